//! One worker per configured service pulls due notifications from the durable outbox,
//! rate-limits, keeps up to `concurrency` deliveries in flight (in order per
//! Application and destination), and completes, reschedules or dead-letters them, the
//! outcomes of everything that finished together in one transaction. Services never wait on each other: a slow Slack does not
//! delay a PagerDuty page.

use std::collections::{BTreeMap, HashMap, HashSet};
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

/// Stops the workers without their owner, as soon as `leading` turns false: a leader
/// whose Lease is lost must stop sending before a standby may take over, whatever the
/// evaluation thread (which owns the [`Delivery`]) is busy with. Attempts in flight
/// get `grace` to finish and be recorded; past it they are abandoned (their entries
/// stay in the outbox, and their idempotency keys go with them to the next leader).
#[derive(Clone)]
pub struct Halt {
    pub leading: watch::Receiver<bool>,
    pub grace: Duration,
}

impl Halt {
    fn halted(&self) -> bool {
        !*self.leading.borrow()
    }
}

/// Resolves when `halt` says stop (never without one).
async fn halt_signal(halt: &mut Option<Halt>) {
    match halt {
        Some(h) => {
            while !h.halted() {
                if h.leading.changed().await.is_err() {
                    // Leader election is gone: the owner stops the workers.
                    std::future::pending::<()>().await;
                }
            }
        }
        None => std::future::pending().await,
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
    halt: Option<Halt>,
    /// Set while a settle cannot be written (shared by the workers; the owner reopens
    /// the store, see [`Delivery::store_failing`]).
    store_failing: Arc<std::sync::atomic::AtomicBool>,
}

/// What an attempt in flight reports back: its entries and what happened.
struct Attempted {
    batch: Vec<OutboxEntry>,
    outcome: Outcome,
    /// Started while the destination was down: its outcome says whether it is back.
    probe: bool,
}

/// Whether the service's destination answers, from the outcomes of its attempts. A
/// retried failure (refused, reset, timed out, 5xx, 429, a refusal a rotation
/// explains) takes the destination down: from then on one probe at a time goes out,
/// with its own backoff ([`DeliverySettings::probe_wait`]), instead of every entry
/// waiting out a backoff of its own; the first delivery brings it back up, and the
/// entries that failed meanwhile are released ([`StateStore::release`]) so the whole
/// queue drains at the rate limit at once. (Each entry waiting out its own backoff
/// took 64 s to drain 1,000 after an outage.)
#[derive(Default)]
struct Health {
    /// Down since, with the failed probes so far and when the next may go.
    down: Option<Down>,
    /// Entries that failed since the destination went down, with the next attempt
    /// their settle gave them: released when it is back. Bounded by [`MAX_RELEASED`].
    failed: BTreeMap<u64, u64>,
    /// Entries released at the last recovery: a failure of one of them right after is
    /// its own (its payload, its recipient), not the destination's, so it keeps its
    /// own backoff and does not take the destination down again.
    released: HashSet<u64>,
    /// Whether "not answering" was logged for the current outage.
    logged: bool,
}

struct Down {
    probes_failed: u32,
    probe_at: tokio::time::Instant,
}

/// Most failed entries remembered for release at a recovery (the rest wait out their
/// own backoff).
const MAX_RELEASED: usize = 4096;

/// How one entry of a settled attempt ended, for [`Health`].
enum Ended {
    Delivered,
    /// Refused for good (a 400, an unknown channel): the destination answers.
    Refused,
    Retry {
        id: u64,
        next_ms: u64,
    },
    Other,
}

impl Health {
    fn is_down(&self) -> bool {
        self.down.is_some()
    }

    /// Whether a probe may start now.
    fn may_probe(&self, now: tokio::time::Instant) -> bool {
        self.down.as_ref().is_some_and(|d| d.probe_at <= now)
    }

    /// Takes the outcomes of one settled attempt into account; returns the entries to
    /// release (the destination came back).
    fn observe(&mut self, probe: bool, ended: &[Ended], after: Option<Duration>, settings: &DeliverySettings) -> Vec<(u64, u64)> {
        // A delivery, or a refusal that re-sending cannot change: the destination answers.
        let delivered = ended.iter().any(|e| matches!(e, Ended::Delivered | Ended::Refused));
        if delivered {
            if self.down.take().is_some() || !self.failed.is_empty() {
                let release: Vec<(u64, u64)> = std::mem::take(&mut self.failed).into_iter().collect();
                self.released = release.iter().map(|(id, _)| *id).collect();
                return release;
            }
            return Vec::new();
        }
        let retried: Vec<(u64, u64)> =
            ended.iter().filter_map(|e| if let Ended::Retry { id, next_ms } = e { Some((*id, *next_ms)) } else { None }).collect();
        if retried.is_empty() {
            return Vec::new();
        }
        if !self.is_down() && retried.iter().all(|(id, _)| self.released.contains(id)) {
            // Released at the last recovery and failing again while others go
            // through: this entry's own problem.
            return Vec::new();
        }
        for (id, next) in retried {
            if self.failed.len() < MAX_RELEASED || self.failed.contains_key(&id) {
                self.failed.insert(id, next);
            }
        }
        let now = tokio::time::Instant::now();
        match &mut self.down {
            None => {
                self.released.clear();
                self.down = Some(Down { probes_failed: 0, probe_at: now + settings.probe_wait(1, after) });
            }
            // Attempts already in flight when it went down say nothing new; a failed
            // probe widens the wait.
            Some(d) if probe => {
                d.probes_failed = d.probes_failed.saturating_add(1);
                d.probe_at = now + settings.probe_wait(d.probes_failed.saturating_add(1), after);
            }
            Some(d) => {
                if let Some(a) = after {
                    d.probe_at = d.probe_at.max(now + a);
                }
            }
        }
        Vec::new()
    }
}

/// The key whose notifications must reach the destination in order: one Application
/// at one destination (a PagerDuty trigger before its resolve, a Slack message before
/// its `chat.update` or thread reply). Entries with different keys go in parallel.
fn order_key(n: &Notification) -> String {
    match &n.group {
        // A group's message before its updates.
        Some(g) => format!("group\u{0}{}\u{0}{}", g.key, n.destination),
        None => format!("{}\u{0}{}", n.app, n.destination),
    }
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
        let mut health = Health::default();
        // A `Retry-After` from the receiver pauses the whole service, not only the
        // entry that got it: the receiver asked the sender to stop for that long.
        let mut paused_until: Option<tokio::time::Instant> = None;
        let mut halt = this.halt.clone();
        loop {
            if *shutdown.borrow() {
                // Attempts in flight finish and are recorded (the caller's grace bounds
                // how long): a stop must not turn a delivery into a repeat.
                this.drain(&mut in_flight, &mut busy, &mut health).await;
                return;
            }
            if let Some(h) = halt.as_ref().filter(|h| h.halted()) {
                tracing::info!(service = %this.service.name, "no longer leading: stopping");
                let grace = h.grace;
                if tokio::time::timeout(grace, this.drain(&mut in_flight, &mut busy, &mut health)).await.is_err() {
                    in_flight.abort_all();
                }
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
                if let Some(after) = this.settle(done, &mut busy, &mut health).await {
                    paused_until = Some(tokio::time::Instant::now() + after);
                }
                continue;
            }
            let paused = paused_until.is_some_and(|t| t > tokio::time::Instant::now());
            // While the destination is down: one probe at a time, when its wait is over.
            let probing = health.is_down();
            let free = match probing {
                false => concurrency.saturating_sub(in_flight.len()),
                true if in_flight.is_empty() && health.may_probe(tokio::time::Instant::now()) => 1,
                true => 0,
            };
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
                        // A lost Lease wins over a rate-limit slot that is ready too.
                        biased;
                        _ = halt_signal(&mut halt) => {
                            for e in &batch {
                                busy.remove(&order_key(&e.notification));
                            }
                            break;
                        }
                        _ = limiter.until_ready() => {}
                        _ = shutdown.changed() => {
                            for e in &batch {
                                busy.remove(&order_key(&e.notification));
                            }
                            this.drain(&mut in_flight, &mut busy, &mut health).await;
                            return;
                        }
                    }
                    let w = this.clone();
                    in_flight.spawn(async move {
                        let outcome = w.attempt(&batch).await;
                        Attempted { batch, outcome, probe: probing }
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
            } else if let Some(d) = &health.down {
                // Down: nothing but the probe goes, so nothing else is looked at. While an
                // attempt is in flight only its completion (in the select) matters.
                match in_flight.is_empty() {
                    true => d.probe_at.saturating_duration_since(tokio::time::Instant::now()).max(Duration::from_millis(1)),
                    false => Duration::from_secs(1),
                }
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
                        if let Some(after) = this.settle(done, &mut busy, &mut health).await {
                            paused_until = Some(tokio::time::Instant::now() + after);
                        }
                    }
                }
                _ = this.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
                _ = halt_signal(&mut halt) => {}
            }
        }
    }

    /// Waits for every attempt in flight and records how each ended.
    async fn drain(&self, in_flight: &mut JoinSet<Attempted>, busy: &mut HashSet<String>, health: &mut Health) {
        let mut done = Vec::new();
        while let Some(r) = in_flight.join_next().await {
            if let Ok(a) = r {
                done.push(a);
            }
        }
        if !done.is_empty() {
            self.settle(done, busy, health).await;
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
    /// then frees the entries' order keys; tells `health` how each attempt went and,
    /// when the destination came back, releases what failed while it was down. Returns
    /// the longest `Retry-After` given.
    async fn settle(&self, done: Vec<Attempted>, busy: &mut HashSet<String>, health: &mut Health) -> Option<Duration> {
        let s = &self.service.settings;
        let kind = self.service.kind.as_str();
        let now = self.clock.now_ms();
        let mut outcomes = Vec::new();
        // Per attempt, how its entries ended and the `Retry-After` it got (for the
        // destination's health).
        let mut ended_by_attempt = Vec::with_capacity(done.len());
        let mut retry_after: Option<Duration> = None;
        for a in &done {
            let after = match &a.outcome {
                Outcome::Retry { after, .. } => *after,
                _ => None,
            };
            if let Some(d) = after {
                retry_after = Some(retry_after.map_or(d, |r| r.max(d)));
            }
            let mut ended = Vec::with_capacity(a.batch.len());
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
                ended.push(match &how {
                    Settle::Delivered => Ended::Delivered,
                    Settle::Retry { next_ms, .. } => Ended::Retry { id: e.id, next_ms: *next_ms },
                    Settle::Dead { permanent: true, .. } => Ended::Refused,
                    Settle::Dead { .. } => Ended::Other,
                });
                outcomes.push((e.clone(), how));
            }
            ended_by_attempt.push((a.probe, ended, after));
        }
        self.write_settle(Arc::new(outcomes), now).await;
        self.settled.notify_waiters();
        // Only now: until the outcome is written, the entries are still due in the store.
        for a in &done {
            for e in &a.batch {
                busy.remove(&order_key(&e.notification));
            }
        }
        let mut release = Vec::new();
        for (probe, ended, after) in &ended_by_attempt {
            release.extend(health.observe(*probe, ended, *after, s));
        }
        if !release.is_empty() {
            let (st, name, at) = (self.state.clone(), self.service.name.clone(), self.clock.now_ms());
            match tokio::task::spawn_blocking(move || st.release(&name, &release, at)).await {
                Ok(Ok(n)) => {
                    tracing::info!(service = %self.service.name, released = n, "destination answers again: its queue goes out now")
                }
                Ok(Err(e)) => {
                    tracing::warn!(service = %self.service.name, error = %e, "releasing the entries that failed during the outage failed; they wait out their backoff")
                }
                Err(_) => {}
            }
        } else if health.is_down() && !std::mem::replace(&mut health.logged, true) {
            tracing::warn!(service = %self.service.name, "destination not answering: one probe at a time until it does");
        }
        if !health.is_down() {
            health.logged = false;
        }
        retry_after
    }

    /// Writes a settle, and tries again until it is written: until then the entries
    /// are still due in the store, and freeing their order keys would send them again
    /// at once. A store that keeps failing holds this service's worker here (nothing
    /// it could deliver would be recorded either) and says so
    /// ([`Delivery::store_failing`]), so that its owner reopens the store (redb refuses
    /// every write after an I/O error until then), which stops this worker.
    async fn write_settle(&self, outcomes: Arc<Vec<(OutboxEntry, Settle)>>, now: u64) {
        let mut wait = Duration::from_millis(200);
        loop {
            let (st, o) = (self.state.clone(), outcomes.clone());
            match tokio::task::spawn_blocking(move || st.settle(&o, now)).await {
                Ok(Ok(())) => {
                    self.store_failing.store(false, Ordering::Relaxed);
                    return;
                }
                Ok(Err(err)) => {
                    tracing::error!(service = %self.service.name, error = %err, ?wait, "recording delivery outcomes failed; will retry (the entries are held meanwhile)")
                }
                Err(err) => {
                    tracing::error!(service = %self.service.name, error = %err, ?wait, "recording delivery outcomes failed; will retry")
                }
            }
            self.store_failing.store(true, Ordering::Relaxed);
            METRICS.failed.inc(&format!("{}:settle_write", self.service.kind.as_str()));
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }
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

/// A service's queue shared fairly between Applications: past the service's burst,
/// each Application's entries for a service are first due one rate-limit interval
/// apart, so the due index interleaves Applications. One Application whose annotation
/// fans a change out to thousands of notifications queues them over time, and another
/// Application's page, decided a moment later, is due before all but the first few of
/// them: the flood costs the others a slot, not its whole length. A service's
/// throughput is unchanged (its rate limit spaces deliveries anyway). In memory: after
/// a restart the entries already queued keep their times.
#[derive(Default)]
struct FairShare {
    /// (service, Application) -> when its next entry may be first due (ms).
    next: HashMap<(String, String), u64>,
    /// Size after the last prune: the map is pruned when it doubles (amortised O(1)).
    pruned_len: usize,
}

impl FairShare {
    /// When the next entry of `app` for `service` is first due: a token bucket of
    /// `burst` entries refilled one per `gap_ms`.
    fn due(&mut self, service: &str, app: &str, gap_ms: u64, burst: u32, now_ms: u64) -> u64 {
        if gap_ms == 0 {
            return now_ms;
        }
        let credit = gap_ms.saturating_mul(u64::from(burst.max(1)) - 1);
        if self.next.len() > (2 * self.pruned_len).max(1024) {
            self.next.retain(|_, at| at.saturating_add(credit) > now_ms);
            self.pruned_len = self.next.len();
        }
        let slot = self.next.entry((service.to_string(), app.to_string())).or_insert(0);
        *slot = (*slot).max(now_ms.saturating_sub(credit));
        let due = (*slot).max(now_ms);
        *slot = slot.saturating_add(gap_ms);
        due
    }
}

/// The running delivery side: a worker per service over the shared outbox.
pub struct Delivery {
    state: Arc<StateStore>,
    workers: BTreeMap<String, Handle>,
    shutdown: watch::Sender<bool>,
    clock: Clock,
    settled: Arc<Notify>,
    store_failing: Arc<std::sync::atomic::AtomicBool>,
    /// When a full outbox was last logged.
    full_logged: std::sync::Mutex<Option<std::time::Instant>>,
    fair: std::sync::Mutex<FairShare>,
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
        Delivery::start_with(services, state, clock, None)
    }

    /// [`Delivery::start`] for a leader: the workers stop by themselves when `halt`
    /// says it no longer leads.
    pub fn start_leading(services: Vec<ServiceRuntime>, state: Arc<StateStore>, halt: Option<Halt>) -> Delivery {
        Delivery::start_with(services, state, Clock::system(), halt)
    }

    fn start_with(services: Vec<ServiceRuntime>, state: Arc<StateStore>, clock: Clock, halt: Option<Halt>) -> Delivery {
        let (shutdown, rx) = watch::channel(false);
        let settled = Arc::new(Notify::new());
        let store_failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut workers = BTreeMap::new();
        for service in services {
            let (service_rate, service_burst) = (service.settings.rate.per_second, service.settings.rate.burst);
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
                halt: halt.clone(),
                store_failing: store_failing.clone(),
            };
            // A rate of a thousand a second or more needs no spacing (previews, tests).
            let gap_ms = if service_rate >= 1000.0 { 0 } else { (1000.0 / service_rate.max(0.001)) as u64 };
            let task = tokio::spawn(w.run(rx.clone()));
            workers.insert(name, Handle { wake, stats, task, gap_ms, burst: service_burst });
        }
        Delivery {
            state,
            workers,
            shutdown,
            clock,
            settled,
            store_failing,
            full_logged: std::sync::Mutex::new(None),
            fair: Default::default(),
        }
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
        let due: Vec<u64> = {
            let mut fair = self.fair.lock().unwrap_or_else(|p| p.into_inner());
            known
                .iter()
                .map(|n| {
                    let (gap, burst) = self.workers.get(&n.destination.service).map_or((0, 1), |h| (h.gap_ms, h.burst));
                    fair.due(&n.destination.service, &n.app, gap, burst, now)
                })
                .collect()
        };
        let enqueue = self.state.write_pass_due(pass, &known, now, Some(&due))?;
        for (service, n) in &enqueue.full {
            METRICS.not_queued.add(&format!("{service}:full"), *n as u64);
            self.log_full(service, *n);
        }
        if enqueue.superseded > 0 {
            METRICS.not_queued.add("all:superseded", enqueue.superseded as u64);
        }
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
        assert_eq!(state.queue_depths().unwrap(), vec![], "the counters follow");
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
        let state = Arc::new(StateStore::in_memory().unwrap());
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
        let state = Arc::new(StateStore::in_memory().unwrap());
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
        let left = state.queue_depths().unwrap();
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
        let state = Arc::new(StateStore::in_memory().unwrap());
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
}
