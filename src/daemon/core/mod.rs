//! The evaluation thread of the live daemon: holds the Applications and AppProjects
//! the watch reported, evaluates an Application when it changes (or a wake-up, a
//! reload, an attribution read or its AppProject says so), writes each pass in one
//! transaction and flushes every 100 ms, leads or stands by as leader election
//! says, and reloads the configuration. Blocking by design: it runs on its own thread
//! ([`Core::run`]), never on a tokio worker, and waits on the runtime only through
//! [`Core::wait`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use chrono::Utc;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

mod attribution;
mod audit;
mod changes;
mod leadership;
mod reload;

use self::leadership::build_services;
pub(super) use self::leadership::{LeadError, services_problems};
use self::reload::time_dependent;
use super::admin::SharedState;
use super::fingerprint::{config_fingerprint, fingerprint};
use super::wakeups::Wakeups;
use crate::cluster::live::{LiveFetcher, ReadError};
use crate::cluster::watch::{Change, Kind, Stream};
use crate::config::{self, Runtime};
use crate::deliver::{Delivery, ServiceRuntime};
use crate::drift::attribution::Attribution;
use crate::metrics::METRICS;
use crate::model::App;
use crate::pipeline::Pipeline;
use crate::state::Store;
use crate::trigger::TriggerEngine;

/// An Application between evaluations: its JSON text, compressed (LZ4), and what the
/// loops over all Applications filter on. A `serde_json::Value` tree takes several
/// times the object's JSON and the JSON was most of what the daemon held (3.5 KB of the
/// 5.9 KB per Application, heap profile at 3,000); compressed it is a fifth of that or
/// less: an Application's keys repeat in every entry of `status.resources`. It is
/// decompressed and parsed again only when the Application is evaluated without a
/// change of its own (a wake-up, a reload, an attribution read, a change of its
/// AppProject), so a change pays for one compression and nothing more. LZ4 rather than
/// deflate: deflate's fastest level was a tenth of a first pass's CPU (its tables
/// cleared for every Application), LZ4 under 2%, for somewhat more kept
/// (BENCHMARKS.md, "A first pass's cost").
struct Kept {
    compressed: Box<[u8]>,
    /// The JSON's length (what decompression makes room for).
    len: u32,
    namespace: String,
    project: String,
}

impl Kept {
    fn of(app: &App) -> Kept {
        let json = serde_json::to_vec(&app.object).unwrap_or_default();
        // An object is at most a few MB (etcd's limit): its length fits.
        let (compressed, len) = match u32::try_from(json.len()) {
            Ok(len) => (lz4_flex::compress(&json).into_boxed_slice(), len),
            Err(_) => (Box::default(), 0),
        };
        Kept { compressed, len, namespace: app.namespace.clone(), project: app.project.clone() }
    }

    /// The Application again. It was one when kept, so this does not fail in practice;
    /// if it did, the Application is skipped until its next change.
    fn app(&self) -> Option<App> {
        let json = lz4_flex::decompress(&self.compressed, usize::try_from(self.len).ok()?).ok()?;
        let v: Value = serde_json::from_slice(&json).ok()?;
        App::from_value(v).ok()
    }
}

/// What the shell forwards to the evaluation thread.
pub(super) enum Input {
    Change(Change),
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
    /// Finish what has arrived, stop the workers and return.
    Stop,
}

/// Where the state store is.
#[derive(Debug, Clone)]
pub(in crate::daemon) enum StoreAt {
    File(PathBuf),
    Postgres(crate::state::PgOptions),
}

/// What [`Core::new`] starts from.
pub(super) struct CoreOptions {
    pub runtime: Arc<Runtime>,
    pub engine: Arc<TriggerEngine>,
    pub config: Option<PathBuf>,
    pub store_at: StoreAt,
    pub shared: SharedState,
    pub live: Option<LiveFetcher>,
    /// The audit input's shared index (none without `audit:`).
    pub audit: Option<Arc<crate::audit::Shared>>,
    pub streams: BTreeSet<Stream>,
    /// The shard this evaluation thread holds when it leads (0 without sharding).
    pub shard: u32,
    /// Sharded: the shell forwards only the Applications of held shards, and a thread
    /// that stops leading forgets its Applications (a replica keeps only what it owns).
    pub sharded: bool,
    /// Whether to send from the start (no leader election).
    pub leading: bool,
    pub step_down_grace: Duration,
    pub shutdown_grace: Duration,
    /// The runtime the delivery workers, live reads and waits run on.
    pub handle: tokio::runtime::Handle,
    /// With leader election: the lease's view of leadership, which stops the workers
    /// directly (not behind the inputs queued for this thread).
    pub halt: Option<crate::deliver::queue::Halt>,
    /// With leader election: how to give the Lease up when leading but unable to send,
    /// and the lease duration.
    pub stand_aside: Option<(crate::cluster::lease::StandAside, Duration)>,
}

