//! What the watch says: Applications and AppProjects applied or deleted, and relists
//! per stream, whose end deletes what a stream no longer lists.

use std::collections::{BTreeSet, HashMap};

use super::EvalThread;
use crate::cluster::watch::{Change, Kind, Stream};
use crate::metrics::METRICS;
use crate::model::{App, Project};

/// A one-line description of a change for debug logs (no whole objects).
struct ChangeSummary<'a>(&'a Change);

impl std::fmt::Debug for ChangeSummary<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Change::App(a) => write!(f, "app {}", a.qualified_name()),
            Change::AppDeleted(a) => write!(f, "app deleted {}", a.qualified_name()),
            Change::Project(p) => write!(f, "project {}/{}", p.namespace, p.name),
            Change::ProjectDeleted { namespace, name } => write!(f, "project deleted {namespace}/{name}"),
            Change::ListStarted(s) => write!(f, "list started: {s}"),
            Change::ListDone(s) => write!(f, "list done: {s}"),
            Change::Malformed { kind, name, .. } => write!(f, "malformed {} {name}", kind.as_str()),
            Change::Error { kind, error } => write!(f, "error {}: {error}", kind.as_str()),
        }
    }
}

/// The watch's lists: per stream with a (re)list in progress, the objects seen so far
/// (state keys of Applications, names of AppProjects). Per stream, because each
/// namespace relists on its own: a `410 Gone` in one says nothing about another.
pub(super) struct Lists {
    listing: HashMap<Stream, BTreeSet<String>>,
    /// Streams whose first list is done; ready once all of `streams` are.
    done: BTreeSet<Stream>,
    streams: BTreeSet<Stream>,
}

impl Lists {
    pub fn new(streams: BTreeSet<Stream>) -> Lists {
        Lists { listing: HashMap::new(), done: BTreeSet::new(), streams }
    }

    /// A (re)list of `stream` started.
    fn started(&mut self, stream: Stream) {
        self.listing.insert(stream, BTreeSet::new());
    }

    /// `name` (a state key or an AppProject's name) of `kind` in `namespace` was seen:
    /// by the lists in progress that cover it.
    fn seen(&mut self, kind: Kind, namespace: &str, name: &str) {
        for (stream, seen) in self.listing.iter_mut() {
            if stream.kind == kind && stream.covers(namespace) {
                seen.insert(name.to_string());
            }
        }
    }

    /// A list of `stream` ended: what it saw (none if its start was not seen).
    fn finished(&mut self, stream: &Stream) -> Option<BTreeSet<String>> {
        let seen = self.listing.remove(stream);
        self.done.insert(stream.clone());
        seen
    }

    /// The streams watched.
    pub(super) fn streams(&self) -> &BTreeSet<Stream> {
        &self.streams
    }

    /// Whether every stream's first list is done.
    pub(super) fn all_done(&self) -> bool {
        self.streams.iter().all(|s| self.done.contains(s))
    }
}

impl EvalThread {
    /// AppProject `name` changed or went: its subscriptions apply to its Applications,
    /// and its rule bounds what is read and indexed for them (nothing, once it is
    /// gone), so they are indexed and evaluated again now.
    fn project_changed(&mut self, name: &str) {
        let members = self.apps.members_of(name);
        for k in &members {
            if let Some(a) = self.apps.get(k) {
                self.eval.index_managed(&a);
            }
        }
        self.reevaluate(members);
    }

    /// AppProject `name` is gone (deleted, or not in its relist): its members are
    /// evaluated again without it.
    fn project_deleted(&mut self, name: &str) {
        METRICS.events.inc("appproject_delete");
        self.eval.project_gone(name);
        self.project_changed(name);
    }

    /// Whether an AppProject in `namespace` is one Argo CD reads: in its own namespace
    /// (`attribution.argocdNamespace`).
    fn argo_cds_project(&self, namespace: &str) -> bool {
        namespace == self.eval.runtime().attribution.argocd_namespace
    }

