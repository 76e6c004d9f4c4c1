use super::*;

/// What one import gives: the report, `driftwatch.yaml` as text and as a value (TODO
/// marks are comments), and the secrets skeleton.
pub(super) struct Run {
    pub(super) report: Report,
    pub(super) text: String,
    pub(super) config: Value,
    pub(super) secrets: String,
    _dir: tempfile::TempDir,
}

impl Run {
    /// The items marked TODO, with their reasons.
    pub(super) fn todos(&self) -> Vec<String> {
        self.report.todos.iter().map(|t| format!("{}: {}", t.item, t.reason)).collect()
    }

    pub(super) fn has_todo(&self, item: &str, words: &str) -> bool {
        self.report.todos.iter().any(|t| t.item == item && t.reason.contains(words))
    }

    pub(super) fn has_note(&self, item: &str, words: &str) -> bool {
        self.report.notes.iter().any(|t| t.item == item && t.reason.contains(words))
    }

    pub(super) fn service(&self, name: &str) -> &Value {
        &self.config["services"][name]
    }

    pub(super) fn subscriptions(&self) -> Vec<Value> {
        self.config["subscriptions"].as_array().cloned().unwrap_or_default()
    }
}

/// Imports `text` (Flux objects) as the file `in.yaml`.
pub(super) fn import_text(text: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("in.yaml");
    std::fs::write(&f, text).unwrap();
    let out = dir.path().join("out");
    let report = import(&[f], &out, false).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(out.join("driftwatch.yaml")).unwrap();
    let config: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
    let secrets = std::fs::read_to_string(out.join("secrets.yaml")).unwrap_or_default();
    Run { report, text, config, secrets, _dir: dir }
}

