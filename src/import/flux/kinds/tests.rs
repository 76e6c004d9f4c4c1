use serde_json::{Value, json};

use super::*;
use crate::import::flux::tests::{import_text, provider_with};

/// Each type's Provider spec, the keys of its Secret `s`, the service written, the
/// recipient subscriptions name, and whether it converts without a TODO.
const CASES: &[(&str, &[&str], &str, &str, bool)] = &[
    (
        "type: slack\nchannel: general\naddress: https://slack.com/api/chat.postMessage",
        &["token"],
        r#"{"type": "slack", "token": "$s-token"}"#,
        "p:general",
        true,
    ),
    ("type: slack\nchannel: general", &["address"], r#"{"type": "slack", "webhookUrl": "$s-address"}"#, "p", true),
    (
        "type: discord\nusername: flux",
        &["address"],
        r#"{"type": "slack", "username": "flux", "webhookUrl": "$s-address/slack"}"#,
        "p",
        true,
    ),
    (
        "type: discord\naddress: https://discord.com/api/webhooks/1/x/slack",
        &[],
        r#"{"type": "slack", "webhookUrl": "https://discord.com/api/webhooks/1/x/slack"}"#,
        "p",
        true,
    ),
    ("type: rocket", &["address"], r#"{"type": "slack", "webhookUrl": "$s-address"}"#, "p", true),
    ("type: msteams", &["address"], r#"{"type": "teams-workflows", "recipientUrls": {"p": "$s-address"}}"#, "p:p", true),
    (
        "type: msteams\naddress: https://x.webhook.office.com/webhookb2/1",
        &[],
        r#"{"type": "teams", "recipientUrls": {"p": "https://x.webhook.office.com/webhookb2/1"}}"#,
        "p:p",
        true,
    ),
    ("type: googlechat", &["address"], r#"{"type": "googlechat", "webhooks": {"p": "$s-address"}}"#, "p:p", true),
    (
        "type: webex\naddress: https://webexapis.com/v1/messages\nchannel: room1",
        &["token"],
        r#"{"type": "webex", "token": "$s-token"}"#,
        "p:room1",
        true,
    ),
    ("type: telegram\nchannel: '@fluxcd'", &["token"], r#"{"type": "telegram", "token": "$s-token"}"#, "p:@fluxcd", true),
    (
        "type: opsgenie\naddress: https://api.eu.opsgenie.com/v2/alerts",
        &["token"],
        r#"{"type": "opsgenie", "apiUrl": "https://api.eu.opsgenie.com", "apiKeys": {"p": "$s-token"}}"#,
        "p:p",
        true,
    ),
    (
        "type: pagerduty\naddress: https://events.pagerduty.com\nchannel: rk1",
        &[],
        r#"{"type": "pagerduty", "routingKeys": {"p": "rk1"}}"#,
        "p:p",
        true,
    ),
    (
        "type: alertmanager\naddress: https://am.monitoring:9093/api/v2/alerts/",
        &["token"],
        r#"{"type": "alertmanager", "targets": ["https://am.monitoring:9093"], "bearerToken": "$s-token"}"#,
        "p",
        true,
    ),
    (
        "type: alertmanager\naddress: https://am.example/custom/alerts\nusername: flux",
        &["password"],
        r#"{"type": "alertmanager", "targets": ["https://am.example"], "apiPath": "/custom/alerts", "basicAuth": {"username": "flux", "password": "$s-password"}}"#,
        "p",
        true,
    ),
    (
        "type: grafana\naddress: https://grafana.example/api/annotations",
        &["token"],
        r#"{"type": "grafana", "apiUrl": "https://grafana.example/api", "apiKey": "$s-token"}"#,
        "p:flux",
        true,
    ),
    (
        "type: github\naddress: https://github.com/org/repo",
        &["token"],
        r#"{"type": "github", "repositories": ["org/repo"], "token": "$s-token"}"#,
        "p",
        false,
    ),
    (
        "type: github\naddress: https://ghe.example/org/repo.git",
        &["token"],
        r#"{"type": "github", "enterpriseBaseURL": "https://ghe.example/api/v3", "repositories": ["org/repo"], "token": "$s-token"}"#,
        "p",
        false,
    ),
    ("type: generic\naddress: https://hook.example/flux", &[], r#"{"type": "webhook", "url": "https://hook.example/flux"}"#, "p", false),
    (
        "type: generic-hmac\naddress: https://hook.example/flux",
        &["token"],
        r#"{"type": "signed-webhook", "url": "https://hook.example/flux", "secret": "$s-token"}"#,
        "p",
        true,
    ),
];

/// Every type converts to its kind with its settings, and subscriptions name the
/// recipient the kind reads.
#[test]
fn each_mapped_type_converts_to_its_kind() {
    for (spec, keys, service, recipient, complete) in CASES {
        let service: Value = serde_json::from_str(service).unwrap();
        let secret = if keys.is_empty() { String::new() } else { "\nsecretRef:\n  name: s".to_string() };
        let r = import_text(&provider_with(&format!("{spec}{secret}"), (!keys.is_empty()).then_some(*keys)));
        assert_eq!(r.service("p"), &service, "{spec}\n{}", r.text);
        assert_eq!(r.subscriptions()[0]["recipients"], json!([recipient]), "{spec}");
        assert_eq!(r.report.complete(), *complete, "{spec}: {:?}", r.todos());
        for k in *keys {
            assert!(r.secrets.contains(&format!("# s-{k}: \"\"")), "{spec}: {}", r.secrets);
        }
    }
}

/// Every type of Flux's enum is either mapped or one driftwatch says it has no
/// destination for; a Provider of such a type is marked, its Alerts kept commented out.
#[test]
fn every_flux_type_is_mapped_or_named_as_unmapped() {
    for ty in FLUX_TYPES {
        let mapped = mapper(ty, &serde_json::Map::new()).is_some();
        assert!(mapped || unmapped_reason(ty).contains(&format!("no destination for the provider type `{ty}`")), "{ty}");
    }
    assert_eq!(unmapped_reason("carrier-pigeon"), "unknown provider type `carrier-pigeon`");
    let r = import_text(&provider_with("type: azuredevops\naddress: https://dev.azure.com/org/project/_git/repo", None));
    assert!(r.has_todo("provider apps/p", "no destination for the provider type `azuredevops`"), "{:?}", r.todos());
    assert!(r.has_todo("alert apps/a", "its type `azuredevops` was not converted"), "{:?}", r.todos());
    assert!(r.config.get("services").is_none() && r.subscriptions().is_empty(), "{}", r.text);
    assert!(r.text.contains("#   spec:\n#     type: azuredevops\n"), "the original kept: {}", r.text);
    assert_eq!((r.report.services.todo, r.report.subscriptions.todo), (1, 1));
}

#[test]
fn what_a_service_cannot_take_is_marked() {
    let spec = "type: generic-hmac\naddress: https://hook.example\ntimeout: 45s\ninterval: 5m\nproxy: https://proxy:8080\ncertSecretRef:\n  name: ca\nserviceAccountName: sa\nwidget: 1\nsecretRef:\n  name: s";
    let r = import_text(&provider_with(spec, Some(&["token", "proxy", "headers", "extra"])));
    assert_eq!(r.service("p")["timeout"], "45s");
    for (field, words) in [
        ("proxy", "no proxy setting"),
        ("certSecretRef", "set `caFile`"),
        ("serviceAccountName", "no counterpart"),
        ("widget", "unknown field"),
        ("secretRef", "`proxy` key"),
        ("secretRef", "`headers`"),
    ] {
        assert!(r.has_todo(&format!("provider apps/p.spec.{field}"), words), "{field}: {:?}", r.todos());
    }
    assert!(r.has_note("provider apps/p.spec.interval", "not used"), "{:?}", r.report.notes);
    assert!(r.has_note("provider apps/p.spec.secretRef", "`extra`"), "{:?}", r.report.notes);
}

#[test]
fn a_secret_not_in_the_input_is_assumed_to_hold_the_types_keys_and_marked() {
    let r = import_text(&provider_with("type: telegram\nchannel: '-100123'\nsecretRef:\n  name: elsewhere", None));
    assert_eq!(r.service("p")["token"], "$elsewhere-token");
    assert!(
        r.has_todo("provider apps/p.spec.secretRef", "not in the input, so its keys are not known: taken to hold token"),
        "{:?}",
        r.todos()
    );
    assert!(r.secrets.contains("# elsewhere-token: \"\"   # referenced by service p"), "{}", r.secrets);
}

#[test]
fn what_a_type_needs_and_lacks_is_marked_with_a_placeholder_that_loads() {
    let r = import_text(&provider_with(
        "type: slack\naddress: https://slack.com/api/chat.postMessage\nsecretRef:\n  name: s",
        Some(&["token"]),
    ));
    assert!(r.has_todo("provider apps/p", "names none"), "a token without a channel: {:?}", r.todos());
    assert!(r.subscriptions().is_empty(), "{}", r.text);
    let r = import_text(&provider_with("type: webex\nchannel: room", None));
    assert!(r.has_todo("provider apps/p.spec.secretRef", "needs a token"), "{:?}", r.todos());
    assert_eq!(r.service("p")["token"], "$p-token");
    assert!(r.secrets.contains("# p-token: \"\""), "{}", r.secrets);
    let r = import_text(&provider_with("type: telegram\nchannel: '-1001:7'\nsecretRef:\n  name: s", Some(&["token"])));
    assert!(r.has_todo("provider apps/p.spec.channel", "forum topic"), "{:?}", r.todos());
    assert_eq!(r.subscriptions()[0]["recipients"], json!(["p:-1001"]));
    let r = import_text(&provider_with("type: alertmanager\nsecretRef:\n  name: s", Some(&["address", "username", "password"])));
    assert!(r.has_todo("provider apps/p.spec.address", "replace the `targets` written in its place"), "{:?}", r.todos());
    assert!(r.has_todo("provider apps/p.spec.secretRef", "`username` is not read"), "{:?}", r.todos());
    assert!(!r.secrets.contains("s-username"), "no reference is written for a value driftwatch cannot reference: {}", r.secrets);
    let r = import_text(&provider_with(
        "type: github\naddress: https://github.com/o/r\nsecretRef:\n  name: s",
        Some(&["githubAppID", "githubAppInstallationID", "githubAppPrivateKey"]),
    ));
    assert_eq!(r.service("p")["privateKey"], "$s-githubAppPrivateKey");
    assert!(r.has_todo("provider apps/p.spec.secretRef", "write in the values of the Secret s's githubAppID"), "{:?}", r.todos());
}

/// Every service the import writes is one driftwatch's parser accepts, or it is
/// marked with the parser's reason (a secret sent over plain HTTP, here).
#[test]
fn a_service_driftwatch_refuses_is_marked_with_its_reason() {
    let r =
        import_text(&provider_with("type: generic-hmac\naddress: http://receiver.example/flux\nsecretRef:\n  name: s", Some(&["token"])));
    assert!(
        r.has_todo("provider apps/p", "driftwatch refuses the service as converted") && r.todos().iter().any(|t| t.contains("https://")),
        "{:?}",
        r.todos()
    );
}

#[test]
fn a_secrets_values_never_reach_the_output() {
    let spec = "type: slack\nchannel: c\naddress: https://slack.com/api/chat.postMessage\nsecretRef:\n  name: s";
    let r = import_text(&provider_with(spec, Some(&["token", "username", "headers"])));
    for out in [&r.text, &r.secrets, &serde_json::to_string(&r.report).unwrap()] {
        assert!(!out.contains("not-real"), "{out}");
    }
}
