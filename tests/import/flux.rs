//! `driftwatch import --flux`: the command on the Flux objects of
//! `tests/data/flux/notification` (written after Flux's docs; see its README): the
//! report, the exit codes, what each provider type and Alert field becomes, and that no
//! Secret's value reaches anything written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/flux/notification")
}

/// `driftwatch import --flux FILES --out DIR -o json`.
fn import(files: &[PathBuf], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["import", "--flux"])
        .args(files)
        .arg("--out")
        .arg(out)
        .args(["-o", "json"])
        .output()
        .unwrap()
}

/// Imports `names` of the data into a fresh directory: the exit code, the report, and
/// `driftwatch.yaml` as text and as a value.
fn run(names: &[&str]) -> (tempfile::TempDir, i32, Value, String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = names.iter().map(|n| data().join(n)).collect();
    let o = import(&files, dir.path());
    let report: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let text = std::fs::read_to_string(dir.path().join("driftwatch.yaml")).unwrap();
    let config: Value = serde_saphyr::from_str(&text).unwrap();
    (dir, o.status.code().unwrap(), report, text, config)
}

fn todo_items(report: &Value) -> Vec<String> {
    report["todos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| format!("{}: {}", t["item"].as_str().unwrap(), t["reason"].as_str().unwrap()))
        .collect()
}

#[test]
fn every_mapped_provider_type_becomes_its_kind() {
    let (_dir, code, report, _, config) = run(&["every-provider.yaml"]);
    assert_eq!(code, 3, "github and generic need a template section, and a Secret's username cannot be referenced: {report}");
    let kinds: Vec<(&str, &str)> =
        config["services"].as_object().unwrap().iter().map(|(name, s)| (name.as_str(), s["type"].as_str().unwrap())).collect();
    assert_eq!(
        kinds,
        [
            ("slack-api", "slack"),
            ("slack-hook", "slack"),
            ("discord", "slack"),
            ("rocket", "slack"),
            ("msteams", "teams-workflows"),
            ("msteams-connector", "teams"),
            ("google", "googlechat"),
            ("webex", "webex"),
            ("telegram", "telegram"),
            ("opsgenie", "opsgenie"),
            ("pagerduty", "pagerduty"),
            ("alertmanager", "alertmanager"),
            ("grafana", "grafana"),
            ("github-status", "github"),
            ("generic", "webhook"),
            ("generic-hmac", "signed-webhook"),
        ]
    );
    assert_eq!(report["services"], json!({"converted": 13, "todo": 3}), "{report}");
    assert_eq!(report["subscriptions"], json!({"converted": 16, "todo": 0}), "{report}");
    let todos = todo_items(&report);
    assert!(todos.iter().any(|t| t.starts_with("provider monitoring/generic.spec.type: driftwatch's webhook service")), "{todos:#?}");
    assert!(todos.iter().any(|t| t.starts_with("provider monitoring/github-status.spec.type:")), "{todos:#?}");
    let recipients: Vec<&str> = config["subscriptions"].as_array().unwrap().iter().map(|s| s["recipients"][0].as_str().unwrap()).collect();
    assert_eq!(&recipients[..3], ["slack-api:deploys", "slack-hook", "discord"]);
    assert!(
        recipients.contains(&"telegram:@fluxcd") && recipients.contains(&"grafana:flux") && recipients.contains(&"pagerduty:pagerduty")
    );
}

#[test]
fn a_type_driftwatch_has_no_destination_for_is_marked_and_exits_3() {
    let (_dir, code, report, text, config) = run(&["unmapped.yaml"]);
    assert_eq!(code, 3);
    let todos = todo_items(&report);
    for ty in ["gitlab", "datadog", "matrix"] {
        assert!(todos.iter().any(|t| t.contains(&format!("no destination for the provider type `{ty}`"))), "{ty}: {todos:#?}");
    }
    assert!(
        todos.iter().any(|t| t.starts_with("alert flux-system/datadog: the Provider datadog: its type `datadog` was not converted")),
        "{todos:#?}"
    );
    assert!(config.get("subscriptions").is_none(), "nothing is sent that was not: {text}");
    assert!(text.contains("#   subscriptions:\n#     - recipients:\n#         - gitlab-status\n"), "{text}");
    assert_eq!(report["services"], json!({"converted": 0, "todo": 3}));
    // Each mark names its file and line, as check will.
    let todo = &report["todos"][0];
    assert!(todo["file"].as_str().unwrap().ends_with("unmapped.yaml") && todo["line"] == 9, "{report}");
}

#[test]
fn a_stream_with_a_source_event_source() {
    let (_dir, code, report, text, config) = run(&["slack-stream.yaml"]);
    assert_eq!(code, 3, "{report}");
    assert_eq!(
        todo_items(&report),
        [
            "alert flux-system/slack.eventSources[0]: driftwatch does not watch sources: events of a GitRepository are not notified (its Kustomizations and HelmReleases are)"
        ]
    );
    assert_eq!(report["todos"][0]["line"], 37);
    assert_eq!(
        config["subscriptions"],
        json!([{"recipients": ["slack-bot:general"], "triggers": ["on-reconcile-failed"], "engine": "flux", "kind": "Kustomization", "namespace": "flux-system"}])
    );
    assert_eq!(config["services"]["slack-bot"], json!({"type": "slack", "token": "$slack-bot-token-token"}));
    assert!(text.contains("# TODO(import) ") && text.contains("#   - kind: GitRepository"), "{text}");
    let notes: Vec<&str> = report["notes"].as_array().unwrap().iter().map(|n| n["item"].as_str().unwrap()).collect();
    assert_eq!(notes, ["alert flux-system/slack.spec.eventMetadata", "subscriptions"]);
}

#[test]
fn a_kubectl_list_dump_with_match_labels_converts_whole() {
    let (dir, code, report, _, config) = run(&["kubectl-dump.yaml"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        config["subscriptions"],
        json!([
            {"recipients": ["team-slack"], "triggers": ["on-reconcile-failed", "on-reconcile-succeeded"], "engine": "flux",
             "kind": "HelmRelease", "namespace": "apps", "selector": "team=app-dev"},
            {"recipients": ["team-slack"], "triggers": ["on-reconcile-failed", "on-reconcile-succeeded"], "engine": "flux",
             "kind": "Kustomization", "namespace": "flux-system", "name": "apps"}
        ])
    );
    assert_eq!(config["services"]["team-slack"], json!({"type": "slack", "webhookUrl": "$team-slack-webhook-address"}));
    let secrets = std::fs::read_to_string(dir.path().join("secrets.yaml")).unwrap();
    assert!(secrets.contains("# team-slack-webhook-address: \"\"   # from "), "{secrets}");
    assert!(!secrets.contains("default-token"), "a Secret no Provider names is left out: {secrets}");
}

#[test]
fn alert_shapes_each_as_the_mapping_says() {
    let (_dir, code, report, text, config) = run(&["alert-shapes.yaml"]);
    assert_eq!(code, 3);
    let todos = todo_items(&report);
    let has = |s: &str| todos.iter().any(|t| t.starts_with(s));
    assert!(has("alert apps/orphan: its providerRef names the Provider \"not-here\", which is not in the input"), "{todos:#?}");
    assert!(has("alert apps/paused: the Alert is suspended"), "{todos:#?}");
    assert!(has("alert apps/apps.eventSources[2]: the name \"podinfo-*\" is a pattern"), "{todos:#?}");
    assert!(has("alert apps/apps.eventSources[3]: driftwatch does not watch sources"), "{todos:#?}");
    assert!(has("alert apps/apps.spec.inclusionList:") && has("alert apps/apps.spec.exclusionList:"), "{todos:#?}");
    assert!(has("provider apps/ops-slack.spec.proxy:") && has("provider apps/ops-slack.spec.certSecretRef:"), "{todos:#?}");
    assert!(has("provider apps/ops-slack.spec.secretRef: the Secret ops-slack-token is not in the input"), "{todos:#?}");
    let subs = config["subscriptions"].as_array().unwrap();
    assert_eq!(subs.len(), 2, "{text}");
    assert_eq!(subs[1]["selector"], "team=app-dev,tier=web");
    assert_eq!(config["services"]["ops-slack"]["timeout"], "30s");
    assert_eq!(text.matches("TODO(import)").count(), todos.len(), "one mark in the file per TODO reported");
}

/// Every value of every Secret in the data (as written, and base64-decoded) is absent
/// from every file written and from the report.
#[test]
fn no_secret_value_reaches_any_output() {
    let mut values = Vec::new();
    for f in ["slack-stream.yaml", "every-provider.yaml", "kubectl-dump.yaml", "unmapped.yaml", "complete/flux-notifications.yaml"] {
        let text = std::fs::read_to_string(data().join(f)).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        let items = docs.iter().flat_map(|d| d["items"].as_array().cloned().unwrap_or_else(|| vec![d.clone()]));
        for s in items.filter(|d| d["kind"] == "Secret") {
            for v in s["stringData"].as_object().into_iter().flatten().filter_map(|(_, v)| v.as_str()) {
                values.push(v.to_string());
            }
            for v in s["data"].as_object().into_iter().flatten().filter_map(|(_, v)| v.as_str()) {
                use base64::Engine;
                values.push(v.to_string());
                values.push(String::from_utf8(base64::engine::general_purpose::STANDARD.decode(v).unwrap()).unwrap());
            }
        }
    }
    // The service-account token Secret of the dump holds `namespace: apps`, which the
    // objects' namespaces say anyway; every other value is made up and distinctive.
    values.retain(|v| v != "apps");
    assert!(values.len() >= 20 && values.iter().all(|v| v.len() >= 8), "{values:?}");
    let dir = tempfile::tempdir().unwrap();
    let o = import(&[data()], dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    let mut outputs = vec![String::from_utf8_lossy(&o.stdout).to_string()];
    for e in std::fs::read_dir(dir.path()).unwrap() {
        outputs.push(std::fs::read_to_string(e.unwrap().path()).unwrap());
    }
    assert_eq!(outputs.len(), 3, "the report, driftwatch.yaml, secrets.yaml");
    for v in &values {
        for out in &outputs {
            assert!(!out.contains(v.as_str()), "{v:?} is in an output");
        }
    }
}

#[test]
fn a_complete_configuration_exits_0() {
    let (dir, code, report, _, config) = run(&["complete/flux-notifications.yaml"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["services"], json!({"converted": 3, "todo": 0}));
    assert_eq!(report["subscriptions"], json!({"converted": 4, "todo": 0}));
    assert_eq!(config["services"]["telegram"]["timeout"], "20s");
    let written: Vec<&str> = report["written"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    assert_eq!(written, ["secrets.yaml", "driftwatch.yaml"]);
    // Not replaced without --force; replaced with it.
    let file = data().join("complete/flux-notifications.yaml");
    let o = import(std::slice::from_ref(&file), dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["import", "--flux", "--force"])
        .arg(&file)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("services         3 converted,   0 need a hand"));
}

#[test]
fn unreadable_input_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-file.yaml");
    let o = import(std::slice::from_ref(&missing), &dir.path().join("o"));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(&format!("{}: cannot read", missing.display())), "{stderr}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: notification.toolkit.fluxcd.io/v1beta3\nkind: Alert\nspec:\n  eventSources: [\n").unwrap();
    let o = import(std::slice::from_ref(&bad), &dir.path().join("o"));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let at = format!("{}:", bad.display());
    let rest = stderr.split_once(&at).map(|(_, r)| r).unwrap_or_else(|| panic!("{stderr}"));
    let mut pos = rest.split(':');
    assert!(pos.next().unwrap().parse::<u32>().is_ok() && pos.next().unwrap().parse::<u32>().is_ok(), "line and column: {stderr}");
    assert!(stderr.contains("not YAML"), "{stderr}");
    assert!(!dir.path().join("o").exists(), "nothing written");

    // Flux objects without --flux: refused with a pointer to it.
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .arg("import")
        .arg(data().join("slack-stream.yaml"))
        .arg("--out")
        .arg(dir.path().join("o"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("import them with `driftwatch import --flux`"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // An Argo CD configuration with --flux: refused, naming the other way.
    let cm = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/corpus/kubectl-dump/dump.yaml");
    let o = import(&[cm], &dir.path().join("o"));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no Flux notification objects found"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `driftwatch check --config DIR/driftwatch.yaml`: its exit code and stderr.
fn check(dir: &Path) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch")).args(["check", "--config"]).arg(dir.join("driftwatch.yaml")).output().unwrap();
    (o.status.code().unwrap(), String::from_utf8_lossy(&o.stderr).to_string())
}

/// The complete configuration's import is one driftwatch loads as it is: the
/// services, and the subscriptions with their engine, kind, namespace, name and
/// selector, on the catalog's reconcile triggers.
#[test]
fn the_import_of_a_complete_configuration_passes_check() {
    let (dir, code, report, _, _) = run(&["complete/flux-notifications.yaml"]);
    assert_eq!(code, 0, "{report}");
    let (code, stderr) = check(dir.path());
    assert_eq!(code, 0, "{stderr}");
}

/// Every file's import passes check once a person has resolved its marks (here:
/// deleted them, keeping what was written), and before that check refuses it at each
/// mark's line, one error per TODO reported.
#[test]
fn every_import_passes_check_once_its_todos_are_resolved() {
    for name in ["slack-stream.yaml", "every-provider.yaml", "kubectl-dump.yaml", "unmapped.yaml", "alert-shapes.yaml"] {
        let (dir, code, report, text, _) = run(&[name]);
        let todos = report["todos"].as_array().unwrap().len();
        let (checked, stderr) = check(dir.path());
        if code == 0 {
            assert_eq!((checked, todos), (0, 0), "{name}: {stderr}");
            continue;
        }
        assert_eq!(checked, 1, "{name}: the marks are refused");
        let marks: Vec<&str> = stderr.lines().filter(|l| l.contains(": import: not converted by `driftwatch import`")).collect();
        assert_eq!(marks.len(), todos, "{name}: one error per TODO: {stderr}");
        let errors = stderr.lines().filter(|l| l.starts_with("error:")).count();
        assert_eq!(errors, marks.len(), "{name}: only the marks are errors: {stderr}");
        let resolved: String = text.lines().filter(|l| !l.contains("TODO(import)")).map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.path().join("driftwatch.yaml"), resolved).unwrap();
        let (checked, stderr) = check(dir.path());
        assert_eq!(checked, 0, "{name}: still refused once the marks are resolved: {stderr}");
    }
}
