//! The `driftwatch` binary as a user runs it: `check`, `trigger run`, `template notify`
//! and `run --replay`, on files that are not in the repository.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{AppBuilder, REV1};
use serde_json::{Value, json};

fn driftwatch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driftwatch")).args(args).env_remove("DRIFTWATCH_LOG").output().expect("run driftwatch")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    p
}

fn repo(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel).display().to_string()
}

/// `run --replay PATH --config CONFIG [--state STATE] --jsonl JSONL` (JSONL in `dir`):
/// the process output and every notification it wrote as a JSON line.
fn replay_jsonl(dir: &Path, path: &str, config: &str, state: Option<&Path>) -> (Output, Vec<Value>) {
    let jsonl = tempfile::NamedTempFile::new_in(dir).unwrap();
    let mut args = vec!["run", "--replay", path, "--config", config, "--jsonl", jsonl.path().to_str().unwrap()];
    if let Some(s) = state {
        args.extend(["--state", s.to_str().unwrap()]);
    }
    let o = driftwatch(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let sent = std::fs::read_to_string(jsonl.path()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (o, sent)
}

/// One written notification as `<step> <trigger>[<condition>] <service>:<recipient> <action>`.
fn summary(n: &Value) -> String {
    let s = |p: &str| n.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    format!(
        "{} {}[{}] {}:{} {}",
        s("/step"),
        s("/trigger"),
        n["condition"],
        s("/destination/service"),
        s("/destination/recipient"),
        s("/action")
    )
}

#[test]
fn trigger_run_json_for_every_catalog_trigger() {
    let dir = tempfile::tempdir().unwrap();
    let app = AppBuilder::new("shop")
        .sync("Unknown", REV1)
        .degraded()
        .operation("Failed", REV1, "2026-03-01T11:58:00Z", Some("2026-03-01T11:59:00Z"))
        .deleting()
        .build();
    // JSON input, as `kubectl get -o json` gives it.
    let file = write(dir.path(), "shop.json", &serde_json::to_string_pretty(&app).unwrap());
    let want = [
        ("on-created", true, json!("shop")),
        ("on-deleted", true, json!("shop")),
        ("on-deployed", false, Value::Null),
        ("on-health-degraded", true, json!(REV1)),
        ("on-out-of-sync", false, Value::Null),
        ("on-sync-failed", true, json!(REV1)),
        ("on-sync-running", false, Value::Null),
        ("on-sync-status-unknown", true, json!(REV1)),
        ("on-sync-succeeded", false, Value::Null),
    ];
    for (trigger, result, once_per) in want {
        let o = driftwatch(&["trigger", "run", trigger, file.to_str().unwrap(), "-o", "json"]);
        assert!(o.status.success(), "{trigger}: {}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["trigger"], trigger);
        let c = &v["conditions"][0];
        assert_eq!(c["index"], 0);
        assert_eq!(c["result"], result, "{trigger}: {v}");
        assert_eq!(c["oncePer"], once_per, "{trigger}: {v}");
        assert!(c["send"][0].as_str().unwrap().starts_with("app-"), "{v}");
        assert!(c["when"].is_string());
    }
}

#[test]
fn trigger_run_table() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "a.yaml", &serde_json::to_string(&AppBuilder::new("a").sync("OutOfSync", REV1).build()).unwrap());
    let o = driftwatch(&["trigger", "run", "on-out-of-sync", file.to_str().unwrap()]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("RESULT") && out.contains(&format!("0   true   {REV1}")), "{out}");
}

#[test]
fn template_notify_json_per_recipient() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "a.yaml",
        &serde_json::to_string(&AppBuilder::new("payments").multi_source().synced().healthy().build()).unwrap(),
    );
    let o = driftwatch(&[
        "template",
        "notify",
        "app-deployed",
        file.to_str().unwrap(),
        "--recipient",
        "slack:deploys",
        "--recipient",
        "email:ops@example.com",
        "-o",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["template"], "app-deployed");
    let n = v["notifications"].as_array().unwrap();
    assert_eq!(n.len(), 2);
    assert_eq!((n[0]["destination"].as_str(), n[0]["recipient"].as_str()), (Some("slack"), Some("deploys")));
    let fields = &n[0]["payload"]["attachments"][0]["fields"];
    assert_eq!(fields[1]["title"], "Repositories", "multi-source: {fields}");
    assert_eq!(fields[1]["value"], ":arrow_heading_up: https://git.example.com/a.git\n:arrow_heading_up: https://charts.example.com");
    assert_eq!(n[1]["destination"], "email");
    assert_eq!(n[1]["payload"]["subject"], "New version of an application payments is up and running.");
    // Default recipient: the console.
    let o = driftwatch(&["template", "notify", "app-created", file.to_str().unwrap()]);
    assert_eq!(stdout(&o), "--- console console:\nApplication payments has been created.\n");
}

#[test]
fn template_notify_never_prints_a_secret_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "driftwatch.yaml",
        "services:\n  hook:\n    type: webhook\n    url: https://h.example.com\n    bearerToken: $hook-token\ntemplates:\n  t:\n    message: \"note: {{app.metadata.annotations.note}}\"\n",
    );
    let app =
        write(dir.path(), "a.json", &serde_json::to_string(&AppBuilder::new("a").annotate("note", "tok-SUPERSECRET-42").build()).unwrap());
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["template", "notify", "t", app.to_str().unwrap(), "--config", cfg.to_str().unwrap(), "-o", "json"])
        .env("DRIFTWATCH_SECRET_HOOK_TOKEN", "tok-SUPERSECRET-42")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(!all.contains("SUPERSECRET"), "{all}");
    assert!(stdout(&o).contains("note: ***"), "{all}");
}

