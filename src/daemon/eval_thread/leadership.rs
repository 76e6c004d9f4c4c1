//! Leading and standing by ([`Leadership`]): taking over sending (the state store
//! opened, its file lock held, the delivery workers started), stepping down, making
//! the passes durable, reopening the store after a failed write, and building the
//! services' clients.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{STORE_RETRY, StoreAt};
use crate::config::Runtime;
use crate::daemon::admin::SharedState;
use crate::deliver::queue::Halt;
use crate::deliver::{Delivery, ServiceRuntime};
use crate::metrics::METRICS;
use crate::state::Store;

/// Passes commit without waiting for the disk (redb's non-durable commits, seen at
/// once by the delivery workers); one durable commit per this interval makes them all
/// durable. One per burst cost an fsync per change at a low, steady rate (2 ms of the
/// evaluation thread per change at 100 changes/s). A pass lost in a crash before its
/// flush is decided again at the restart, and a delivery's own durable commit makes
/// the passes before it durable too.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// At most this many passes wait for a flush.
const MAX_UNFLUSHED: usize = 4096;

/// Every configured service's client (`pipeline::wiring::service_clients`), each with a
/// queue-depth series.
pub(super) fn build_services(rt: &Runtime, state: &Arc<Store>) -> Result<Vec<ServiceRuntime>, Vec<String>> {
    let services = crate::pipeline::wiring::service_clients(rt, state)?;
    for s in &services {
        // Every configured service has a queue-depth series, zero until something waits.
        METRICS.show_queue(&s.name);
    }
    Ok(services)
}

/// What keeps the configuration's services from being built, checked against a
/// throwaway store before anything is opened.
pub(in crate::daemon) fn services_problems(rt: &Runtime) -> Result<(), Vec<String>> {
    let probe = Store::in_memory().map_err(|e| vec![e.to_string()])?;
    build_services(rt, &Arc::new(probe)).map(drop)
}

/// This process, as a fencing holder without leader election: host and process id.
fn identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "driftwatch".into());
    format!("{host}/{}", std::process::id())
}

/// Why [`Leadership::take_over`] could not take over sending.
pub(in crate::daemon) enum LeadError {
    /// The state file is held (another driftwatch) or cannot be opened.
    Store(String),
    /// A delivery client could not be built (a CA file gone, ...).
    Services(Vec<String>),
}

/// How [`Leadership`] is set up: where the store is and what leader election says.
pub(in crate::daemon) struct LeadOptions {
    pub store_at: StoreAt,
    /// Whether to send from the start (no leader election).
    pub leading: bool,
    pub step_down_grace: Duration,
    pub shutdown_grace: Duration,
    /// With leader election: the lease's view of leadership, which stops the workers
    /// directly (not behind the inputs queued for the evaluation thread).
    pub halt: Option<Halt>,
    /// With leader election: how to give the Lease up when leading but unable to send,
    /// and the lease duration.
    pub stand_aside: Option<(crate::cluster::lease::StandAside, Duration)>,
}

/// Whether this evaluation thread sends, and what sending holds: the state store (open
/// only while leading) and the delivery workers; the passes waiting to be made
/// durable; the store's reopening after a failed write.
pub(super) struct Leadership {
    /// Open only while this process leads: the file lock of the store is what keeps a
    /// second process from writing to it.
    store: Option<Arc<Store>>,
    delivery: Option<Delivery>,
    store_at: StoreAt,
    /// The operations endpoints read the store while it is open.
    shared: SharedState,
    shard: u32,
    sharded: bool,
    /// Whether leader election (or its absence) says this replica should send.
    leading: bool,
    /// Whether this thread counts in `driftwatch_leader` (the gauge is the process's,
    /// the sum of its threads').
    counted: bool,
    /// State keys of passes written since the last [`Leadership::flush`], and when
    /// that was.
    unflushed: Vec<String>,
    last_flush: Instant,
    /// A state store write failed: the main loop reopens the store (at most once per
    /// [`STORE_RETRY`], `last_reopen`).
    reopen: bool,
    last_reopen: Option<Instant>,
    /// Without leader election, another daemon took the store over: the run ends.
    fenced: bool,
    step_down_grace: Duration,
    shutdown_grace: Duration,
    /// The runtime the delivery workers run on and the waits block on.
    handle: tokio::runtime::Handle,
    halt: Option<Halt>,
    stand_aside: Option<(crate::cluster::lease::StandAside, Duration)>,
    /// Since when this replica should send but cannot (its store will not open or its
    /// clients cannot be built).
    failing_since: Option<Instant>,
}

impl Leadership {
    pub fn new(o: LeadOptions, shared: SharedState, shard: u32, sharded: bool, handle: tokio::runtime::Handle) -> Leadership {
        Leadership {
            store: None,
            delivery: None,
            store_at: o.store_at,
            shared,
            shard,
            sharded,
            leading: o.leading,
            counted: false,
            unflushed: Vec::new(),
            last_flush: Instant::now(),
            reopen: false,
            last_reopen: None,
            fenced: false,
            step_down_grace: o.step_down_grace,
            shutdown_grace: o.shutdown_grace,
            handle,
            halt: o.halt,
            stand_aside: o.stand_aside,
            failing_since: None,
        }
    }

