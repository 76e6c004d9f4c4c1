//! The delivery queue over the durable outbox: [`Delivery`] starts one worker per
//! service ([`worker`]), computes when new entries are first due ([`fair`]), follows
//! each destination's health ([`health`]) and is steered by a clock and a leader halt
//! ([`control`]). The pass itself is written by the pipeline (`PassStore::write_pass_due`
//! with [`Delivery::plan`]'s due times and rejects); the queue then wakes the workers
//! concerned ([`Delivery::queued`]). The workers hold the store's [`Outbox`] face only.

mod control;
mod fair;
mod files;
mod health;
#[cfg(test)]
mod tests;
mod worker;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use self::control::{Halt, OutboxClock};
use self::fair::FairShare;
use self::worker::Worker;
use super::deliverer::ServiceRuntime;
use crate::metrics::METRICS;
use crate::model::Notification;
use crate::state::{EnqueueReport, Outbox, PassStore, Reject, StateError, Store};

/// Counters per service, for tests and `--send` (the process-wide metrics are in `crate::metrics`).
#[derive(Debug, Default)]
pub struct Stats {
    pub attempts: AtomicU64,
    pub delivered: AtomicU64,
    pub retried: AtomicU64,
    pub dead: AtomicU64,
}

struct Handle {
    wake: Arc<Notify>,
    stats: Arc<Stats>,
    task: JoinHandle<()>,
    /// The service's rate as the spacing of one Application's entries (ms), and its
    /// burst (how many of them may be due at once).
    gap_ms: u64,
    burst: u32,
}

/// The running delivery side: a worker per service over the shared outbox.
pub struct Delivery {
    /// For [`Delivery::submit`]'s write (a pass of no Application).
    pass: PassStore,
    outbox: Outbox,
    workers: BTreeMap<String, Handle>,
    shutdown: watch::Sender<bool>,
    clock: OutboxClock,
    settled: Arc<Notify>,
    store_failing: Arc<std::sync::atomic::AtomicBool>,
    /// When a full outbox was last logged.
    full_logged: std::sync::Mutex<Option<std::time::Instant>>,
    fair: std::sync::Mutex<FairShare>,
    /// Asks the workers of services that write files to close their open file now
    /// ([`Delivery::close_files`]).
    closing: Arc<std::sync::atomic::AtomicBool>,
}

/// The notifications of a pass as the queue takes them ([`Delivery::plan`]).
#[derive(Debug, Default)]
pub struct Plan {
    /// For configured services, with when each is first due (`due`, same order).
    pub known: Vec<Notification>,
    pub due: Vec<u64>,
    /// For services not configured: dead-lettered with the pass ([`Plan::rejects`]).
    pub unknown: Vec<Notification>,
    /// The queue's clock when planned: the pass is written at this instant.
    pub now_ms: u64,
}

/// What [`Delivery::submit`] did.
#[derive(Debug, Default, PartialEq)]
pub struct SubmitReport {
    pub enqueue: EnqueueReport,
    /// Notifications for a service with no configuration (dead-lettered).
    pub unconfigured: usize,
}

impl Plan {
    /// The notifications for services not configured, with why: the pass's write
    /// dead-letters them in its transaction.
    pub fn rejects(&self) -> Vec<Reject<'_>> {
        self.unknown.iter().map(|n| (n, format!("service {:?} is not configured", n.destination.service))).collect()
    }
}

impl Delivery {
    /// Starts a worker per service. Notifications already in the outbox (left by a
    /// previous run) are delivered first.
    pub fn start(services: Vec<ServiceRuntime>, state: Arc<Store>) -> Delivery {
        Delivery::start_with_clock(services, state, OutboxClock::system())
    }

    /// [`Delivery::start`] on a clock of the caller's.
    pub fn start_with_clock(services: Vec<ServiceRuntime>, state: Arc<Store>, clock: OutboxClock) -> Delivery {
        Delivery::start_with(services, state, clock, None)
    }

    /// [`Delivery::start`] for a leader: the workers stop by themselves when `halt`
    /// says it no longer leads.
    pub fn start_leading(services: Vec<ServiceRuntime>, state: Arc<Store>, halt: Option<Halt>) -> Delivery {
        Delivery::start_with(services, state, OutboxClock::system(), halt)
    }

    fn start_with(services: Vec<ServiceRuntime>, state: Arc<Store>, clock: OutboxClock, halt: Option<Halt>) -> Delivery {
        let (shutdown, rx) = watch::channel(false);
        let settled = Arc::new(Notify::new());
        let store_failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut workers = BTreeMap::new();
        for service in services {
            let (service_rate, service_burst) = (service.settings.rate.per_second, service.settings.rate.burst);
            let wake = Arc::new(Notify::new());
            let stats = Arc::new(Stats::default());
            let name = service.name.clone();
            let w = Worker {
                service,
                outbox: state.outbox(),
                wake: wake.clone(),
                stats: stats.clone(),
                clock: clock.clone(),
                settled: settled.clone(),
                halt: halt.clone(),
                store_failing: store_failing.clone(),
                closing: closing.clone(),
            };
            // A rate of a thousand a second or more needs no spacing (previews, tests).
            let gap_ms = if service_rate >= 1000.0 { 0 } else { (1000.0 / service_rate.max(0.001)) as u64 };
            // A service that writes files has a worker that cuts its queue into them.
            let task = match w.service.deliverer.files() {
                Some(cut) => tokio::spawn(w.run_files(rx.clone(), cut)),
                None => tokio::spawn(w.run(rx.clone())),
            };
            workers.insert(name, Handle { wake, stats, task, gap_ms, burst: service_burst });
        }
        Delivery {
            pass: state.pass(),
            outbox: state.outbox(),
            workers,
            shutdown,
            clock,
            settled,
            store_failing,
            full_logged: std::sync::Mutex::new(None),
            fair: Default::default(),
            closing,
        }
    }