#[test]
fn a_file_that_is_not_an_application_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let cm = write(dir.path(), "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n");
    let o = driftwatch(&["trigger", "run", "on-created", cm.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "cm.yaml: not an Application: kind is \"ConfigMap\", expected \"Application, Kustomization, HelmRelease or BundleDeployment\""
        ),
        "{}",
        stderr(&o)
    );
    let bad = write(dir.path(), "bad.yaml", "kind: Application\nmetadata: {name: [x\n");
    let o = driftwatch(&["template", "notify", "app-created", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.yaml:"), "{}", stderr(&o));
    let o = driftwatch(&["trigger", "run", "on-nothing", cm.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("trigger \"on-nothing\" does not exist"));
}

#[test]
fn check_passes_on_the_catalog_and_the_examples() {
    let o = driftwatch(&["check"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("ok: 21 triggers, 25 templates"), "{}", stdout(&o));
    let o = driftwatch(&["check", "--config", &repo("examples/drift-incident/driftwatch.yaml")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = driftwatch(&["check", "--config", &repo("examples/flux-fleet/driftwatch.yaml")]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The reference configuration: valid, with warnings for its unset secrets only.
    let o = driftwatch(&["check", "--config", &repo("deploy/driftwatch.yaml")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("ok: 22 triggers, 26 templates, 5 services, 5 warning(s)"), "{}", stdout(&o));
    assert!(stderr(&o).lines().all(|l| l.starts_with("warning: services.") && l.contains("is not set")), "{}", stderr(&o));
}

#[test]
fn check_reports_every_broken_file_with_positions() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "driftwatch.yaml", "context:\n  argocdUrl: https://cd\nservice:\n  slack: {}\n");
    let o = driftwatch(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains(&format!("error: {}:3:1: the configuration: ", cfg.display())) && err.contains("service"), "{err}");

    let cfg = write(dir.path(), "driftwatch.yaml", "context:\n  argocdUrl: https://cd\n");
    write(dir.path(), "triggers/on-bad.yaml", "- when: app.status.sync.status === \"OutOfSync\"\n  send: [app-created]\n");
    write(dir.path(), "templates/bad-hbs.yaml", "message: \"{{#if app.x}}open\"\n");
    let o = driftwatch(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("on-bad.yaml:1:") && err.contains("trigger on-bad[0].when: invalid rhai"), "{err}");
    assert!(err.contains("bad-hbs.yaml:1:") && err.contains("template bad-hbs.message: invalid handlebars"), "{err}");
    assert!(err.contains("2 configuration error(s)"), "{err}");

    // A JSON field that compiles but does not render to JSON is found by rendering.
    std::fs::remove_file(dir.path().join("triggers/on-bad.yaml")).unwrap();
    write(
        dir.path(),
        "templates/bad-hbs.yaml",
        "message: x\nslack:\n  attachments: |\n    [{\"title\": \"{{app.metadata.name}}\" \"color\": 1}]\n",
    );
    let o = driftwatch(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("template bad-hbs field slack.attachments did not render to valid JSON"), "{}", stderr(&o));

    // A path the Application schema does not have is a warning, not an error.
    write(dir.path(), "templates/bad-hbs.yaml", "message: \"{{app.status.healthh.status}}\"\n");
    let o = driftwatch(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: ") && stderr(&o).contains("app.status.healthh.status does not exist"), "{}", stderr(&o));
}

/// The shipped example shows exactly the notifications its files describe, once each.
#[test]
fn replay_of_the_drift_incident_example() {
    let dir = tempfile::tempdir().unwrap();
    let (o, sent) = replay_jsonl(dir.path(), &repo("examples/drift-incident"), &repo("examples/drift-incident/driftwatch.yaml"), None);
    assert_eq!(
        sent.iter().map(summary).collect::<Vec<_>>(),
        [
            "01-deployed.yaml on-deployed[0] slack:deployments fire",
            "02-kubectl-edit.yaml on-out-of-sync[0] slack:drift fire",
            "05-self-heal-failed.yaml on-sync-failed[0] email:oncall@example.com fire",
            "05-self-heal-failed.yaml on-sync-failed[0] slack:drift fire",
            "06-fixed-in-git.yaml on-deployed[0] slack:deployments fire",
        ]
    );
    assert_eq!(sent[2]["payload"]["subject"], "Failed to sync application guestbook.");
    assert!(sent[1]["payload"]["text"].as_str().unwrap().contains("https://argocd.example.com/applications/guestbook"));
    let out = stdout(&o);
    assert!(out.contains("(sync status is stale: skipped until Argo CD re-reconciles)"), "{out}");
    assert!(out.contains("5 notification(s) sent, 0 failed"), "{out}");
}

/// The Flux and Fleet example: the same routes and templates for a Kustomization, a
/// HelmRelease and a Fleet bundle — a failed build told once and resolved, drift reported
/// by helm-controller and by Fleet's agent (the patch's values shown, a security field
/// paged), everything resolved when fixed.
#[test]
fn replay_of_the_flux_and_fleet_example() {
    let dir = tempfile::tempdir().unwrap();
    let (o, sent) = replay_jsonl(dir.path(), &repo("examples/flux-fleet"), &repo("examples/flux-fleet/driftwatch.yaml"), None);
    assert_eq!(
        sent.iter().map(summary).collect::<Vec<_>>(),
        [
            "01-ready.yaml#1 on-reconcile-succeeded[0] slack:deploys fire",
            "01-ready.yaml#2 on-reconcile-succeeded[0] slack:deploys fire",
            "01-ready.yaml#3 on-reconcile-succeeded[0] slack:deploys fire",
            "02-build-failed.yaml on-reconcile-failed[0] slack:deploys fire",
            "04-drifted.yaml#1 on-live-drift[0] slack:drift fire",
            "04-drifted.yaml#2 on-live-drift[0] slack:drift fire",
            "04-drifted.yaml#2 on-security-drift[0] pagerduty:platform fire",
            "05-fixed.yaml#1 on-reconcile-failed[0] slack:deploys resolve",
            "05-fixed.yaml#1 on-reconcile-succeeded[0] slack:deploys fire",
            "05-fixed.yaml#2 on-drift-resolved[0] slack:drift fire",
            "05-fixed.yaml#2 on-live-drift[0] slack:drift resolve",
            "05-fixed.yaml#3 on-drift-resolved[0] slack:drift fire",
            "05-fixed.yaml#3 on-live-drift[0] slack:drift resolve",
            "05-fixed.yaml#3 on-security-drift[0] pagerduty:platform resolve",
        ]
    );
    let text = |i: usize| sent[i]["payload"]["text"].as_str().unwrap_or_default().to_string();
    assert!(text(3).contains("Kustomization flux-system/apps failed to reconcile: BuildFailed"), "{}", text(3));
    assert!(text(3).contains("no such file or directory"), "the controller's message: {}", text(3));
    assert!(text(4).contains("Deployment shop/podinfo (changed: 0 additions, 1 changes, 0 removals)"), "{}", text(4));
    assert!(text(5).contains("spec.replicas: 2 → (changed)"), "the patch's value: {}", text(5));
    assert!(text(5).contains("securityContext.privileged: (removed)"), "{}", text(5));
    assert_eq!(sent[6]["payload"]["severity"], "critical");
    assert!(stdout(&o).contains("14 notification(s) sent, 0 failed"), "{}", stdout(&o));
}

/// The production policy example: a Git change notifies chat quietly, live drift alerts
/// chat, attribution escalates it to a page, self-heal resolves page and message, a
/// Degraded blip shorter than the hold-down pages nobody, and the SIEM gets every
/// episode record and every sync operation. Then the history is queried from the state file.
#[test]
fn replay_of_the_production_example_and_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.redb");
    let config = repo("examples/production/driftwatch.yaml");
    let (o, sent) = replay_jsonl(dir.path(), &repo("examples/production"), &config, Some(&state));
    assert_eq!(
        sent.iter().map(summary).collect::<Vec<_>>(),
        [
            "01-synced.yaml on-sync-operation[0] siem: fire",
            "02-git-change.yaml on-drift-episode[0] siem: fire",
            "02-git-change.yaml on-git-change[0] chat:deploys fire",
            "03-synced.yaml on-drift-episode[2] siem: fire",
            "03-synced.yaml on-sync-operation[0] siem: fire",
            "04-kubectl-edit.yaml on-drift-episode[0] siem: fire",
            "04-kubectl-edit.yaml on-live-drift[0] chat:drift fire",
            "06-attributed.yaml on-drift-episode[1] siem: fire",
            "06-attributed.yaml on-security-drift[0] oncall:platform fire",
            "09-self-healed.yaml on-drift-episode[2] siem: fire",
            "09-self-healed.yaml on-drift-resolved[0] chat:drift fire",
            "09-self-healed.yaml on-live-drift[0] chat:drift resolve",
            "09-self-healed.yaml on-security-drift[0] oncall:platform resolve",
            "10-degraded-blip.yaml on-drift-episode[0] siem: fire",
            "11-healthy.yaml on-drift-episode[2] siem: fire",
            "11-healthy.yaml on-health-recovered[0] chat:drift fire",
        ]
    );
    let at = |s: &str| &sent[sent.iter().position(|n| summary(n) == s).unwrap()];
    // The page names who changed which security field, and when.
    let page = &at("06-attributed.yaml on-security-drift[0] oncall:platform fire")["payload"];
    assert_eq!(page["severity"], "critical");
    assert!(page["summary"].as_str().unwrap().contains("by kubectl-edit"), "{page}");
    let attribution = &page["custom_details"]["attribution"];
    let edit = attribution.as_array().unwrap().iter().find(|a| a["kind"] == "Deployment").unwrap();
    assert_eq!(edit["manager"], "kubectl-edit");
    assert_eq!(edit["securityFields"], json!(["spec.template.spec.containers[api].securityContext.privileged"]));
    assert_eq!(edit["time"], "2026-03-02T03:12:04Z");
    // The chat message is updated in place when the drift resolves, with the duration.
    let (alert, update) =
        (at("04-kubectl-edit.yaml on-live-drift[0] chat:drift fire"), at("09-self-healed.yaml on-live-drift[0] chat:drift resolve"));
    assert_eq!(update["payload"]["groupingKey"], alert["payload"]["groupingKey"]);
    assert!(update["payload"]["text"].as_str().unwrap().contains("Resolved after 14 min"), "{}", update["payload"]);
    // The SIEM's resolved record carries the duration.
    let resolved = at("09-self-healed.yaml on-drift-episode[2] siem: fire");
    assert!(resolved["payload"]["message"].as_str().unwrap().contains("resolved after 14 min"), "{}", resolved["payload"]);
    assert_eq!(resolved["episode"]["durationSeconds"], 14 * 60);
    // The SIEM's record of the sync that ended the Git episode.
    let sync = at("03-synced.yaml on-sync-operation[0] siem: fire");
    assert_eq!(sync["operation"]["action"], "sync", "{sync}");
    let out = stdout(&o);
    assert!(out.contains("(held down: on-degraded holds, notifies if it still does at 04:02:00 UTC)"), "{out}");

    // A restart in the middle of the episode: the first process saw steps 01-06, the
    // second sees 06 again (nothing is re-sent) and the rest; together they send
    // exactly what one process did.
    let (part1, part2) = (dir.path().join("part1"), dir.path().join("part2"));
    let split_state = dir.path().join("split.redb");
    for (part, range) in [(&part1, 1..=6), (&part2, 5..=11)] {
        std::fs::create_dir_all(part).unwrap();
        for entry in std::fs::read_dir(repo("examples/production")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name.ends_with(".yaml") && name != "driftwatch.yaml" && range.contains(&name[..2].parse::<u32>().unwrap()) {
                std::fs::copy(&path, part.join(&name)).unwrap();
            }
        }
    }
    let mut split = Vec::new();
    for part in [&part1, &part2] {
        split.extend(replay_jsonl(dir.path(), part.to_str().unwrap(), &config, Some(&split_state)).1.iter().map(summary));
    }
    let whole: Vec<String> = sent.iter().map(summary).collect();
    assert_eq!(split, whole, "a restart mid-episode neither loses nor repeats a notification");

    // The history, after the process that wrote it has exited.
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let eps: Vec<Value> = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(eps.len(), 3, "git change, live drift, degraded blip");
    let live = &eps[1];
    assert_eq!((live["direction"].as_str(), live["severity"].as_str()), (Some("live"), Some("critical")));
    assert_eq!(live["classes"], json!(["config", "rbac", "security-context", "workload"]));
    assert_eq!(live["durationSeconds"], 14 * 60);
    assert_eq!(live["openedAt"], "2026-03-02T03:12:30Z");
    assert_eq!(live["cluster"], "prod-eu-1");
    assert_eq!(live["revision"], "0b1c2d3e4f5a69788796a5b4c3d2e1f001122334");
    let managers: Vec<&str> = live["attribution"].as_array().unwrap().iter().map(|a| a["manager"].as_str().unwrap()).collect();
    assert!(managers.contains(&"kubectl-edit") && managers.contains(&"kubectl-patch"), "{managers:?}");
    let sent_in_episode: Vec<String> = live["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            format!(
                "{} {}:{} {}",
                n["trigger"].as_str().unwrap(),
                n["service"].as_str().unwrap(),
                n["recipient"].as_str().unwrap(),
                n["action"].as_str().unwrap()
            )
        })
        .collect();
    assert!(sent_in_episode.contains(&"on-security-drift oncall:platform resolve".to_string()), "{sent_in_episode:?}");
    assert_eq!(eps[2]["durationSeconds"], 30);
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--limit", "1", "-o", "json"]);
    let newest: Vec<Value> = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!((newest.len(), &newest[0]["durationSeconds"]), (1, &json!(30)), "--limit keeps the newest");

    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--class", "rbac", "-o", "csv"]);
    let csv = stdout(&o);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[0].starts_with("id,app,project,cluster,opened,resolved,duration_seconds"), "{csv}");
    assert!(
        lines[1].contains(",argocd/payments-api,payments,prod-eu-1,2026-03-02T03:12:30Z,2026-03-02T03:26:30Z,840,resolved,critical,live,"),
        "{csv}"
    );
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--app", "argocd/payments-api", "--since", "2026-03-02T03:30:00Z"]);
    let table = stdout(&o);
    assert!(table.contains("30 s") && table.ends_with("1 episode(s)\n"), "{table}");
    // Before any representable time: an error, not a panic.
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--since", "100000000d"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("100000000d"), "{}", stderr(&o));
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--since", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--since"), "{}", stderr(&o));
}

