//! The evaluation thread of the live daemon: holds the Applications and AppProjects
//! the watch reported, evaluates an Application when it changes (or a wake-up, a
//! reload, an attribution read or its AppProject says so), writes each pass in one
//! transaction and flushes every 100 ms, leads or stands by as leader election
//! says, and reloads the configuration. Blocking by design: it runs on its own
//! thread ([`EvalThread::run`]), never on a tokio worker, and waits on the runtime
//! only through [`EvalThread::wait`].
//!
//! [`EvalThread`] is thin: it routes each [`Input`] to the three things it owns, each
//! in its own file: the Applications kept ([`apps::AppCache`]), what evaluates a pass
//! ([`evaluator::Evaluator`]) and whether this thread sends, with the store and the
//! delivery workers ([`leadership::Leadership`]). The watch's changes are handled in
//! `changes.rs`, reloads in `reload.rs`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

mod apps;
mod changes;
mod evaluator;
mod inbox;
mod leadership;
mod reload;

use self::apps::AppCache;
use self::changes::Lists;
use self::evaluator::Evaluator;
pub(super) use self::inbox::{INBOX_POLL, InboxReader};
use self::leadership::Leadership;
pub(super) use self::leadership::{LeadError, LeadOptions, services_problems};
use self::reload::ConfigFiles;
use super::admin::SharedState;
use crate::cluster::live::LiveFetcher;
use crate::cluster::watch::{Change, Stream};
use crate::config::Runtime;
use crate::drift::audit::Recorded;
use crate::metrics::METRICS;
use crate::trigger::TriggerEngine;

/// What the supervisor forwards to the evaluation thread.
pub(super) enum Input {
    /// A watch change, and when the daemon took it from the watch (wall-clock
    /// milliseconds: the start of `driftwatch_notification_latency_seconds`).
    Change(Change, u64),
    /// With sharding: the Application (by state key) belongs to another shard now.
    Moved(String),
    /// A live object read for attribution.
    Fetched(Box<crate::cluster::live::Fetched>),
    /// Relevant events from the audit input, and when their request arrived.
    Audit(crate::audit::Relevant, Instant),
    /// SIGHUP: reload the configuration.
    Reload,
    /// Time to re-evaluate every Application if a condition reads the clock.
    Resync,
    /// Leader election says whether this replica should send.
    Leading(bool),
    /// Retry taking over sending if it failed.
    RetryLead,
    /// Look at the configuration files: reload if they changed.
    PollConfig,
    /// A batch may be waiting in the audit inbox: the shard's leader reads it.
    Inbox,
    /// Finish what has arrived, stop the workers and return.
    Stop,
}

/// Where the state store is.
#[derive(Debug, Clone)]
pub(in crate::daemon) enum StoreAt {
    File(PathBuf),
    Postgres(crate::state::PgOptions),
}

/// What [`EvalThread::new`] starts from.
pub(super) struct EvalThreadOptions {
    pub runtime: Arc<Runtime>,
    pub engine: Arc<TriggerEngine>,
    pub config: Option<PathBuf>,
    pub shared: SharedState,
    pub live: Option<LiveFetcher>,
    /// The audit input's shared index (none without `audit:`).
    pub audit: Option<Arc<crate::audit::Shared>>,
    /// With the state in PostgreSQL and the audit listener: the inbox this unit reads
    /// its shard's audit events from.
    pub inbox: Option<InboxReader>,
    pub streams: BTreeSet<Stream>,
    /// The shard this evaluation thread holds when it leads (0 without sharding).
    pub shard: u32,
    /// Sharded: the supervisor forwards only the Applications of held shards, and a
    /// thread that stops leading forgets its Applications (a replica keeps only what it
    /// owns).
    pub sharded: bool,
    /// Where the store is and what leader election says.
    pub lead: LeadOptions,
    /// The runtime the delivery workers, live reads and waits run on.
    pub handle: tokio::runtime::Handle,
}

/// One evaluation thread ([`EvalThread::run`]): routes what the supervisor forwards
/// to the Applications kept, the evaluator and leadership.
pub(super) struct EvalThread {
    /// The latest Application per state key, packed between evaluations.
    apps: AppCache,
    /// What evaluates a pass, and what it reads besides the Application.
    eval: Evaluator,
    /// Whether this thread sends: the state store and the delivery workers.
    lead: Leadership,
    /// The watch's lists in progress, and which first lists are done.
    lists: Lists,
    /// Where a reload reads the configuration from.
    config: ConfigFiles,
    /// The operations endpoints' view of the running configuration.
    shared: SharedState,
    shard: u32,
    sharded: bool,
    /// The runtime the delivery workers, live reads and waits run on.
    handle: tokio::runtime::Handle,
    /// The audit inbox, read while this unit leads (with the state in PostgreSQL).
    inbox: Option<InboxReader>,
}