/// Everything that evaluates Applications and writes the state store; runs on the
/// evaluation thread ([`Core::run`]).
pub(super) struct Core {
    pipeline: Pipeline,
    /// What evaluations read besides the Application: AppProjects and live objects.
    inputs: crate::pipeline::Inputs,
    /// Open only while this process leads: the file lock of the store is what keeps a
    /// second process from writing to it.
    state: Option<Arc<Store>>,
    shared: SharedState,
    store_at: StoreAt,
    delivery: Option<Delivery>,
    /// Latest Application per state key (for re-evaluation and missed deletes), kept
    /// compact between evaluations.
    apps: HashMap<String, Kept>,
    /// Deleted Applications whose last pass could not be written yet (the store
    /// failed): evaluated again, as deleted, until it is.
    retiring: HashMap<String, Kept>,
    /// Fingerprint of what was last evaluated, per state key.
    evaluated: HashMap<String, u64>,
    /// Per state key with malformed subscription annotations, a hash of what was last
    /// logged (logged again only when it changes).
    annotation_logged: HashMap<String, u64>,
    /// Per watch stream with a (re)list in progress, the objects seen so far (state
    /// keys of Applications, names of AppProjects). Per stream, because each namespace
    /// relists on its own: a `410 Gone` in one says nothing about another.
    listing: HashMap<Stream, BTreeSet<String>>,
    /// Streams whose first list is done; ready once all of `streams` are.
    lists_done: BTreeSet<Stream>,
    streams: BTreeSet<Stream>,
    shard: u32,
    sharded: bool,
    /// Whether this thread counts in `driftwatch_leader`, and how many Applications it
    /// counts in `driftwatch_applications` (the gauges are the process's, the sum of
    /// its threads').
    counted_leading: bool,
    counted_apps: usize,
    /// Reads live objects for attribution (none when `attribution.enabled: false`).
    live: Option<LiveFetcher>,
    /// The audit input: which objects Applications manage is kept in it.
    audit: Option<Arc<crate::audit::Shared>>,
    /// When an Application must be evaluated again although nothing changed (a
    /// hold-down elapsing, a repeat falling due), by state key.
    wakeups: Wakeups,
    /// Resources (`deployments.apps`) whose refused reads were logged, so each is
    /// logged once.
    forbidden_logged: BTreeSet<String>,
    /// Per state key, the resources its `status.resources` lists outside its AppProject
    /// (never read; each counted and logged once while listed).
    outside_project: HashMap<String, BTreeSet<String>>,
    /// Clusters whose last read failed (logged once when they fail, once when they
    /// answer again), by label.
    clusters_down: BTreeSet<String>,
    /// State keys of passes written since the last [`Core::flush`], and when that was.
    unflushed: Vec<String>,
    last_flush: Instant,
    /// A state store write failed: the main loop reopens the store (at most once per
    /// [`STORE_RETRY`], `last_reopen`).
    reopen_store: bool,
    /// Without leader election, another daemon took the store over: the run ends.
    fenced: bool,
    last_reopen: Option<Instant>,
    /// Whether leader election (or its absence) says this replica should send.
    leading: bool,
    engine: Arc<TriggerEngine>,
    config: Option<PathBuf>,
    /// The fingerprint of the files the running configuration was read from, as they
    /// were at the last (attempted) load.
    last_config: Vec<(PathBuf, Option<SystemTime>, u64)>,
    step_down_grace: Duration,
    shutdown_grace: Duration,
    /// The runtime the delivery workers, live reads and waits run on.
    handle: tokio::runtime::Handle,
    halt: Option<crate::deliver::queue::Halt>,
    stand_aside: Option<(crate::cluster::lease::StandAside, Duration)>,
    /// Since when this replica should send but cannot (its store will not open or its
    /// clients cannot be built).
    lead_failing_since: Option<Instant>,
}

/// At most this many inputs that have already arrived are handled before the loop
/// looks at the flush, the store and the wake-ups again.
const MAX_BURST: usize = 256;