/// A Provider of `spec` (YAML lines under `spec:`) named `p` in `apps`, its Secret
/// `s` with `keys` when given, and an Alert `a` on every Kustomization of `apps`.
pub(super) fn provider_with(spec: &str, keys: Option<&[&str]>) -> String {
    let mut text = format!(
        "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\nmetadata:\n  name: p\n  namespace: apps\nspec:\n{}\n",
        spec.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    if let Some(keys) = keys {
        text.push_str("---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: apps\nstringData:\n");
        for k in keys {
            text.push_str(&format!("  {k}: value-of-{k}-not-real\n"));
        }
    }
    text.push_str(ALERT);
    text
}

const ALERT: &str = "---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata:
  name: a
  namespace: apps
spec:
  providerRef:
    name: p
  eventSources:
    - kind: Kustomization
      name: '*'
";

fn alert_with(spec: &str) -> Run {
    let text = provider_with(
        "type: slack\nchannel: ops\naddress: https://slack.com/api/chat.postMessage\nsecretRef:\n  name: s",
        Some(&["token"]),
    );
    let text = text.replace(ALERT, "");
    import_text(&format!(
        "{text}---\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nmetadata:\n  name: a\n  namespace: apps\nspec:\n{}",
        spec.lines().map(|l| format!("  {l}\n")).collect::<String>()
    ))
}

#[test]
fn severity_error_subscribes_to_failures_and_info_to_both() {
    let r = alert_with("providerRef: {name: p}\neventSeverity: error\neventSources:\n  - {kind: Kustomization, name: '*'}");
    assert_eq!(r.subscriptions()[0]["triggers"], json!(["on-reconcile-failed"]));
    for severity in ["eventSeverity: info\n", ""] {
        let r = alert_with(&format!("providerRef: {{name: p}}\n{severity}eventSources:\n  - {{kind: Kustomization, name: '*'}}"));
        assert_eq!(r.subscriptions()[0]["triggers"], json!(["on-reconcile-failed", "on-reconcile-succeeded"]), "{severity:?}");
        assert!(r.report.complete(), "{:?}", r.todos());
    }
    assert!(r.has_note("subscriptions", "on-drift-attempt, on-security-drift, on-live-drift, on-drift-resolved"), "{:?}", r.report.notes);
}

#[test]
fn an_event_source_gives_engine_kind_namespace_name_and_selector() {
    let r = alert_with(
        "providerRef: {name: p}\neventSources:\n  - kind: HelmRelease\n    name: '*'\n    namespace: team-b\n    matchLabels: {tier: web, team: app-dev}\n  - kind: Kustomization\n    name: podinfo",
    );
    assert!(r.report.complete(), "{:?}", r.todos());
    let subs = r.subscriptions();
    assert_eq!(
        subs[0],
        json!({"recipients": ["p:ops"], "triggers": ["on-reconcile-failed", "on-reconcile-succeeded"], "engine": "flux",
               "kind": "HelmRelease", "namespace": "team-b", "selector": "team=app-dev,tier=web"})
    );
    assert_eq!(subs[1]["namespace"], "apps", "the Alert's namespace by default");
    assert_eq!(subs[1]["name"], "podinfo");
    assert!(subs[0].get("name").is_none(), "`*` is any name");
    assert_eq!(r.report.subscriptions, super::super::Counts { converted: 2, todo: 0 });
}

#[test]
fn a_source_a_name_pattern_and_an_unknown_kind_are_marked_with_the_source_kept() {
    let r = alert_with(
        "providerRef: {name: p}\neventSources:\n  - {kind: GitRepository, name: '*'}\n  - {kind: HelmRelease, name: 'web-*'}\n  - {kind: Widget, name: x}\n  - {kind: Kustomization, name: ok}",
    );
    assert!(r.has_todo("alert apps/a.eventSources[0]", "driftwatch does not watch sources"), "{:?}", r.todos());
    assert!(r.has_todo("alert apps/a.eventSources[1]", "\"web-*\" is a pattern"), "{:?}", r.todos());
    assert!(r.has_todo("alert apps/a.eventSources[2]", "unknown event source kind `Widget`"), "{:?}", r.todos());
    assert_eq!(r.subscriptions().len(), 1, "the unit is subscribed");
    assert_eq!(r.report.subscriptions, super::super::Counts { converted: 1, todo: 3 });
    assert!(r.text.contains("#   - kind: GitRepository\n"), "{}", r.text);
    let line = r.report.todos.iter().find(|t| t.item == "alert apps/a.eventSources[1]").unwrap().line;
    assert_eq!(r.text.lines().filter(|l| l.contains(&format!("in.yaml:{line}: alert apps/a.eventSources[1]"))).count(), 1);
}

#[test]
fn a_suspended_alert_and_a_missing_provider_keep_their_subscriptions_commented_out() {
    let r = alert_with("suspend: true\nproviderRef: {name: p}\neventSources:\n  - {kind: Kustomization, name: '*'}");
    assert!(r.has_todo("alert apps/a", "suspended"), "{:?}", r.todos());
    assert!(r.subscriptions().is_empty());
    assert!(r.text.contains("#   subscriptions:\n#     - recipients:\n#         - p:ops\n"), "{}", r.text);
    let r = alert_with("providerRef: {name: elsewhere}\neventSources:\n  - {kind: Kustomization, name: '*'}");
    assert!(r.has_todo("alert apps/a", "\"elsewhere\", which is not in the input"), "{:?}", r.todos());
    assert!(r.subscriptions().is_empty());
}

#[test]
fn message_filters_are_marked_and_metadata_noted() {
    let r = alert_with(
        "providerRef: {name: p}\neventSources:\n  - {kind: Kustomization, name: '*'}\ninclusionList: ['.*succeeded.*']\nexclusionList: ['.*test.*']\neventMetadata: {env: prod}\nsummary: impacted\nbogus: 1",
    );
    assert!(r.has_todo("alert apps/a.spec.inclusionList", "regular expressions"), "{:?}", r.todos());
    assert!(r.has_todo("alert apps/a.spec.exclusionList", "regular expressions"), "{:?}", r.todos());
    assert!(r.has_todo("alert apps/a.spec.bogus", "unknown field"), "{:?}", r.todos());
    assert!(r.has_note("alert apps/a.spec.eventMetadata", "env=prod"), "{:?}", r.report.notes);
    assert!(r.has_note("alert apps/a.spec.summary", "\"impacted\""), "{:?}", r.report.notes);
    assert_eq!(r.subscriptions().len(), 1, "written, its mark beside it");
    assert!(r.text.contains("#   inclusionList:\n#     - .*succeeded.*\n"), "{}", r.text);
    assert_eq!(r.report.subscriptions.todo, 1);
}

#[test]
fn an_alert_without_a_namespace_is_taken_as_default_and_marked() {
    let text = provider_with(
        "type: slack\nchannel: ops\naddress: https://slack.com/api/chat.postMessage\nsecretRef:\n  name: s",
        Some(&["token"]),
    )
    .replace("  namespace: apps\n", "");
    let r = import_text(&text);
    assert!(r.has_todo("alert a", "taken as `default`"), "{:?}", r.todos());
    assert_eq!(r.subscriptions()[0]["namespace"], "default");
    assert_eq!(r.subscriptions()[0]["recipients"], json!(["p:ops"]), "the Provider found without a namespace too");
}

#[test]
fn a_paging_service_told_of_successes_is_noted() {
    let text = provider_with("type: pagerduty\naddress: https://events.pagerduty.com\nchannel: key", None);
    let r = import_text(&text);
    assert!(r.has_note("alert apps/a", "each revision applied then opens an alert"), "{:?}", r.report.notes);
}

#[test]
fn names_are_qualified_only_where_two_namespaces_share_one() {
    let (a, b, c) = (Some("a".to_string()), Some("b".to_string()), None);
    let ids = [(&a, "x"), (&b, "x"), (&c, "y")];
    let names = unique_names(ids.iter().copied());
    assert_eq!(names[&(a.clone(), "x".into())], "a-x");
    assert_eq!(names[&(b.clone(), "x".into())], "b-x");
    assert_eq!(names[&(None, "y".into())], "y");
}

#[test]
fn an_object_twice_is_imported_once_the_later() {
    let once = provider_with("type: generic-hmac\naddress: https://a.example\nsecretRef:\n  name: s", Some(&["token"]));
    let later = "---\napiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\nmetadata:\n  name: p\n  namespace: apps\nspec:\n  type: generic-hmac\n  address: https://b.example\n  secretRef:\n    name: s\n";
    let r = import_text(&format!("{once}{later}"));
    assert_eq!(r.service("p")["url"], "https://b.example");
    assert!(r.has_note("apps/p", "defined again at"), "{:?}", r.report.notes);
    assert_eq!(r.report.services.converted, 1);
}

#[test]
fn argo_cd_input_is_refused_with_a_pointer_and_flux_input_without_flux_too() {
    let dir = tempfile::tempdir().unwrap();
    let cm = dir.path().join("cm.yaml");
    std::fs::write(&cm, "kind: ConfigMap\ndata:\n  trigger.on-x: |\n    - when: 'true'\n").unwrap();
    let e = import(std::slice::from_ref(&cm), &dir.path().join("o"), false).unwrap_err();
    assert!(e.0.contains("no Flux notification objects") && e.0.contains("without --flux"), "{e}");
    let flux = dir.path().join("flux.yaml");
    std::fs::write(&flux, provider_with("type: generic\naddress: https://x.example", None)).unwrap();
    let e = crate::import::import(&[flux], &dir.path().join("o"), false).unwrap_err();
    assert!(e.0.contains("flux.yaml: holds Flux notification-controller objects") && e.0.contains("--flux"), "{e}");
}

#[test]
fn bad_yaml_names_the_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yaml");
    std::fs::write(&f, "kind: Provider\nspec:\n  type: [slack\n").unwrap();
    let e = import(std::slice::from_ref(&f), &dir.path().join("o"), false).unwrap_err();
    let at = format!("{}:", f.display());
    assert!(e.0.starts_with(&at) && e.0.contains("not YAML"), "{e}");
    let rest = &e.0[at.len()..];
    let mut parts = rest.split(':');
    assert!(parts.next().unwrap().parse::<usize>().is_ok() && parts.next().unwrap().parse::<usize>().is_ok(), "{e}");
}

