//! One worker per configured service pulls due notifications from the durable outbox,
//! rate-limits, keeps up to `concurrency` deliveries in flight (in order per
//! Application and destination), and completes, reschedules or dead-letters them (the
//! verdict is [`crate::deliver::outcome::verdict`]), the outcomes of everything that
//! finished together in one transaction. Services never wait on each other: a slow
//! Slack does not delay a PagerDuty page.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use governor::{Quota, RateLimiter};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::Stats;
use super::control::{Halt, OutboxClock, halt_signal};
use super::health::{Ended, Health};
use crate::deliver::deliverer::ServiceRuntime;
use crate::deliver::outcome::{Outcome, Verdict, verdict};
use crate::metrics::METRICS;
use crate::model::Notification;
use crate::state::{Due, Outbox, OutboxEntry, Settle};

pub(super) struct Worker {
    pub(super) service: ServiceRuntime,
    /// The store's face for the workers: two round trips per batch (what is due,
    /// with when the next is; the settle, with any release).
    pub(super) outbox: Outbox,
    pub(super) wake: Arc<Notify>,
    pub(super) stats: Arc<Stats>,
    pub(super) clock: OutboxClock,
    /// Told after every settle transaction (`Delivery::settle` waits on it).
    pub(super) settled: Arc<Notify>,
    pub(super) halt: Option<Halt>,
    /// Set while a settle cannot be written (shared by the workers; the owner reopens
    /// the store, see `Delivery::store_failing`).
    pub(super) store_failing: Arc<std::sync::atomic::AtomicBool>,
    /// Set when the queue is asked to close open files now (a drain): only a
    /// service that writes files reads it (`super::files`).
    pub(super) closing: Arc<std::sync::atomic::AtomicBool>,
}

/// What one worker's loop keeps from turn to turn.
struct Running {
    limiter: governor::DefaultDirectRateLimiter,
    concurrency: usize,
    max_batch: usize,
    in_flight: JoinSet<Attempted>,
    /// Order keys with an attempt in flight (their later entries wait).
    busy: HashSet<String>,
    health: Health,
    /// A `Retry-After` from the receiver pauses the whole service, not only the entry
    /// that got it: the receiver asked the sender to stop for that long.
    paused_until: Option<tokio::time::Instant>,
    halt: Option<Halt>,
    /// When the service's next entry is due, as this turn's read of the outbox said.
    next_due_ms: Option<u64>,
}

impl Running {
    fn new(w: &Worker) -> Running {
        let s = w.service.settings;
        let per_second = s.rate.per_second.max(0.001);
        let period = Duration::from_secs_f64(1.0 / per_second);
        let burst = NonZeroU32::new(s.rate.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        // `with_period` only fails for a zero period, which `max(0.001)` above rules out;
        // fall back to one per second rather than panic.
        let quota = Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN)).allow_burst(burst);
        Running {
            limiter: RateLimiter::direct(quota),
            concurrency: s.concurrency.max(1),
            max_batch: w.service.deliverer.max_batch().max(1),
            in_flight: JoinSet::new(),
            busy: HashSet::new(),
            health: Health::default(),
            paused_until: None,
            halt: w.halt.clone(),
            next_due_ms: None,
        }
    }
}

/// How a turn of the worker's loop went.
enum Turn {
    /// Attempts were started: the next turn looks again at once.
    Started,
    /// Stopped (a shutdown while starting).
    Stopped,
    /// Nothing started: wait (see `Worker::idle_wait`).
    Idle { paused: bool, blocked: bool, free: usize },
}

/// Frees the order keys of a batch that was not started.
fn free_keys(busy: &mut HashSet<String>, batch: &[OutboxEntry]) {
    for e in batch {
        busy.remove(&order_key(&e.notification));
    }
}

/// What an attempt in flight reports back: its entries and what happened to each.
struct Attempted {
    batch: Vec<OutboxEntry>,
    outcomes: Vec<Outcome>,
    /// Started while the destination was down: its outcome says whether it is back.
    probe: bool,
}

