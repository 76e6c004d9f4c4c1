//! The pipeline end to end on the library API: subscriptions, triggers, the state store
//! (dedup, re-arm, retry after a failed delivery, restart) and redaction.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use common::{AppBuilder, REV1, REV2};
use driftwatch::config;
use driftwatch::deliver::deliverer::BoxFuture;
use driftwatch::deliver::outcome::Outcome;
use driftwatch::deliver::queue::OutboxClock;
use driftwatch::deliver::{Deliverer, Delivery};
use driftwatch::model::{App, Notification, Project};
use driftwatch::pipeline::pass::{self, preview_services};
use driftwatch::pipeline::{Inputs, Pipeline, Skip};
use driftwatch::state::Store;

/// Records what it was given; fails the first `fail_first` deliveries (retryable).
#[derive(Default)]
struct Recorder {
    got: Vec<Notification>,
    fail_first: usize,
    attempts: usize,
}

/// The deliverer every service of a [`deliver_at`] call uses, with the [`Recorder`]'s
/// state for the call.
#[derive(Default)]
struct Probe {
    got: Mutex<Vec<Notification>>,
    to_fail: AtomicUsize,
    attempts: AtomicUsize,
}

impl Deliverer for Probe {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            if self.to_fail.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                return Outcome::retry("receiver answered 503");
            }
            self.got.lock().unwrap().extend(batch.iter().cloned());
            Outcome::Delivered
        })
    }
}

/// A pipeline and the inputs its driver keeps (AppProjects, live objects).
struct Fixture {
    pipeline: Pipeline,
    inputs: Inputs,
}

impl std::ops::Deref for Fixture {
    type Target = Pipeline;
    fn deref(&self) -> &Pipeline {
        &self.pipeline
    }
}

fn pipeline(config_yaml: Option<&str>, dir: &Path) -> Fixture {
    let rt = match config_yaml {
        Some(y) => {
            let p = dir.join("driftwatch.yaml");
            std::fs::write(&p, y).unwrap();
            config::load(Some(&p)).unwrap_or_else(|e| panic!("{e:#?}"))
        }
        None => config::load(None).unwrap(),
    };
    Fixture { pipeline: Pipeline::new(Arc::new(rt)), inputs: Inputs::default() }
}

/// What the daemon does with one snapshot at `now`: one pass (evaluate, write what was
/// decided and the notifications to the outbox), then the outbox's workers deliver
/// what is due at `now` and record it; returns what was delivered and when the
/// Application asked to be evaluated again.
fn deliver_at(
    p: &Fixture,
    state: &Arc<Store>,
    sink: &mut Recorder,
    app: &App,
    now: chrono::DateTime<Utc>,
) -> (Vec<Notification>, Option<chrono::DateTime<Utc>>) {
    deliver_pass(p, state, sink, app, false, now)
}

/// [`deliver_at`] for an Application that is there (`deleted` false) or gone.
fn deliver_pass(
    p: &Fixture,
    state: &Arc<Store>,
    sink: &mut Recorder,
    app: &App,
    deleted: bool,
    now: chrono::DateTime<Utc>,
) -> (Vec<Notification>, Option<chrono::DateTime<Utc>>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let _entered = runtime.enter();
    let probe = Arc::new(Probe { to_fail: AtomicUsize::new(sink.fail_first.saturating_sub(sink.attempts)), ..Default::default() });
    let clock = OutboxClock::manual(driftwatch::state::to_millis(now));
    let delivery = Delivery::start_with_clock(preview_services(&p.runtime, probe.clone()), state.clone(), clock);
    let pass = pass::run(&p.pipeline, &p.inputs, &state.pass(), &delivery, app, deleted, (now, None)).unwrap();
    runtime.block_on(delivery.settle(Duration::ZERO, Duration::from_secs(30)));
    runtime.block_on(delivery.shutdown(Duration::from_secs(5)));
    sink.attempts += probe.attempts.load(Ordering::SeqCst);
    let mut got = std::mem::take(&mut *probe.got.lock().unwrap());
    // Services deliver in parallel: in the order the pass decided them (a retry of an
    // earlier pass's last).
    // (The outbox gave each its idempotency key: compared without it.)
    let decided = |n: &Notification| {
        pass.eval.notifications.iter().position(|d| *d == Notification { idempotency_key: None, ..n.clone() }).unwrap_or(usize::MAX)
    };
    got.sort_by_key(decided);
    sink.got.extend(got.iter().cloned());
    (got, pass.eval.wake_at)
}