/// How soon a pass whose state writes failed is tried again.
const STORE_RETRY: Duration = Duration::from_secs(2);

/// How soon a pass some of whose notifications a full outbox refused is decided again.
const OUTBOX_FULL_RETRY: Duration = Duration::from_secs(15);

/// At most this many refused resources are remembered for logging once.
const MAX_FORBIDDEN_LOGGED: usize = 256;

/// Passes commit without waiting for the disk (redb's non-durable commits, seen at
/// once by the delivery workers); one durable commit per this interval makes them all
/// durable. One per burst cost an fsync per change at a low, steady rate (2 ms of the
/// evaluation thread per change at 100 changes/s). A pass lost in a crash before its
/// flush is decided again at the restart, and a delivery's own durable commit makes
/// the passes before it durable too.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// At most this many passes wait for a flush.
const MAX_UNFLUSHED: usize = 4096;

impl Core {
    pub(super) fn new(o: CoreOptions) -> Core {
        let last_config = config_fingerprint(&o.runtime.sources);
        Core {
            pipeline: Pipeline::new(o.runtime),
            inputs: crate::pipeline::Inputs::new(o.live.is_some()),
            state: None,
            shared: o.shared,
            store_at: o.store_at,
            delivery: None,
            apps: HashMap::new(),
            retiring: HashMap::new(),
            evaluated: HashMap::new(),
            annotation_logged: HashMap::new(),
            listing: HashMap::new(),
            lists_done: BTreeSet::new(),
            streams: o.streams,
            shard: o.shard,
            sharded: o.sharded,
            counted_leading: false,
            counted_apps: 0,
            live: o.live,
            audit: o.audit,
            wakeups: Wakeups::default(),
            forbidden_logged: BTreeSet::new(),
            outside_project: HashMap::new(),
            clusters_down: BTreeSet::new(),
            unflushed: Vec::new(),
            last_flush: Instant::now(),
            reopen_store: false,
            fenced: false,
            last_reopen: None,
            leading: o.leading,
            engine: o.engine,
            config: o.config,
            last_config,
            step_down_grace: o.step_down_grace,
            shutdown_grace: o.shutdown_grace,
            handle: o.handle,
            halt: o.halt,
            stand_aside: o.stand_aside,
            lead_failing_since: None,
        }
    }

    /// Waits for `f` on the runtime (this thread is not one of its workers).
    fn wait<F: std::future::Future>(&self, f: F) -> F::Output {
        self.handle.block_on(f)
    }

