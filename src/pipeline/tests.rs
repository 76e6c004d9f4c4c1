//! The stages on a plain [`AppState`] fixture: what the store holds about the
//! Application is a value the pass is given, so each decision that depends on it —
//! dedup, in flight, re-arm, hold-down, the stored note — is checked without a store.

use super::*;
use crate::state::NoGroups;
use serde_json::json;

fn pipeline() -> Pipeline {
    Pipeline::new(Arc::new(crate::config::load(None).unwrap_or_else(|e| panic!("{e:?}"))))
}

/// A pipeline whose `on-sync-failed` is the catalog's without `oncePer`, plus `extra`
/// (a `for:` line, say).
fn pipeline_with(extra: &str) -> Pipeline {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("driftwatch.yaml");
    let yaml = format!(
        "triggers:\n  on-sync-failed:\n  - when: app.status.operationState.phase in [\"Error\", \"Failed\"]\n    send: [app-sync-failed]\n{extra}"
    );
    std::fs::write(&path, yaml).unwrap_or_else(|e| panic!("{e}"));
    Pipeline::new(Arc::new(crate::config::load(Some(&path)).unwrap_or_else(|e| panic!("{e:?}"))))
}

fn evaluate_on(p: &Pipeline, app: &App, state: &AppState) -> Evaluation {
    p.evaluate_in(&Inputs::default(), app, state, &NoGroups, now()).unwrap_or_else(|e| panic!("{e}"))
}

/// An Application subscribed to `on-sync-failed` on Slack, its last sync `phase`.
fn app(phase: &str) -> App {
    App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "namespace": "argocd", "uid": "u1",
            "annotations": {"notifications.argoproj.io/subscribe.on-sync-failed.slack": "ops"}},
        "spec": {"project": "default", "destination": {"server": "https://kubernetes.default.svc", "namespace": "web"}},
        "status": {"sync": {"status": "Synced", "revision": "abc"}, "health": {"status": "Healthy"},
            "reconciledAt": "2026-12-06T09:00:30Z",
            "operationState": {"phase": phase, "startedAt": "2026-12-06T09:00:00Z", "finishedAt": "2026-12-06T09:00:05Z",
                "operation": {"sync": {"revision": "abc"}}, "syncResult": {"revision": "abc"}}}}))
    .unwrap_or_else(|e| panic!("{e:?}"))
}

fn now() -> DateTime<Utc> {
    chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 6, 9, 1, 0).single().unwrap_or_default()
}

fn evaluate(app: &App, state: &AppState) -> Evaluation {
    evaluate_on(&pipeline(), app, state)
}

/// The dedup key and template the first pass on an empty state sends.
fn first_send(app: &App) -> (String, String) {
    let eval = evaluate(app, &AppState::default());
    assert_eq!(eval.notifications.len(), 1, "{:?}", eval.skipped);
    let n = &eval.notifications[0];
    (n.record.as_ref().map(|r| r.key.clone()).unwrap_or_default(), n.template.clone())
}

#[test]
fn a_key_the_state_holds_is_not_sent_again() {
    let failed = app("Failed");
    let (key, _) = first_send(&failed);
    let state = AppState { notified: [(key, 1)].into(), ..AppState::default() };
    let eval = evaluate(&failed, &state);
    assert!(eval.notifications.is_empty());
    assert!(matches!(&eval.skipped[..], [Skip::AlreadyNotified { trigger, .. }] if trigger == "on-sync-failed"), "{:?}", eval.skipped);
}

#[test]
fn a_notification_waiting_in_the_outbox_is_not_queued_twice() {
    let failed = app("Failed");
    let (key, template) = first_send(&failed);
    let state = AppState { pending: [(key, template, Action::Fire)].into(), ..AppState::default() };
    let eval = evaluate(&failed, &state);
    assert!(eval.notifications.is_empty());
    assert!(matches!(&eval.skipped[..], [Skip::InFlight { .. }]), "{:?}", eval.skipped);
}

#[test]
fn a_false_condition_rearms_only_a_recorded_key() {
    let p = pipeline_with("");
    let sent = evaluate_on(&p, &app("Failed"), &AppState::default()).notifications;
    let key = sent.first().and_then(|n| n.record.as_ref()).map(|r| r.key.clone()).unwrap_or_default();
    let succeeded = app("Succeeded");
    assert!(evaluate_on(&p, &succeeded, &AppState::default()).rearm.is_empty(), "nothing recorded, nothing to forget");
    let state = AppState { notified: [(key.clone(), 1)].into(), ..AppState::default() };
    let rearm = evaluate_on(&p, &succeeded, &state).rearm;
    assert_eq!(rearm.iter().map(|r| (r.key.as_str(), r.op)).collect::<Vec<_>>(), [(key.as_str(), RecordOp::Clear)]);
}

#[test]
fn the_note_is_written_only_when_it_changes() {
    let failed = app("Failed");
    assert_eq!(evaluate(&failed, &AppState::default()).note, None, "no note, none dropped");
    let stale = AppState { note: Some("3 subscriptions over the limit".into()), ..AppState::default() };
    assert_eq!(evaluate(&failed, &stale).note, Some(None), "the stored note is cleared");
}

#[test]
fn a_running_hold_down_holds_until_it_elapses() {
    let p = pipeline_with("    for: 5m\n");
    let failed = app("Failed");
    let eval = |state: &AppState| evaluate_on(&p, &failed, state);
    let fresh = eval(&AppState::default());
    assert!(fresh.notifications.is_empty());
    let [(hold_key, Some(since))] = &fresh.holds[..] else { panic!("{:?}", fresh.holds) };
    assert_eq!(*since, to_millis(now()), "the hold-down starts now");
    let started = |ago: i64| AppState {
        holds: [(hold_key.clone(), to_millis(now() - chrono::Duration::minutes(ago)))].into(),
        ..AppState::default()
    };
    let running = eval(&started(2));
    assert!(running.notifications.is_empty() && running.holds.is_empty());
    assert_eq!(running.wake_at, Some(now() + chrono::Duration::minutes(3)), "woken when it elapses");
    assert_eq!(eval(&started(6)).notifications.len(), 1, "elapsed: it notifies");
}
