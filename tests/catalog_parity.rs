//! The rewritten Argo CD catalog triggers give, on the same Application, the result and
//! `oncePer` value Argo CD's expr conditions give. Expected values are worked out from
//! Argo CD's semantics (expr-lang, `fmt.Sprintf("%v")` of the oncePer value, a runtime
//! error counting as false) and noted beside each case.
//!
//! Every row runs twice: on driftwatch's built-in catalog, and on the catalog as
//! `driftwatch import` translates it from Argo CD's own ConfigMap
//! (`tests/import/argocd-catalog-cm.yaml`), so the import keeps expr's semantics.

mod common;

use chrono::TimeZone;
use common::{AppBuilder, REV1, REV2};
use driftwatch::config;

/// Runs trigger `name` on `app`; returns (result, oncePer) of its only condition. The
/// daemon's passes convert only what the triggers read of the Application: the same
/// results as with all of it converted, for this trigger's reads and for all the
/// catalog's together.
fn eval(rt: &config::Runtime, name: &str, app: &serde_json::Value) -> (bool, Option<String>) {
    let t = rt.triggers.get(name).unwrap_or_else(|| panic!("trigger {name} missing"));
    let now = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let run = |mut scope| driftwatch::clock::with_now(now, || rt.engine.run(t, &mut scope));
    let mut results = run(rt.engine.prepare(app));
    let drift = driftwatch::drift::Drift::default();
    for reads in [&t.reads(), &rt.reads] {
        assert!(!reads.app.is_whole(), "{name}: the catalog reads some of the Application: {reads:?}");
        let unit = driftwatch::unit::Unit::read(app).unwrap_or_default();
        assert_eq!(run(rt.engine.prepare_pass(app, &unit, &drift, None, now, reads)), results, "{name}: only what is read, converted");
    }
    assert_eq!(results.len(), 1, "catalog triggers have one condition");
    let r = results.remove(0);
    (r.result, r.once_per)
}

/// Argo CD's catalog ConfigMap through `driftwatch import`, loaded on its own: the
/// imported triggers replace the built-in ones of the same name.
fn imported() -> (tempfile::TempDir, config::Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let cm = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import/argocd-catalog-cm.yaml");
    let report = driftwatch::import::import(&[cm], dir.path(), false).expect("the catalog imports");
    assert!(report.complete(), "{}", driftwatch::import::render_report(&report));
    assert_eq!(report.triggers.converted, 8);
    let rt = config::load(Some(&dir.path().join("driftwatch.yaml"))).unwrap_or_else(|e| panic!("{e:?}"));
    for t in rt.triggers.values().filter(|t| dir.path().join(format!("triggers/{}.yaml", t.name)).exists()) {
        let file = std::fs::read_to_string(dir.path().join(format!("triggers/{}.yaml", t.name))).unwrap();
        let when = &t.conditions[0].when_text;
        assert!(when.lines().all(|l| file.contains(l)), "{}: the imported condition is the one evaluated: {when}", t.name);
    }
    (dir, rt)
}

/// One row: trigger, fixture, expected result, expected oncePer.
fn check(rows: &[(&str, &str, AppBuilder, bool, Option<&str>)]) {
    let builtin = config::load(None).expect("built-in catalog loads");
    let (dir, imported) = imported();
    for (trigger, case, app, want, want_once) in rows {
        let app = app.clone().build();
        let want = (*want, want_once.map(str::to_string));
        assert_eq!(eval(&builtin, trigger, &app), want, "built-in {trigger}: {case}");
        let file = dir.path().join(format!("triggers/{trigger}.yaml"));
        let imported_when = std::fs::read_to_string(&file).unwrap_or_default();
        assert_eq!(eval(&imported, trigger, &app), want, "imported {trigger}: {case}\n{imported_when}");
    }
}

fn base() -> AppBuilder {
    AppBuilder::new("guestbook")
}

const START: &str = "2026-03-01T11:58:00Z";
const FINISH: &str = "2026-03-01T11:59:00Z";

#[test]
fn on_created_and_on_deleted() {
    check(&[
        ("on-created", "any application", base(), true, Some("guestbook")),
        // metadata.name missing: nil in expr, "<nil>" once stringified
        ("on-created", "no name", base().remove("/metadata/name"), true, Some("<nil>")),
        ("on-deleted", "not being deleted", base(), false, None),
        ("on-deleted", "deletionTimestamp set", base().deleting(), true, Some("guestbook")),
        ("on-deleted", "deletionTimestamp null", base().field("/metadata/deletionTimestamp", serde_json::Value::Null), false, None),
    ]);
}

