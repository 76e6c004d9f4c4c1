//! `driftwatch run` against a live cluster: watches Applications and AppProjects,
//! evaluates an Application when it changes (and on a schedule only when a trigger
//! reads the clock), hands notifications to the delivery workers, reloads the
//! configuration on SIGHUP or when its files change, serves the operations endpoints,
//! and stops cleanly on SIGTERM.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use chrono::Utc;
use futures::{FutureExt, StreamExt};
use serde_json::Value;

use crate::attribution::{Attribution, NotReadReason};
use crate::config::{self, Runtime};
use crate::deliver::{Delivery, ServiceRuntime};
use crate::live::{LiveFetcher, ReadError};
use crate::metrics::METRICS;
use crate::model::App;
use crate::pipeline::Pipeline;
use crate::state::StateStore;
use crate::trigger::TriggerEngine;
use crate::watch::{self, Change, Kind, Stream, WatchOptions};

/// Options of `driftwatch run` (live).
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub config: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub watch: WatchOptions,
    /// The state file; the config's `state.path`, else `driftwatch-state.redb`.
    pub state: Option<PathBuf>,
    /// Where `/healthz`, `/readyz` and `/metrics` listen.
    pub listen: SocketAddr,
    /// How often time-dependent triggers are re-evaluated.
    pub resync: Duration,
    /// How long in-flight deliveries get on shutdown.
    pub shutdown_grace: Duration,
    /// Leader election between replicas; `None`: this process always sends.
    pub lease: Option<crate::lease::LeaseConfig>,
}

/// The object without the fields whose change cannot affect a trigger.
/// Walks the object instead of cloning and serialising it (this runs for every watch
/// event).
fn fingerprint(app: &App) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match &app.object {
        Value::Object(top) => {
            for (k, v) in top {
                k.hash(&mut h);
                match (k.as_str(), v) {
                    ("metadata", Value::Object(meta)) => {
                        for (mk, mv) in meta.iter().filter(|(mk, _)| !matches!(mk.as_str(), "resourceVersion" | "managedFields")) {
                            mk.hash(&mut h);
                            hash_value(mv, &mut h);
                        }
                    }
                    _ => hash_value(v, &mut h),
                }
            }
        }
        other => hash_value(other, &mut h),
    }
    h.finish()
}

/// Feeds a JSON value to a hasher, with a tag per type so `"1"` and `1` differ.
fn hash_value(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            b.hash(h);
        }
        Value::Number(n) => {
            h.write_u8(2);
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i.hash(h),
                (None, Some(u)) => u.hash(h),
                _ => n.as_f64().unwrap_or_default().to_bits().hash(h),
            }
        }
        Value::String(s) => {
            h.write_u8(3);
            s.hash(h);
        }
        Value::Array(a) => {
            h.write_u8(4);
            a.len().hash(h);
            a.iter().for_each(|x| hash_value(x, h));
        }
        Value::Object(m) => {
            h.write_u8(5);
            m.len().hash(h);
            for (k, x) in m {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

/// Whether any condition reads the clock (decided from the compiled script): only then
/// is a periodic re-evaluation needed.
fn time_dependent(rt: &Runtime) -> bool {
    rt.triggers.values().flat_map(|t| &t.conditions).any(|c| c.reads_clock)
}

/// What the configuration reload watches: every file the configuration was read from
/// (the config file, each file of its trigger and template directories), with
/// modification times and sizes. A mounted ConfigMap update swaps them.
fn config_fingerprint(sources: &[PathBuf]) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
    let mut files = Vec::new();
    for p in sources {
        if p.is_dir() {
            if let Ok(entries) = std::fs::read_dir(p) {
                files.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
            }
        } else {
            files.push(p.clone());
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).ok();
            let mtime = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.map_or(0, |m| m.len());
            (p, mtime, len)
        })
        .collect()
}

