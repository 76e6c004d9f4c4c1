//! What evaluates a pass ([`Evaluator`]): the pipeline and what it reads besides the
//! Application (AppProjects, live objects, audited attempts), the fingerprints that
//! skip a pass nothing changed, the wake-ups, and the logs and metrics of each pass.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

mod attribution;
mod audit;

use super::leadership::Leadership;
use super::{OUTBOX_FULL_RETRY, STORE_RETRY};
use crate::cluster::live::LiveFetcher;
use crate::cluster::watch::Stream;
use crate::config::Runtime;
use crate::daemon::fingerprint::fingerprint;
use crate::daemon::wakeups::Wakeups;
use crate::drift::audit::Recorded;
use crate::metrics::METRICS;
use crate::model::App;
use crate::pipeline::Pipeline;
use crate::pipeline::pass::{Pass, PassError};
use crate::state::StateError;

/// Evaluates Applications: one pass each, written through [`Leadership`]'s store.
pub(super) struct Evaluator {
    pipeline: Pipeline,
    /// What evaluations read besides the Application: AppProjects and live objects.
    inputs: crate::pipeline::Inputs,
    /// Fingerprint of what was last evaluated, per state key.
    evaluated: HashMap<String, u64>,
    /// When an Application must be evaluated again although nothing changed (a
    /// hold-down elapsing, a repeat falling due), by state key.
    wakeups: Wakeups,
    /// Per state key with malformed subscription annotations, a hash of what was last
    /// logged (logged again only when it changes).
    annotation_logged: HashMap<String, u64>,
    /// Per state key, the resources its `status.resources` lists outside its AppProject
    /// (never read; each counted and logged once while listed).
    outside_project: HashMap<String, BTreeSet<String>>,
    /// Reads live objects for attribution (none when `attribution.enabled: false`).
    live: Option<LiveFetcher>,
    /// Resources (`deployments.apps`) whose refused reads were logged, so each is
    /// logged once.
    forbidden_logged: BTreeSet<String>,
    /// Clusters whose last read failed (logged once when they fail, once when they
    /// answer again), by label.
    clusters_down: BTreeSet<String>,
    /// The audit input: which objects Applications manage is kept in it.
    audit: Option<Arc<crate::audit::Shared>>,
    /// When the input being handled reached the daemon (wall-clock ms), given to the
    /// notifications its passes decide; `None` between inputs (a wake-up, a live read).
    received_ms: Option<u64>,
}

impl Evaluator {
    pub fn new(runtime: Arc<Runtime>, live: Option<LiveFetcher>, audit: Option<Arc<crate::audit::Shared>>) -> Evaluator {
        Evaluator {
            pipeline: Pipeline::new(runtime),
            inputs: crate::pipeline::Inputs::new(live.is_some()),
            evaluated: HashMap::new(),
            wakeups: Wakeups::default(),
            annotation_logged: HashMap::new(),
            outside_project: HashMap::new(),
            live,
            forbidden_logged: BTreeSet::new(),
            clusters_down: BTreeSet::new(),
            audit,
            received_ms: None,
        }
    }

    /// When the input about to be handled reached the daemon (`None` once handled).
    pub fn received(&mut self, at_ms: Option<u64>) {
        self.received_ms = at_ms;
    }

