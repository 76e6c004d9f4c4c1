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
        units: UnitFilter::default(),
    });
    r.global.push(GlobalSubscription {
        recipients: vec![Destination::parse("slack:all")],
        triggers: vec![],
        selector: Selector::default(),
        units: UnitFilter::default(),
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
    assert!(errors.iter().all(|e| e.reason == Refusal::Malformed), "{errors:?}");
    assert_eq!(flat(&subs), ["on-deployed -> slack:ok"]);
}

/// Within the bounds, an Application naming more than the limits gets at most the
/// limits' worth, and says what was dropped.
#[test]
fn annotations_past_the_limits_are_capped_and_reported() {
    let channels = |n: usize| (0..n).map(|i| format!("c{i:02}")).collect::<Vec<_>>().join(", ");
    let r = Router { limits: Limits { max_triggers: 2, max_recipients: 10 }, ..router() };
    let yaml = format!(
        "- trigger: [on-health-degraded, on-sync-failed, on-deployed]\n  destinations:\n    - service: slack\n      recipients: [{}]\n",
        channels(6)
    );
    let got = r.subscriptions(&app(&[("notifications.argoproj.io/subscriptions", &yaml)], &[]), None);
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    assert_eq!(got.subs.len(), 2, "two triggers kept");
    assert!(got.capped.unwrap().contains("1 trigger(s) and 0 recipient(s) ignored"));
    // A recipient named for two triggers that are both kept is one recipient.
    let yaml = format!(
        "- trigger: [on-health-degraded, on-sync-failed]\n  destinations:\n    - service: slack\n      recipients: [{}]\n",
        channels(9)
    );
    let annotations = [
        ("notifications.argoproj.io/subscriptions", yaml.as_str()),
        ("notifications.argoproj.io/subscribe.on-sync-failed.slack", "c09;c10"),
    ];
    let got = r.subscriptions(&app(&annotations, &[]), None);
    assert_eq!(got.subs.values().map(BTreeSet::len).sum::<usize>(), 2 + 2 * 8, "ten destinations kept");
    assert!(got.capped.unwrap().contains("0 trigger(s) and 1 recipient(s) ignored"), "distinct recipients, not occurrences");
    // Within the limits: nothing said.
    let small = router().subscriptions(&app(&[("notifications.argoproj.io/subscribe.on-deployed.slack", "a;b")], &[]), None);
    assert!(small.capped.is_none());
}

/// What one annotation may cost is bounded as it is read: a list past
/// `MAX_LIST_ITEMS`, a product of triggers × recipients past the limits (16 million
/// pairs in 141 KB), an alias, an over-long recipient: each is refused, with the reason
/// `limits`, before anything is expanded; the Application's other annotations apply.
#[test]
fn annotations_past_the_bounds_are_refused_before_they_are_expanded() {
    let refused = |annotations: &[(&str, &str)]| {
        let got = router().subscriptions(&app(annotations, &[("x", "y")]), None);
        assert_eq!(flat(&got.subs), ["on-deployed -> slack:ok"], "{annotations:.200?}");
        assert_eq!(got.errors.len(), 1, "{:?}", got.errors);
        assert_eq!(got.errors[0].reason, Refusal::Limits, "{}", got.errors[0]);
        assert!(got.errors[0].message.len() < 400, "the report is bounded: {}", got.errors[0]);
        got.errors[0].message.clone()
    };
    let ok = ("notifications.argoproj.io/subscribe.on-deployed.slack", "ok");
    let list = |n: usize, item: &str| vec![item; n].join(",");
    let key = "notifications.argoproj.io/subscriptions";
    let product = format!("- trigger: [{}]\n  destinations: [{}]\n", list(4000, "a"), list(4000, "{service: slack}"));
    assert!(product.len() > 70_000, "{}", product.len());
    let said = refused(&[(key, &product), ok]);
    assert!(said.contains(&format!("{LIST_TOO_LONG} (1024)")), "{said}");
    let product = format!("- trigger: [{}]\n  destinations: [{}]\n", list(100, "a"), list(100, "{service: slack, recipients: [x]}"));
    assert!(refused(&[(key, &product), ok]).contains("10000 (trigger, recipient) pairs"));
    let entries = "- trigger: [a]\n  destinations: [{service: slack, recipients: [x, y, z]}]\n".repeat(1000);
    assert!(refused(&[(key, &entries), ok]).contains("pairs"), "the entries count too");
    let alias = "- trigger: &t [a]\n  destinations: [{service: slack, recipients: *t}]\n";
    refused(&[(key, alias), ok]);
    let long = "r".repeat(2_100);
    let yaml = format!("- trigger: [a]\n  destinations: [{{service: slack, recipients: [{long}]}}]\n");
    assert!(refused(&[(key, &yaml), ok]).contains("recipient of 2100 bytes"));
    assert!(refused(&[("notifications.argoproj.io/subscribe.on-x.slack", &long), ok]).contains("recipient of 2100 bytes"));
    let many = list(3000, "x").replace(',', ";");
    refused(&[("notifications.argoproj.io/subscribe.on-x.slack", &many), ok]);
}

/// A refused AppProject annotation is said of the project, and counted as each member's.
#[test]
fn a_projects_refused_annotation_is_reported_on_its_members() {
    let project = Project::from_value(&json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": "team-a", "namespace": "argocd",
            "annotations": {"notifications.argoproj.io/subscriptions": "- trigger: &t [a]\n  destinations: *t\n"}}}))
    .unwrap();
    let got = router().subscriptions(&app(&[("notifications.argoproj.io/subscribe.on-deployed.slack", "ok")], &[]), Some(&project));
    assert_eq!(flat(&got.subs), ["on-deployed -> slack:ok"]);
    assert!(got.errors[0].message.starts_with("project team-a: annotation notifications.argoproj.io/subscriptions"), "{}", got.errors[0]);
    let note = note(&got.errors, None).unwrap();
    assert!(note.starts_with("project team-a"), "{note}");
}