/// Every configured service's client, or why not: every missing secret (with where it
/// was looked for), else the first client that fails to build. Start-up, leading and
/// reloads all go through here, so they refuse the same things in the same words.
fn build_services(rt: &Runtime, state: &Arc<StateStore>) -> Result<Vec<ServiceRuntime>, Vec<String>> {
    if !rt.missing_secrets.is_empty() {
        return Err(rt.missing_secrets.clone());
    }
    let env = crate::deliver::services::Env {
        http: crate::deliver::http::client(None, false).map_err(|e| vec![e.to_string()])?,
        state: state.clone(),
        secrets: rt.secrets.clone(),
        context: rt.context.clone(),
    };
    let services: Vec<ServiceRuntime> = rt
        .services
        .values()
        .map(|s| crate::deliver::services::build(&s.name, &s.spec, &env).map_err(|e| vec![format!("service {}: {e}", s.name)]))
        .collect::<Result<_, _>>()?;
    for s in &services {
        // Every configured service has a queue-depth series, zero until something waits.
        if METRICS.queue_depth.get(&s.name) == 0 {
            METRICS.queue_depth.set(&s.name, 0);
        }
    }
    Ok(services)
}

/// What keeps the configuration's services from being built, checked against a
/// throwaway store before anything is opened.
fn services_problems(rt: &Runtime) -> Result<(), Vec<String>> {
    let probe = StateStore::in_memory().map_err(|e| vec![e.to_string()])?;
    build_services(rt, &Arc::new(probe)).map(drop)
}

/// A one-line description of a change for debug logs (no whole objects).
struct ChangeSummary<'a>(&'a Change);

impl std::fmt::Debug for ChangeSummary<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Change::App(a) => write!(f, "app {}", a.qualified_name()),
            Change::AppDeleted(a) => write!(f, "app deleted {}", a.qualified_name()),
            Change::Project(p) => write!(f, "project {}", p.name),
            Change::ProjectDeleted(p) => write!(f, "project deleted {p}"),
            Change::ListStarted(s) => write!(f, "list started: {s}"),
            Change::ListDone(s) => write!(f, "list done: {s}"),
            Change::Malformed { kind, name, .. } => write!(f, "malformed {} {name}", kind.as_str()),
            Change::Error { kind, error } => write!(f, "error {}: {error}", kind.as_str()),
        }
    }
}

/// Why [`Daemon::lead`] could not take over sending.
enum LeadError {
    /// The state file is held (another driftwatch) or cannot be opened.
    Store(String),
    /// A delivery client could not be built (a CA file gone, ...).
    Services(Vec<String>),
}

/// An Application between evaluations: its JSON text, and what the loops over all
/// Applications filter on. About the size of the object's JSON, where a
/// `serde_json::Value` tree takes several times that; parsed again only when the
/// Application is evaluated without a change of its own (a wake-up, a reload, an
/// attribution read, a change of its AppProject).
struct Kept {
    json: Box<str>,
    namespace: String,
    project: String,
}

impl Kept {
    fn of(app: &App) -> Kept {
        Kept { json: app.object.to_string().into_boxed_str(), namespace: app.namespace.clone(), project: app.project.clone() }
    }

    /// The Application again. It was one when kept, so this does not fail in practice;
    /// if it did, the Application is skipped until its next change.
    fn app(&self) -> Option<App> {
        let v: Value = serde_json::from_str(&self.json).ok()?;
        App::from_value(v).ok()
    }
}

/// The state store the operations endpoints read (none while not leading).
pub type SharedState = Arc<std::sync::RwLock<Option<Arc<StateStore>>>>;