    pub(super) fn handle(&mut self, change: Change) {
        tracing::debug!(change = ?ChangeSummary(&change), "watch");
        match change {
            Change::App(app) => self.applied(&app),
            Change::AppDeleted(app) => self.deleted(*app),
            Change::Project(p) if !self.argo_cds_project(&p.namespace) => {
                // Argo CD reads AppProjects from its own namespace only; one elsewhere
                // (a tenant's, named like a real one) neither replaces nor removes it.
                METRICS.events.inc("appproject_elsewhere");
            }
            Change::ProjectDeleted { namespace, .. } if !self.argo_cds_project(&namespace) => {
                METRICS.events.inc("appproject_elsewhere");
            }
            Change::Project(p) => self.project_applied(p),
            Change::ProjectDeleted { name, .. } => self.project_deleted(&name),
            Change::ListStarted(stream) => {
                METRICS.events.inc(&format!("{}_list", stream.kind.as_str()));
                self.inbox_listed(&stream, false);
                self.lists.started(stream);
            }
            Change::ListDone(stream) => {
                self.inbox_listed(&stream, true);
                self.list_done(stream);
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

    /// An Application was applied: indexed, evaluated, kept.
    fn applied(&mut self, app: &App) {
        METRICS.events.inc("application_apply");
        self.lists.seen(Kind::of(app.engine()), &app.namespace, &app.state_key());
        self.eval.index_managed(app);
        self.eval.evaluate(&mut self.lead, app, false, false);
        self.apps.keep(app);
    }

    /// An AppProject of Argo CD's namespace was applied: its members are evaluated
    /// again if it changed what they read.
    fn project_applied(&mut self, p: Project) {
        METRICS.events.inc("appproject_apply");
        let name = p.name.clone();
        self.lists.seen(Kind::AppProject, &p.namespace, &name);
        if self.eval.project_seen(p) {
            self.project_changed(&name);
        }
    }

    /// A stream's list ended: what it no longer has was deleted while it was not
    /// watching; once every stream is listed, the daemon is ready.
    fn list_done(&mut self, stream: Stream) {
        if let Some(seen) = self.lists.finished(&stream) {
            self.relisted(&stream, &seen);
        }
        if self.sharded && self.lead.should_lead() {
            // A shard taken over was listed again: what the list's pages took
            // goes back, as at the first ready.
            crate::memory::release_free();
        }
        let all_listed = self.lists.all_done();
        if all_listed {
            // Ready means the lists' passes are written, the operations of first
            // passes waiting for a flush included.
            self.flush();
        }
        if all_listed && METRICS.ready.set(1) == 0 {
            // The local API server answered the lists: it is up until a live
            // read says otherwise.
            if !METRICS.cluster_up.has(crate::cluster::live::IN_CLUSTER) {
                METRICS.cluster_up.set(crate::cluster::live::IN_CLUSTER, 1);
            }
            crate::memory::ready();
        }
    }

    /// Deleted while `stream` was not watching: its relist (`seen`) no longer has them.
    /// Objects of other streams' namespaces are not its to judge.
    fn relisted(&mut self, stream: &Stream, seen: &BTreeSet<String>) {
        match stream.kind {
            Kind::Application | Kind::Unit(_) => {
                // Keys first, each parsed only when its turn comes: a relist
                // without a whole namespace does not hold all of it parsed.
                for k in self.apps.gone_from(stream, seen) {
                    if let Some(a) = self.apps.get(&k) {
                        self.deleted(a);
                    }
                }
            }
            Kind::AppProject => {
                for name in self.eval.projects_gone_from(stream, seen) {
                    self.project_deleted(&name);
                }
            }
        }
    }

    /// The Application `key` now deploys to a cluster of another shard: what this
    /// thread kept of it goes, and its state in this shard's store is retired (no last
    /// pass: it was not deleted; the other shard evaluates it from now on).
    pub(super) fn moved_away(&mut self, key: &str) {
        if !self.apps.forget(key) {
            return;
        }
        self.eval.forget(key);
        self.eval.cancel_wakeup(key);
        tracing::info!(app = %key, shard = self.shard, "the Application deploys to another shard's cluster now: retired here");
        if let Some(state) = self.lead.store()
            && let Err(e) = state.pass().retire_moved(key)
        {
            tracing::warn!(app = %key, error = %e, "retiring a moved Application's state failed; its keys stay in this shard");
        }
    }

    /// A shard this thread held is another replica's now: what it kept of the shard's
    /// Applications goes (the new holder lists them again), so the replica's memory is
    /// only what it owns. Nothing is evaluated: the store is closed.
    pub(super) fn forget_all(&mut self) {
        let keys = self.apps.forget_all();
        for key in &keys {
            self.eval.forget(key);
        }
        self.eval.forget_all();
        if !keys.is_empty() {
            tracing::info!(shard = self.shard, applications = keys.len(), "forgot the shard's Applications");
            crate::memory::release_free();
        }
    }

    /// The Application is gone: its last pass (on-deleted sees it deleted) retires its
    /// state, which the store purges once its last outbox entry has settled.
    pub(super) fn deleted(&mut self, app: App) {
        METRICS.events.inc("application_delete");
        let done = self.eval.evaluate(&mut self.lead, &app, true, true);
        let key = app.state_key();
        self.apps.remove(&key);
        self.eval.forget(&key);
        if !done && self.lead.sends() {
            // Its write failed: the retry wake-up evaluates it again, as deleted.
            self.apps.retire(&app);
        } else {
            self.eval.cancel_wakeup(&key);
        }
    }
}