    /// Closes the open files of the services that write files (`Deliverer::files`)
    /// now, and every later one as soon as it has entries: a drain (`run --replay
    /// --deliver`) sends everything rather than waiting out each file's age.
    pub fn close_files(&self) {
        self.closing.store(true, Ordering::Relaxed);
        for h in self.workers.values() {
            h.wake.notify_one();
        }
    }

    /// Writes notifications to the outbox (durably) and wakes their workers, with no
    /// evaluation pass around them (the CLI's `--send`, tests). A notification for a
    /// service that is not configured is dead-lettered.
    pub fn submit(&self, notifications: &[Notification]) -> Result<SubmitReport, StateError> {
        let plan = self.plan(notifications);
        let enqueue =
            self.pass.write_pass_due(&crate::state::PassWrite::default(), &plan.known, plan.now_ms, Some(&plan.due), &plan.rejects())?;
        self.queued(&plan, enqueue)
    }

    /// Which notifications a worker takes (the rest are for services not configured),
    /// and when each is first due: the fair share of its service between Applications.
    /// The caller writes them with its pass (`PassStore::write_pass_due`, with
    /// [`Plan::rejects`]), then hands the report to [`Delivery::queued`].
    pub fn plan(&self, notifications: &[Notification]) -> Plan {
        let (known, unknown): (Vec<&Notification>, Vec<&Notification>) =
            notifications.iter().partition(|n| self.workers.contains_key(&n.destination.service));
        let known: Vec<Notification> = known.into_iter().cloned().collect();
        let now_ms = self.clock.now_ms();
        let due: Vec<u64> = {
            let mut fair = self.fair.lock().unwrap_or_else(|p| p.into_inner());
            known
                .iter()
                .map(|n| {
                    let (gap, burst) = self.workers.get(&n.destination.service).map_or((0, 1), |h| (h.gap_ms, h.burst));
                    fair.due(&n.destination.service, &n.app, gap, burst, now_ms)
                })
                .collect()
        };
        Plan { known, unknown: unknown.into_iter().cloned().collect(), due, now_ms }
    }

    /// After the pass holding `plan`'s notifications (and its rejects) was written:
    /// counts and logs what the outbox refused and what went to the dead letters for
    /// an unconfigured service, and wakes the workers concerned.
    pub fn queued(&self, plan: &Plan, enqueue: EnqueueReport) -> Result<SubmitReport, StateError> {
        for (service, n) in &enqueue.full {
            METRICS.not_queued.add(&format!("{service}:full"), *n as u64);
            self.log_full(service, *n);
        }
        if enqueue.superseded > 0 {
            METRICS.not_queued.add("all:superseded", enqueue.superseded as u64);
        }
        let mut unconfigured = 0;
        for n in &plan.unknown {
            tracing::warn!(service = %n.destination.service, app = %n.app, trigger = %n.trigger, "service is not configured; dead-lettered");
            unconfigured += 1;
        }
        for n in &plan.known {
            if let Some(h) = self.workers.get(&n.destination.service) {
                h.wake.notify_one();
            }
        }
        Ok(SubmitReport { enqueue, unconfigured })
    }

    /// Logs a full outbox at most once a minute per process (the counter has every
    /// refusal): a flood would otherwise write a line per Application per pass.
    fn log_full(&self, service: &str, n: usize) {
        let mut last = self.full_logged.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(std::time::Instant::now());
            tracing::warn!(
                service,
                refused = n,
                bound = crate::state::MAX_OUTBOX_PER_SERVICE,
                "outbox full: notifications not queued; they are decided again once the queue has room"
            );
        }
    }

    /// Whether a worker cannot write its settle (the store refuses writes): the owner
    /// should reopen the store.
    pub fn store_failing(&self) -> bool {
        self.store_failing.load(Ordering::Relaxed)
    }

    /// Workers still running (a halted one has returned).
    pub fn running(&self) -> usize {
        self.workers.values().filter(|h| !h.task.is_finished()).count()
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
            let empty = self.outbox.queue_depths().map(|d| d.is_empty()).unwrap_or(false);
            let horizon = self.clock.now_ms().saturating_add(u64::try_from(within.as_millis()).unwrap_or(u64::MAX));
            let nothing_due = self.workers.keys().all(|s| self.outbox.next_due_ms(s).ok().flatten().is_none_or(|at| at > horizon));
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
