//! One worker per configured service pulls due notifications from the durable outbox,
//! rate-limits, delivers with a per-attempt timeout, and completes, reschedules or
//! dead-letters each one. Services never wait on each other: a slow Slack does not
//! delay a PagerDuty page.

use std::collections::BTreeMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::{Quota, RateLimiter};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::outcome::{DeliverySettings, Outcome};
use crate::metrics::METRICS;
use crate::model::Notification;
use crate::secret::Redactor;
use crate::state::{EnqueueReport, OutboxEntry, StateError, StateStore};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

fn now_ms() -> u64 {
    crate::state::to_millis(chrono::Utc::now())
}

struct Worker {
    service: ServiceRuntime,
    state: Arc<StateStore>,
    wake: Arc<Notify>,
    stats: Arc<Stats>,
}

impl Worker {
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let s = &self.service.settings;
        let per_second = s.rate.per_second.max(0.001);
        let period = Duration::from_secs_f64(1.0 / per_second);
        let burst = NonZeroU32::new(s.rate.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        // `with_period` only fails for a zero period, which `max(0.001)` above rules out;
        // fall back to one per second rather than panic.
        let quota = Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN)).allow_burst(burst);
        let limiter = RateLimiter::direct(quota);
        // A `Retry-After` from the receiver pauses the whole service, not only the
        // entry that got it: the receiver asked the sender to stop for that long.
        let mut paused_until: Option<tokio::time::Instant> = None;
        loop {
            if *shutdown.borrow() {
                return;
            }
            if let Some(until) = paused_until.take() {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = shutdown.changed() => return,
                }
            }
            let batch = match self.state.due(&self.service.name, now_ms(), self.service.deliverer.max_batch().max(1)) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(service = %self.service.name, error = %e, "reading the outbox failed");
                    Vec::new()
                }
            };
            if batch.is_empty() {
                let wait = match self.state.next_due_ms(&self.service.name) {
                    Ok(Some(at)) => Duration::from_millis(at.saturating_sub(now_ms())).min(Duration::from_secs(1)),
                    _ => Duration::from_secs(1),
                };
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            tokio::select! {
                _ = limiter.until_ready() => {}
                _ = shutdown.changed() => return,
            }
            if let Some(after) = self.attempt(&batch).await {
                paused_until = Some(tokio::time::Instant::now() + after);
            }
        }
    }

    /// One attempt at a batch; returns the receiver's `Retry-After`, if it gave one.
    async fn attempt(&self, batch: &[OutboxEntry]) -> Option<Duration> {
        let s = &self.service.settings;
        let notifications: Vec<Notification> = batch.iter().map(|e| e.notification.clone()).collect();
        self.stats.attempts.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let outcome = match tokio::time::timeout(s.timeout, self.service.deliverer.deliver(&notifications)).await {
            Ok(o) => o,
            Err(_) => Outcome::retry(format!("timed out after {:?}", s.timeout)),
        };
        METRICS.delivery_latency.observe(started.elapsed());
        let kind = self.service.kind.as_str();
        let now = now_ms();
        for e in batch {
            let n = &e.notification;
            let result = match &outcome {
                Outcome::Delivered => {
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    METRICS.sent.inc(kind);
                    tracing::info!(service = %self.service.name, app = %n.app, trigger = %n.trigger, destination = %n.destination, "delivered");
                    self.state.complete(e, now)
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
                        self.state.dead_letter(e, &error, false, now)
                    } else {
                        self.stats.retried.fetch_add(1, Ordering::Relaxed);
                        METRICS.failed.inc(&format!("{kind}:retry"));
                        let wait = s.backoff(attempts, *after);
                        tracing::info!(service = %self.service.name, app = %n.app, attempt = attempts, ?wait, %reason, "will retry");
                        self.state.reschedule(e, now + u64::try_from(wait.as_millis()).unwrap_or(u64::MAX / 2), &reason)
                    }
                }
                Outcome::Permanent(reason) => {
                    self.stats.dead.fetch_add(1, Ordering::Relaxed);
                    METRICS.failed.inc(&format!("{kind}:permanent"));
                    let error = self.service.redactor.redact(reason);
                    tracing::warn!(service = %self.service.name, app = %n.app, trigger = %n.trigger, %error, "permanent failure; dead-lettered");
                    self.state.dead_letter(e, &error, true, now)
                }
            };
            if let Err(err) = result {
                tracing::error!(service = %self.service.name, error = %err, "updating the outbox failed");
            }
        }
        match outcome {
            Outcome::Retry { after, .. } => after,
            _ => None,
        }
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
        let (shutdown, rx) = watch::channel(false);
        let mut workers = BTreeMap::new();
        for service in services {
            let wake = Arc::new(Notify::new());
            let stats = Arc::new(Stats::default());
            let name = service.name.clone();
            let w = Worker { service, state: state.clone(), wake: wake.clone(), stats: stats.clone() };
            let task = tokio::spawn(w.run(rx.clone()));
            workers.insert(name, Handle { wake, stats, task });
        }
        Delivery { state, workers, shutdown }
    }

    /// Writes notifications to the outbox (durably) and wakes their workers. A
    /// notification for a service that is not configured is dead-lettered.
    pub fn submit(&self, notifications: &[Notification]) -> Result<SubmitReport, StateError> {
        let (known, unknown): (Vec<&Notification>, Vec<&Notification>) =
            notifications.iter().partition(|n| self.workers.contains_key(&n.destination.service));
        let known: Vec<Notification> = known.into_iter().cloned().collect();
        let now = now_ms();
        let enqueue = self.state.enqueue(&known, now)?;
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

    /// Waits until the outbox holds nothing due within `within` (everything delivered,
    /// dead-lettered, or waiting longer than that), or `timeout` passes. Returns whether
    /// the outbox is empty.
    pub async fn settle(&self, within: Duration, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let pending = self.state.outbox(None).unwrap_or_default();
            let horizon = now_ms() + u64::try_from(within.as_millis()).unwrap_or(0);
            if pending.iter().all(|e| e.next_attempt_ms > horizon) || tokio::time::Instant::now() >= deadline {
                return pending.is_empty();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
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
