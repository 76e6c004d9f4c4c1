//! One worker per configured service pulls due notifications from the durable outbox,
//! rate-limits, keeps up to `concurrency` deliveries in flight (in order per
//! Application and destination), and completes, reschedules or dead-letters them, the
//! outcomes of everything that finished together in one transaction. Services never wait on each other: a slow Slack does not
//! delay a PagerDuty page.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::{Quota, RateLimiter};
use tokio::sync::{Notify, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::outcome::{DeliverySettings, Outcome};
use crate::metrics::METRICS;
use crate::model::Notification;
use crate::secret::Redactor;
use crate::state::{EnqueueReport, OutboxEntry, Settle, StateError, StateStore};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Delivers a batch one notification at a time, stopping at the first that is not
/// delivered (its outcome is the batch's): what every one-request-per-notification
/// client does.
pub async fn one_by_one<'a, F, Fut>(batch: &'a [Notification], mut deliver: F) -> Outcome
where
    F: FnMut(&'a Notification) -> Fut,
    Fut: Future<Output = Outcome>,
{
    for n in batch {
        let outcome = deliver(n).await;
        if outcome != Outcome::Delivered {
            return outcome;
        }
    }
    Outcome::Delivered
}

/// A destination client: delivers a batch (one notification unless `max_batch` says
/// more) and says what happened.
pub trait Deliverer: Send + Sync {
    /// How many notifications one request may carry (Splunk HEC takes many).
    fn max_batch(&self) -> usize {
        1
    }
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome>;
}

/// Counters per service, for tests and `--send` (the process-wide metrics are in `crate::metrics`).
#[derive(Debug, Default)]
pub struct Stats {
    pub attempts: AtomicU64,
    pub delivered: AtomicU64,
    pub retried: AtomicU64,
    pub dead: AtomicU64,
}

/// A service ready to run: its name, client and settings.
pub struct ServiceRuntime {
    pub name: String,
    pub kind: crate::model::DestinationKind,
    pub deliverer: Arc<dyn Deliverer>,
    pub settings: DeliverySettings,
    /// Scrubs this configuration's secret values from error texts.
    pub redactor: Redactor,
}

/// Where the workers read the time: the system clock, or a clock the caller sets (a
/// replay's previews run on the snapshots' clock, so what they record is stamped as
/// the evaluation that decided it is).
#[derive(Clone, Debug, Default)]
pub struct Clock(Option<Arc<AtomicU64>>);

impl Clock {
    pub fn system() -> Clock {
        Clock(None)
    }

    /// A clock that reads `ms` (unix milliseconds) until [`Clock::set`].
    pub fn manual(ms: u64) -> Clock {
        Clock(Some(Arc::new(AtomicU64::new(ms))))
    }

    /// Moves a manual clock; the system clock cannot be set.
    pub fn set(&self, ms: u64) {
        if let Some(c) = &self.0 {
            c.store(ms, Ordering::Relaxed);
        }
    }

    pub fn now_ms(&self) -> u64 {
        match &self.0 {
            Some(c) => c.load(Ordering::Relaxed),
            None => crate::state::to_millis(chrono::Utc::now()),
        }
    }
}

struct Worker {
    service: ServiceRuntime,
    state: Arc<StateStore>,
    wake: Arc<Notify>,
    stats: Arc<Stats>,
    clock: Clock,
    /// Told after every settle transaction ([`Delivery::settle`] waits on it).
    settled: Arc<Notify>,
}

/// What an attempt in flight reports back: its entries and what happened.
struct Attempted {
    batch: Vec<OutboxEntry>,
    outcome: Outcome,
}

/// The key whose notifications must reach the destination in order: one Application
/// at one destination (a PagerDuty trigger before its resolve, a Slack message before
/// its `chat.update` or thread reply). Entries with different keys go in parallel.
fn order_key(n: &Notification) -> String {
    format!("{}\u{0}{}", n.app, n.destination)
}

impl Worker {
    /// Pulls due entries and keeps up to `concurrency` attempts in flight, never two of
    /// one [`order_key`]; settles finished attempts together (one transaction for all
    /// that finished meanwhile); a `Retry-After` pauses the whole service. Store reads
    /// and writes run on the blocking pool, not on the runtime's workers.
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let s = this.service.settings;
        let per_second = s.rate.per_second.max(0.001);
        let period = Duration::from_secs_f64(1.0 / per_second);
        let burst = NonZeroU32::new(s.rate.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        // `with_period` only fails for a zero period, which `max(0.001)` above rules out;
        // fall back to one per second rather than panic.
        let quota = Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN)).allow_burst(burst);
        let limiter = RateLimiter::direct(quota);
        let concurrency = s.concurrency.max(1);
        let max_batch = this.service.deliverer.max_batch().max(1);
        let mut in_flight: JoinSet<Attempted> = JoinSet::new();
        // Order keys with an attempt in flight (their later entries wait).
        let mut busy: HashSet<String> = HashSet::new();
        // A `Retry-After` from the receiver pauses the whole service, not only the
        // entry that got it: the receiver asked the sender to stop for that long.
        let mut paused_until: Option<tokio::time::Instant> = None;
        loop {
            if *shutdown.borrow() {
                // Attempts in flight finish and are recorded (the caller's grace bounds
                // how long): a stop must not turn a delivery into a repeat.
                this.drain(&mut in_flight, &mut busy).await;
                return;
            }
            // Settle everything that finished, in one transaction.
            let mut done = Vec::new();
            while let Some(r) = in_flight.try_join_next() {
                if let Ok(a) = r {
                    done.push(a);
                }
            }
            if !done.is_empty() {
                if let Some(after) = this.settle(done, &mut busy).await {
                    paused_until = Some(tokio::time::Instant::now() + after);
                }
                continue;
            }
            let paused = paused_until.is_some_and(|t| t > tokio::time::Instant::now());
            let free = concurrency.saturating_sub(in_flight.len());
            let mut started = 0;
            // Due entries were found, but every one waits for an attempt in flight of
            // its key: only a completion can change that.
            let mut blocked = false;
            if free > 0 && !paused {
                // Enough candidates to fill the free slots past entries whose key is busy.
                let limit = free * max_batch * 2 + busy.len();
                let st = this.state.clone();
                let name = this.service.name.clone();
                let clock = this.clock.clone();
                let due = tokio::task::spawn_blocking(move || st.due(&name, clock.now_ms(), limit)).await;
                let due = match due {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => {
                        tracing::error!(service = %this.service.name, error = %e, "reading the outbox failed");
                        Vec::new()
                    }
                    Err(_) => Vec::new(),
                };
                blocked = !due.is_empty();
                let mut batches: Vec<Vec<OutboxEntry>> = Vec::new();
                let mut batch = Vec::new();
                // Keys of the batch being filled: more of the same key may join it (one
                // request keeps their order), never another batch.
                let mut open_keys: HashSet<String> = HashSet::new();
                for e in due {
                    if batches.len() >= free {
                        break;
                    }
                    let key = order_key(&e.notification);
                    if !open_keys.contains(&key) {
                        if !busy.insert(key.clone()) {
                            continue;
                        }
                        open_keys.insert(key);
                    }
                    batch.push(e);
                    if batch.len() >= max_batch {
                        batches.push(std::mem::take(&mut batch));
                        open_keys.clear();
                    }
                }
                if !batch.is_empty() && batches.len() < free {
                    batches.push(batch);
                } else {
                    // Not started this round: its keys are free again.
                    for e in batch {
                        busy.remove(&order_key(&e.notification));
                    }
                }
                for batch in batches {
                    tokio::select! {
                        _ = limiter.until_ready() => {}
                        _ = shutdown.changed() => {
                            for e in &batch {
                                busy.remove(&order_key(&e.notification));
                            }
                            this.drain(&mut in_flight, &mut busy).await;
                            return;
                        }
                    }
                    let w = this.clone();
                    in_flight.spawn(async move {
                        let outcome = w.attempt(&batch).await;
                        Attempted { batch, outcome }
                    });
                    started += 1;
                }
            }
            if started > 0 {
                continue;
            }
            // Nothing to start: wait for a completion, new work, the next due entry or
            // the end of a pause.
            let wait = if paused {
                paused_until.map_or(Duration::from_secs(1), |t| t.saturating_duration_since(tokio::time::Instant::now()))
            } else if blocked {
                // Not the next due time (already past: that would poll in a loop).
                Duration::from_secs(1)
            } else {
                let st = this.state.clone();
                let name = this.service.name.clone();
                match tokio::task::spawn_blocking(move || st.next_due_ms(&name)).await {
                    Ok(Ok(Some(at))) if free > 0 => {
                        Duration::from_millis(at.saturating_sub(this.clock.now_ms())).min(Duration::from_secs(1))
                    }
                    _ => Duration::from_secs(1),
                }
            };
            tokio::select! {
                Some(r) = in_flight.join_next(), if !in_flight.is_empty() => {
                    if let Ok(a) = r {
                        let mut done = vec![a];
                        while let Some(Ok(more)) = in_flight.try_join_next() {
                            done.push(more);
                        }
                        if let Some(after) = this.settle(done, &mut busy).await {
                            paused_until = Some(tokio::time::Instant::now() + after);
                        }
                    }
                }
                _ = this.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// Waits for every attempt in flight and records how each ended.
    async fn drain(&self, in_flight: &mut JoinSet<Attempted>, busy: &mut HashSet<String>) {
        let mut done = Vec::new();
        while let Some(r) = in_flight.join_next().await {
            if let Ok(a) = r {
                done.push(a);
            }
        }
        if !done.is_empty() {
            self.settle(done, busy).await;
        }
    }

    /// One attempt at a batch under the per-attempt timeout.
    async fn attempt(&self, batch: &[OutboxEntry]) -> Outcome {
        let s = &self.service.settings;
        let notifications: Vec<Notification> = batch.iter().map(|e| e.notification.clone()).collect();
        self.stats.attempts.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let outcome = match tokio::time::timeout(s.timeout, self.service.deliverer.deliver(&notifications)).await {
            Ok(o) => o,
            Err(_) => Outcome::retry(format!("timed out after {:?}", s.timeout)),
        };
        METRICS.delivery_latency.observe(started.elapsed());
        outcome
    }

    /// Decides what each finished entry becomes, writes all of it in one transaction,
    /// then frees the entries' order keys. Returns the longest `Retry-After` given.
    async fn settle(&self, done: Vec<Attempted>, busy: &mut HashSet<String>) -> Option<Duration> {
        let s = &self.service.settings;
        let kind = self.service.kind.as_str();
        let now = self.clock.now_ms();
        let mut outcomes = Vec::new();
        let mut retry_after: Option<Duration> = None;
        for a in &done {
            if let Outcome::Retry { after: Some(d), .. } = &a.outcome {
                retry_after = Some(retry_after.map_or(*d, |r| r.max(*d)));
            }
            for e in &a.batch {
                let n = &e.notification;
                let how = match &a.outcome {
                    Outcome::Delivered => {
                        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                        METRICS.sent.inc(kind);
                        tracing::info!(service = %self.service.name, app = %n.app, trigger = %n.trigger, destination = %n.destination, "delivered");
                        Settle::Delivered
                    }
                    Outcome::Retry { reason, after } => {
                        let reason = self.service.redactor.redact(reason);
                        let attempts = e.attempts + 1;
                        let age = Duration::from_millis(now.saturating_sub(e.enqueued_ms));
                        if attempts >= s.retry.max_attempts || age >= s.retry.deadline.0 {
                            self.stats.dead.fetch_add(1, Ordering::Relaxed);
                            METRICS.failed.inc(&format!("{kind}:exhausted"));
                            let error = format!("gave up after {attempts} attempt(s): {reason}");
                            tracing::warn!(service = %self.service.name, app = %n.app, trigger = %n.trigger, %error, "dead-lettered");
                            Settle::Dead { error, permanent: false }
                        } else {
                            self.stats.retried.fetch_add(1, Ordering::Relaxed);
                            METRICS.failed.inc(&format!("{kind}:retry"));
                            let wait = s.backoff(attempts, *after);
                            tracing::info!(service = %self.service.name, app = %n.app, attempt = attempts, ?wait, %reason, "will retry");
                            Settle::Retry {
                                next_ms: now.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX / 2)),
                                error: reason,
                            }
                        }
                    }
                    Outcome::Permanent(reason) => {
                        self.stats.dead.fetch_add(1, Ordering::Relaxed);
                        METRICS.failed.inc(&format!("{kind}:permanent"));
                        let error = self.service.redactor.redact(reason);
                        tracing::warn!(service = %self.service.name, app = %n.app, trigger = %n.trigger, %error, "permanent failure; dead-lettered");
                        Settle::Dead { error, permanent: true }
                    }
                };
                outcomes.push((e.clone(), how));
            }
        }
        let st = self.state.clone();
        let written = tokio::task::spawn_blocking(move || st.settle(&outcomes, now)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::error!(service = %self.service.name, error = %err, "updating the outbox failed"),
            Err(err) => tracing::error!(service = %self.service.name, error = %err, "updating the outbox failed"),
        }
        self.settled.notify_waiters();
        // Only now: until the outcome is written, the entries are still due in the store.
        for a in &done {
            for e in &a.batch {
                busy.remove(&order_key(&e.notification));
            }
        }
        retry_after
    }
}