struct Daemon {
    pipeline: Pipeline,
    /// Open only while this process leads: the file lock of the store is what keeps a
    /// second process from writing to it.
    state: Option<Arc<StateStore>>,
    shared: SharedState,
    state_path: PathBuf,
    delivery: Option<Delivery>,
    /// Latest Application per state key (for re-evaluation and missed deletes), kept
    /// compact between evaluations.
    apps: HashMap<String, Kept>,
    /// Fingerprint of what was last evaluated, per state key.
    evaluated: HashMap<String, u64>,
    /// Per watch stream with a (re)list in progress, the objects seen so far (state
    /// keys of Applications, names of AppProjects). Per stream, because each namespace
    /// relists on its own: a `410 Gone` in one says nothing about another.
    listing: HashMap<Stream, BTreeSet<String>>,
    /// Streams whose first list is done; ready once all of `streams` are.
    lists_done: BTreeSet<Stream>,
    streams: BTreeSet<Stream>,
    /// Reads live objects for attribution (none when `attribution.enabled: false`).
    live: Option<LiveFetcher>,
    /// When an Application must be evaluated again although nothing changed (a
    /// hold-down elapsing, a repeat falling due), by state key.
    wakeups: HashMap<String, chrono::DateTime<Utc>>,
    /// Resources (`deployments.apps`) whose refused reads were logged, so each is
    /// logged once.
    forbidden_logged: BTreeSet<String>,
    /// State keys of passes written since the last [`Daemon::flush`].
    unflushed: Vec<String>,
    /// A state store write failed: the main loop reopens the store (at most once per
    /// [`STORE_RETRY`], `last_reopen`).
    reopen_store: bool,
    last_reopen: Option<Instant>,
}

/// At most this many changes that have already arrived are handled before a flush.
const MAX_BURST: usize = 256;

/// How soon a pass whose state writes failed is tried again.
const STORE_RETRY: Duration = Duration::from_secs(2);

/// At most this many refused resources are remembered for logging once.
const MAX_FORBIDDEN_LOGGED: usize = 256;