/// [`deliver_at`] at a fixed instant; returns `trigger -> destination` of what was sent.
fn step(p: &Fixture, state: &Arc<Store>, sink: &mut Recorder, app: &App) -> Vec<String> {
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    deliver_at(p, state, sink, app, now).0.iter().map(|n| format!("{} -> {}", n.trigger, n.destination)).collect()
}

const DEGRADED_PLAIN: &str = r#"
triggers:
  on-degraded-plain:
    - when: app.status.health.status == "Degraded"
      send: [app-health-degraded]
"#;

#[test]
fn a_plain_trigger_rearms_when_its_condition_turns_false() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(Some(DEGRADED_PLAIN), dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let app = |b: AppBuilder| b.annotate("notifications.argoproj.io/subscribe.on-degraded-plain.slack", "ops").app();
    let sent = |b| step(&p, &state, &mut Recorder::default(), &app(b));
    assert_eq!(sent(AppBuilder::new("a").synced().degraded()), ["on-degraded-plain -> slack:ops"]);
    assert!(sent(AppBuilder::new("a").synced().degraded()).is_empty(), "still degraded: already notified");
    assert!(sent(AppBuilder::new("a").synced().healthy()).is_empty());
    assert_eq!(sent(AppBuilder::new("a").synced().degraded()), ["on-degraded-plain -> slack:ops"], "re-armed by the healthy snapshot");
}

#[test]
fn an_once_per_key_is_kept_until_its_value_changes() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(None, dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let mut sink = Recorder::default();
    let app = |b: AppBuilder| b.annotate("notifications.argoproj.io/subscribe.on-out-of-sync.slack", "drift").app();
    assert_eq!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").sync("OutOfSync", REV1))), ["on-out-of-sync -> slack:drift"]);
    assert!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").sync("Synced", REV1))).is_empty());
    assert!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").sync("OutOfSync", REV1))).is_empty(), "same revision: once per revision");
    assert_eq!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").sync("OutOfSync", REV2))), ["on-out-of-sync -> slack:drift"]);
}

#[test]
fn a_failed_delivery_is_retried_by_the_outbox_and_recorded_once_even_for_once_per() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(None, dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let app = AppBuilder::new("a")
        .synced()
        .healthy()
        .operation("Failed", REV1, "2026-03-01T11:58:00Z", Some("2026-03-01T11:59:00Z"))
        .annotate("notifications.argoproj.io/subscribe.on-sync-failed.slack", "ops")
        .app();
    let mut sink = Recorder { fail_first: 1, ..Default::default() };
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    assert!(deliver_at(&p, &state, &mut sink, &app, now).0.is_empty(), "the receiver failed");
    assert!(state.pass().keys(&app.state_key()).unwrap().is_empty(), "nothing recorded for a failed send");
    // The outbox's worker retries it once its backoff is over; the evaluation at that
    // time does not decide it again (it is in flight).
    let later = now + chrono::Duration::minutes(10);
    let sent: Vec<String> =
        deliver_at(&p, &state, &mut sink, &app, later).0.iter().map(|n| format!("{} -> {}", n.trigger, n.destination)).collect();
    assert_eq!(sent, ["on-sync-failed -> slack:ops"], "retried");
    assert!(deliver_at(&p, &state, &mut sink, &app, later).0.is_empty(), "recorded after success");
    assert_eq!(sink.attempts, 2);
}

#[test]
fn state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let app =
        AppBuilder::new("a").sync("OutOfSync", REV1).annotate("notifications.argoproj.io/subscribe.on-out-of-sync.slack", "drift").app();
    {
        let p = pipeline(None, dir.path());
        let state = Arc::new(Store::open(&path).unwrap());
        assert_eq!(step(&p, &state, &mut Recorder::default(), &app).len(), 1);
    }
    // A new process: new pipeline, the store reopened from disk.
    let p = pipeline(None, dir.path());
    let state = Arc::new(Store::open(&path).unwrap());
    assert!(step(&p, &state, &mut Recorder::default(), &app).is_empty());
    let keys = state.pass().keys(&app.state_key()).unwrap();
    assert_eq!(keys.len(), 1);
    assert!(keys[0].0.starts_with(&format!("{REV1}:on-out-of-sync:[0].")), "{keys:?}");
    assert!(keys[0].0.ends_with(":slack:drift"), "{keys:?}");
}