#[test]
fn on_deployed_time_window_on_both_sides() {
    let ok = || base().synced().operation("Succeeded", REV1, START, Some(FINISH));
    check(&[
        ("on-deployed", "operationState absent", base().synced().healthy(), false, None),
        // healthy 30 s after the sync finished: !(lt+1m < finishedAt) = !(false)
        ("on-deployed", "healthy after finish", ok().health("Healthy", "2026-03-01T11:59:30Z"), true, Some(REV1)),
        // healthy 59 s before the finish: lt+1m = finish+1s, not before finish -> true
        ("on-deployed", "inside the one-minute window", ok().health("Healthy", "2026-03-01T11:58:01Z"), true, Some(REV1)),
        // exactly 60 s before: lt+1m == finish, Before is strict -> true
        (
            "on-deployed",
            "window boundary",
            ok().health("Healthy", "2026-03-01T11:58:00Z").operation("Succeeded", REV1, "2026-03-01T11:57:00Z", Some(FINISH)),
            true,
            Some(REV1),
        ),
        // 61 s before the finish but after the start: outside the window, not before start -> false
        (
            "on-deployed",
            "outside the window",
            ok().health("Healthy", "2026-03-01T11:57:59Z").operation("Succeeded", REV1, "2026-03-01T11:57:00Z", Some(FINISH)),
            false,
            None,
        ),
        // healthy since before the sync started: second disjunct -> true
        ("on-deployed", "healthy before start", ok().health("Healthy", "2026-03-01T11:00:00Z"), true, Some(REV1)),
        ("on-deployed", "degraded", ok().health("Degraded", "2026-03-01T11:59:30Z"), false, None),
        ("on-deployed", "still running", base().synced().healthy().operation("Running", REV1, START, None), false, None),
        ("on-deployed", "failed", base().synced().healthy().operation("Failed", REV1, START, Some(FINISH)), false, None),
        // time.Parse on a missing lastTransitionTime fails: a runtime error is false
        ("on-deployed", "no lastTransitionTime", ok().field("/status/health", serde_json::json!({"status": "Healthy"})), false, None),
        // multi-source apps record `revisions`, not `revision`: oncePer is nil
        (
            "on-deployed",
            "multi-source",
            ok().multi_source()
                .health("Healthy", "2026-03-01T11:59:30Z")
                .field("/status/operationState/syncResult", serde_json::json!({"revisions": [REV1, REV2]})),
            true,
            Some("<nil>"),
        ),
    ]);
}

#[test]
fn on_health_degraded() {
    check(&[
        ("on-health-degraded", "healthy", base().synced().healthy(), false, None),
        (
            "on-health-degraded",
            "degraded after a sync",
            base().synced().degraded().operation("Succeeded", REV2, START, Some(FINISH)),
            true,
            Some(REV2),
        ),
        // `?.` makes a missing operationState nil rather than an error
        ("on-health-degraded", "degraded, operationState absent", base().synced().degraded(), true, Some("<nil>")),
        ("on-health-degraded", "no health at all", base(), false, None),
    ]);
}

#[test]
fn on_sync_phases() {
    let op = |phase: &str| base().synced().healthy().operation(phase, REV1, START, Some(FINISH));
    check(&[
        ("on-sync-failed", "Failed", op("Failed"), true, Some(REV1)),
        ("on-sync-failed", "Error", op("Error"), true, Some(REV1)),
        ("on-sync-failed", "Succeeded", op("Succeeded"), false, None),
        ("on-sync-failed", "operationState absent", base().synced(), false, None),
        ("on-sync-failed", "no syncResult", op("Failed").remove("/status/operationState/syncResult"), true, Some("<nil>")),
        ("on-sync-running", "Running", base().operation("Running", REV2, START, None), true, Some(REV2)),
        ("on-sync-running", "Succeeded", op("Succeeded"), false, None),
        ("on-sync-running", "operationState absent", base(), false, None),
        ("on-sync-succeeded", "Succeeded", op("Succeeded"), true, Some(REV1)),
        ("on-sync-succeeded", "Failed", op("Failed"), false, None),
        ("on-sync-succeeded", "operationState absent", base(), false, None),
        (
            "on-sync-succeeded",
            "multi-source",
            op("Succeeded").multi_source().field("/status/operationState/syncResult", serde_json::json!({"revisions": [REV1]})),
            true,
            Some("<nil>"),
        ),
    ]);
}