impl Daemon {
    fn evaluate(&mut self, app: &App, force: bool) {
        // A standby replica keeps its cache warm and evaluates nothing.
        let Some(state) = self.state.clone() else { return };
        let key = app.state_key();
        let fp = fingerprint(app);
        if !force && self.evaluated.get(&key) == Some(&fp) {
            return;
        }
        let started = Instant::now();
        let now = Utc::now();
        let eval = match self.pipeline.evaluate(app, &state, now) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(app = %app.qualified_name(), error = %e, "evaluation failed (state store)");
                self.store_failed(&key, now);
                return;
            }
        };
        METRICS.evaluations.fetch_add(1, Ordering::Relaxed);
        METRICS.evaluation_latency.observe(started.elapsed());
        for e in &eval.annotation_errors {
            tracing::warn!(app = %app.qualified_name(), error = %e, "malformed subscription annotation");
        }
        if eval.stale {
            // Nothing was decided: pending wake-ups and attribution reads stay as they are.
            self.evaluated.insert(key, fp);
            return;
        }
        if let (Some(ep), Some(event)) = (&eval.episode, eval.episode_event)
            && event != crate::episode::Event::Updated
        {
            METRICS.episodes.inc(event.as_str());
            tracing::info!(app = %app.qualified_name(), episode = %ep.id, event = event.as_str(), severity = ep.severity.as_str(),
                direction = %ep.direction, "drift episode");
        }
        match eval.wake_at {
            Some(at) => {
                self.wakeups.insert(key.clone(), at);
            }
            None => {
                self.wakeups.remove(&key);
            }
        }
        if let Some(live) = self.live.as_mut() {
            let wanted = match self.pipeline.runtime.attribution.reads(app) {
                true => crate::live::Wanted::from_drift(&eval.drift),
                false => Vec::new(),
            };
            let r = live.request(&key, wanted);
            for k in r.forgotten {
                self.pipeline.live.remove(&k);
            }
        }
        for n in &eval.notifications {
            METRICS.fired.inc(&n.trigger);
        }
        // The pass's decisions (episode, hold-downs, re-arms) and its outbox entries
        // are written in one transaction before the fingerprint is recorded: a pass
        // whose write failed (a full disk) is done again, not lost until the
        // Application changes.
        let pass = crate::pipeline::pass_write(&eval, &key, &self.pipeline.runtime);
        let writes = !pass.is_empty() || !eval.notifications.is_empty();
        let written = match &self.delivery {
            Some(d) => d.submit_pass(&pass, &eval.notifications).map(drop),
            None => state.write_pass(&pass, &[], crate::state::to_millis(now)).map(drop),
        };
        if let Err(e) = written {
            tracing::error!(app = %app.qualified_name(), error = %e, "recording the evaluation failed (state store); will retry");
            self.store_failed(&key, now);
            return;
        }
        if writes {
            // Only passes that wrote need the flush (an empty one would still fsync).
            self.unflushed.push(key.clone());
        }
        self.evaluated.insert(key, fp);
    }

    /// Makes the passes written since the last flush durable (one disk write for a
    /// burst of changes); if that fails, they are evaluated again.
    fn flush(&mut self) {
        if self.unflushed.is_empty() {
            return;
        }
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
        let due = self.wakeups.entry(key.to_string()).or_insert(at);
        *due = (*due).min(at);
        self.reopen_store = true;
    }

    /// Closes and reopens the state store after a failed write (workers stopped and
    /// started again, the outbox delivered from where it was). Until it opens again
    /// (the disk still full), `lead` is retried.
    async fn reopen(&mut self, grace: Duration) {
        self.reopen_store = false;
        self.last_reopen = Some(Instant::now());
        self.flush();
        tracing::warn!("reopening the state store after a failed write");
        if let Some(d) = self.delivery.take() {
            d.shutdown(grace).await;
        }
        *self.shared.write().unwrap_or_else(|p| p.into_inner()) = None;
        self.state = None;
        let _ = self.lead();
    }

    /// A live object was read: update its attribution and re-evaluate the
    /// Applications waiting for it when it changed what is known.
    fn live_read(&mut self, fetched: crate::live::Fetched) {
        let Some(live) = self.live.as_mut() else { return };
        // None: nobody reports this resource as drifted any more.
        let Some(waiting) = live.complete(&fetched) else { return };
        let f = fetched;
        let key = f.wanted.key();
        let next = match &f.object {
            Ok(Some(object)) => {
                Some(crate::attribution::attribute(object, &f.wanted.class, &self.pipeline.runtime.attribution.ignore_managers))
            }
            Ok(None) => None,
            Err(e @ ReadError::Forbidden { group, resource }) => {
                let label = ReadError::resource_label(group, resource);
                METRICS.live_reads_forbidden.inc(&label);
                // Once per kind: the drift is still reported, and the read is not
                // retried for a while (`live::FORBIDDEN_BACKOFF`).
                if self.forbidden_logged.len() < MAX_FORBIDDEN_LOGGED && self.forbidden_logged.insert(label.clone()) {
                    tracing::warn!(resource = %label, rule = %ReadError::rule(group, resource), label = crate::live::AGGREGATE_LABEL,
                        "attribution is not permitted to read this kind of resource: its drift is reported without who made it; \
                         add the rule to a ClusterRole with the label to allow it");
                }
                Some(Attribution::not_read(NotReadReason::Forbidden, e.to_string()))
            }
            Err(e @ ReadError::SecretsOff) => Some(Attribution::not_read(NotReadReason::SecretsOff, e.to_string())),
            Err(ReadError::Failed(e)) => {
                METRICS.live_read_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(resource = %key, error = %e, "reading a drifted resource for attribution failed");
                return;
            }
        };
        let changed = self.pipeline.live.get(&key) != next.as_ref();
        match next {
            Some(a) => {
                self.pipeline.live.insert(key, a);
            }
            None => {
                self.pipeline.live.remove(&key);
            }
        }
        if changed {
            let apps: Vec<App> = waiting.iter().filter_map(|k| self.apps.get(k).and_then(Kept::app)).collect();
            for a in apps {
                self.evaluate(&a, true);
            }
        }
    }

    /// Evaluates the Applications whose wake-up time has come.
    fn wake_due(&mut self) {
        let now = Utc::now();
        let due: Vec<String> = self.wakeups.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
        for k in due {
            self.wakeups.remove(&k);
            if let Some(a) = self.apps.get(&k).and_then(Kept::app) {
                self.evaluate(&a, true);
            }
        }
    }

    /// How long until the next wake-up.
    fn next_wake(&self) -> Option<Duration> {
        let at = self.wakeups.values().min()?;
        Some((*at - Utc::now()).to_std().unwrap_or(Duration::ZERO))
    }

    fn deleted(&mut self, mut app: App) {
        METRICS.events.inc("application_delete");
        if app.object.pointer("/metadata/deletionTimestamp").is_none_or(Value::is_null)
            && let Some(meta) = app.object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("deletionTimestamp".into(), Utc::now().to_rfc3339().into());
        }
        self.evaluate(&app, true);
        let key = app.state_key();
        self.apps.remove(&key);
        self.evaluated.remove(&key);
        self.wakeups.remove(&key);
        if let Some(live) = self.live.as_mut() {
            for k in live.request(&key, Vec::new()).forgotten {
                self.pipeline.live.remove(&k);
            }
        }
        if let Some(state) = &self.state
            && let Err(e) = state.remove_app(&key)
        {
            tracing::error!(error = %e, "cleaning a deleted Application's state failed");
        }
    }

    fn handle(&mut self, change: Change) {
        tracing::debug!(change = ?ChangeSummary(&change), "watch");
        match change {
            Change::App(app) => {
                METRICS.events.inc("application_apply");
                let key = app.state_key();
                for (stream, seen) in self.listing.iter_mut() {
                    if stream.kind == Kind::Application && stream.covers(&app.namespace) {
                        seen.insert(key.clone());
                    }
                }
                self.evaluate(&app, false);
                self.apps.insert(key, Kept::of(&app));
            }
            Change::AppDeleted(app) => self.deleted(*app),
            Change::Project(p) => {
                METRICS.events.inc("appproject_apply");
                let name = p.name.clone();
                for (stream, seen) in self.listing.iter_mut() {
                    if stream.kind == Kind::AppProject && stream.covers(&p.namespace) {
                        seen.insert(name.clone());
                    }
                }
                let changed = self.pipeline.projects.get(&name) != Some(&p);
                self.pipeline.projects.insert(name.clone(), p);
                if changed {
                    // Project subscriptions apply to its Applications: evaluate them now.
                    let members: Vec<App> = self.apps.values().filter(|a| a.project == name).filter_map(Kept::app).collect();
                    for a in members {
                        self.evaluate(&a, true);
                    }
                }
            }
            Change::ProjectDeleted(name) => {
                METRICS.events.inc("appproject_delete");
                self.pipeline.projects.remove(&name);
            }
            Change::ListStarted(stream) => {
                METRICS.events.inc(&format!("{}_list", stream.kind.as_str()));
                self.listing.insert(stream, BTreeSet::new());
            }
            Change::ListDone(stream) => {
                if let Some(seen) = self.listing.remove(&stream) {
                    // Deleted while this stream was not watching: its relist no longer
                    // has them. Objects of other streams' namespaces are not its to judge.
                    match stream.kind {
                        Kind::Application => {
                            let gone: Vec<App> = self
                                .apps
                                .iter()
                                .filter(|(k, a)| stream.covers(&a.namespace) && !seen.contains(*k))
                                .filter_map(|(_, a)| a.app())
                                .collect();
                            for a in gone {
                                self.deleted(a);
                            }
                        }
                        Kind::AppProject => {
                            let gone: Vec<String> = self
                                .pipeline
                                .projects
                                .iter()
                                .filter(|(name, p)| stream.covers(&p.namespace) && !seen.contains(*name))
                                .map(|(name, _)| name.clone())
                                .collect();
                            for name in gone {
                                METRICS.events.inc("appproject_delete");
                                self.pipeline.projects.remove(&name);
                            }
                        }
                    }
                }
                self.lists_done.insert(stream);
                if self.streams.iter().all(|s| self.lists_done.contains(s)) {
                    METRICS.ready.store(1, Ordering::Relaxed);
                }
            }
            Change::Malformed { kind, name, reason } => {
                METRICS.malformed.inc(kind.as_str());
                tracing::warn!(kind = kind.as_str(), object = %name, %reason, "malformed object skipped");
            }
            Change::Error { kind, error } => {
                METRICS.watch_restarts.inc(kind.as_str());
                tracing::warn!(kind = kind.as_str(), %error, "watch failed; retrying with backoff");
            }
        }
    }

    fn reevaluate_all(&mut self) {
        // One at a time: parsed Applications never pile up (10,000 of them would).
        let keys: Vec<String> = self.apps.keys().cloned().collect();
        for k in keys {
            if let Some(a) = self.apps.get(&k).and_then(Kept::app) {
                self.evaluate(&a, true);
            }
        }
    }

    /// Takes over sending: opens the state store (the previous holder's file lock must
    /// be gone), starts the workers (which deliver what the outbox holds first), and
    /// evaluates every cached Application. Fails if the store is still locked or a
    /// delivery client cannot be built; the caller retries.
    fn lead(&mut self) -> Result<(), LeadError> {
        if self.state.is_some() {
            return Ok(());
        }
        let mut store = match StateStore::open(&self.state_path) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot open the state store yet; retrying");
                return Err(LeadError::Store(e.to_string()));
            }
        };
        if let Some(n) = self.pipeline.runtime.state.max_keys_per_app {
            store = store.with_max_keys_per_app(n);
        }
        let state = Arc::new(store);
        // Passes commit without waiting for the disk; the main loop flushes after each
        // burst of changes.
        state.defer_durability(true);
        match build_services(&self.pipeline.runtime, &state) {
            Ok(services) => self.delivery = Some(Delivery::start(services, state.clone())),
            Err(e) => {
                // The store is closed again (dropped here): a standby may take it.
                for e in &e {
                    tracing::error!(error = %e, "building the delivery clients failed");
                }
                return Err(LeadError::Services(e));
            }
        }
        *self.shared.write().unwrap_or_else(|p| p.into_inner()) = Some(state.clone());
        self.state = Some(state);
        METRICS.leader.store(1, Ordering::Relaxed);
        tracing::info!("leading: sending notifications");
        self.evaluated.clear();
        self.reevaluate_all();
        Ok(())
    }

    /// Stops sending: workers stop after their current attempt, the store is closed
    /// (releasing its file lock), undelivered notifications stay in its outbox.
    async fn step_down(&mut self, grace: Duration) {
        self.flush();
        METRICS.leader.store(0, Ordering::Relaxed);
        if let Some(d) = self.delivery.take() {
            d.shutdown(grace).await;
        }
        *self.shared.write().unwrap_or_else(|p| p.into_inner()) = None;
        self.state = None;
        self.evaluated.clear();
        tracing::info!("standing by: not sending");
    }
}