    /// Waits for `f` on the runtime (this thread is not one of its workers).
    fn wait<F: std::future::Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }

    /// The state store, open while this thread sends.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// The delivery workers, running while this thread sends.
    pub fn delivery(&self) -> Option<&Delivery> {
        self.delivery.as_ref()
    }

    /// Whether this thread sends now (its store open).
    pub fn sends(&self) -> bool {
        self.store.is_some()
    }

    /// Whether leader election (or its absence) says this thread should send.
    pub fn should_lead(&self) -> bool {
        self.leading
    }

    pub fn set_leading(&mut self, leading: bool) {
        self.leading = leading;
    }

    /// Without leader election, another daemon took the store over: the run ends.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// Takes over sending: opens the state store (the previous holder's file lock must
    /// be gone) and starts the workers (which deliver what the outbox holds first).
    /// Returns whether it took over now (false: it already sent). Fails if the store is
    /// still locked or a delivery client cannot be built; the caller retries.
    pub fn take_over(&mut self, rt: &Runtime) -> Result<bool, LeadError> {
        if self.store.is_some() {
            return Ok(false);
        }
        let mut store = match self.open() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the state store yet; retrying");
                // The previous leader may still be closing it (a handover): stand
                // aside only if it stays closed for a whole lease duration — at once
                // when the volume cannot lock it (that does not pass).
                // A store refused to this replica's Lease (another took it over with a
                // newer one) does not pass either.
                self.failed(matches!(e, crate::state::StateError::NoLocks { .. } | crate::state::StateError::Fenced(_)));
                return Err(LeadError::Store(e.to_string()));
            }
        };
        if let Some(n) = rt.state.max_keys_per_app {
            store = store.with_max_keys_per_app(n);
        }
        let state = Arc::new(store);
        // Passes commit without waiting for the disk; the main loop flushes them every
        // FLUSH_EVERY.
        state.defer_durability(true);
        match build_services(rt, &state) {
            Ok(services) => self.delivery = Some(Delivery::start_leading(services, state.clone(), self.halt.clone())),
            Err(e) => {
                // The store is closed again (dropped here): a standby may take it.
                for e in &e {
                    tracing::error!(error = %e, "building the delivery clients failed");
                }
                self.failed(true);
                return Err(LeadError::Services(e));
            }
        }
        self.shared.set_store(self.shard, Some(state.clone()));
        self.store = Some(state);
        self.failing_since = None;
        self.count(true);
        match self.sharded {
            true => tracing::info!(shard = self.shard, "leading the shard: sending notifications"),
            false => tracing::info!("leading: sending notifications"),
        }
        Ok(true)
    }

    /// Opens the state store where it is.
    fn open(&self) -> Result<Store, crate::state::StateError> {
        match &self.store_at {
            // With leader election another replica may open the same file: the file
            // system's locks must work (Store::open_fenced).
            StoreAt::File(path) if self.stand_aside.is_some() => Store::open_fenced(path),
            StoreAt::File(path) => Store::open(path),
            // In PostgreSQL the store is taken over with the Lease's generation: a
            // replica whose Lease is older cannot take it back, and once
            // this one took it, the one before it can write nothing more.
            StoreAt::Postgres(pg) => {
                let role = match &self.stand_aside {
                    Some((aside, _)) => {
                        crate::state::Role::Leader { holder: aside.identity().to_string(), lease: Some(aside.lease_generation()) }
                    }
                    None => crate::state::Role::Leader { holder: identity(), lease: None },
                };
                let opts = pg.clone();
                // Connecting and migrating block: off the runtime's workers.
                self.wait(async move { tokio::task::spawn_blocking(move || Store::open_postgres(&opts, &role)).await })
                    .unwrap_or_else(|e| Err(crate::state::StateError::Postgres(e.to_string())))
            }
        }
    }

    /// This replica should send but cannot. With leader election, it gives the Lease up
    /// (for two lease durations, so another replica can take it) rather than hold it
    /// while sending nothing: at once when the clients cannot be built, after a lease
    /// duration of failing when the store will not open.
    fn failed(&mut self, at_once: bool) {
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        let Some((aside, duration)) = &self.stand_aside else { return };
        if at_once || since.elapsed() >= *duration {
            tracing::error!(aside = ?(*duration * 2), "leading but unable to send: giving the lease up");
            aside.until(tokio::time::Instant::now() + *duration * 2);
            self.failing_since = None;
        }
    }

    /// Stops sending (the passes flushed first, by the caller): workers stop after
    /// their current attempt, the store is closed (releasing its file lock),
    /// undelivered notifications stay in its outbox.
    pub fn step_down(&mut self) {
        self.count(false);
        self.close();
        match self.sharded {
            true => tracing::info!(shard = self.shard, "the shard is another replica's: not sending"),
            false => tracing::info!("standing by: not sending"),
        }
    }

    /// Another replica took the store in PostgreSQL over and this one stepped down: it
    /// does not reopen the store (that would take it back). With leader election it
    /// stands aside for two lease durations (its Lease is gone or going); without, the
    /// daemon stops ([`Leadership::fenced`]), since a second daemon without election
    /// runs on the same state.
    pub fn fenced_out(&mut self) {
        match &self.stand_aside {
            Some((aside, duration)) => aside.until(tokio::time::Instant::now() + *duration * 2),
            None => self.fenced = true,
        }
    }

    /// Stops the workers (within the step-down grace) and closes the store, releasing
    /// its file lock; the operations endpoints stop reading it.
    pub fn close(&mut self) {
        if let Some(d) = self.delivery.take() {
            self.wait(d.shutdown(self.step_down_grace));
        }
        self.shared.set_store(self.shard, None);
        self.store = None;
    }

    /// The evaluation thread stops: the workers get the shutdown grace, and what waits
    /// in the outbox is logged. Returns whether the run ended fenced.
    pub fn stop(&mut self) -> bool {
        self.count(false);
        if let Some(delivery) = self.delivery.take() {
            self.wait(delivery.shutdown(self.shutdown_grace));
        }
        let pending: BTreeMap<String, u64> =
            self.store.as_ref().and_then(|s| s.outbox().queue_depths().ok()).unwrap_or_default().into_iter().collect();
        tracing::info!(?pending, "stopped");
        self.fenced
    }

    /// A reload built new clients: the workers are started again with them (while
    /// sending). Undelivered notifications stay in the outbox for the new workers.
    pub fn restart_delivery(&mut self, services: Vec<ServiceRuntime>) {
        if let Some(old) = self.delivery.take() {
            self.wait(old.shutdown(self.shutdown_grace));
        }
        if let Some(state) = &self.store {
            self.delivery = Some(Delivery::start_leading(services, state.clone(), self.halt.clone()));
        }
    }

    /// The pass of `key` wrote: it waits for the next flush.
    pub fn written(&mut self, key: String) {
        self.unflushed.push(key);
    }

    /// Whether the passes written should be made durable now.
    pub fn flush_due(&self) -> bool {
        !self.unflushed.is_empty() && (self.last_flush.elapsed() >= FLUSH_EVERY || self.unflushed.len() >= MAX_UNFLUSHED)
    }

    /// How long until the next flush, if a pass waits for one.
    pub fn flush_in(&self) -> Option<Duration> {
        (!self.unflushed.is_empty()).then(|| FLUSH_EVERY.saturating_sub(self.last_flush.elapsed()))
    }

    /// Makes the passes written since the last flush durable (one disk write for a
    /// burst of changes). Returns the state keys of the passes it could not make
    /// durable: they are to be evaluated again.
    pub fn flush(&mut self) -> Vec<String> {
        if self.unflushed.is_empty() {
            return Vec::new();
        }
        self.last_flush = Instant::now();
        let keys = std::mem::take(&mut self.unflushed);
        let Some(state) = self.store.clone() else { return Vec::new() };
        match state.flush() {
            Ok(()) => Vec::new(),
            Err(e) => {
                tracing::error!(error = %e, "making the evaluations durable failed (state store); will retry");
                keys
            }
        }
    }

    /// A write to the state store failed: it is reopened (redb refuses every write
    /// after an I/O error until it is opened again).
    pub fn write_failed(&mut self) {
        self.reopen = true;
    }

    /// Whether a write failed and the store is not reopened yet.
    pub fn write_failing(&self) -> bool {
        self.reopen
    }

    /// Whether the store is to be reopened now: a write failed (a pass's, or a settle
    /// of the workers: no pass may be failing in a quiet cluster), at most once per
    /// [`STORE_RETRY`].
    pub fn reopen_due(&mut self) -> bool {
        if self.delivery.as_ref().is_some_and(Delivery::store_failing) {
            self.reopen = true;
        }
        self.reopen && self.store.is_some() && self.last_reopen.is_none_or(|t| t.elapsed() >= STORE_RETRY)
    }

    /// The store is about to be reopened. Returns whether it was taken over by
    /// another replica (fenced) instead: then it must not be reopened.
    pub fn begin_reopen(&mut self) -> bool {
        self.reopen = false;
        if self.store.as_ref().is_some_and(|s| s.fenced()) {
            return true;
        }
        self.last_reopen = Some(Instant::now());
        false
    }

    /// This thread's part of `driftwatch_leader`: one while it leads.
    fn count(&mut self, on: bool) {
        if on != self.counted {
            match on {
                true => METRICS.leader.inc(),
                false => METRICS.leader.dec(),
            };
            self.counted = on;
        }
    }
}