#[test]
fn stale_sync_status_is_skipped_until_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(None, dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let b = AppBuilder::new("a")
        .synced()
        .healthy()
        .operation("Failed", REV1, "2026-03-01T12:00:00Z", Some("2026-03-01T12:00:10Z"))
        .annotate("notifications.argoproj.io/subscribe.on-sync-failed.slack", "ops");
    let eval = p.evaluate(&p.inputs, &b.clone().reconciled_at("2026-03-01T12:00:05Z").app(), &state.pass(), Utc::now()).unwrap();
    assert!(eval.stale && eval.notifications.is_empty());
    let eval = p.evaluate(&p.inputs, &b.reconciled_at("2026-03-01T12:00:20Z").app(), &state.pass(), Utc::now()).unwrap();
    assert!(!eval.stale);
    assert_eq!(eval.notifications.len(), 1);
}

#[test]
fn project_subscriptions_and_global_selectors_route_without_app_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = pipeline(
        Some("subscriptions:\n  - recipients: [email:sre@example.com]\n    triggers: [on-health-degraded]\n    selector: env=prod\n"),
        dir.path(),
    );
    p.inputs.project_seen(Project {
        name: "default".into(),
        namespace: "argocd".into(),
        annotations: [("notifications.argoproj.io/subscribe.on-health-degraded.slack".to_string(), "team".to_string())].into(),
        policy: Default::default(),
    });
    let state = Arc::new(Store::in_memory().unwrap());
    let prod = AppBuilder::new("a").synced().degraded().label("env", "prod").app();
    assert_eq!(
        step(&p, &state, &mut Recorder::default(), &prod),
        ["on-health-degraded -> email:sre@example.com", "on-health-degraded -> slack:team"]
    );
    let dev = AppBuilder::new("b").synced().degraded().label("env", "dev").app();
    assert_eq!(step(&p, &state, &mut Recorder::default(), &dev), ["on-health-degraded -> slack:team"]);
}

#[test]
fn unknown_services_and_triggers_are_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(None, dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let app = AppBuilder::new("a")
        .synced()
        .degraded()
        .annotate("notifications.argoproj.io/subscribe.on-health-degraded.hipchat", "x")
        .annotate("notifications.argoproj.io/subscribe.on-nonexistent.slack", "x")
        .annotate("notifications.argoproj.io/subscribe.on-health-degraded.slack", "ok")
        .app();
    let eval = p.evaluate(&p.inputs, &app, &state.pass(), Utc::now()).unwrap();
    assert_eq!(eval.notifications.len(), 1);
    assert!(eval.skipped.contains(&Skip::UnknownService { service: "hipchat".into() }), "{:?}", eval.skipped);
    assert!(eval.skipped.contains(&Skip::UnknownTrigger { trigger: "on-nonexistent".into() }), "{:?}", eval.skipped);
}

#[test]
fn secret_values_never_reach_a_rendered_payload() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secrets.yaml"), "slack-token: xoxb-TOPSECRET-0001\n").unwrap();
    let p = pipeline(
        Some(
            "secretsFile: secrets.yaml\nservices:\n  slack:\n    token: $slack-token\ntemplates:\n  leak:\n    message: \"{{app.metadata.annotations.note}}\"\ntriggers:\n  on-any:\n    - when: true\n      send: [leak]\n",
        ),
        dir.path(),
    );
    let state = Arc::new(Store::in_memory().unwrap());
    let app = AppBuilder::new("a")
        .annotate("note", "someone pasted xoxb-TOPSECRET-0001 here")
        .annotate("notifications.argoproj.io/subscribe.on-any.slack", "ops")
        .app();
    let mut sink = Recorder::default();
    step(&p, &state, &mut sink, &app);
    let text = serde_json::to_string(&sink.got[0].payload).unwrap();
    assert!(!text.contains("TOPSECRET"), "{text}");
    assert!(text.contains("someone pasted *** here"), "{text}");
}

/// A page while an Application is Degraded, resolved when it is not.
const DEGRADED_PAGE: &str = r#"
triggers:
  on-degraded-page:
    - when: app.status.health.status == "Degraded"
      oncePer: app.status.sync.revision
      resolve: true
      send: [page]
templates:
  page:
    message: "{{#if resolved}}RESOLVED{{else}}FIRING{{/if}} {{app.metadata.name}}"
    severity: critical
"#;