/// Builds everything new; swaps it in only if all of it is valid.
async fn reload(d: &mut Daemon, opts: &DaemonOptions, engine: &Arc<TriggerEngine>, grace: Duration) {
    let probe = match &d.state {
        Some(s) => s.clone(),
        // Not leading: validate the services against a throwaway store.
        None => match StateStore::in_memory() {
            Ok(s) => Arc::new(s),
            Err(e) => {
                tracing::error!(error = %e, "configuration reload failed");
                return;
            }
        },
    };
    match config::load_with(opts.config.as_deref(), engine.clone()) {
        Ok(rt) => match build_services(&rt, &probe) {
            Ok(services) => {
                if let Some(old) = d.delivery.take() {
                    // Undelivered notifications stay in the outbox for the new workers.
                    old.shutdown(grace).await;
                }
                if let Some(state) = &d.state {
                    d.delivery = Some(Delivery::start(services, state.clone()));
                }
                let projects = std::mem::take(&mut d.pipeline.projects);
                let live = std::mem::take(&mut d.pipeline.live);
                d.pipeline = Pipeline::new(Arc::new(rt));
                d.pipeline.projects = projects;
                d.pipeline.live = live;
                METRICS.reload_ok.store(1, Ordering::Relaxed);
                METRICS.set_reload_errors(Vec::new());
                tracing::info!("configuration reloaded");
                d.evaluated.clear();
                d.reevaluate_all();
            }
            Err(errors) => {
                METRICS.reload_ok.store(0, Ordering::Relaxed);
                for e in &errors {
                    tracing::error!(error = %e, "configuration reload failed; keeping the running configuration");
                }
                METRICS.set_reload_errors(errors);
            }
        },
        Err(errors) => {
            METRICS.reload_ok.store(0, Ordering::Relaxed);
            for e in &errors {
                tracing::error!(error = %e, "configuration reload failed; keeping the running configuration");
            }
            METRICS.set_reload_errors(errors.iter().map(ToString::to_string).collect());
        }
    }
}