struct Handle {
    wake: Arc<Notify>,
    stats: Arc<Stats>,
    task: JoinHandle<()>,
}

/// The running delivery side: a worker per service over the shared outbox.
pub struct Delivery {
    state: Arc<StateStore>,
    workers: BTreeMap<String, Handle>,
    shutdown: watch::Sender<bool>,
    clock: Clock,
    settled: Arc<Notify>,
}

/// What [`Delivery::submit`] did.
#[derive(Debug, Default, PartialEq)]
pub struct SubmitReport {
    pub enqueue: EnqueueReport,
    /// Notifications for a service with no configuration (dead-lettered).
    pub unconfigured: usize,
}

impl Delivery {
    /// Starts a worker per service. Notifications already in the outbox (left by a
    /// previous run) are delivered first.
    pub fn start(services: Vec<ServiceRuntime>, state: Arc<StateStore>) -> Delivery {
        Delivery::start_with_clock(services, state, Clock::system())
    }

    /// [`Delivery::start`] on a clock of the caller's.
    pub fn start_with_clock(services: Vec<ServiceRuntime>, state: Arc<StateStore>, clock: Clock) -> Delivery {
        let (shutdown, rx) = watch::channel(false);
        let settled = Arc::new(Notify::new());
        let mut workers = BTreeMap::new();
        for service in services {
            let wake = Arc::new(Notify::new());
            let stats = Arc::new(Stats::default());
            let name = service.name.clone();
            let w = Worker {
                service,
                state: state.clone(),
                wake: wake.clone(),
                stats: stats.clone(),
                clock: clock.clone(),
                settled: settled.clone(),
            };
            let task = tokio::spawn(w.run(rx.clone()));
            workers.insert(name, Handle { wake, stats, task });
        }
        Delivery { state, workers, shutdown, clock, settled }
    }