/// `routes test` with audit events: the person and the refused attempt in the drift,
/// and the security attempt route paging the security team.
#[test]
fn routes_test_shows_who_from_audit_events() {
    let dir = tempfile::tempdir().unwrap();
    let app = write(
        dir.path(),
        "app.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: payments-api, namespace: argocd, uid: u1}\nspec:\n  project: default\n  destination: {server: https://kubernetes.default.svc, namespace: payments}\nstatus:\n  sync: {status: Synced, revision: abc}\n  health: {status: Healthy}\n  resources: [{group: apps, version: v1, kind: Deployment, namespace: payments, name: api, status: Synced}]\n",
    );
    let audit = repo("tests/data/k8s-audit/eventlist-changes-1.json");
    let config = repo("examples/production/driftwatch.yaml");
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", app.to_str().unwrap(), "--audit", &audit]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("audit: mallory denied patch Deployment payments/api (workload)"), "{out}");
    assert!(out.contains("audit: alice allowed patch Deployment payments/api (security-context)"), "{out}");
    assert!(out.contains("routes[3] \"security-attempts\" matched"), "{out}");
    assert!(out.contains("on-drift-attempt -> oncall:security  (sends now: app-drift-attempt)"), "{out}");
    let bad = write(dir.path(), "bad.json", "{\"items\": [");
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", app.to_str().unwrap(), "--audit", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.json"), "{}", stderr(&o));
}