/// At most this many inputs that have already arrived are handled before the loop
/// looks at the flush, the store and the wake-ups again.
const MAX_BURST: usize = 256;

/// How soon a pass whose state writes failed is tried again.
const STORE_RETRY: Duration = Duration::from_secs(2);

/// How soon a pass some of whose notifications a full outbox refused is decided again.
const OUTBOX_FULL_RETRY: Duration = Duration::from_secs(15);

impl EvalThread {
    pub(super) fn new(o: EvalThreadOptions) -> EvalThread {
        EvalThread {
            apps: AppCache::default(),
            config: ConfigFiles::new(o.engine, o.config, &o.runtime),
            eval: Evaluator::new(o.runtime, o.live, o.audit),
            lead: Leadership::new(o.lead, o.shared.clone(), o.shard, o.sharded, o.handle.clone()),
            lists: Lists::new(o.streams),
            shared: o.shared,
            shard: o.shard,
            sharded: o.sharded,
            handle: o.handle,
            inbox: o.inbox,
        }
    }

    /// Waits for `f` on the runtime (this thread is not one of its workers).
    fn wait<F: std::future::Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }

    /// The evaluation thread: takes over sending if it should (the result goes to
    /// `started`), then handles inputs until [`Input::Stop`] or the supervisor is gone.
    /// Inputs that have already arrived are handled in bursts; what they wrote is made
    /// durable by one flush per 100 ms ([`Leadership::flush_due`]).
    /// Returns whether it ended because another daemon took the store over (fenced).
    pub(super) fn run(mut self, mut rx: mpsc::Receiver<Input>, started: oneshot::Sender<Result<(), LeadError>>) -> bool {
        // Delivery workers and live reads are spawned from here onto the runtime.
        let handle = self.handle.clone();
        let _entered = handle.enter();
        let first = match self.lead.should_lead() {
            true => self.lead(),
            false => Ok(()),
        };
        let failed = first.is_err();
        self.eval.audit_leading(self.lead.sends());
        let _ = started.send(first);
        if failed {
            return false;
        }
        'run: loop {
            if !self.upkeep() {
                break 'run;
            }
            let wait = match (self.eval.next_wake(), self.lead.flush_in()) {
                (Some(w), Some(f)) => Some(w.min(f)),
                (w, f) => w.or(f),
            };
            let next = match wait {
                Some(wait) => self.wait(async { tokio::time::timeout(wait, rx.recv()).await.ok() }),
                None => Some(self.wait(rx.recv())),
            };
            match next {
                // A wake-up or the flush came first.
                None => self.wake_due(),
                Some(None) | Some(Some(Input::Stop)) => break,
                Some(Some(input)) => {
                    self.input(input);
                    for _ in 0..MAX_BURST {
                        match rx.try_recv() {
                            Ok(Input::Stop) => break 'run,
                            Ok(input) => self.input(input),
                            Err(_) => break,
                        }
                    }
                }
            }
        }
        self.flush();
        METRICS.ready.set(0);
        self.lead.stop()
    }

    /// Between bursts: the flush if it is due, the store reopened if a write failed.
    /// Returns false when the run must end (another daemon took the store over).
    fn upkeep(&mut self) -> bool {
        // What was evaluated becomes durable in one write per 100 ms.
        if self.lead.flush_due() {
            self.flush();
        }
        if self.lead.reopen_due() {
            self.reopen();
        }
        !self.lead.fenced()
    }

    fn input(&mut self, input: Input) {
        self.input_one(input);
        self.eval.audit_leading(self.lead.sends());
        self.apps.count();
    }

    fn input_one(&mut self, input: Input) {
        match input {
            Input::Change(c, received_ms) => {
                self.eval.received(Some(received_ms));
                self.handle(c);
                self.eval.received(None);
            }
            Input::Moved(key) => self.moved_away(&key),
            Input::Fetched(f) => {
                let waiting = self.eval.live_read(*f);
                self.reevaluate(waiting);
            }
            Input::Audit(batch, arrived) => {
                self.eval.received(crate::clock::wall_ms().checked_sub(u64::try_from(arrived.elapsed().as_millis()).unwrap_or(u64::MAX)));
                self.audited(batch, arrived);
                self.eval.received(None);
            }
            Input::Reload => self.reload(),
            Input::Resync => {
                if self.eval.resync() {
                    self.reevaluate_all();
                }
            }
            Input::Leading(true) => {
                if !self.lead.sends() {
                    // Its election gave it the shard: with sharding, its Applications are
                    // listed again before it reads the audit inbox.
                    self.inbox_owned();
                }
                self.lead.set_leading(true);
                let _ = self.lead();
            }
            Input::Leading(false) => {
                self.lead.set_leading(false);
                if self.lead.sends() {
                    self.step_down();
                }
                if self.sharded {
                    self.forget_all();
                }
            }
            Input::RetryLead => {
                if !self.lead.sends() && self.lead.should_lead() {
                    let _ = self.lead();
                }
            }
            Input::PollConfig => {
                if self.config.changed(self.eval.runtime()) {
                    if self.shard == 0 {
                        tracing::info!("configuration files changed: reloading");
                    }
                    self.reload();
                }
            }
            Input::Inbox => self.read_inbox(),
            Input::Stop => {}
        }
    }

    /// Relevant events from the audit input: recorded in the window of their
    /// Application and evaluated at once, one pass per new attempt (so each is the
    /// newest an `on-drift-attempt` pass sees); the same actor again on the same
    /// resource within the window only counts.
    fn audited(&mut self, batch: crate::audit::Relevant, arrived: Instant) {
        let new = batch.len();
        // A write of the break-glass annotation: kept (it verifies the exception it
        // opened or approved) and the Application judged again at once.
        for w in batch.break_glass {
            let key = w.app_key.clone();
            match self.eval.record_break_glass(w) {
                true => self.reevaluate([key]),
                false => METRICS.audit_dropped.inc("too-many-apps"),
            }
        }
        for a in batch.attempts {
            let key = a.app_key.clone();
            match self.eval.record_attempt(a) {
                Recorded::Full => METRICS.audit_dropped.inc("too-many-apps"),
                Recorded::OverBudget => METRICS.audit_dropped.inc("actor-over-budget"),
                Recorded::WindowFull => METRICS.audit_dropped.inc("window-full"),
                Recorded::Coalesced => {}
                Recorded::New => self.reevaluate([key]),
            }
        }
        if new > 0 {
            // From the request's arrival to its relevant events evaluated (their
            // notifications in the outbox).
            METRICS.audit_evaluated_latency.observe(arrived.elapsed());
        }
    }

    /// Takes over sending and evaluates every kept Application; the caller retries
    /// when it fails.
    fn lead(&mut self) -> Result<(), LeadError> {
        if self.lead.take_over(self.eval.runtime())? {
            self.inbox_taken_over();
            self.eval.forget_fingerprints();
            self.reevaluate_all();
        }
        Ok(())
    }

    /// Stops sending; what was written is made durable first.
    fn step_down(&mut self) {
        self.flush();
        self.lead.step_down();
        self.eval.forget_fingerprints();
    }

    /// Closes and reopens the state store after a failed write (workers stopped and
    /// started again, the outbox delivered from where it was). Until it opens again
    /// (the disk still full), `lead` is retried. A store another replica took over in
    /// PostgreSQL is not reopened: this one steps down ([`Leadership::fenced_out`]).
    fn reopen(&mut self) {
        if self.lead.begin_reopen() {
            tracing::error!("another replica took the state store over (PostgreSQL fencing epoch): this one stops sending");
            self.step_down();
            self.lead.fenced_out();
            return;
        }
        self.flush();
        tracing::warn!("reopening the state store after a failed write");
        self.lead.close();
        let _ = self.lead();
    }

    /// Makes the passes written since the last flush durable; if that fails, they are
    /// evaluated again (and it returns false).
    fn flush(&mut self) -> bool {
        let lost = self.lead.flush();
        if lost.is_empty() {
            return true;
        }
        let now = chrono::Utc::now();
        for k in lost {
            self.eval.store_failed(&k, now);
        }
        self.lead.write_failed();
        false
    }

    /// Evaluates the Applications whose wake-up time has come.
    fn wake_due(&mut self) {
        let due = self.eval.due();
        self.reevaluate(due);
    }

    fn reevaluate_all(&mut self) {
        let keys = self.apps.keys();
        self.reevaluate(keys);
    }

    /// Evaluates the kept Applications of `keys` although they did not change, parsing
    /// one at a time: parsed Applications never pile up (10,000 members of one
    /// AppProject would).
    fn reevaluate(&mut self, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            if let Some((app, deleted)) = self.apps.for_pass(&k)
                && self.eval.evaluate(&mut self.lead, &app, true, deleted)
                && deleted
            {
                self.apps.retired(&k);
            }
        }
    }
}