    /// Writes notifications to the outbox (durably) and wakes their workers. A
    /// notification for a service that is not configured is dead-lettered.
    pub fn submit(&self, notifications: &[Notification]) -> Result<SubmitReport, StateError> {
        self.submit_pass(&crate::state::PassWrite::default(), notifications)
    }

    /// Writes an evaluation pass and its notifications in one transaction
    /// ([`StateStore::write_pass`]) and wakes the workers concerned.
    pub fn submit_pass(&self, pass: &crate::state::PassWrite, notifications: &[Notification]) -> Result<SubmitReport, StateError> {
        let (known, unknown): (Vec<&Notification>, Vec<&Notification>) =
            notifications.iter().partition(|n| self.workers.contains_key(&n.destination.service));
        let known: Vec<Notification> = known.into_iter().cloned().collect();
        let now = self.clock.now_ms();
        let enqueue = self.state.write_pass(pass, &known, now)?;
        let mut unconfigured = 0;
        for n in unknown {
            tracing::warn!(service = %n.destination.service, app = %n.app, trigger = %n.trigger, "service is not configured; dead-lettered");
            self.state.reject(n, &format!("service {:?} is not configured", n.destination.service), now)?;
            unconfigured += 1;
        }
        for n in &known {
            if let Some(h) = self.workers.get(&n.destination.service) {
                h.wake.notify_one();
            }
        }
        Ok(SubmitReport { enqueue, unconfigured })
    }