#[test]
fn on_sync_status_unknown_and_out_of_sync() {
    check(&[
        ("on-sync-status-unknown", "Unknown", base().sync("Unknown", ""), true, Some("<nil>")),
        (
            "on-sync-status-unknown",
            "Unknown after a sync",
            base().sync("Unknown", REV1).operation("Failed", REV1, START, Some(FINISH)),
            true,
            Some(REV1),
        ),
        ("on-sync-status-unknown", "Synced", base().synced(), false, None),
        ("on-sync-status-unknown", "no status", base(), false, None),
        ("on-out-of-sync", "OutOfSync", base().out_of_sync().healthy(), true, Some(REV1)),
        ("on-out-of-sync", "new revision", base().sync("OutOfSync", REV2), true, Some(REV2)),
        ("on-out-of-sync", "Synced", base().synced(), false, None),
        (
            "on-out-of-sync",
            "multi-source",
            base().multi_source().field("/status/sync", serde_json::json!({"status": "OutOfSync", "revisions": [REV1, REV2]})),
            true,
            Some("<nil>"),
        ),
    ]);
}

#[test]
fn every_catalog_trigger_has_a_template_and_is_covered() {
    let rt = config::load(None).unwrap();
    let names: Vec<&String> = rt.triggers.keys().collect();
    assert_eq!(
        names,
        [
            "on-break-glass-overdue",
            "on-created",
            "on-deleted",
            "on-deployed",
            "on-drift-attempt",
            "on-drift-episode",
            "on-drift-resolved",
            "on-git-change",
            "on-health-degraded",
            "on-health-recovered",
            "on-live-drift",
            "on-out-of-sync",
            "on-reconcile-failed",
            "on-reconcile-succeeded",
            "on-rollback",
            "on-security-drift",
            "on-sync-failed",
            "on-sync-operation",
            "on-sync-running",
            "on-sync-status-unknown",
            "on-sync-succeeded"
        ]
    );
    for t in rt.triggers.values() {
        for c in &t.conditions {
            for s in &c.send {
                assert!(rt.templates.contains(s), "{} sends {s}", t.name);
            }
        }
    }
}

/// `on-reconcile-failed` and `on-reconcile-succeeded` read the unit, one shape for every
/// engine: a Flux Kustomization's `Ready=False` with its reason, a Fleet bundle
/// `ErrApplied`, an Argo CD sync Failed; once per reason and revision, once per applied
/// revision (a HelmRelease's Helm release too).
#[test]
fn reconcile_triggers_read_the_unit_of_every_engine() {
    use serde_json::json;
    let rt = config::load(None).unwrap();
    let kustomization = |ready: &str, reason: &str, suspend: bool| {
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "generation": 2},
            "spec": {"suspend": suspend},
            "status": {"observedGeneration": 2, "lastAppliedRevision": "main@sha1:aaa", "lastAttemptedRevision": "main@sha1:bbb",
                "conditions": [{"type": "Ready", "status": ready, "reason": reason, "message": "kustomize build failed: accumulating resources",
                    "lastTransitionTime": "2026-03-01T11:00:00Z"}]}})
    };
    let failed = kustomization("False", "BuildFailed", false);
    assert_eq!(eval(&rt, "on-reconcile-failed", &failed), (true, Some("BuildFailed@main@sha1:bbb".into())));
    assert!(!eval(&rt, "on-reconcile-failed", &kustomization("False", "BuildFailed", true)).0, "suspended");
    assert!(!eval(&rt, "on-reconcile-failed", &kustomization("True", "ReconciliationSucceeded", false)).0);
    assert!(!eval(&rt, "on-reconcile-succeeded", &failed).0);
    let mut applied = kustomization("True", "ReconciliationSucceeded", false);
    applied["status"]["lastAttemptedRevision"] = json!("main@sha1:aaa");
    assert_eq!(eval(&rt, "on-reconcile-succeeded", &applied), (true, Some("main@sha1:aaa".into())));
    let helm = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": "apps"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "UpgradeSucceeded"}],
            "history": [{"chartName": "podinfo", "chartVersion": "6.7.1", "version": 4, "status": "deployed"}]}});
    assert_eq!(eval(&rt, "on-reconcile-succeeded", &helm), (true, Some("6.7.1#4".into())));
    let fleet = json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
        "metadata": {"name": "apps-web", "namespace": "cluster-fleet-local-local-1a3d67d0a899"},
        "spec": {"deploymentID": "s-1:abc"},
        "status": {"display": {"state": "ErrApplied"}, "ready": false,
            "conditions": [{"type": "Deployed", "status": "False", "message": "chart requires kubeVersion >=1.30"}]}});
    assert_eq!(eval(&rt, "on-reconcile-failed", &fleet), (true, Some("ErrApplied@s-1:abc".into())));
    let argo = base().operation("Failed", REV1, START, Some(FINISH)).sync("OutOfSync", REV1).build();
    assert_eq!(eval(&rt, "on-reconcile-failed", &argo), (true, Some(format!("Failed@{REV1}"))));
}