#[test]
fn a_resolve_trigger_sends_resolve_when_its_condition_clears_then_rearms() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(Some(DEGRADED_PAGE), dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let app = |b: AppBuilder| b.annotate("notifications.argoproj.io/subscribe.on-degraded-page.pagerduty", "platform").app();
    let mut sink = Recorder::default();
    assert_eq!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").synced().degraded())), ["on-degraded-page -> pagerduty:platform"]);
    let fired = sink.got.last().unwrap().clone();
    assert_eq!(fired.action, driftwatch::model::Action::Fire);
    assert_eq!(fired.payload["summary"], "FIRING a");
    assert_eq!(fired.payload["severity"], "critical");
    assert!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").synced().degraded())).is_empty(), "still degraded");
    // Healthy again: a resolve, for the same condition and destination.
    assert_eq!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").synced().healthy())), ["on-degraded-page -> pagerduty:platform"]);
    let resolved = sink.got.last().unwrap().clone();
    assert_eq!(resolved.action, driftwatch::model::Action::Resolve);
    assert_eq!(resolved.payload["summary"], "RESOLVED a");
    assert_eq!(resolved.condition_key, fired.condition_key, "the same PagerDuty dedup_key");
    assert!(state.pass().keys(&resolved.record.as_ref().unwrap().app_key).unwrap().is_empty(), "the key was cleared");
    assert!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").synced().healthy())).is_empty(), "resolved once");
    assert_eq!(step(&p, &state, &mut sink, &app(AppBuilder::new("a").synced().degraded())).len(), 1, "re-armed: a new episode pages again");
}

/// A unit ready again while its failure's page is still in flight (its key not
/// recorded yet) has nothing to resolve in that pass; the pass asks to be woken, so
/// that once the page settles its resolve follows (it used to be lost: nothing looked
/// at the Application again).
#[test]
fn a_resolve_whose_firing_is_in_flight_is_looked_at_again() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(Some(DEGRADED_PAGE), dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let app = |b: AppBuilder| b.annotate("notifications.argoproj.io/subscribe.on-degraded-page.pagerduty", "platform").app();
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    // The receiver fails the page: it stays in the outbox, to be sent again.
    let mut down = Recorder { fail_first: 1_000, ..Recorder::default() };
    let (sent, _) = step_at(&p, &state, &mut down, &app(AppBuilder::new("a").synced().degraded()), now);
    assert!(sent.is_empty(), "not delivered: {sent:?}");
    let (sent, wake) = step_at(&p, &state, &mut down, &app(AppBuilder::new("a").synced().healthy()), now);
    assert!(sent.is_empty(), "nothing to resolve yet: {sent:?}");
    assert!(wake.is_some_and(|w| w > now), "looked at again once the page in flight settles: {wake:?}");
}

#[test]
fn drift_classes_reach_triggers_and_templates() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(
        Some(
            r#"
resourceClasses:
  - {group: example.com, kind: Widget, class: crd}
triggers:
  on-rbac-drift:
    - when: '"rbac" in drift.classes'
      oncePer: app.status.sync.revision
      send: [classes]
templates:
  classes:
    message: "{{#each drift.resources}}{{kind}}/{{name}}={{class}} {{/each}}({{drift.count}})"
"#,
        ),
        dir.path(),
    );
    let state = Arc::new(Store::in_memory().unwrap());
    let resources = serde_json::json!([
        {"group": "rbac.authorization.k8s.io", "kind": "ClusterRoleBinding", "name": "admins", "status": "OutOfSync"},
        {"group": "example.com", "kind": "Widget", "namespace": "a", "name": "w", "status": "OutOfSync"},
        {"group": "apps", "kind": "Deployment", "namespace": "a", "name": "web", "status": "Synced"}
    ]);
    let app = AppBuilder::new("a")
        .out_of_sync()
        .field("/status/resources", resources)
        .annotate("notifications.argoproj.io/subscribe.on-rbac-drift.console", "")
        .app();
    let mut sink = Recorder::default();
    assert_eq!(step(&p, &state, &mut sink, &app), ["on-rbac-drift -> console:"]);
    assert_eq!(sink.got[0].payload["message"], "ClusterRoleBinding/admins=rbac Widget/w=crd (2)");
    // Only a workload drifted: the RBAC trigger stays quiet.
    let workload = AppBuilder::new("b")
        .out_of_sync()
        .field("/status/resources", serde_json::json!([{"group": "apps", "kind": "Deployment", "name": "web", "status": "OutOfSync"}]))
        .annotate("notifications.argoproj.io/subscribe.on-rbac-drift.console", "")
        .app();
    assert!(step(&p, &state, &mut sink, &workload).is_empty());
}

/// [`deliver_at`]; returns `trigger Action` of what was sent, and the wake-up.
fn step_at(
    p: &Fixture,
    state: &Arc<Store>,
    sink: &mut Recorder,
    app: &App,
    now: chrono::DateTime<Utc>,
) -> (Vec<String>, Option<chrono::DateTime<Utc>>) {
    let (sent, wake) = deliver_at(p, state, sink, app, now);
    (sent.iter().map(|n| format!("{} {:?}", n.trigger, n.action)).collect(), wake)
}