/// A config-level subscription selects units by engine, kind, namespace and name (what
/// `driftwatch import --flux` writes for a Flux Alert's event sources).
#[test]
fn global_subscriptions_select_units_by_engine_kind_namespace_and_name() {
    let mut r = router();
    r.global.push(GlobalSubscription {
        recipients: vec![Destination::parse("slack:flux")],
        triggers: vec!["on-reconcile-failed".into()],
        selector: Selector::default(),
        units: UnitFilter {
            engines: vec!["flux".into()],
            kinds: vec!["Kustomization".into()],
            namespaces: vec!["flux-system".into()],
            names: vec!["*".into()],
        },
    });
    let unit = |kind: &str, api: &str, ns: &str| {
        App::from_value(serde_json::json!({"apiVersion": api, "kind": kind, "metadata": {"name": "apps", "namespace": ns}})).unwrap()
    };
    let k = unit("Kustomization", "kustomize.toolkit.fluxcd.io/v1", "flux-system");
    assert_eq!(flat(&r.subscriptions(&k, None).subs), ["on-reconcile-failed -> slack:flux"]);
    for other in [
        unit("Kustomization", "kustomize.toolkit.fluxcd.io/v1", "apps"),
        unit("HelmRelease", "helm.toolkit.fluxcd.io/v2", "flux-system"),
        unit("Application", "argoproj.io/v1alpha1", "flux-system"),
    ] {
        assert!(r.subscriptions(&other, None).subs.is_empty(), "{}", other.qualified_name());
    }
}

/// The annotation forms of Applications work on a Flux or Fleet unit's own annotations.
#[test]
fn a_flux_units_subscription_annotations_are_read_as_an_applications() {
    let r = router();
    let k = App::from_value(serde_json::json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system",
            "annotations": {"notifications.argoproj.io/subscribe.on-reconcile-failed.slack": "flux-alerts;platform"}}
    }))
    .unwrap();
    assert_eq!(
        flat(&r.subscriptions(&k, None).subs),
        ["on-reconcile-failed -> slack:flux-alerts", "on-reconcile-failed -> slack:platform"]
    );
}