/// Runs until SIGTERM or SIGINT. Returns the exit code.
pub async fn run(opts: DaemonOptions, err: &mut dyn std::io::Write) -> anyhow::Result<i32> {
    let engine = Arc::new(TriggerEngine::new());
    let rt = match config::load_with(opts.config.as_deref(), engine.clone()) {
        Ok(rt) => rt,
        Err(errors) => {
            for e in &errors {
                writeln!(err, "error: {e}")?;
            }
            return Ok(crate::cli::FAILED);
        }
    };
    // Every delivery client is built once before anything else happens, so a missing
    // secret or an unreadable CA file is the one error reported, with nothing created.
    if let Err(problems) = services_problems(&rt) {
        for p in &problems {
            writeln!(err, "error: {p}")?;
        }
        writeln!(err, "driftwatch does not start until the services can be built (`driftwatch check` lists the same)")?;
        return Ok(crate::cli::FAILED);
    }
    // The cluster first: without one there is nothing to do, and nothing is created.
    let client = match watch::client(opts.kubeconfig.as_deref(), opts.context.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            writeln!(err, "(to try driftwatch without a cluster: driftwatch run --replay examples/drift-incident)")?;
            return Ok(crate::cli::FAILED);
        }
    };
    let state_path = opts.state.clone().or_else(|| rt.state.path.clone()).unwrap_or_else(|| PathBuf::from("driftwatch-state.redb"));
    if let Some(dir) = state_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let shared: SharedState = Arc::new(std::sync::RwLock::new(None));
    let bound = crate::admin::serve(opts.listen, shared.clone()).await?;
    tracing::info!(%bound, "operations endpoints listening");
    // Without leader election this process always sends (the sender is kept so the
    // channel stays open).
    let (_always_leading, always) = tokio::sync::watch::channel(true);
    let mut leader_rx = match &opts.lease {
        Some(cfg) => crate::lease::spawn(client.clone(), cfg.clone()),
        None => always,
    };
    let (live, mut live_rx) = match rt.attribution.enabled {
        true => {
            let (f, rx) = LiveFetcher::new(client.clone(), rt.attribution.concurrency, rt.attribution.ttl, rt.attribution.read_secrets);
            (Some(f), Some(rx))
        }
        false => (None, None),
    };
    let mut changes = watch::changes(client, &opts.watch).boxed();
    let mut time_dep = time_dependent(&rt);
    let mut d = Daemon {
        pipeline: Pipeline::new(Arc::new(rt)),
        state: None,
        shared,
        state_path,
        delivery: None,
        apps: HashMap::new(),
        evaluated: HashMap::new(),
        listing: HashMap::new(),
        lists_done: BTreeSet::new(),
        streams: opts.watch.streams().into_iter().collect(),
        live,
        wakeups: HashMap::new(),
        forbidden_logged: BTreeSet::new(),
        reopen_store: false,
        last_reopen: None,
        unflushed: Vec::new(),
    };
    if opts.lease.is_none() {
        match d.lead() {
            Ok(()) => {}
            Err(LeadError::Store(e)) => {
                writeln!(err, "error: cannot open the state store {}: {e} (is another driftwatch using it?)", d.state_path.display())?;
                return Ok(crate::cli::FAILED);
            }
            Err(LeadError::Services(errors)) => {
                for e in errors {
                    writeln!(err, "error: {e}")?;
                }
                return Ok(crate::cli::FAILED);
            }
        }
    }
    let step_down_grace = match &opts.lease {
        Some(l) => opts.shutdown_grace.min(l.duration / 4),
        None => opts.shutdown_grace,
    };
    let mut lead_retry = tokio::time::interval(Duration::from_millis(500));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut config_poll = tokio::time::interval(Duration::from_secs(2));
    let mut resync = tokio::time::interval(opts.resync);
    let mut sources = d.pipeline.runtime.sources.clone();
    let mut last_config = config_fingerprint(&sources);
    loop {
        // Everything the last iteration evaluated becomes durable in one write.
        d.flush();
        let next_wake = d.next_wake();
        tokio::select! {
            Some(fetched) = async { match live_rx.as_mut() { Some(rx) => rx.recv().await, None => None } }, if live_rx.is_some() => {
                d.live_read(fetched);
            }
            _ = tokio::time::sleep(next_wake.unwrap_or(Duration::from_secs(3600))), if next_wake.is_some() => d.wake_due(),
            change = changes.next() => match change {
                Some(c) => {
                    d.handle(c);
                    // A burst: what has already arrived is handled before the flush.
                    for _ in 0..MAX_BURST {
                        match changes.next().now_or_never() {
                            Some(Some(c)) => d.handle(c),
                            _ => break,
                        }
                    }
                }
                None => {
                    tracing::error!("watch streams ended");
                    break;
                }
            },
            _ = sighup.recv() => {
                tracing::info!("SIGHUP: reloading the configuration");
                reload(&mut d, &opts, &engine, opts.shutdown_grace).await;
                time_dep = time_dependent(&d.pipeline.runtime);
                sources = d.pipeline.runtime.sources.clone();
                last_config = config_fingerprint(&sources);
            }
            _ = config_poll.tick() => {
                let now = config_fingerprint(&sources);
                if now != last_config {
                    tracing::info!("configuration files changed: reloading");
                    last_config = now;
                    reload(&mut d, &opts, &engine, opts.shutdown_grace).await;
                    time_dep = time_dependent(&d.pipeline.runtime);
                    sources = d.pipeline.runtime.sources.clone();
                }
            }
            _ = resync.tick(), if time_dep => d.reevaluate_all(),
            changed = leader_rx.changed(), if opts.lease.is_some() => {
                if changed.is_err() {
                    tracing::error!("leader election stopped");
                    break;
                }
                let leading = *leader_rx.borrow();
                if leading {
                    let _ = d.lead();
                } else if d.state.is_some() {
                    d.step_down(step_down_grace).await;
                }
            }
            _ = lead_retry.tick(), if d.state.is_none() && *leader_rx.borrow() => {
                let _ = d.lead();
            }
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM: stopping");
                break;
            }
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("interrupted: stopping");
                break;
            }
        }
        if d.reopen_store && d.state.is_some() && d.last_reopen.is_none_or(|t| t.elapsed() >= STORE_RETRY) {
            d.reopen(step_down_grace).await;
        }
    }
    // Stop watching first, then let in-flight deliveries finish; what is left stays in
    // the outbox for the next start.
    drop(changes);
    d.flush();
    METRICS.ready.store(0, Ordering::Relaxed);
    if let Some(delivery) = d.delivery.take() {
        delivery.shutdown(opts.shutdown_grace).await;
    }
    let pending: BTreeMap<String, u64> = d.state.as_ref().and_then(|s| s.queue_depths().ok()).unwrap_or_default().into_iter().collect();
    tracing::info!(?pending, "stopped");
    Ok(crate::cli::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_ignores_resource_version_and_managed_fields_only() {
        let app = |rv: &str, managers: Value, sync: Value| {
            App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "a", "namespace": "argocd", "uid": "u", "resourceVersion": rv, "managedFields": managers},
                "status": {"sync": {"status": sync}}}))
            .unwrap()
        };
        let base = fingerprint(&app("1", serde_json::json!([]), serde_json::json!("Synced")));
        assert_eq!(base, fingerprint(&app("2", serde_json::json!([{"manager": "x"}]), serde_json::json!("Synced"))));
        assert_ne!(base, fingerprint(&app("1", serde_json::json!([]), serde_json::json!("OutOfSync"))));
        assert_ne!(
            fingerprint(&app("1", serde_json::json!([]), serde_json::json!("1"))),
            fingerprint(&app("1", serde_json::json!([]), serde_json::json!(1))),
            "a string is not a number"
        );
    }
}
