//! What the watch says: Applications and AppProjects applied or deleted, and relists
//! per stream, whose end deletes what a stream no longer lists.

use super::{App, BTreeSet, Change, Core, HashMap, Kept, Kind, METRICS, Wakeups};

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

impl Core {
    /// AppProject `name` changed or went: its subscriptions apply to its Applications,
    /// and its rule bounds what is read and indexed for them (nothing, once it is
    /// gone), so they are indexed and evaluated again now.
    fn project_changed(&mut self, name: &str) {
        let members: Vec<String> = self.apps.iter().filter(|(_, a)| a.project == name).map(|(k, _)| k.clone()).collect();
        for k in &members {
            if let Some(a) = self.apps.get(k).and_then(Kept::app) {
                self.index_managed(&a);
            }
        }
        self.reevaluate(members);
    }

    /// Whether an AppProject in `namespace` is one Argo CD reads: in its own namespace
    /// (`attribution.argocdNamespace`).
    fn argo_cds_project(&self, namespace: &str) -> bool {
        namespace == self.pipeline.runtime.attribution.argocd_namespace
    }

    pub(super) fn handle(&mut self, change: Change) {
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
                self.index_managed(&app);
                self.evaluate(&app, false, false);
                self.apps.insert(key, Kept::of(&app));
            }
            Change::AppDeleted(app) => self.deleted(*app),
            Change::Project(p) if !self.argo_cds_project(&p.namespace) => {
                // Argo CD reads AppProjects from its own namespace only; one elsewhere
                // (a tenant's, named like a real one) neither replaces nor removes it.
                METRICS.events.inc("appproject_elsewhere");
            }
            Change::ProjectDeleted { namespace, .. } if !self.argo_cds_project(&namespace) => {
                METRICS.events.inc("appproject_elsewhere");
            }
            Change::Project(p) => {
                METRICS.events.inc("appproject_apply");
                let name = p.name.clone();
                for (stream, seen) in self.listing.iter_mut() {
                    if stream.kind == Kind::AppProject && stream.covers(&p.namespace) {
                        seen.insert(name.clone());
                    }
                }
                if self.inputs.project_seen(p) {
                    self.project_changed(&name);
                }
            }
            Change::ProjectDeleted { name, .. } => {
                METRICS.events.inc("appproject_delete");
                self.inputs.project_gone(&name);
                self.project_changed(&name);
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
                            // Keys first, each parsed only when its turn comes: a relist
                            // without a whole namespace does not hold all of it parsed.
                            let gone: Vec<String> = self
                                .apps
                                .iter()
                                .filter(|(k, a)| stream.covers(&a.namespace) && !seen.contains(*k))
                                .map(|(k, _)| k.clone())
                                .collect();
                            for k in gone {
                                if let Some(a) = self.apps.get(&k).and_then(Kept::app) {
                                    self.deleted(a);
                                }
                            }
                        }
                        Kind::AppProject => {
                            let gone: Vec<String> = self
                                .inputs
                                .projects()
                                .filter(|p| stream.covers(&p.namespace) && !seen.contains(&p.name))
                                .map(|p| p.name.clone())
                                .collect();
                            for name in gone {
                                METRICS.events.inc("appproject_delete");
                                self.inputs.project_gone(&name);
                                self.project_changed(&name);
                            }
                        }
                    }
                }
                self.lists_done.insert(stream);
                if self.sharded && self.leading {
                    // A shard taken over was listed again: what the list's pages took
                    // goes back, as at the first ready.
                    crate::memory::release_free();
                }
                let all_listed = self.streams.iter().all(|s| self.lists_done.contains(s));
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

    /// The Application `key` now deploys to a cluster of another shard: what this
    /// thread kept of it goes, and its state in this shard's store is retired (no last
    /// pass: it was not deleted; the other shard evaluates it from now on).
    pub(super) fn moved_away(&mut self, key: &str) {
        if self.apps.remove(key).is_none() && self.retiring.remove(key).is_none() {
            return;
        }
        self.forget_one(key);
        self.wakeups.remove(key);
        tracing::info!(app = %key, shard = self.shard, "the Application deploys to another shard's cluster now: retired here");
        if let Some(state) = &self.state
            && let Err(e) = state.pass().retire_moved(key)
        {
            tracing::warn!(app = %key, error = %e, "retiring a moved Application's state failed; its keys stay in this shard");
        }
    }

    /// Forgets what is kept about `key` beside the Application itself and its wake-up
    /// (a deleted Application whose last pass failed keeps that): its index of managed
    /// objects, its last fingerprint and logs, its live reads.
    fn forget_one(&mut self, key: &str) {
        self.unindex(key);
        self.evaluated.remove(key);
        self.annotation_logged.remove(key);
        self.outside_project.remove(key);
        if let Some(live) = self.live.as_mut() {
            self.inputs.live_forgotten(live.request(key, Vec::new(), crate::drift::ignore::IgnoreRules::default).forgotten);
        }
    }

    /// A shard this thread held is another replica's now: what it kept of the shard's
    /// Applications goes (the new holder lists them again), so the replica's memory is
    /// only what it owns. Nothing is evaluated: the store is closed.
    pub(super) fn forget_all(&mut self) {
        let keys: Vec<String> = self.apps.keys().chain(self.retiring.keys()).cloned().collect();
        for key in &keys {
            self.forget_one(key);
        }
        // Emptied above; new maps give their capacity back too.
        self.apps = HashMap::new();
        self.retiring = HashMap::new();
        self.evaluated = HashMap::new();
        self.annotation_logged = HashMap::new();
        self.outside_project = HashMap::new();
        self.wakeups = Wakeups::default();
        if !keys.is_empty() {
            tracing::info!(shard = self.shard, applications = keys.len(), "forgot the shard's Applications");
            crate::memory::release_free();
        }
    }

    /// The Application is gone: its last pass (on-deleted sees it deleted) retires its
    /// state, which the store purges once its last outbox entry has settled.
    pub(super) fn deleted(&mut self, app: App) {
        METRICS.events.inc("application_delete");
        let done = self.evaluate(&app, true, true);
        let key = app.state_key();
        self.apps.remove(&key);
        self.forget_one(&key);
        if !done && self.state.is_some() {
            // Its write failed: the retry wake-up evaluates it again, as deleted.
            self.retiring.insert(key.clone(), Kept::of(&app));
        } else {
            self.wakeups.remove(&key);
        }
    }
}