/// Objects Kubernetes would refuse are marked, and never read as something wider (a
/// name that is not text is not `*`, a severity that is not text is not left out).
#[test]
fn malformed_objects_are_marked_never_widened() {
    let r = import_text(
        "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\nspec: {type: generic}\n---\n\
         apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Provider\nmetadata: {name: p, namespace: x}\nspec: {type: 42}\n---\n\
         apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nmetadata: {name: a, namespace: x}\n\
         spec: {providerRef: p, eventSources: all, eventSeverity: 3, inclusionList: x}\n---\n\
         apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nmetadata: {name: b, namespace: x}\n\
         spec: {providerRef: {name: p}, eventSources: [7, {kind: Kustomization, name: 5}, {kind: HelmRelease, name: w, matchLabels: {n: 1}}]}\n",
    );
    for (item, words) in [
        ("object", "no metadata.name"),
        ("provider x/p", "unknown provider type `42`"),
        ("alert x/a", "no providerRef"),
        ("alert x/a", "no list of eventSources"),
        ("alert x/a.spec.eventSeverity", "eventSeverity 3"),
        ("alert x/a.spec.inclusionList", "regular expressions"),
        ("alert x/b.eventSources[0]", "unknown event source kind"),
        ("alert x/b.eventSources[1]", "the name 5 is not text"),
        ("alert x/b", "its type `42` was not converted"),
    ] {
        assert!(r.has_todo(item, words), "{item}: {words}: {:#?}", r.todos());
    }
    assert!(r.text.contains("#       selector: n=1\n"), "a label written as a number keeps its value: {}", r.text);
    assert!(r.config.get("services").is_none() && r.config.get("subscriptions").is_none(), "{}", r.text);
}

/// The triggers the subscriptions name are the catalog's, so an import loads without
/// defining them.
#[test]
fn the_reconcile_triggers_are_in_the_catalog() {
    for t in [alert::ON_FAILED, alert::ON_SUCCEEDED] {
        assert!(crate::config::catalog::TRIGGERS.iter().any(|(n, _, _)| *n == t), "{t}");
    }
}