#[test]
fn hold_down_fires_only_after_the_condition_held_long_enough_and_repeat_renotifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let p = pipeline(
        Some(
            r#"
triggers:
  on-degraded-2m:
    - when: app.status.health.status == "Degraded"
      for: 2m
      repeat: 1h
      resolve: true
      send: [app-health-degraded]
subscriptions:
  - recipients: [console]
    triggers: [on-degraded-2m]
"#,
        ),
        dir.path(),
    );
    let t = |secs: i64| Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap() + chrono::Duration::seconds(secs);
    let degraded = AppBuilder::new("a").synced().degraded().app();
    let healthy = AppBuilder::new("a").synced().healthy().app();
    let mut sink = Recorder::default();
    {
        let state = Arc::new(Store::open(&path).unwrap());
        // A 30-second blip pages nobody, and the hold-down ends with it.
        assert_eq!(step_at(&p, &state, &mut sink, &degraded, t(0)), (vec![], Some(t(120))));
        assert_eq!(step_at(&p, &state, &mut sink, &healthy, t(30)), (vec![], None));
        // Degraded again: the clock starts over.
        assert_eq!(step_at(&p, &state, &mut sink, &degraded, t(60)), (vec![], Some(t(180))));
        assert_eq!(step_at(&p, &state, &mut sink, &degraded, t(120)).0, Vec::<String>::new(), "held for 60 s only");
    }
    // The hold-down survives a restart.
    let state = Arc::new(Store::open(&path).unwrap());
    let (sent, wake) = step_at(&p, &state, &mut sink, &degraded, t(180));
    assert_eq!(sent, ["on-degraded-2m Fire"]);
    assert_eq!(wake, None, "delivered just now: the repeat is scheduled by the next evaluation");
    // Still degraded: the repeat falls due an hour after the delivery.
    assert_eq!(step_at(&p, &state, &mut sink, &degraded, t(600)), (vec![], Some(t(180 + 3600))));
    assert_eq!(step_at(&p, &state, &mut sink, &degraded, t(180 + 3600)).0, ["on-degraded-2m Fire"]);
    // Healthy: resolved once.
    assert_eq!(step_at(&p, &state, &mut sink, &healthy, t(4000)).0, ["on-degraded-2m Resolve"]);
    assert_eq!(step_at(&p, &state, &mut sink, &healthy, t(4010)).0, Vec::<String>::new());
}

#[test]
fn a_route_escalation_is_resolved_even_though_the_drift_that_matched_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(
        Some(
            r#"
routes:
  - match: {class: rbac}
    triggers: [on-security-drift]
    recipients: [pagerduty:platform]
"#,
        ),
        dir.path(),
    );
    let state = Arc::new(Store::in_memory().unwrap());
    let t = |min: i64| Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap() + chrono::Duration::minutes(min);
    let role = serde_json::json!([{"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "a", "name": "r", "status": "OutOfSync"}]);
    // No annotation at all: the route alone pages.
    let drifted = AppBuilder::new("a")
        .sync("OutOfSync", REV1)
        .healthy()
        .field("/status/history", serde_json::json!([{"revision": REV1}]))
        .field("/status/resources", role)
        .app();
    let mut sink = Recorder::default();
    assert_eq!(step_at(&p, &state, &mut sink, &drifted, t(0)).0, ["on-security-drift Fire"]);
    let page = sink.got[0].clone();
    assert_eq!(page.kind, driftwatch::model::DestinationKind::Pagerduty);
    assert_eq!(page.payload["severity"], "critical");
    // Synced: no Role drifts any more, yet the route still matches the (resolved) episode.
    let synced = AppBuilder::new("a").sync("Synced", REV1).healthy().app();
    assert_eq!(step_at(&p, &state, &mut sink, &synced, t(14)).0, ["on-security-drift Resolve"]);
    let resolve = sink.got.last().unwrap();
    assert_eq!((resolve.condition_key.as_str(), &resolve.destination), (page.condition_key.as_str(), &page.destination));
    assert!(resolve.payload["summary"].as_str().unwrap().contains("Security drift in a"), "{}", resolve.payload);
    let history = state.history().episodes(&Default::default()).unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].duration_secs(t(99)), 14 * 60);
    let sent: Vec<&str> = history[0].notifications.iter().map(|n| n.action.as_str()).collect();
    assert_eq!(sent, ["fire", "resolve"], "the episode remembers what was sent");
    assert!(page.episode.is_some() && resolve.episode.is_some(), "both belong to the episode");

    // Later, something unrelated (a sync succeeds): not part of the ended episode.
    let later = AppBuilder::new("a")
        .sync("Synced", REV2)
        .healthy()
        .operation("Succeeded", REV2, "2026-03-01T13:00:00Z", Some("2026-03-01T13:00:30Z"))
        .reconciled_at("2026-03-01T13:01:00Z")
        .annotate("notifications.argoproj.io/subscribe.on-sync-succeeded.console", "")
        .app();
    assert_eq!(step_at(&p, &state, &mut sink, &later, t(90)).0, ["on-sync-succeeded Fire"]);
    assert_eq!(sink.got.last().unwrap().episode, None);
    assert_eq!(state.history().episodes(&Default::default()).unwrap()[0].notifications.len(), 2, "not noted in the old episode");
}