/// `routes test` explains which route takes an Application's drift, with attribution
/// from live objects given as files.
#[test]
fn routes_test_explains_where_drift_goes() {
    let config = repo("examples/production/driftwatch.yaml");
    let app = repo("examples/production/08-role-drift.yaml");
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", &app]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("direction=live, severity=critical"), "{out}");
    assert!(out.contains("routes[0] \"security-page\" matched: class=rbac (Role payments/api-reader)"), "{out}");
    assert!(out.contains("on-security-drift -> oncall:platform  (sends now: app-security-drift)"), "{out}");
    assert!(out.contains("routes[4] \"attempts\" matched: catch-all"), "{out}");
    assert!(out.contains("routes[6] \"live-drift\" matched: catch-all"), "{out}");
    assert!(!out.contains("git-changes"), "{out}");

    // Project-level subscriptions come on top of the routes.
    let dir = tempfile::tempdir().unwrap();
    let project = write(
        dir.path(),
        "project.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata:\n  name: payments\n  namespace: argocd\n  annotations:\n    notifications.argoproj.io/subscribe.on-live-drift.slack: payments-team\n",
    );
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", &app, "--project", project.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(out.contains("on-live-drift -> slack:payments-team  (sends now: app-live-drift)"), "{out}");
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", &app, "--project", &app]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not an AppProject"), "{}", stderr(&o));

    // Without the RBAC drift, only attribution makes the Deployment a security matter.
    let dir = tempfile::tempdir().unwrap();
    let edited = std::fs::read_to_string(repo("examples/production/06-attributed.yaml")).unwrap();
    let app = write(dir.path(), "app.yaml", &edited);
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", app.to_str().unwrap(), "-o", "json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let paths: Vec<&str> = v["routes"].as_array().unwrap().iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["routes[1]", "routes[2]", "routes[4]", "routes[6]"], "no security page without attribution: {v}");
    let o = driftwatch(&[
        "routes",
        "test",
        "--config",
        &config,
        "--app",
        app.to_str().unwrap(),
        "--live",
        &repo("examples/production/05-live-objects.yaml"),
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["routes"][0]["path"], "routes[0]");
    assert_eq!(v["routes"][0]["reasons"], json!(["class=security-context (Deployment payments/api)"]));
    assert_eq!(v["drift"]["resources"][0]["kindClass"], "workload");
    let sent: Vec<&str> = v["notifications"].as_array().unwrap().iter().map(|n| n["destination"].as_str().unwrap()).collect();
    assert!(sent.contains(&"oncall:platform"), "{v}");
}