    /// The evaluation thread: takes over sending if it should (the result goes to
    /// `started`), then handles inputs until [`Input::Stop`] or the shell is gone.
    /// Inputs that have already arrived are handled in bursts; what they wrote is made
    /// durable by one flush per [`FLUSH_EVERY`].
    /// Returns whether it ended because another daemon took the store over (fenced).
    pub(super) fn run(mut self, mut rx: mpsc::Receiver<Input>, started: oneshot::Sender<Result<(), LeadError>>) -> bool {
        // Delivery workers and live reads are spawned from here onto the runtime.
        let handle = self.handle.clone();
        let _entered = handle.enter();
        let first = match self.leading {
            true => self.lead(),
            false => Ok(()),
        };
        let failed = first.is_err();
        self.audit_leading();
        let _ = started.send(first);
        if failed {
            return false;
        }
        'run: loop {
            // What was evaluated becomes durable in one write per FLUSH_EVERY.
            if !self.unflushed.is_empty() && (self.last_flush.elapsed() >= FLUSH_EVERY || self.unflushed.len() >= MAX_UNFLUSHED) {
                self.flush();
            }
            // A settle the workers cannot write (no pass may be failing: a quiet
            // cluster) needs the reopen as much as a failed pass does.
            if self.delivery.as_ref().is_some_and(Delivery::store_failing) {
                self.reopen_store = true;
            }
            if self.reopen_store && self.state.is_some() && self.last_reopen.is_none_or(|t| t.elapsed() >= STORE_RETRY) {
                self.reopen();
            }
            if self.fenced {
                break 'run;
            }
            let flush_in = (!self.unflushed.is_empty()).then(|| FLUSH_EVERY.saturating_sub(self.last_flush.elapsed()));
            let wait = match (self.next_wake(), flush_in) {
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
        self.count_leading(false);
        if let Some(delivery) = self.delivery.take() {
            self.wait(delivery.shutdown(self.shutdown_grace));
        }
        let pending: BTreeMap<String, u64> =
            self.state.as_ref().and_then(|s| s.outbox().queue_depths().ok()).unwrap_or_default().into_iter().collect();
        tracing::info!(?pending, "stopped");
        self.fenced
    }

    fn input(&mut self, input: Input) {
        self.input_one(input);
        self.audit_leading();
        self.count_apps();
    }

    /// This thread's part of `driftwatch_leader`: one while it leads.
    fn count_leading(&mut self, on: bool) {
        if on != self.counted_leading {
            match on {
                true => METRICS.leader.inc(),
                false => METRICS.leader.dec(),
            };
            self.counted_leading = on;
        }
    }

    /// This thread's part of `driftwatch_applications`: the Applications it keeps.
    fn count_apps(&mut self) {
        let now = self.apps.len();
        if now != self.counted_apps {
            let delta = i64::try_from(now).unwrap_or(i64::MAX).saturating_sub(i64::try_from(self.counted_apps).unwrap_or(i64::MAX));
            METRICS.applications.inc_by(delta);
            self.counted_apps = now;
        }
    }

    fn input_one(&mut self, input: Input) {
        match input {
            Input::Change(c) => self.handle(c),
            Input::Moved(key) => self.moved_away(&key),
            Input::Fetched(f) => self.live_read(*f),
            Input::Audit(batch, arrived) => self.audited(batch, arrived),
            Input::Reload => self.reload(),
            Input::Resync => {
                let rt = &self.pipeline.runtime;
                self.inputs.expire(rt.audit.window, rt.break_glass.max_for, Utc::now());
                if time_dependent(&self.pipeline.runtime) {
                    self.reevaluate_all();
                }
            }
            Input::Leading(true) => {
                self.leading = true;
                let _ = self.lead();
            }
            Input::Leading(false) => {
                self.leading = false;
                if self.state.is_some() {
                    self.step_down();
                }
                if self.sharded {
                    self.forget_all();
                }
            }
            Input::RetryLead => {
                if self.state.is_none() && self.leading {
                    let _ = self.lead();
                }
            }
            Input::PollConfig => {
                if config_fingerprint(&self.pipeline.runtime.sources) != self.last_config {
                    if self.shard == 0 {
                        tracing::info!("configuration files changed: reloading");
                    }
                    self.reload();
                }
            }
            Input::Stop => {}
        }
    }

    /// One pass for `app` (skipped when its fingerprint was evaluated already, unless
    /// `force`); `deleted`: the Application is gone and is retired by the pass. Returns
    /// whether the pass is done (false: not leading, or its write failed and it will
    /// be tried again).
    fn evaluate(&mut self, app: &App, force: bool, deleted: bool) -> bool {
        // A standby replica keeps its cache warm and evaluates nothing.
        let (Some(state), Some(delivery)) = (self.state.clone(), self.delivery.as_ref()) else { return false };
        let key = app.state_key();
        let fp = fingerprint(app);
        if !force && self.evaluated.get(&key) == Some(&fp) {
            return true;
        }
        let started = Instant::now();
        let now = Utc::now();
        // The pass's decisions (episode, hold-downs, re-arms) and its outbox entries
        // are written in one transaction before the fingerprint is recorded: a pass
        // whose write failed (a full disk) is done again, not lost until the
        // Application changes.
        let pass = match crate::pipeline::pass::run(&self.pipeline, &self.inputs, &state.pass(), delivery, app, deleted, now) {
            Ok(p) => p,
            Err(
                crate::pipeline::pass::PassError::Write(crate::state::StateError::Refused(reason))
                | crate::pipeline::pass::PassError::Evaluate(crate::state::StateError::Refused(reason)),
            ) => {
                // This Application's input made a write the store cannot hold (nothing
                // was written): its pass fails, and it is tried again when the
                // Application changes. The store is sound: reopening it would stop
                // every other Application's deliveries, every STORE_RETRY, for ever.
                METRICS.passes_refused.inc();
                tracing::error!(app = %app.qualified_name(), error = %reason, "this Application's pass was refused by the state store: skipped until it changes");
                self.evaluated.insert(key, fp);
                return true;
            }
            Err(e) => {
                tracing::error!(app = %app.qualified_name(), error = %e, "will retry");
                self.store_failed(&key, now);
                return false;
            }
        };
        let eval = pass.eval;
        METRICS.evaluations.inc();
        METRICS.evaluation_latency.observe(started.elapsed());
        if let Some(c) = &eval.capped {
            METRICS.subscriptions_capped.inc();
            if eval.note.is_some() {
                // Logged when it changes (the note in the store changed with it), not
                // at every pass.
                tracing::warn!(app = %app.qualified_name(), error = %c, "subscriptions over the limits");
            }
        }
        self.log_annotation_errors(&key, app, &eval.annotation_errors);
        if eval.stale {
            // Nothing was decided: pending wake-ups and attribution reads stay as they are.
            self.evaluated.insert(key, fp);
            return true;
        }
        if let (Some(ep), Some(event)) = (&eval.episode, eval.episode_event)
            && event != crate::drift::episode::Event::Updated
        {
            METRICS.episodes.inc(event.as_str());
            if event == crate::drift::episode::Event::Resolved {
                for class in &ep.classes {
                    if let Some(s) = ep.detection_secs() {
                        METRICS.detection_seconds.observe(class, s as f64);
                    }
                    if let Some(s) = ep.resolution_secs() {
                        let how = ep.resolution.map_or("synced", |r| r.as_str());
                        METRICS.resolution_seconds.observe(&format!("{class}:{how}"), s as f64);
                    }
                }
            }
            tracing::info!(app = %app.qualified_name(), episode = %ep.id, event = event.as_str(), severity = ep.severity.as_str(),
                direction = %ep.direction, "drift episode");
        }
        match eval.wake_at {
            Some(at) => {
                self.wakeups.set(&key, at);
            }
            None => {
                self.wakeups.remove(&key);
            }
        }
        self.note_outside_project(&key, app, &eval.drift);
        self.request_live(&key, app, &eval.drift, &eval.target);
        for n in &eval.notifications {
            METRICS.fired.inc(&n.trigger);
        }
        if pass.wrote {
            // Only passes that wrote need the flush (an empty one would still fsync).
            self.unflushed.push(key.clone());
        }
        if pass.submitted.enqueue.rejected() > 0 {
            // A full outbox refused some of this pass's notifications and recorded
            // nothing of them: the pass is decided again once there may be room, not
            // forgotten until the Application changes.
            let at = now + chrono::Duration::from_std(OUTBOX_FULL_RETRY).unwrap_or(chrono::Duration::zero());
            self.wakeups.set_earlier(&key, at);
            self.evaluated.remove(&key);
            return true;
        }
        self.evaluated.insert(key, fp);
        true
    }

    /// Counts and logs (once while listed) each resource an Application's status names
    /// outside its AppProject: never read, and a sign that someone wrote the status by
    /// hand (the CRD has no status subresource).
    fn note_outside_project(&mut self, key: &str, app: &App, drift: &crate::drift::Drift) {
        use crate::drift::attribution::NotReadReason;
        // Until its AppProject has been seen (the first list may still be on its way)
        // nothing is read, but nothing is outside it either: nothing to count.
        if self.inputs.project(&app.project).is_none() {
            return;
        }
        let now: BTreeSet<String> = drift
            .resources
            .iter()
            .filter(|r| r.attribution.as_ref().and_then(|a| a.not_read.as_ref()).is_some_and(|n| n.reason == NotReadReason::OutsideProject))
            .map(|r| format!("{} {}/{}", r.object.kind, r.object.namespace, r.object.name))
            .collect();
        let before = match now.is_empty() {
            true => self.outside_project.remove(key).unwrap_or_default(),
            false => self.outside_project.insert(key.to_string(), now.clone()).unwrap_or_default(),
        };
        for r in now.difference(&before) {
            METRICS.live_reads_outside_project.inc();
            tracing::warn!(app = %app.qualified_name(), project = %app.project, resource = %r,
                "status.resources names a resource outside the Application's AppProject: not read, not indexed");
        }
    }

    /// Logs and counts an Application's refused subscription annotations when they
    /// change, not at every pass (an Application re-evaluated every resync would log
    /// them for ever).
    fn log_annotation_errors(&mut self, key: &str, app: &App, errors: &[crate::route::AnnotationError]) {
        use std::hash::{Hash, Hasher};
        if errors.is_empty() {
            self.annotation_logged.remove(key);
            return;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        errors.hash(&mut h);
        let hash = h.finish();
        if self.annotation_logged.insert(key.to_string(), hash) != Some(hash) {
            for e in errors {
                METRICS.annotations_refused.inc(e.reason.as_str());
                tracing::warn!(app = %app.qualified_name(), reason = e.reason.as_str(), error = %e, "subscription annotation refused");
            }
        }
    }

    /// Makes the passes written since the last flush durable (one disk write for a
    /// burst of changes); if that fails, they are evaluated again.
    fn flush(&mut self) {
        if self.unflushed.is_empty() {
            return;
        }
        self.last_flush = Instant::now();
        let keys = std::mem::take(&mut self.unflushed);
        let Some(state) = self.state.clone() else { return };
        if let Err(e) = state.flush() {
            tracing::error!(error = %e, "making the evaluations durable failed (state store); will retry");
            let now = Utc::now();
            for k in keys {
                self.store_failed(&k, now);
            }
        }
    }

    /// A write to the state store failed for `key`'s pass: evaluate it again after
    /// [`STORE_RETRY`], and have the store reopened (redb refuses every write after an
    /// I/O error until it is opened again).
    fn store_failed(&mut self, key: &str, now: chrono::DateTime<Utc>) {
        self.evaluated.remove(key);
        let at = now + chrono::Duration::from_std(STORE_RETRY).unwrap_or(chrono::Duration::zero());
        self.wakeups.set_earlier(key, at);
        self.reopen_store = true;
    }

    /// Evaluates the Applications whose wake-up time has come.
    fn wake_due(&mut self) {
        let due = self.wakeups.take_due(Utc::now());
        self.reevaluate(due);
    }

    /// How long until the next wake-up.
    fn next_wake(&self) -> Option<Duration> {
        let at = self.wakeups.next()?;
        Some((at - Utc::now()).to_std().unwrap_or(Duration::ZERO))
    }

    fn reevaluate_all(&mut self) {
        let keys: Vec<String> = self.apps.keys().chain(self.retiring.keys()).cloned().collect();
        self.reevaluate(keys);
    }

    /// Evaluates the kept Applications of `keys` although they did not change, parsing
    /// one at a time: parsed Applications never pile up (10,000 members of one
    /// AppProject would).
    fn reevaluate(&mut self, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            if let Some(a) = self.apps.get(&k).and_then(Kept::app) {
                self.evaluate(&a, true, false);
            } else if let Some(a) = self.retiring.get(&k).and_then(Kept::app)
                && self.evaluate(&a, true, true)
            {
                self.retiring.remove(&k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_application_comes_back_whole_in_a_fraction_of_its_json() {
        let resources: Vec<Value> = (0..20)
            .map(|r| {
                serde_json::json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop",
                                   "name": format!("res-{r}"), "status": "Synced", "health": {"status": "Healthy"}})
            })
            .collect();
        let object = serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd", "uid": "u-1", "labels": {"team": "shop"},
                         "annotations": {"notifications.argoproj.io/subscribe.on-drift.slack": "ops"}},
            "spec": {"project": "payments", "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
            "status": {"sync": {"status": "OutOfSync", "revision": "4f1c0de"}, "resources": resources, "unicode": "größe ✓"}
        });
        let app = App::from_value(object.clone()).unwrap();
        let kept = Kept::of(&app);
        assert_eq!((kept.namespace.as_str(), kept.project.as_str()), ("argocd", "payments"));
        let json = object.to_string().len();
        assert!(kept.compressed.len() * 3 < json, "{} bytes kept for {json} of JSON", kept.compressed.len());
        assert_eq!(kept.app(), Some(app));
    }

    #[test]
    fn an_application_that_does_not_compress_is_kept_whole_too() {
        // 256 KB of characters with no repeats to speak of: the output is larger than
        // the input.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let noise: String = (0..256 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 90) as u8)
            })
            .collect();
        for n in 0..3 {
            let app = App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": format!("a{n}"), "namespace": "argocd", "annotations": {"noise": noise}}}))
            .unwrap();
            assert_eq!(Kept::of(&app).app(), Some(app));
        }
    }

    #[test]
    fn a_damaged_kept_application_is_none_not_a_panic() {
        let app = App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                                                     "metadata": {"name": "a", "namespace": "argocd"}}))
        .unwrap();
        let mut kept = Kept::of(&app);
        let half = kept.compressed.len() / 2;
        kept.compressed = kept.compressed[..half].into();
        assert_eq!(kept.app(), None);
        let mut kept = Kept::of(&app);
        kept.len /= 2;
        assert_eq!(kept.app(), None, "a length too short");
    }
}