/// Holds every delivery until opened.
struct Gate(tokio::sync::Semaphore);

impl Deliverer for Gate {
    fn deliver<'a>(&'a self, _batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            match self.0.acquire().await {
                Ok(_permit) => Outcome::Delivered,
                Err(_) => Outcome::retry("closed"),
            }
        })
    }
}

/// A deleted Application's dedup keys go when its last outbox entry settles, not
/// before: a delivery that settled after an immediate purge would write its key back,
/// and the `notified` table would grow with every Application ever deleted.
#[test]
fn applications_created_and_deleted_in_a_loop_leave_no_keys_behind() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(None, dir.path());
    let state = Arc::new(Store::open(&dir.path().join("state.redb")).unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build().unwrap();
    let _entered = runtime.enter();
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let gate = Arc::new(Gate(tokio::sync::Semaphore::new(0)));
    let clock = OutboxClock::manual(driftwatch::state::to_millis(now));
    let delivery = Delivery::start_with_clock(preview_services(&p.runtime, gate.clone()), state.clone(), clock);
    for round in 0..3 {
        for i in 0..40 {
            let app = AppBuilder::new(&format!("app-{round}-{i}"))
                .sync("OutOfSync", REV1)
                .annotate("notifications.argoproj.io/subscribe.on-out-of-sync.slack", "drift")
                .annotate("notifications.argoproj.io/subscribe.on-deleted.slack", "drift")
                .app();
            let created = pass::run(&p.pipeline, &p.inputs, &state.pass(), &delivery, &app, false, (now, None)).unwrap();
            assert_eq!(created.submitted.enqueue.queued, 1, "on-out-of-sync goes to the outbox");
            let deleted = pass::run(&p.pipeline, &p.inputs, &state.pass(), &delivery, &app, true, (now, None)).unwrap();
            assert_eq!(deleted.eval.notifications.len(), 1, "on-deleted sees it deleted");
        }
        // Every entry is still held: the deleted Applications wait for them.
        let waiting = state.pass().deleted_waiting().unwrap();
        gate.0.add_permits(1_000);
        assert!(runtime.block_on(delivery.settle(Duration::ZERO, Duration::from_secs(30))), "everything delivered");
        assert_eq!(state.pass().apps().unwrap(), Vec::<String>::new(), "no dedup key of a deleted Application is left");
        assert_eq!((waiting, state.pass().deleted_waiting().unwrap()), (40, 0));
        gate.0.forget_permits(1_000);
    }
    // A key recorded the only way one is (a delivery's settle), then the Application
    // deleted with nothing in the outbox: purged in the deleting pass itself.
    let notified = |name: &str| {
        let drifted = AppBuilder::new(name)
            .sync("OutOfSync", REV1)
            .annotate("notifications.argoproj.io/subscribe.on-out-of-sync.slack", "drift")
            .app();
        pass::run(&p.pipeline, &p.inputs, &state.pass(), &delivery, &drifted, false, (now, None)).unwrap();
        gate.0.add_permits(1);
        assert!(runtime.block_on(delivery.settle(Duration::ZERO, Duration::from_secs(30))));
        assert!(!state.pass().keys(&drifted.state_key()).unwrap().is_empty(), "{name}'s key recorded by its settle");
    };
    notified("quiet");
    let quiet = AppBuilder::new("quiet").synced().healthy().app();
    pass::run(&p.pipeline, &p.inputs, &state.pass(), &delivery, &quiet, true, (now, None)).unwrap();
    assert!(state.pass().keys(&quiet.state_key()).unwrap().is_empty());
    // Deleted while Argo CD's sync status was stale: nothing is decided, but it is
    // retired all the same.
    let stale = AppBuilder::new("stale")
        .synced()
        .operation("Failed", REV1, "2026-03-01T12:00:00Z", Some("2026-03-01T12:00:10Z"))
        .reconciled_at("2026-03-01T12:00:05Z")
        .app();
    notified("stale");
    let gone = pass::run(&p.pipeline, &p.inputs, &state.pass(), &delivery, &stale, true, (now, None)).unwrap();
    assert!(gone.eval.stale);
    assert!(state.pass().keys(&stale.state_key()).unwrap().is_empty(), "a stale deleted Application is purged too");
    runtime.block_on(delivery.shutdown(Duration::from_secs(5)));
}