    /// The running configuration.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.pipeline.runtime
    }

    /// A reload's configuration replaces the running one. The projects and live objects
    /// seen stay: they are the cluster's, not the configuration's.
    pub fn set_runtime(&mut self, rt: Runtime) {
        self.pipeline = Pipeline::new(Arc::new(rt));
    }

    /// Whether live objects are read (`attribution.enabled`).
    pub fn reads_live(&self) -> bool {
        self.live.is_some()
    }

    /// The audit input's shared index, if there is an audit input.
    pub fn audit(&self) -> Option<&Arc<crate::audit::Shared>> {
        self.audit.as_ref()
    }

    /// One pass for `app` (skipped when its fingerprint was evaluated already, unless
    /// `force`); `deleted`: the Application is gone and is retired by the pass. Returns
    /// whether the pass is done (false: not leading, or its write failed and it will
    /// be tried again).
    pub fn evaluate(&mut self, lead: &mut Leadership, app: &App, force: bool, deleted: bool) -> bool {
        // A standby replica keeps its cache warm and evaluates nothing.
        let (Some(state), Some(delivery)) = (lead.store().cloned(), lead.delivery()) else { return false };
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
        let pass = match crate::pipeline::pass::run(
            &self.pipeline,
            &self.inputs,
            &state.pass(),
            delivery,
            app,
            deleted,
            (now, self.received_ms),
        ) {
            Ok(p) => p,
            Err(PassError::Write(StateError::Refused(reason)) | PassError::Evaluate(StateError::Refused(reason))) => {
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
                lead.write_failed();
                return false;
            }
        };
        METRICS.evaluations.inc();
        METRICS.evaluation_latency.observe(started.elapsed());
        self.decided(lead, app, key, fp, pass, now)
    }

    /// What a pass decided, noted: its logs and metrics, the Application's wake-up and
    /// live reads, the flush its write waits for, its fingerprint.
    fn decided(&mut self, lead: &mut Leadership, app: &App, key: String, fp: u64, pass: Pass, now: chrono::DateTime<Utc>) -> bool {
        let eval = pass.eval;
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
        note_episode(app, &eval);
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
            lead.written(key.clone());
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

    /// A write to the state store failed for `key`'s pass: evaluate it again after
    /// [`STORE_RETRY`] (the caller has the store reopened).
    pub fn store_failed(&mut self, key: &str, now: chrono::DateTime<Utc>) {
        self.evaluated.remove(key);
        let at = now + chrono::Duration::from_std(STORE_RETRY).unwrap_or(chrono::Duration::zero());
        self.wakeups.set_earlier(key, at);
    }

    /// Every Application is evaluated again at its next pass, changed or not (the
    /// store was taken over, the configuration reloaded).
    pub fn forget_fingerprints(&mut self) {
        self.evaluated.clear();
    }

    /// Takes the Applications whose wake-up time has come.
    pub fn due(&mut self) -> Vec<String> {
        self.wakeups.take_due(Utc::now())
    }

    /// How long until the next wake-up.
    pub fn next_wake(&self) -> Option<Duration> {
        let at = self.wakeups.next()?;
        Some((at - Utc::now()).to_std().unwrap_or(Duration::ZERO))
    }

    /// `key` is not woken any more.
    pub fn cancel_wakeup(&mut self, key: &str) {
        self.wakeups.remove(key);
    }

    /// Forgets what is kept about `key` beside the Application itself and its wake-up
    /// (a deleted Application whose last pass failed keeps that): its index of managed
    /// objects, its last fingerprint and logs, its live reads.
    pub fn forget(&mut self, key: &str) {
        self.unindex(key);
        self.evaluated.remove(key);
        self.annotation_logged.remove(key);
        self.outside_project.remove(key);
        if let Some(live) = self.live.as_mut() {
            self.inputs.live_forgotten(live.request(key, Vec::new(), crate::drift::ignore::IgnoreRules::default).forgotten);
        }
    }

    /// After [`Evaluator::forget`] of every key: new maps give their capacity back,
    /// and no wake-up is left.
    pub fn forget_all(&mut self) {
        self.evaluated = HashMap::new();
        self.annotation_logged = HashMap::new();
        self.outside_project = HashMap::new();
        self.wakeups = Wakeups::default();
    }

    /// Drops the audited attempts and break-glass writes older than their windows.
    /// Returns whether any condition reads the clock (decided from the compiled
    /// script): only then does the periodic resync evaluate every Application.
    pub fn resync(&mut self) -> bool {
        let rt = &self.pipeline.runtime;
        self.inputs.expire(rt.audit.window, rt.break_glass.max_for, Utc::now());
        super::reload::time_dependent(rt)
    }

    /// AppProject `p` was applied; whether it changed what its members read.
    pub fn project_seen(&mut self, p: crate::model::Project) -> bool {
        self.inputs.project_seen(p)
    }

    /// AppProject `name` is gone.
    pub fn project_gone(&mut self, name: &str) {
        self.inputs.project_gone(name);
    }

    /// The AppProjects of `stream`'s namespaces that its relist did not have.
    pub fn projects_gone_from(&self, stream: &Stream, seen: &BTreeSet<String>) -> Vec<String> {
        self.inputs.projects().filter(|p| stream.covers(&p.namespace) && !seen.contains(&p.name)).map(|p| p.name.clone()).collect()
    }

    /// Records an audited write of the break-glass annotation; false when the window
    /// is full.
    pub fn record_break_glass(&mut self, w: crate::drift::break_glass::Write) -> bool {
        self.inputs.break_glass_audited(w)
    }

    /// Records an audited attempt in its Application's window.
    pub fn record_attempt(&mut self, a: crate::drift::audit::Attempt) -> Recorded {
        let window = self.pipeline.runtime.audit.window;
        self.inputs.attempt_audited(a, &self.pipeline.runtime.classes, window, Utc::now())
    }
}

/// Counts an episode's opening or resolution (with its detection and resolution
/// times) and logs it.
fn note_episode(app: &App, eval: &crate::pipeline::Evaluation) {
    let (Some(ep), Some(event)) = (&eval.episode, eval.episode_event) else { return };
    if event == crate::drift::episode::Event::Updated {
        return;
    }
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