#[test]
fn replay_state_persists_across_runs_and_malformed_objects_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.redb");
    let replay = write(
        dir.path(),
        "replay.yaml",
        &format!(
            "{}\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: broken}}\nstatus: \"not a mapping\"\n---\n{}\n",
            serde_json::to_string(
                &AppBuilder::new("a")
                    .sync("OutOfSync", REV1)
                    .annotate("notifications.argoproj.io/subscribe.on-out-of-sync.slack", "x")
                    .build()
            )
            .unwrap(),
            r#"{"type": "DELETED", "object": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "gone", "namespace": "argocd", "annotations": {"notifications.argoproj.io/subscribe.on-deleted.slack": "x"}}}}"#,
        ),
    );
    let run = || driftwatch(&["run", "--replay", replay.to_str().unwrap(), "--state", state.to_str().unwrap()]);
    let first = stdout(&run());
    assert!(first.contains("2 notification(s) sent") && first.contains("1 malformed object(s) skipped"), "{first}");
    assert!(first.contains("replay.yaml#2  skipped: replay.yaml#2: not an Application: field status has the wrong type"), "{first}");
    assert!(first.contains("slack:x (slack) argocd/gone: on-deleted[0]"), "{first}");
    // Second run, same state file: the live app was already notified; the deleted one's
    // state was cleaned, so its deletion is reported again (it is a new deletion).
    let second = stdout(&run());
    assert!(second.contains("1 notification(s) sent"), "{second}");
    assert!(!second.contains("on-out-of-sync[0]"), "{second}");
    // The store, inspected after both runs: one key for the live app, none for the deleted.
    let o = driftwatch(&["state", "list", "--state", state.to_str().unwrap(), "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(rows[0]["app"], "argocd/a@uid-a");
    assert!(rows[0]["key"].as_str().unwrap().starts_with(&format!("{REV1}:on-out-of-sync:[0].")), "{rows}");
    assert!(rows[0]["key"].as_str().unwrap().ends_with(":slack:x"), "{rows}");
}

#[test]
fn run_without_a_cluster_says_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .arg("run")
        .current_dir(home.path())
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("no cluster configuration found") && err.contains("--replay"), "{err}");
    assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0, "nothing created without a cluster");
}