/// The pass/settle race, made deterministic: a pass decides on a snapshot that
/// predates a settle of the same notification (another pass queued it, and a worker
/// delivered and recorded it, after the snapshot was taken). The enqueue re-checks
/// the key the pass saw and drops the copy: the receiver gets it once. (Before, the
/// enqueue re-checked only "in flight", which the settle had just cleared, and the
/// same message was queued and delivered again.) And a snapshot taken while the entry
/// is in flight sees it in flight, whatever settles meanwhile: a pass reads
/// "delivered" and "in flight" from one snapshot.
#[test]
fn a_settle_between_a_pass_snapshot_and_its_write_does_not_send_twice() {
    use driftwatch::state::{Settle, to_millis};
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(Some(DEGRADED_PLAIN), dir.path());
    let state = Store::in_memory().unwrap();
    let app = AppBuilder::new("a").synced().degraded().annotate("notifications.argoproj.io/subscribe.on-degraded-plain.slack", "ops").app();
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let write = |eval: &driftwatch::pipeline::Evaluation| {
        let key = app.state_key();
        let pass = driftwatch::pipeline::pass_write(eval, &key, &p.runtime, false, now);
        state.pass().write_pass(&pass, &eval.notifications, to_millis(now)).unwrap()
    };
    // The second pass's snapshot, taken before anything was queued.
    let stale = state.pass().view().unwrap();
    // The first pass queues the notification...
    let first = p.evaluate(&p.inputs, &app, &state.pass(), now).unwrap();
    assert_eq!(first.notifications.len(), 1);
    assert_eq!(write(&first).queued, 1);
    // ...a snapshot now sees it in flight...
    let in_flight = state.pass().view().unwrap();
    // ...and a worker delivers and records it.
    let entry = state.outbox().due("slack", to_millis(now), 10).unwrap().remove(0);
    state.outbox().settle(&[(entry, Settle::Delivered)], to_millis(now)).unwrap();
    assert!(state.pass().is_notified(&app.state_key(), &first.notifications[0].record.as_ref().unwrap().key).unwrap());

    let second = p.evaluate_in(&p.inputs, &app, &stale.app_state(&app.state_key()).unwrap(), &stale, now).unwrap();
    assert_eq!(second.notifications.len(), 1, "the stale snapshot saw neither the delivery nor the entry");
    let report = write(&second);
    assert_eq!((report.queued, report.superseded), (0, 1), "the enqueue's re-check drops the copy");
    assert!(state.outbox().entries(None).unwrap().is_empty(), "nothing to send twice");

    let during = p.evaluate_in(&p.inputs, &app, &in_flight.app_state(&app.state_key()).unwrap(), &in_flight, now).unwrap();
    assert!(during.notifications.is_empty());
    assert!(matches!(during.skipped[..], [Skip::InFlight { .. }]), "{:?}", during.skipped);
    let after = p.evaluate(&p.inputs, &app, &state.pass(), now).unwrap();
    assert!(matches!(after.skipped[..], [Skip::AlreadyNotified { .. }]), "{:?}", after.skipped);
}

/// A grouped route: the chat gets the group's message (the second member in the update
/// an interval later), the SIEM still gets one record per Application.
#[test]
fn a_grouped_route_sends_the_group_to_the_chat_and_each_application_to_the_siem() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(
        Some(
            "routes:\n  - triggers: [on-out-of-sync]\n    recipients: [slack:drift, splunk]\n    group: {by: [revision], wait: 0s, interval: 1s}\n",
        ),
        dir.path(),
    );
    let state = Arc::new(Store::in_memory().unwrap());
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let mut sink = Recorder::default();
    let sent = |got: &[Notification]| -> Vec<String> {
        got.iter()
            .map(|n| format!("{} -> {} ({})", n.destination, n.app, n.group.as_ref().map_or("one".into(), |g| g.key.clone())))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    let a = AppBuilder::new("a").out_of_sync().healthy().app();
    let b = AppBuilder::new("b").out_of_sync().healthy().app();
    let (got, _) = deliver_at(&p, &state, &mut sink, &a, now);
    let key = got.iter().find_map(|n| n.group.as_ref()).map(|g| g.key.clone()).expect("a group's message");
    assert_eq!(sent(&got), [format!("slack:drift -> argocd/a ({key})"), "splunk: -> argocd/a (one)".to_string()]);
    let group = got.iter().find(|n| n.group.is_some()).unwrap();
    assert!(group.payload.to_string().contains("1 of 1 Applications"), "{}", group.payload);
    let (got, _) = deliver_at(&p, &state, &mut sink, &b, now);
    assert_eq!(sent(&got), ["splunk: -> argocd/b (one)"], "b's record at once, the group's update an interval later");
    let (got, _) = deliver_at(&p, &state, &mut sink, &b, now + chrono::Duration::seconds(2));
    assert_eq!(sent(&got), [format!("slack:drift -> argocd/b ({key})")], "b's pass finds its join in flight; the update goes out");
    assert!(got[0].payload.to_string().contains("2 of 2 Applications"), "{}", got[0].payload);
    let (got, _) = deliver_at(&p, &state, &mut sink, &b, now + chrono::Duration::seconds(4));
    assert!(got.is_empty(), "nothing twice: {:?}", sent(&got));
}