/// The due entries to start now as at most `free` batches of at most `max_batch`:
/// never two batches of one [`order_key`] nor one whose key is `busy` (an attempt in
/// flight); the keys taken are marked busy. More of one key may join its batch (one
/// request keeps their order).
fn batches(due: Vec<OutboxEntry>, free: usize, max_batch: usize, busy: &mut HashSet<String>) -> Vec<Vec<OutboxEntry>> {
    let mut batches: Vec<Vec<OutboxEntry>> = Vec::new();
    let mut batch = Vec::new();
    // Keys of the batch being filled: more of the same key may join it, never another.
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
    batches
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
    /// and writes run on the blocking pool, not on the runtime's workers. Each turn:
    /// stop if asked, else settle what finished, else start what is due, else wait.
    pub(super) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let mut r = Running::new(&this);
        loop {
            if this.stop_if_asked(&mut r, &shutdown).await {
                return;
            }
            if this.settle_finished(&mut r).await {
                continue;
            }
            match this.start_due(&mut r, &mut shutdown).await {
                Turn::Started => continue,
                Turn::Stopped => return,
                Turn::Idle { paused, blocked, free } => this.wait_idle(&mut r, &mut shutdown, paused, blocked, free).await,
            }
        }
    }

    /// Stops on a shutdown (attempts in flight finish and are recorded, the caller's
    /// grace bounds how long: a stop must not turn a delivery into a repeat) or once
    /// this replica no longer leads (within the halt's grace). Whether it stopped.
    async fn stop_if_asked(&self, r: &mut Running, shutdown: &watch::Receiver<bool>) -> bool {
        if *shutdown.borrow() {
            self.drain(&mut r.in_flight, &mut r.busy, &mut r.health).await;
            return true;
        }
        let Some(grace) = r.halt.as_ref().filter(|h| h.halted()).map(|h| h.grace) else { return false };
        tracing::info!(service = %self.service.name, "no longer leading: stopping");
        if tokio::time::timeout(grace, self.drain(&mut r.in_flight, &mut r.busy, &mut r.health)).await.is_err() {
            r.in_flight.abort_all();
        }
        true
    }

    /// Settles everything that finished, in one transaction. Whether anything had.
    async fn settle_finished(&self, r: &mut Running) -> bool {
        let mut done = Vec::new();
        while let Some(res) = r.in_flight.try_join_next() {
            if let Ok(a) = res {
                done.push(a);
            }
        }
        if done.is_empty() {
            return false;
        }
        if let Some(after) = self.settle(done, &mut r.busy, &mut r.health).await {
            r.paused_until = Some(tokio::time::Instant::now() + after);
        }
        true
    }

    /// Starts what is due in the free slots (while the destination is down: one probe
    /// at a time, when its wait is over), each batch after a rate-limit slot.
    async fn start_due(self: &Arc<Self>, r: &mut Running, shutdown: &mut watch::Receiver<bool>) -> Turn {
        let paused = r.paused_until.is_some_and(|t| t > tokio::time::Instant::now());
        let probing = r.health.is_down();
        let free = match probing {
            false => r.concurrency.saturating_sub(r.in_flight.len()),
            true if r.in_flight.is_empty() && r.health.may_probe(tokio::time::Instant::now()) => 1,
            true => 0,
        };
        let mut started = 0;
        // Due entries were found, but every one waits for an attempt in flight of its
        // key: only a completion can change that.
        let mut blocked = false;
        if free > 0 && !paused {
            // Enough candidates to fill the free slots past entries whose key is busy.
            let limit = free * r.max_batch * 2 + r.busy.len();
            let due = self.due(limit).await;
            r.next_due_ms = due.next_due_ms;
            blocked = !due.entries.is_empty();
            for batch in batches(due.entries, free, r.max_batch, &mut r.busy) {
                tokio::select! {
                    // A lost Lease wins over a rate-limit slot that is ready too.
                    biased;
                    _ = halt_signal(&mut r.halt) => {
                        free_keys(&mut r.busy, &batch);
                        break;
                    }
                    _ = r.limiter.until_ready() => {}
                    _ = shutdown.changed() => {
                        free_keys(&mut r.busy, &batch);
                        self.drain(&mut r.in_flight, &mut r.busy, &mut r.health).await;
                        return Turn::Stopped;
                    }
                }
                let w = self.clone();
                r.in_flight.spawn(async move {
                    let outcomes = w.attempt(&batch).await;
                    Attempted { batch, outcomes, probe: probing }
                });
                started += 1;
            }
        }
        match started {
            0 => Turn::Idle { paused, blocked, free },
            _ => Turn::Started,
        }
    }

    /// Nothing to start: waits for a completion (and settles it), new work, the next
    /// due entry, the end of a pause, a shutdown or a lost Lease.
    async fn wait_idle(&self, r: &mut Running, shutdown: &mut watch::Receiver<bool>, paused: bool, blocked: bool, free: usize) {
        // Down: nothing but the probe goes, so nothing else is looked at; while it is
        // in flight only its completion (in the select) matters.
        let down = r.health.down.as_ref().map(|d| r.in_flight.is_empty().then_some(d.probe_at));
        let wait = self.idle_wait(r.paused_until.filter(|_| paused), down, blocked, free, r.next_due_ms);
        tokio::select! {
            Some(res) = r.in_flight.join_next(), if !r.in_flight.is_empty() => {
                if let Ok(a) = res {
                    let mut done = vec![a];
                    while let Some(Ok(more)) = r.in_flight.try_join_next() {
                        done.push(more);
                    }
                    if let Some(after) = self.settle(done, &mut r.busy, &mut r.health).await {
                        r.paused_until = Some(tokio::time::Instant::now() + after);
                    }
                }
            }
            _ = self.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
            _ = halt_signal(&mut r.halt) => {}
        }
    }

    /// Up to `limit` due entries of this service, and when its next is due (read on the
    /// blocking pool in one transaction; a failed read is logged and reads as none).
    async fn due(&self, limit: usize) -> Due {
        let (outbox, name, now) = (self.outbox.clone(), self.service.name.clone(), self.clock.now_ms());
        match tokio::task::spawn_blocking(move || outbox.due_and_next(&name, now, limit)).await {
            Ok(Ok(due)) => due,
            Ok(Err(e)) => {
                tracing::error!(service = %self.service.name, error = %e, "reading the outbox failed");
                Due::default()
            }
            Err(_) => Due::default(),
        }
    }

    /// How long to wait when nothing can start: until a pause ends; while the
    /// destination is down (`down`: when the probe may go, `None` while it is in
    /// flight), until the probe may go, else a second; when due entries wait for their
    /// keys (`blocked`), a second (the next due time is already past: that would poll in
    /// a loop); else until the next due entry (`next_due_ms`, from this turn's read),
    /// at most a second. A completion or new work ends the wait sooner.
    fn idle_wait(
        &self,
        paused_until: Option<tokio::time::Instant>,
        down: Option<Option<tokio::time::Instant>>,
        blocked: bool,
        free: usize,
        next_due_ms: Option<u64>,
    ) -> Duration {
        let now = tokio::time::Instant::now();
        if let Some(t) = paused_until {
            return t.saturating_duration_since(now);
        }
        match down {
            Some(Some(probe_at)) => return probe_at.saturating_duration_since(now).max(Duration::from_millis(1)),
            Some(None) => return Duration::from_secs(1),
            None if blocked => return Duration::from_secs(1),
            None => {}
        }
        match next_due_ms {
            Some(at) if free > 0 => Duration::from_millis(at.saturating_sub(self.clock.now_ms())).min(Duration::from_secs(1)),
            _ => Duration::from_secs(1),
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

    /// One attempt at a batch under the per-attempt timeout: one outcome per entry.
    async fn attempt(&self, batch: &[OutboxEntry]) -> Vec<Outcome> {
        let s = &self.service.settings;
        let notifications: Vec<Notification> = batch.iter().map(|e| e.notification.clone()).collect();
        self.stats.attempts.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let mut outcomes = match tokio::time::timeout(s.timeout, self.service.deliverer.deliver_each(&notifications)).await {
            Ok(o) => o,
            Err(_) => vec![Outcome::retry(format!("timed out after {:?}", s.timeout)); batch.len()],
        };
        // A client that answered for fewer entries than it was given: the rest are
        // retried, never taken as delivered.
        outcomes.resize(batch.len(), Outcome::retry("the destination client gave no outcome for this notification"));
        METRICS.delivery_latency.observe(started.elapsed());
        outcomes
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
            // The longest `Retry-After` any of the attempt's answers gave.
            let after = a
                .outcomes
                .iter()
                .filter_map(|o| match o {
                    Outcome::Retry { after, .. } => *after,
                    _ => None,
                })
                .max();
            if let Some(d) = after {
                retry_after = Some(retry_after.map_or(d, |r| r.max(d)));
            }
            let mut ended = Vec::with_capacity(a.batch.len());
            for (e, outcome) in a.batch.iter().zip(&a.outcomes) {
                let n = &e.notification;
                let how = match verdict(outcome, e.attempts, e.enqueued_ms, s, now) {
                    Verdict::Delivered => {
                        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                        METRICS.sent.inc(kind);
                        if let Some(ms) = n.received_ms.and_then(|r| now.checked_sub(r)) {
                            METRICS.notification_latency.observe(kind, ms as f64 / 1000.0);
                        }
                        tracing::info!(service = %self.service.name, app = %n.app, trigger = %n.trigger, destination = %n.destination, "delivered");
                        Settle::Delivered
                    }
                    Verdict::Retry { attempt, wait, next_ms } => {
                        self.stats.retried.fetch_add(1, Ordering::Relaxed);
                        METRICS.failed.inc(&format!("{kind}:retry"));
                        let reason = self.service.redactor.redact(outcome.reason());
                        tracing::info!(service = %self.service.name, app = %n.app, attempt, ?wait, %reason, "will retry");
                        Settle::Retry { next_ms, error: reason }
                    }
                    Verdict::GaveUp { attempts } => {
                        self.stats.dead.fetch_add(1, Ordering::Relaxed);
                        METRICS.failed.inc(&format!("{kind}:exhausted"));
                        let error = format!("gave up after {attempts} attempt(s): {}", self.service.redactor.redact(outcome.reason()));
                        tracing::warn!(service = %self.service.name, app = %n.app, trigger = %n.trigger, %error, "dead-lettered");
                        Settle::Dead { error, permanent: false }
                    }
                    Verdict::Refused => {
                        self.stats.dead.fetch_add(1, Ordering::Relaxed);
                        METRICS.failed.inc(&format!("{kind}:permanent"));
                        let error = self.service.redactor.redact(outcome.reason());
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
        // What failed while the destination was down goes out now that it answers: released
        // in the settle's transaction.
        let mut release = Vec::new();
        for (probe, ended, after) in &ended_by_attempt {
            release.extend(health.observe(*probe, ended, *after, s));
        }
        let released = self.write_settle(Arc::new(outcomes), now, Arc::new(release.clone())).await;
        self.settled.notify_waiters();
        // Only now: until the outcome is written, the entries are still due in the store.
        for a in &done {
            for e in &a.batch {
                busy.remove(&order_key(&e.notification));
            }
        }
        if !release.is_empty() {
            tracing::info!(service = %self.service.name, released, "destination answers again: its queue goes out now")
        } else if health.is_down() && !std::mem::replace(&mut health.logged, true) {
            tracing::warn!(service = %self.service.name, "destination not answering: one probe at a time until it does");
        }
        if !health.is_down() {
            health.logged = false;
        }
        retry_after
    }

    /// Writes a settle (with the release of `release`, whose count it returns), and
    /// tries again until it is written: until then the entries
    /// are still due in the store, and freeing their order keys would send them again
    /// at once. A store that keeps failing holds this service's worker here (nothing
    /// it could deliver would be recorded either) and says so
    /// (`Delivery::store_failing`), so that its owner reopens the store (redb refuses
    /// every write after an I/O error until then), which stops this worker.
    pub(super) async fn write_settle(&self, outcomes: Arc<Vec<(OutboxEntry, Settle)>>, now: u64, release: Arc<Vec<(u64, u64)>>) -> usize {
        let mut wait = Duration::from_millis(200);
        loop {
            let (outbox, o, name, rel) = (self.outbox.clone(), outcomes.clone(), self.service.name.clone(), release.clone());
            match tokio::task::spawn_blocking(move || outbox.settle_releasing(&o, now, &name, &rel)).await {
                Ok(Ok(released)) => {
                    self.store_failing.store(false, Ordering::Relaxed);
                    return released;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deliver::ecs::tests::sample;
    use crate::model::DestinationKind;

    fn entry(id: u64, app: &str) -> OutboxEntry {
        let mut n = sample(DestinationKind::Splunk, "siem");
        n.app = app.into();
        OutboxEntry { id, notification: n, attempts: 0, enqueued_ms: 0, next_attempt_ms: 0, last_error: None }
    }

    /// At most `free` batches of at most `max_batch`; a key with an attempt in flight
    /// waits; more of one key join its batch, never a second batch; what does not fit
    /// waits with its key free.
    #[test]
    fn due_entries_become_batches_that_keep_each_keys_order() {
        let due = || vec![entry(1, "a"), entry(2, "a"), entry(3, "b"), entry(4, "c"), entry(5, "d")];
        let mut busy: HashSet<String> = [order_key(&entry(0, "c").notification)].into();
        let got = batches(due(), 2, 2, &mut busy);
        let ids: Vec<Vec<u64>> = got.iter().map(|b| b.iter().map(|e| e.id).collect()).collect();
        assert_eq!(ids, [vec![1, 2], vec![3, 5]], "a's two in one batch, c busy (in flight), b and d in the second");
        for app in ["a", "b", "d"] {
            assert!(busy.contains(&order_key(&entry(0, app).notification)), "{app} started: its key is busy");
        }
        let mut one: HashSet<String> = HashSet::new();
        let got = batches(due(), 1, 2, &mut one);
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [2], "one slot: a's two");
        assert!(!one.contains(&order_key(&entry(0, "b").notification)), "b waits, its key free");
        let mut none: HashSet<String> = HashSet::new();
        assert_eq!(batches(due(), 10, 1, &mut none).len(), 4, "max_batch 1: one per key (a's second waits for its first)");
    }
}
