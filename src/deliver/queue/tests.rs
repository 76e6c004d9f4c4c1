//! The queue's workers against scripted deliverers: order per Application, outages
//! and recovery, leadership lost, fair share.

use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use super::control::*;
use super::fair::FairShare;
use super::health::{Ended, Health};
use super::*;
use crate::deliver::deliverer::{BoxFuture, Deliverer, ServiceRuntime};
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::{DeliverySettings, Outcome};
use crate::model::{Action, DestinationKind};

/// Holds each delivery a moment and records when it started and ended.
#[derive(Default)]
struct Probe {
    now: AtomicUsize,
    max: AtomicUsize,
    /// (app, action, started, ended) in the order deliveries ended.
    log: Mutex<Vec<(String, Action, std::time::Instant, std::time::Instant)>>,
}

impl Deliverer for Probe {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(n, Ordering::SeqCst);
            let started = std::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(40)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            let mut log = self.log.lock().unwrap();
            for b in batch {
                log.push((b.app.clone(), b.action, started, std::time::Instant::now()));
            }
            Outcome::Delivered
        })
    }
}

/// Up to `concurrency` deliveries at once, but an Application's notifications to one
/// destination one after another, in order (a fire before its resolve).
#[tokio::test]
async fn deliveries_run_in_parallel_but_in_order_per_application() {
    let state = Arc::new(Store::in_memory().unwrap());
    let mut items = Vec::new();
    for app in 0..6 {
        for action in [Action::Fire, Action::Resolve] {
            let mut n = sample(DestinationKind::Webhook, "hook");
            n.app = format!("argocd/app-{app}");
            n.action = action;
            if let Some(r) = n.record.as_mut() {
                r.app_key = format!("argocd/app-{app}@u");
            }
            items.push(n);
        }
    }
    state.enqueue(&items, 0).unwrap();
    let probe = Arc::new(Probe::default());
    let mut settings = DeliverySettings::with_limits(10.0, 20, 16);
    settings.rate.per_second = 1000.0;
    settings.rate.burst = 100;
    settings.concurrency = 4;
    let service = ServiceRuntime {
        name: "hook".into(),
        kind: DestinationKind::Webhook,
        deliverer: probe.clone(),
        settings,
        redactor: crate::secret::Secrets::default().redactor(Vec::new()),
    };
    let delivery = Delivery::start(vec![service], state.clone());
    assert!(delivery.settle(Duration::from_secs(60), Duration::from_secs(20)).await, "everything delivered");
    delivery.shutdown(Duration::from_secs(1)).await;
    assert_eq!(probe.max.load(Ordering::SeqCst), 4, "four in flight at once, never more");
    let log = probe.log.lock().unwrap().clone();
    assert_eq!(log.len(), 12);
    for app in 0..6 {
        let mine: Vec<_> = log.iter().filter(|(a, ..)| *a == format!("argocd/app-{app}")).collect();
        assert_eq!(mine[0].1, Action::Fire, "the fire first");
        assert!(mine[0].3 <= mine[1].2, "one after the other: {mine:?}");
    }
    assert_eq!(state.outbox().queue_depths().unwrap(), vec![], "the counters follow");
}

/// A receiver that is down until told otherwise: counts attempts while down, the
/// most attempts in flight at once while down after the first failures, and what
/// it delivered.
#[derive(Default)]
struct Outage {
    up: std::sync::atomic::AtomicBool,
    down_attempts: AtomicUsize,
    now: AtomicUsize,
    /// Most attempts in flight together once the outage had been seen.
    max_probes_at_once: AtomicUsize,
    failed: tokio::sync::Notify,
    delivered: Mutex<Vec<String>>,
}

impl Deliverer for Outage {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let at_once = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::task::yield_now().await;
            let outcome = if self.up.load(Ordering::SeqCst) {
                self.delivered.lock().unwrap().extend(batch.iter().map(|n| n.app.clone()));
                Outcome::Delivered
            } else {
                if self.down_attempts.fetch_add(1, Ordering::SeqCst) >= 4 {
                    self.max_probes_at_once.fetch_max(at_once, Ordering::SeqCst);
                }
                Outcome::retry("connection refused")
            };
            self.now.fetch_sub(1, Ordering::SeqCst);
            self.failed.notify_one();
            outcome
        })
    }
}

fn outage_service(deliverer: Arc<dyn Deliverer>) -> ServiceRuntime {
    let mut settings = DeliverySettings::with_limits(10.0, 20, 16);
    settings.rate.per_second = 100_000.0;
    settings.rate.burst = 10_000;
    settings.concurrency = 4;
    // Each entry's own backoff is far longer than the test: only the release at the
    // recovery lets the entries that failed go at once.
    settings.retry.initial_backoff = crate::source::ConfigDuration(Duration::from_secs(600));
    settings.retry.max_backoff = crate::source::ConfigDuration(Duration::from_secs(600));
    settings.probe_backoff = (Duration::from_millis(20), Duration::from_millis(80));
    ServiceRuntime {
        name: "hook".into(),
        kind: DestinationKind::Webhook,
        deliverer,
        settings,
        redactor: crate::secret::Secrets::default().redactor(Vec::new()),
    }
}