const GROUPED_BY_REVISION: &str =
    "routes:\n  - triggers: [on-out-of-sync]\n    recipients: [slack:drift]\n    group: {by: [revision], wait: 0s, interval: 1s}\n";

/// (action, firing of count) of each group message delivered, by group key.
fn group_messages(got: &[Notification]) -> Vec<(String, driftwatch::model::Action, String)> {
    let mut v: Vec<_> = got
        .iter()
        .filter_map(|n| {
            let text = n.payload.to_string();
            let shown = text.split(" Applications").next().and_then(|h| h.rsplit(": ").next()).unwrap_or_default().to_string();
            n.group.as_ref().map(|g| (g.key.clone(), n.action, shown))
        })
        .collect();
    v.sort_by(|x, y| x.0.cmp(&y.0));
    v
}

/// A member that moves to a new revision leaves its old group (resolving it, as its
/// last member) and joins the new one; a deleted member leaves its group; a member
/// whose route is no longer grouped (a reload) still leaves the group it joined.
#[test]
fn members_leave_their_group_when_they_move_are_deleted_or_the_route_changes() {
    use driftwatch::model::Action::{Fire, Resolve};
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(Some(GROUPED_BY_REVISION), dir.path());
    let state = Arc::new(Store::in_memory().unwrap());
    let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let at = |s: i64| t0 + chrono::Duration::seconds(s);
    let mut sink = Recorder::default();
    let a = |rev: &str, status: &str| AppBuilder::new("a").sync(status, rev).healthy().app();

    let (got, _) = deliver_at(&p, &state, &mut sink, &a(REV1, "OutOfSync"), at(0));
    let first = group_messages(&got);
    assert_eq!(first.iter().map(|(_, a, s)| (*a, s.as_str())).collect::<Vec<_>>(), [(Fire, "1 of 1")]);
    let (got, _) = deliver_at(&p, &state, &mut sink, &a(REV2, "OutOfSync"), at(2));
    let moved = group_messages(&got);
    assert_eq!(moved.len(), 2, "{moved:?}");
    let old = moved.iter().find(|(k, _, _)| *k == first[0].0).expect("the old group's message");
    assert_eq!(old.1, Resolve, "its only member moved on");
    let new = moved.iter().find(|(k, _, _)| *k != first[0].0).expect("the new group's message");
    assert_eq!((new.1, new.2.as_str()), (Fire, "1 of 1"));
    assert_eq!(state.outbox().groups().unwrap().len(), 1, "the old run ended");

    let (got, _) = deliver_pass(&p, &state, &mut sink, &a(REV2, "OutOfSync"), true, at(4));
    assert_eq!(
        group_messages(&got).iter().map(|(k, a, _)| (k.clone(), *a)).collect::<Vec<_>>(),
        [(new.0.clone(), Resolve)],
        "deleted: it left"
    );
    assert!(state.outbox().groups().unwrap().is_empty());

    // b joins under the grouped route; the route loses its group; b syncs.
    let b = |status: &str| AppBuilder::new("b").sync(status, REV1).healthy().app();
    let (got, _) = deliver_at(&p, &state, &mut sink, &b("OutOfSync"), at(6));
    assert_eq!(group_messages(&got).len(), 1);
    let reloaded = pipeline(Some("routes:\n  - triggers: [on-out-of-sync]\n    recipients: [slack:drift]\n"), dir.path());
    let (got, _) = deliver_at(&reloaded, &state, &mut sink, &b("Synced"), at(8));
    assert_eq!(group_messages(&got).iter().map(|(_, a, _)| *a).collect::<Vec<_>>(), [Resolve], "the group it joined is resolved");
    assert!(state.outbox().groups().unwrap().is_empty());
}
