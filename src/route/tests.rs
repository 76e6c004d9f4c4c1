//! Subscriptions, label selectors and the route tree.

use super::*;
use serde_json::json;

fn app(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> App {
    let ann: serde_json::Map<String, serde_json::Value> = annotations.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let lab: serde_json::Map<String, serde_json::Value> = labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "argocd", "annotations": ann, "labels": lab}, "spec": {"project": "p"}}))
    .unwrap()
}

fn router() -> Router {
    Router {
        global: vec![],
        default_triggers: vec!["on-sync-failed".into(), "on-health-degraded".into()],
        default_triggers_by_service: [("email".to_string(), vec!["on-deleted".to_string()])].into(),
        limits: Limits::default(),
    }
}

/// Flattens subscriptions to `trigger -> service:recipient` strings for table checks.
fn flat(s: &Subscriptions) -> Vec<String> {
    s.iter().flat_map(|(t, ds)| ds.iter().map(move |d| format!("{t} -> {d}"))).collect()
}

fn check(annotations: &[(&str, &str)], want: &[&str]) {
    let AppSubscriptions { subs, errors, .. } = router().subscriptions(&app(annotations, &[]), None);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(flat(&subs), want, "annotations {annotations:?}");
}

#[test]
fn every_argo_cd_annotation_form() {
    // trigger + service, recipients split on ';' and trimmed
    check(
        &[("notifications.argoproj.io/subscribe.on-sync-succeeded.slack", "c1; c2 ;c3")],
        &["on-sync-succeeded -> slack:c1", "on-sync-succeeded -> slack:c2", "on-sync-succeeded -> slack:c3"],
    );
    // empty value = one empty recipient
    check(&[("notifications.argoproj.io/subscribe.on-sync-succeeded.webhook", "")], &["on-sync-succeeded -> webhook:"]);
    // service only and the empty-trigger form use the default triggers
    check(&[("notifications.argoproj.io/subscribe.slack", "ops")], &["on-health-degraded -> slack:ops", "on-sync-failed -> slack:ops"]);
    check(&[("notifications.argoproj.io/subscribe..slack", "ops")], &["on-health-degraded -> slack:ops", "on-sync-failed -> slack:ops"]);
    // defaultTriggers.<service> overrides the defaults for that service
    check(&[("notifications.argoproj.io/subscribe.email", "a@example.com")], &["on-deleted -> email:a@example.com"]);
    // the YAML list form, with and without triggers
    check(
        &[(
            "notifications.argoproj.io/subscriptions",
            "- trigger: [on-sync-failed, on-deployed]\n  destinations:\n    - service: slack\n      recipients: [a, b]\n- destinations:\n    - service: slack\n      recipients: [c]\n",
        )],
        &[
            "on-deployed -> slack:a",
            "on-deployed -> slack:b",
            "on-health-degraded -> slack:c",
            "on-sync-failed -> slack:a",
            "on-sync-failed -> slack:b",
            "on-sync-failed -> slack:c",
        ],
    );
    // unrelated annotations are ignored
    check(&[("notifications.argoproj.io/unrelated", "x"), ("other/annotation", "y")], &[]);
}

#[test]
fn duplicates_across_forms_merge() {
    check(
        &[
            ("notifications.argoproj.io/subscribe.on-sync-failed.slack", "ops"),
            ("notifications.argoproj.io/subscribe.slack", "ops"),
            (
                "notifications.argoproj.io/subscriptions",
                "- trigger: [on-sync-failed]\n  destinations: [{service: slack, recipients: [ops]}]",
            ),
        ],
        &["on-health-degraded -> slack:ops", "on-sync-failed -> slack:ops"],
    );
}

#[test]
fn project_annotations_apply_to_its_applications() {
    let project = Project {
        name: "p".into(),
        namespace: "argocd".into(),
        annotations: [("notifications.argoproj.io/subscribe.on-deployed.slack".to_string(), "team".to_string())].into(),
        policy: Default::default(),
    };
    let AppSubscriptions { subs, .. } =
        router().subscriptions(&app(&[("notifications.argoproj.io/subscribe.on-deployed.slack", "mine")], &[]), Some(&project));
    assert_eq!(flat(&subs), ["on-deployed -> slack:mine", "on-deployed -> slack:team"]);
}

#[test]
fn global_subscriptions_follow_label_selectors() {
    let mut r = router();
    r.global.push(GlobalSubscription {
        recipients: vec![Destination::parse("slack:prod-alerts")],
        triggers: vec!["on-out-of-sync".into()],
        selector: Selector::parse("env=prod").unwrap(),
    });
    r.global.push(GlobalSubscription {
        recipients: vec![Destination::parse("slack:all")],
        triggers: vec![],
        selector: Selector::default(),
    });
    let AppSubscriptions { subs, .. } = r.subscriptions(&app(&[], &[("env", "prod")]), None);
    assert_eq!(flat(&subs), ["on-health-degraded -> slack:all", "on-out-of-sync -> slack:prod-alerts", "on-sync-failed -> slack:all"]);
    let AppSubscriptions { subs, .. } = r.subscriptions(&app(&[], &[("env", "dev")]), None);
    assert_eq!(flat(&subs), ["on-health-degraded -> slack:all", "on-sync-failed -> slack:all"]);
}

#[test]
fn malformed_annotations_are_reported_and_the_rest_still_applies() {
    let AppSubscriptions { subs, errors, .. } = router().subscriptions(
        &app(
            &[
                ("notifications.argoproj.io/subscriptions", "- trigger: [unclosed"),
                ("notifications.argoproj.io/subscribe.a.b.c", "x"),
                ("notifications.argoproj.io/subscribe.on-deployed.slack", "ok"),
            ],
            &[],
        ),
        None,
    );
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(flat(&subs), ["on-deployed -> slack:ok"]);
}

/// One annotation naming thousands of channels for two triggers: the Application gets
/// at most the limits' worth, and says what was dropped.
#[test]
fn annotations_past_the_limits_are_capped_and_reported() {
    let channels: Vec<String> = (0..25_000).map(|i| format!("c{i:05}")).collect();
    let yaml = format!(
        "- trigger: [on-health-degraded, on-sync-failed]\n  destinations:\n    - service: slack\n      recipients: [{}]\n",
        channels.join(", ")
    );
    let r = Router { limits: Limits { max_triggers: 1, max_recipients: 10 }, ..router() };
    let got = r.subscriptions(&app(&[("notifications.argoproj.io/subscriptions", &yaml)], &[]), None);
    assert_eq!(got.subs.len(), 1, "one trigger kept");
    assert_eq!(got.subs.values().map(BTreeSet::len).sum::<usize>(), 10, "ten destinations kept");
    let capped = got.capped.unwrap();
    assert!(capped.contains("1 trigger(s) and 24990 recipient(s) ignored"), "{capped}");
    // A recipient named for two triggers that are both kept is one recipient.
    let r = Router { limits: Limits { max_triggers: 2, max_recipients: 10 }, ..router() };
    let yaml = yaml.replace("on-sync-failed]", "on-sync-failed, on-deployed]");
    let got = r.subscriptions(&app(&[("notifications.argoproj.io/subscriptions", &yaml)], &[]), None);
    assert!(got.capped.unwrap().contains("1 trigger(s) and 24990 recipient(s) ignored"), "distinct recipients, not occurrences");
    // Within the limits: nothing said.
    let small = router().subscriptions(&app(&[("notifications.argoproj.io/subscribe.on-deployed.slack", "a;b")], &[]), None);
    assert!(small.capped.is_none());
}