fn apps(n: usize) -> Vec<Notification> {
    (0..n)
        .map(|i| {
            let mut n = sample(DestinationKind::Webhook, "hook");
            n.app = format!("argocd/app-{i:03}");
            if let Some(r) = n.record.as_mut() {
                r.app_key = format!("argocd/app-{i:03}@u");
            }
            n
        })
        .collect()
}

/// While the destination is down one probe at a time goes out (not every entry on
/// a backoff of its own); once a probe gets through, the whole queue goes at once,
/// the entries that failed during the outage included, each delivered once.
#[tokio::test]
async fn a_destination_that_comes_back_drains_its_whole_queue_at_once() {
    let state = Arc::new(Store::in_memory().unwrap());
    state.enqueue(&apps(300), crate::state::to_millis(chrono::Utc::now())).unwrap();
    let outage = Arc::new(Outage::default());
    let delivery = Delivery::start(vec![outage_service(outage.clone())], state.clone());
    // The attempts in flight when it went down fail, then probes, one at a time.
    while outage.down_attempts.load(Ordering::SeqCst) < 10 {
        outage.failed.notified().await;
    }
    outage.up.store(true, Ordering::SeqCst);
    // Everything due within a minute is delivered: no entry waits out its own
    // ten-minute backoff.
    assert!(delivery.settle(Duration::from_secs(60), Duration::from_secs(30)).await, "the whole queue drained");
    delivery.shutdown(Duration::from_secs(1)).await;
    assert_eq!(outage.max_probes_at_once.load(Ordering::SeqCst), 1, "one probe at a time while down");
    let down = outage.down_attempts.load(Ordering::SeqCst);
    assert!(down <= 4 + 8, "{down} attempts while down: the four in flight, then probes");
    let mut got = outage.delivered.lock().unwrap().clone();
    got.sort();
    got.dedup();
    assert_eq!((got.len(), outage.delivered.lock().unwrap().len()), (300, 300), "each delivered once");
}

/// An entry that fails on its own (its payload, its recipient) right after a
/// recovery does not take the destination down again: the rest keeps flowing, and
/// it waits out its own backoff.
#[test]
fn an_entry_failing_alone_after_a_recovery_keeps_its_own_backoff() {
    let s = outage_service(Arc::new(Outage::default())).settings;
    let mut h = Health::default();
    let retry = |id| vec![Ended::Retry { id, next_ms: 1_000 }];
    assert!(h.observe(false, &retry(7), None, &s).is_empty());
    assert!(h.is_down(), "a retried failure takes it down");
    assert!(h.observe(true, &retry(8), None, &s).is_empty(), "a failed probe");
    let released = h.observe(true, &[Ended::Refused], None, &s);
    assert_eq!(
        released,
        vec![(7, 1_000), (8, 1_000)],
        "a probe refused for good: the destination answers, what failed meanwhile is released"
    );
    assert!(!h.is_down());
    assert!(h.observe(false, &retry(7), None, &s).is_empty());
    assert!(!h.is_down(), "a released entry failing again is its own problem");
    h.observe(false, &retry(9), None, &s);
    assert!(h.is_down(), "another entry failing is the destination's");
}

