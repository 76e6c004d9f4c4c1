//! What an evaluation reads besides the Application and the store, kept by the driver
//! (the daemon from its watch, fetcher and audit input; a replay or `routes test` from
//! its files) and lent to each evaluation. The driver changes it only through the
//! operations below, each named for the event that causes it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::drift::attribution::{Attribution, LiveIndex};
use crate::drift::audit::{Attempt, AttemptIndex, Recorded};
use crate::drift::break_glass::{Write, Writes};
use crate::drift::classes::ClassMap;
use crate::model::{App, Project};

/// The pipeline holds none of it, so a new configuration keeps it as is.
#[derive(Debug, Default)]
pub struct Inputs {
    /// AppProjects by name (from the watch cache or replay files); never fetched per
    /// evaluation.
    pub(super) projects: BTreeMap<String, Project>,
    /// Attribution of drifted resources, read from the live objects outside the
    /// evaluation path (the daemon's fetcher, or live objects in a replay).
    pub(super) live: LiveIndex,
    /// Changes and refused attempts from the audit input, per Application, in the
    /// window (`audit.window`).
    pub(super) attempts: AttemptIndex,
    /// Writes of the break-glass annotation the audit input saw, per Application.
    pub(super) break_glass: Writes,
    /// Whether the driver reads drifted resources' live objects (the daemon with
    /// attribution on): a new episode then waits for them (`drift.awaitingLive`), and
    /// what is read is bounded by each Application's AppProject ([`Inputs::scope`]).
    pub(super) reads_live: bool,
}

impl Inputs {
    /// Empty inputs for a driver that reads live objects (`reads_live`) or not.
    pub fn new(reads_live: bool) -> Inputs {
        Inputs { reads_live, ..Inputs::default() }
    }

    /// What `app`'s AppProject lets the driver read for it: the project's rule when
    /// live objects are read on the Application's behalf (an unseen project permits
    /// nothing, nor does an Application Argo CD would refuse: `project::Scope`), with
    /// the destination resolved as Argo CD resolves it; unrestricted for a replay,
    /// which reads no cluster.
    pub fn scope(&self, app: &App, rt: &crate::config::Runtime) -> crate::project::Scope {
        if self.reads_live { self.project_scope(app, rt) } else { crate::project::Scope::unrestricted() }
    }

    /// The rule of the AppProject `app` names, whether or not live objects are read
    /// (the audit input's index is bounded by it too).
    pub fn project_scope(&self, app: &App, rt: &crate::config::Runtime) -> crate::project::Scope {
        let (server, name) = rt.destination_of(&app.object);
        let policy = self.projects.get(&app.project).map(|p| &p.policy);
        crate::project::Scope::of(&app.object, policy, &rt.attribution.argocd_namespace).resolved(&server, &name)
    }

    pub fn project(&self, name: &str) -> Option<&Project> {
        self.projects.get(name)
    }

    pub fn projects(&self) -> impl Iterator<Item = &Project> {
        self.projects.values()
    }

    /// An AppProject was seen (applied, listed, read from a file); returns whether it
    /// changed (its Applications are then evaluated again).
    pub fn project_seen(&mut self, p: Project) -> bool {
        let changed = self.projects.get(&p.name) != Some(&p);
        self.projects.insert(p.name.clone(), p);
        changed
    }

    /// An AppProject was deleted (or a relist no longer has it).
    pub fn project_gone(&mut self, name: &str) {
        self.projects.remove(name);
    }

    /// The attribution read from drifted resources' live objects, by
    /// [`crate::drift::attribution::live_key`].
    pub fn live(&self) -> &LiveIndex {
        &self.live
    }

    /// A drifted resource's live object was read (`Some`: what it says) or found gone
    /// (`None`). A failed read (`failed`) does not replace what an earlier read
    /// found. Returns whether what the evaluation sees changed.
    pub fn live_read(&mut self, key: String, read: Option<Attribution>, failed: bool) -> bool {
        if failed && self.live.get(&key).is_some_and(|a| a.not_read.is_none()) {
            return false;
        }
        if self.live.get(&key) == read.as_ref() {
            return false;
        }
        match read {
            Some(a) => self.live.insert(key, a),
            None => self.live.remove(&key),
        };
        true
    }

    /// Live objects no Application reads any more.
    pub fn live_forgotten(&mut self, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            self.live.remove(&k);
        }
    }

    /// A change or refused attempt the audit input saw, classified, kept in its
    /// Application's window.
    pub fn attempt_audited(&mut self, mut a: Attempt, classes: &ClassMap, window: chrono::Duration, now: DateTime<Utc>) -> Recorded {
        crate::drift::classify(&mut a, classes);
        self.attempts.record(a, window, now)
    }

    /// A write of the break-glass annotation the audit input saw; `false` when too
    /// many Applications have writes kept.
    pub fn break_glass_audited(&mut self, w: Write) -> bool {
        self.break_glass.record(w)
    }

    /// What the audit input kept about a deleted Application.
    pub fn app_gone(&mut self, app_key: &str) {
        self.attempts.remove(app_key);
        self.break_glass.remove(app_key);
    }

    /// Drops the audit input's attempts older than `window` and break-glass writes
    /// older than `keep`.
    pub fn expire(&mut self, window: chrono::Duration, keep: chrono::Duration, now: DateTime<Utc>) {
        self.attempts.expire(window, now);
        self.break_glass.expire(keep, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_read_does_not_replace_what_a_read_found() {
        let mut inputs = Inputs::new(true);
        let found = Attribution::default();
        let failed = Attribution::not_read(crate::drift::attribution::NotReadReason::Unreachable, "no answer".into());
        assert!(inputs.live_read("k".into(), Some(found.clone()), false), "new: changed");
        assert!(!inputs.live_read("k".into(), Some(found.clone()), false), "the same again: unchanged");
        assert!(!inputs.live_read("k".into(), Some(failed.clone()), true), "a failure keeps the read");
        assert_eq!(inputs.live().get("k"), Some(&found));
        assert!(inputs.live_read("k".into(), None, false), "gone");
        assert!(inputs.live_read("k".into(), Some(failed.clone()), true), "a failure is kept when nothing was read");
        assert_eq!(inputs.live().get("k"), Some(&failed));
    }
}