    pub fn stats(&self, service: &str) -> Option<Arc<Stats>> {
        self.workers.get(service).map(|h| h.stats.clone())
    }

    /// Notifications delivered and dead-lettered by the workers so far, over all
    /// services.
    pub fn totals(&self) -> (u64, u64) {
        self.workers
            .values()
            .fold((0, 0), |(d, x), h| (d + h.stats.delivered.load(Ordering::Relaxed), x + h.stats.dead.load(Ordering::Relaxed)))
    }

    /// Waits until the outbox holds nothing due within `within` (everything delivered,
    /// dead-lettered, or waiting longer than that), or `timeout` passes. Returns whether
    /// the outbox is empty.
    /// It reads the store on the task that awaits it: for callers that wait from
    /// outside the runtime (`block_on`: replays, `--send`, tests), not for a task.
    pub async fn settle(&self, within: Duration, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before looking, so a settle in between is not missed.
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            // The depth counters and each service's first due time: no outbox scan.
            let empty = self.state.queue_depths().map(|d| d.is_empty()).unwrap_or(false);
            let horizon = self.clock.now_ms().saturating_add(u64::try_from(within.as_millis()).unwrap_or(u64::MAX));
            let nothing_due = self.workers.keys().all(|s| self.state.next_due_ms(s).ok().flatten().is_none_or(|at| at > horizon));
            let now = tokio::time::Instant::now();
            if empty || nothing_due || now >= deadline {
                return empty;
            }
            // Woken by the next settle; looked at again at least every 100 ms (a retry
            // falling due settles nothing until it is attempted).
            let _ = tokio::time::timeout((deadline - now).min(Duration::from_millis(100)), settled).await;
        }
    }

    /// Stops the workers after their current attempt; undelivered notifications stay in
    /// the outbox for the next start. Waits at most `grace`.
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.shutdown.send(true);
        // All workers at once: the grace is the whole stop's, not each worker's (a
        // leader stepping down must be done within its share of the lease).
        let stops = self.workers.into_values().map(|h| async move {
            let abort = h.task.abort_handle();
            if tokio::time::timeout(grace, h.task).await.is_err() {
                abort.abort();
            }
        });
        futures::future::join_all(stops).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::deliver::ecs::tests::sample;
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
        let state = Arc::new(StateStore::in_memory().unwrap());
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
        let mut settings = DeliverySettings::for_kind(DestinationKind::Webhook);
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
        assert_eq!(state.queue_depths().unwrap(), vec![], "the counters follow");
    }
}