/// A leader that loses its Lease stops sending at once, by the lease's own signal,
/// whatever its owner is busy with: attempts in flight finish and are recorded,
/// nothing new starts, and the rest stays in the outbox for the next leader.
#[tokio::test]
async fn workers_stop_by_themselves_when_leadership_is_lost() {
    let state = Arc::new(Store::in_memory().unwrap());
    state.enqueue(&apps(100), crate::state::to_millis(chrono::Utc::now())).unwrap();
    let probe = Arc::new(Probe::default());
    let mut service = outage_service(probe.clone());
    service.settings.rate.per_second = 50.0;
    service.settings.rate.burst = 1;
    let (leading, rx) = watch::channel(true);
    let delivery = Delivery::start_leading(vec![service], state.clone(), Some(Halt { leading: rx, grace: Duration::from_secs(5) }));
    while probe.log.lock().unwrap().len() < 5 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    leading.send(false).unwrap();
    let stopped_at = std::time::Instant::now();
    while delivery.running() > 0 {
        assert!(stopped_at.elapsed() < Duration::from_secs(5), "still running");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered = probe.log.lock().unwrap().len();
    assert!(delivered < 100, "stopped before the queue was done: {delivered}");
    // An attempt spawned just before the signal may begin just after it; nothing
    // beyond what can be in flight at once (4) starts later.
    let late = probe.log.lock().unwrap().iter().filter(|(.., started, _)| *started > stopped_at).count();
    assert!(late <= 4, "{late} attempts started after the Lease was lost");
    let left = state.outbox().queue_depths().unwrap();
    assert_eq!(left, vec![("hook".to_string(), 100 - delivered as u64)], "what was delivered is recorded; the rest waits");
    delivery.shutdown(Duration::from_secs(1)).await;
}

/// One Application's flood is spread at the service's rate past its burst; another
/// Application's entry decided later is due at once, ahead of the flood's rest.
#[test]
fn each_application_gets_its_share_of_a_service() {
    let mut f = FairShare::default();
    let flood: Vec<u64> = (0..6).map(|_| f.due("slack", "argocd/flood", 1000, 3, 10_000)).collect();
    assert_eq!(flood, [10_000, 10_000, 10_000, 11_000, 12_000, 13_000], "the burst at once, then one a second");
    assert_eq!(f.due("slack", "argocd/page", 1000, 3, 10_001), 10_001, "another Application: at once");
    assert_eq!(f.due("pagerduty", "argocd/flood", 1000, 3, 10_001), 10_001, "another service: its own share");
    // Later, the flood's credit has refilled.
    assert_eq!(f.due("slack", "argocd/flood", 1000, 3, 100_000), 100_000);
    assert_eq!(f.due("hook", "argocd/any", 0, 1, 5), 5, "no spacing for a fast service");
}

/// Through the outbox: a flood of one Application queued first, one page of another
/// queued after it, on the same rate-limited service: the page is delivered before
/// all but the flood's burst.
#[tokio::test]
async fn a_flood_from_one_application_does_not_delay_another() {
    let state = Arc::new(Store::in_memory().unwrap());
    let probe = Arc::new(Probe::default());
    let mut service = outage_service(probe.clone());
    service.settings.rate.per_second = 20.0;
    service.settings.rate.burst = 2;
    service.settings.concurrency = 1;
    let delivery = Delivery::start(vec![service], state.clone());
    let mut flood = apps(1).remove(0);
    flood.app = "argocd/flood".into();
    let many: Vec<Notification> = (0..40)
        .map(|i| {
            let mut n = flood.clone();
            if let Some(r) = n.record.as_mut() {
                r.key = format!("k{i}");
                r.app_key = "argocd/flood@u".into();
            }
            n
        })
        .collect();
    delivery.submit(&many).unwrap();
    let mut page = apps(1).remove(0);
    page.app = "argocd/page".into();
    delivery.submit(&[page]).unwrap();
    while probe.log.lock().unwrap().iter().all(|(app, ..)| app != "argocd/page") {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = probe.log.lock().unwrap().iter().take_while(|(app, ..)| app != "argocd/page").count();
    delivery.shutdown(Duration::from_secs(1)).await;
    assert!(before <= 3, "{before} of the flood went before the page");
}

/// Takes every notification at once.
struct Takes;

impl Deliverer for Takes {
    fn deliver<'a>(&'a self, _: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async { Outcome::Delivered })
    }
}

/// The observations of `driftwatch_notification_latency_seconds{kind}` above 5 s, and
/// in all.
fn latencies_over_5s(kind: &str) -> (f64, f64) {
    let out = crate::metrics::METRICS.render();
    let value = |prefix: String| {
        out.lines().find(|l| l.starts_with(&prefix)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).unwrap_or(0.0)
    };
    let all = value(format!("driftwatch_notification_latency_seconds_count{{kind=\"{kind}\"}}"));
    let within = value(format!("driftwatch_notification_latency_seconds_bucket{{kind=\"{kind}\",le=\"5.0\"}}"));
    (all - within, all)
}

/// A delivery of a notification that carries its event's arrival (`received_ms`, kept
/// in the outbox entry) is one observation of the notification latency, from that
/// arrival to the acknowledgement; one without (a timer's pass, a replay) is none.
#[tokio::test]
async fn a_delivery_observes_the_time_from_its_events_arrival() {
    let kind = DestinationKind::Mattermost;
    let state = Arc::new(Store::in_memory().unwrap());
    let mut timed = sample(kind, "chat");
    // Its event reached the daemon 6 s ago.
    timed.received_ms = Some(crate::clock::wall_ms() - 6_000);
    let mut untimed = sample(kind, "chat");
    untimed.app = "argocd/other".into();
    if let Some(r) = untimed.record.as_mut() {
        r.app_key = "argocd/other@u-2".into();
    }
    state.enqueue(&[timed, untimed], 0).unwrap();
    let (over_before, all_before) = latencies_over_5s(kind.as_str());
    let mut settings = DeliverySettings::with_limits(1000.0, 100, 16);
    settings.concurrency = 1;
    let service = ServiceRuntime {
        name: "chat".into(),
        kind,
        deliverer: Arc::new(Takes),
        settings,
        redactor: crate::secret::Secrets::default().redactor(Vec::new()),
    };
    let delivery = Delivery::start(vec![service], state.clone());
    assert!(delivery.settle(Duration::from_secs(60), Duration::from_secs(20)).await, "both delivered");
    delivery.shutdown(Duration::from_secs(1)).await;
    let (over, all) = latencies_over_5s(kind.as_str());
    assert_eq!((over - over_before, all - all_before), (1.0, 1.0), "one observation, of at least its 6 s");
}