/// `check` renders every template with a drifted, attributed episode and its
/// resolution too, so a template that only breaks on drift fails `check`, not at 3 a.m.
#[test]
fn check_renders_templates_with_drift_and_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "driftwatch.yaml",
        "templates:\n  broken-on-drift:\n    message: \"{{#if episode}}{{episode.resources.length}} changed by {{episode.attribution.[0].manager}}{{/if}}\"\n",
    );
    let o = driftwatch(&["check", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("broken-on-drift"), "{}", stderr(&o));
    let cfg = write(
        dir.path(),
        "driftwatch.yaml",
        "templates:\n  fine:\n    message: \"{{#if episode}}{{episode.resourceCount}} changed by {{episode.attribution.[0].manager}}{{/if}}\"\n",
    );
    let o = driftwatch(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A deploy of B after A, B Degraded, then a sync back to A by alice: `on-rollback`
/// fires once with from, to and who, and the episode B opened resolves as `rollback`
/// with the fix (revision A, by alice); an automated sync of a newer revision later
/// resolves the next episode as `git`.
#[test]
fn a_rollback_is_recognized_and_resolves_the_episode_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = ("a".repeat(40), "b".repeat(40), "c".repeat(40));
    // `op_at`: when the last operation finished (a snapshot without a new operation keeps it).
    let snapshot = |n: u32, at: &str, op_at: &str, health: &str, history: &[&str], by: Value| {
        let h: Vec<Value> = history.iter().enumerate().map(|(i, r)| serde_json::json!({"id": i, "revision": r})).collect();
        let last = *history.last().unwrap();
        serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd", "uid": "u-1", "resourceVersion": n.to_string()},
            "spec": {"project": "default", "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
            "status": {"reconciledAt": at, "sync": {"status": "Synced", "revision": last}, "health": {"status": health}, "history": h,
                "operationState": {"phase": "Succeeded", "startedAt": op_at, "finishedAt": op_at,
                    "operation": {"initiatedBy": by, "sync": {"revision": last}}, "syncResult": {"revision": last}}}})
    };
    let auto = serde_json::json!({"automated": true});
    let steps = [
        snapshot(1, "2026-12-04T10:00:00Z", "2026-12-04T10:00:00Z", "Healthy", &[&a], auto.clone()),
        snapshot(2, "2026-12-04T10:10:00Z", "2026-12-04T10:05:00Z", "Degraded", &[&a, &b], auto.clone()),
        snapshot(
            3,
            "2026-12-04T10:20:00Z",
            "2026-12-04T10:20:00Z",
            "Healthy",
            &[&a, &b, &a],
            serde_json::json!({"username": "alice@example.com"}),
        ),
        snapshot(
            4,
            "2026-12-04T11:00:00Z",
            "2026-12-04T10:20:00Z",
            "Degraded",
            &[&a, &b, &a],
            serde_json::json!({"username": "alice@example.com"}),
        ),
        snapshot(5, "2026-12-04T11:05:00Z", "2026-12-04T11:05:00Z", "Healthy", &[&a, &b, &a, &c], auto),
    ];
    let replay = dir.path().join("replay");
    std::fs::create_dir(&replay).unwrap();
    for (i, s) in steps.iter().enumerate() {
        std::fs::write(replay.join(format!("0{}-step.json", i + 1)), s.to_string()).unwrap();
    }
    let config = write(
        dir.path(),
        "driftwatch.yaml",
        "subscriptions:\n  - recipients: [slack:ops]\n    triggers: [on-rollback]\n  - recipients: [syslog]\n    triggers: [on-sync-operation]\n",
    );
    let state = dir.path().join("state.redb");
    let (_, all) = replay_jsonl(dir.path(), replay.to_str().unwrap(), config.to_str().unwrap(), Some(&state));
    // One record per operation for the SIEM, each carrying the operation: sync, sync,
    // rollback (from B, by alice), sync — and none for snapshot 4, which has no new one.
    let (ops, sent): (Vec<Value>, Vec<Value>) = all.into_iter().partition(|n| n["trigger"] == "on-sync-operation");
    let records: Vec<String> = ops
        .iter()
        .map(|n| {
            let o = &n["operation"];
            format!(
                "{} {} {} {}",
                n["step"].as_str().unwrap(),
                o["action"].as_str().unwrap(),
                &o["revision"].as_str().unwrap()[..1],
                o["username"]
            )
        })
        .collect();
    assert_eq!(
        records,
        [
            "01-step.json sync a \"\"",
            "02-step.json sync b \"\"",
            "03-step.json rollback a \"alice@example.com\"",
            "05-step.json sync c \"\""
        ]
    );
    assert_eq!(ops[2]["operation"]["from"], b.as_str());
    assert_eq!(sent.iter().map(summary).collect::<Vec<_>>(), ["03-step.json on-rollback[0] slack:ops fire"]);
    let text = sent[0]["payload"]["text"].as_str().unwrap();
    assert!(text.contains("rolled back from bbbbbbb to aaaaaaa by alice@example.com at 10:20 UTC"), "{text}");
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "-o", "json"]);
    let eps: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let how: Vec<(String, String, String)> = eps
        .iter()
        .map(|e| {
            let s = |p: &str| e.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
            (s("/resolution"), s("/fix/revision"), s("/fix/by"))
        })
        .collect();
    assert!(how.contains(&("rollback".into(), a.clone(), "alice@example.com".into())), "{how:?}");
    assert!(how.contains(&("git".into(), c.clone(), "automated sync".into())), "{how:?}");

    // The story, for a post-mortem: A deployed, B deployed, the degradation, alice's
    // rollback to A (one step, though it ended one episode and was running when the
    // next opened), the next degradation, and the Git revision C that ended it.
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--app", "argocd/shop", "--timeline", "-o", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let steps: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let story: Vec<String> = steps
        .iter()
        .map(|s| format!("{} {} {}", s["event"].as_str().unwrap(), s["revision"].as_str().unwrap_or(""), s["by"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        story,
        [
            format!("deployed {a} automated sync"),
            format!("deployed {b} automated sync"),
            "opened  ".to_string(),
            format!("rollback {a} alice@example.com"),
            "opened  ".to_string(),
            format!("git {c} automated sync"),
        ],
        "{steps:?}"
    );
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--app", "argocd/shop", "--timeline"]);
    let table = stdout(&o);
    assert!(table.contains("rollback    aaaaaaa by alice@example.com"), "{table}");
    assert!(table.contains("6 step(s)"), "{table}");
    assert_eq!(steps[1]["episode"], steps[2]["episode"], "B's deployment is the cause of the episode it opened: {steps:?}");
}

/// Break-glass in a replay (no audit input: approvals are `unverifiable`): approved by
/// a second person, a live RBAC change pages nobody and goes to the break-glass route
/// with the ticket; at expiry, still off Git, `on-break-glass-overdue` pages, again an
/// hour later, and resolves when the Application is Synced. The same exception
/// approved by its opener is refused: the page goes out as usual.
#[test]
fn break_glass_holds_the_page_then_reminds_until_git() {
    let dir = tempfile::tempdir().unwrap();
    let rev = "d".repeat(40);
    let exception = |approved_by: &str| {
        serde_json::json!({"ticket": "INC-1234", "reason": "payments down: hot-fixing the Role", "openedBy": "alice",
            "openedAt": "2026-12-04T10:00:00Z", "expiresAt": "2026-12-04T11:00:00Z",
            "approvedBy": approved_by, "approvedAt": "2026-12-04T10:01:00Z"})
        .to_string()
    };
    let snapshot = |name: &str, at: &str, approved_by: &str, drifted: bool| {
        let resources = if drifted {
            serde_json::json!([{"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "shop", "name": "api", "status": "OutOfSync"}])
        } else {
            serde_json::json!([])
        };
        serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "argocd", "uid": format!("u-{name}"), "annotations": {"driftwatch.io/break-glass": exception(approved_by)}},
            "spec": {"project": "default", "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
            "status": {"reconciledAt": at, "sync": {"status": if drifted { "OutOfSync" } else { "Synced" }, "revision": rev},
                "health": {"status": "Healthy"}, "resources": resources,
                "history": [{"id": 0, "revision": rev}],
                "operationState": {"phase": "Succeeded", "startedAt": "2026-12-04T09:00:00Z", "finishedAt": "2026-12-04T09:00:00Z",
                    "operation": {"initiatedBy": {"automated": true}, "sync": {"revision": rev}}, "syncResult": {"revision": rev}}}})
    };
    let replay = dir.path().join("replay");
    std::fs::create_dir(&replay).unwrap();
    let steps = [
        ("01", snapshot("shop", "2026-12-04T10:05:00Z", "bob", false)),
        ("02", snapshot("shop", "2026-12-04T10:10:00Z", "bob", true)),
        ("03", snapshot("shop", "2026-12-04T11:05:00Z", "bob", true)),
        ("04", snapshot("shop", "2026-12-04T11:30:00Z", "bob", true)),
        ("05", snapshot("shop", "2026-12-04T12:06:00Z", "bob", true)),
        ("06", snapshot("shop", "2026-12-04T12:30:00Z", "bob", false)),
        // Approved by the person who opened it: refused, changes nothing.
        ("07", snapshot("cart", "2026-12-04T10:10:00Z", "alice", true)),
    ];
    for (n, s) in &steps {
        std::fs::write(replay.join(format!("{n}-step.json")), s.to_string()).unwrap();
    }
    let config = write(
        dir.path(),
        "driftwatch.yaml",
        "services:\n  oncall:\n    type: pagerduty\n    routingKeys:\n      platform: $pd-key\nroutes:\n  - name: break-glass\n    match: {breakGlass: true}\n    triggers: [on-security-drift]\n    recipients: [slack:incident]\n    continue: true\n  - name: security-page\n    match: {class: rbac}\n    triggers: [on-security-drift]\n    recipients: [oncall:platform]\n    continue: true\n  - name: overdue\n    triggers: [on-break-glass-overdue]\n    recipients: [oncall:platform]\nbreakGlass:\n  approvers:\n    groups: [sre]\n",
    );
    let state = dir.path().join("state.redb");
    let (o, sent) = replay_jsonl(dir.path(), replay.to_str().unwrap(), config.to_str().unwrap(), Some(&state));
    assert_eq!(
        sent.iter().map(summary).collect::<Vec<_>>(),
        [
            "02-step.json on-security-drift[0] slack:incident fire",
            "03-step.json on-break-glass-overdue[0] oncall:platform fire",
            "05-step.json on-break-glass-overdue[0] oncall:platform fire",
            "06-step.json on-break-glass-overdue[0] oncall:platform resolve",
            "06-step.json on-security-drift[0] slack:incident resolve",
            "07-step.json on-security-drift[0] oncall:platform fire",
        ],
        "{}",
        stdout(&o)
    );
    let out = stdout(&o);
    assert!(out.contains("break-glass INC-1234: active (unverifiable, in force)"), "{out}");
    assert!(
        out.contains("(break-glass INC-1234: on-security-drift is not paged to oncall:platform; the break-glass routes have it)"),
        "{out}"
    );
    assert!(out.contains("break-glass INC-1234: refused: approved by alice, who opened it: a second person must approve"), "{out}");
    let text = sent[0]["payload"]["text"].as_str().unwrap();
    assert!(text.contains("Under break-glass INC-1234: opened by alice, approved by bob (unverifiable)."), "{text}");
    assert!(sent[1]["payload"]["summary"].as_str().unwrap().contains("Break-glass INC-1234 overdue: shop still off Git"), "{}", sent[1]);
    // The history: the episode is recorded against the ticket; the timeline tells the
    // exception's story with the drift.
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--app", "argocd/shop", "-o", "json"]);
    let eps: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(eps[0]["breakGlass"]["ticket"], "INC-1234", "{eps:?}");
    assert_eq!(eps[0]["breakGlass"]["approvedBy"], "bob");
    let o = driftwatch(&["history", "--state", state.to_str().unwrap(), "--app", "argocd/shop", "--timeline", "-o", "json"]);
    let steps: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let story: Vec<String> = steps.iter().map(|s| format!("{} {}", s["event"].as_str().unwrap(), s["by"].as_str().unwrap_or(""))).collect();
    assert_eq!(
        story,
        [
            "deployed automated sync",
            "break-glass-opened alice",
            "break-glass-approved bob",
            "break-glass-active ",
            "opened ",
            "break-glass-expired ",
            "break-glass-overdue ",
            "resolved ",
        ],
        "{steps:?}"
    );
}

/// `routes test` names the group a grouped route's notification joins, its `by`
/// values and its timing.
#[test]
fn routes_test_shows_the_group_a_notification_joins() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "driftwatch.yaml",
        "services:\n  chat:\n    type: slack\n    webhookUrl: http://127.0.0.1:9/hook\nroutes:\n  - name: fleet\n    triggers: [on-out-of-sync]\n    recipients: [chat:drift]\n    group: {by: [revision, project], wait: 45s, interval: 10m}\n",
    );
    let (config, app) = (config.to_str().unwrap().to_string(), repo("examples/production/08-role-drift.yaml"));
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", &app]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("on-out-of-sync -> chat:drift  (sends now: app-group)"), "{out}");
    assert!(
        out.contains("(project=payments, revision=0b1c2d3e4f5a69788796a5b4c3d2e1f001122334): sent 45 s after the group opens, then updated at most every 10 min"),
        "{out}"
    );
    let o = driftwatch(&["routes", "test", "--config", &config, "--app", &app, "-o", "json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let g = &v["notifications"][0]["group"];
    assert_eq!((g["waitMs"].as_u64(), g["intervalMs"].as_u64()), (Some(45_000), Some(600_000)));
    assert_eq!(g["labels"], json!({"project": "payments", "revision": "0b1c2d3e4f5a69788796a5b4c3d2e1f001122334"}));
    assert!(out.contains(&format!("joins group {} ", g["key"].as_str().unwrap())), "the same key: {out}");
}

/// A replay on a grouped route: the group's message waits for `wait` on the snapshots'
/// clock (the replay does not stall on it), goes out once a later snapshot passes it,
/// and `deliveries` shows the group.
#[test]
fn a_replay_sends_a_group_once_its_wait_passes_and_deliveries_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "driftwatch.yaml",
        "routes:\n  - triggers: [on-out-of-sync]\n    recipients: [slack:drift]\n    group: {by: [revision], wait: 1m, interval: 5m}\n",
    );
    let app = |name: &str, at: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: argocd, uid: uid-{name}}}\nspec: {{project: default, destination: {{server: https://kubernetes.default.svc, namespace: {name}}}, source: {{repoURL: https://git.example.com/x.git, path: {name}}}}}\nstatus:\n  sync: {{status: OutOfSync, revision: 0123456789abcdef0123456789abcdef01234567}}\n  health: {{status: Healthy}}\n  reconciledAt: \"{at}\"\n"
        )
    };
    let steps = dir.path().join("steps");
    std::fs::create_dir(&steps).unwrap();
    let fleet = ["a", "b", "c"].map(|n| app(n, "2026-03-01T12:00:00Z")).join("---\n");
    std::fs::write(steps.join("01-fleet.yaml"), fleet).unwrap();
    let state = dir.path().join("state.redb");
    let (config, steps_arg, state_arg) = (config.to_str().unwrap(), steps.to_str().unwrap(), state.to_str().unwrap());
    let o = driftwatch(&["run", "--replay", steps_arg, "--config", config, "--state", state_arg]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("0 notification(s) sent"), "the group waits: {}", stdout(&o));
    let o = driftwatch(&["deliveries", "--state", state_arg]);
    let out = stdout(&o);
    assert!(out.contains("PENDING (1)\n  #1 group "), "{out}");
    assert!(out.contains("(revision=0123456789abcdef0123456789abcdef01234567): 3 of 3 firing, opened 2026-03-01T12:00:00Z, not sent yet, message #1 pending"), "{out}");

    // A minute and more later on the snapshots' clock: the one message goes out.
    std::fs::write(steps.join("02-later.yaml"), app("a", "2026-03-01T12:02:00Z")).unwrap();
    std::fs::remove_file(steps.join("01-fleet.yaml")).unwrap();
    let o = driftwatch(&["run", "--replay", steps_arg, "--config", config, "--state", state_arg]);
    assert!(stdout(&o).contains("1 notification(s) sent"), "{}", stdout(&o));
    let o = driftwatch(&["deliveries", "--state", state_arg, "-o", "json"]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["pending"], json!([]), "{v}");
    assert_eq!((v["groups"][0]["firing"].as_u64(), v["groups"][0]["lastSentAt"].as_str()), (Some(3), Some("2026-03-01T12:02:00Z")), "{v}");
}

/// `check` names every secret `run` refuses to start without, the audit token and a
/// spoke's token included, in the words `run` uses (it said ok for them before).
#[test]
fn check_names_every_missing_secret_that_run_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "driftwatch.yaml",
        "audit:\n  listen: 127.0.0.1:0\n  token: $audit-token\nclusters:\n  - name: spoke\n    server: https://spoke.example:6443\n    token: $spoke-token\n",
    );
    let o = driftwatch(&["check", "--config", cfg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    for key in ["audit.token: secret $audit-token is not set", "secret $spoke-token is not set"] {
        assert!(
            err.lines().any(|l| l.starts_with("warning: ") && l.contains(key) && l.ends_with("(driftwatch run will not start without it)")),
            "{key}: {err}"
        );
    }
    let o = driftwatch(&["run", "--config", cfg.to_str().unwrap(), "--kubeconfig", "/nonexistent", "--listen", "127.0.0.1:0"]);
    assert!(!o.status.success());
    for key in ["error: audit.token: secret $audit-token is not set", "error: clusters[0].token: secret $spoke-token is not set"] {
        assert!(stderr(&o).contains(key), "{key}: {}", stderr(&o));
    }
}

/// Issue 40: a replay of 50 Applications that one Git push moves OutOfSync together, on
/// a route grouped by revision, shows each as joining the group and the group's message
/// once, when its wait ends (it used to print the whole message at every join: 50
/// renders for one message sent); no line is Rust debug output.
#[test]
fn a_replay_shows_a_group_join_as_a_join_and_its_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "driftwatch.yaml",
        "context: {argocdUrl: https://argocd.example.com}\nroutes:\n  - name: fleet\n    triggers: [on-out-of-sync]\n    recipients: [slack:fleet]\n    group: {by: [revision], wait: 5m, interval: 1m}\n",
    );
    for i in 0..50 {
        let app = AppBuilder::new(&format!("shop-{i:02}"))
            .sync("OutOfSync", common::REV2)
            .healthy()
            .field("/status/reconciledAt", json!(format!("2026-03-01T12:00:{:02}Z", i % 60)))
            .build();
        write(dir.path(), &format!("steps/{i:02}-shop.yaml"), &serde_json::to_string(&app).unwrap());
    }
    let o = driftwatch(&["run", "--replay", dir.path().join("steps").to_str().unwrap(), "--config", config.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert_eq!(out.matches(" joins the group of on-out-of-sync").count(), 50, "{out}");
    assert_eq!(out.matches("-> slack:fleet (slack)").count(), 1, "the group's message, once: {out}");
    assert!(out.contains("50 of 50 Applications") && out.contains("and 25 more"), "the message lists the whole group: {out}");
    assert!(!out.contains(" { ") && !out.contains("Destination {"), "no Rust debug output: {out}");
}
