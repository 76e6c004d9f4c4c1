//! The in-sync reading of resources: once per revision of its Application, a resource
//! that Argo CD reports Synced, and whose security values are values inside the object
//! (a workload's pod template), is read and the values that grant something are
//! recorded (`drift::diff::InSync`). Without Argo CD's API (`argocd:`) that record is
//! the only desired state for those values the writer of the object does not control:
//! the object's `last-applied-configuration` annotation and its `managedFields` names
//! are written by whoever writes the object.
//!
//! What it trusts: Argo CD's per-resource compare result in the Application's status
//! at the time of the read. Whoever may patch the Application can write that status
//! too (the CRD has no status subresource), and a write that lands between a change of
//! the object and Argo CD's next compare is read as in sync; `argocd:` closes both.

use super::{
    Arc, ForResource, HashMap, InSync, LiveFetcher, MAX_CACHED, METRICS, READ_TIMEOUT, Target, Value, Wanted, get_object, known_forbidden,
};
use std::collections::{HashSet, VecDeque};

use crate::model::ResourceRef;

/// At most this many in-sync reads are on their way at once (over all clusters); more
/// are asked for again at the Application's next evaluation.
const MAX_IN_FLIGHT: usize = 256;

/// The security values read from resources while Argo CD reported them Synced, by
/// [`Wanted::key`] with the Application's revision then (at most [`MAX_CACHED`], the
/// oldest dropped first), and the keys whose in-sync read is on its way. Shared with the
/// read tasks: a drifted resource's diff looks its record up, and an in-sync read that
/// completes after its resource was reported drifted is not kept (it may have read the
/// drift).
#[derive(Default)]
pub(super) struct InSyncBook {
    pub(super) by_key: HashMap<String, (String, Arc<InSync>)>,
    order: VecDeque<String>,
    pub(super) in_flight: HashSet<String>,
}

impl InSyncBook {
    fn insert(&mut self, key: String, revision: String, values: InSync) {
        if !self.by_key.contains_key(&key) {
            while self.by_key.len() >= MAX_CACHED {
                let Some(oldest) = self.order.pop_front() else { break };
                self.by_key.remove(&oldest);
            }
            self.order.push_back(key.clone());
        }
        self.by_key.insert(key, (revision, Arc::new(values)));
    }
}

pub(super) type SharedInSync = Arc<std::sync::Mutex<InSyncBook>>;

pub(super) fn lock(book: &SharedInSync) -> std::sync::MutexGuard<'_, InSyncBook> {
    book.lock().unwrap_or_else(|p| p.into_inner())
}

/// The revision an Application's status says it is synced to (multi-source: all of
/// them): an in-sync record is taken again when it changes.
fn revision(app: &Value) -> String {
    match app.pointer("/status/sync/revisions").and_then(Value::as_array) {
        Some(rs) if !rs.is_empty() => rs.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
        _ => app.pointer("/status/sync/revision").and_then(Value::as_str).unwrap_or_default().to_string(),
    }
}

impl Wanted {
    /// The resources of `app`'s status that Argo CD reports Synced, whose class holds
    /// security values, that its AppProject permits (`scope`) and that are not Secrets,
    /// in the cluster `target` (none elsewhere).
    pub fn in_sync(app: &Value, target: &Target, scope: &crate::project::Scope, classes: &crate::drift::classes::ClassMap) -> Vec<Wanted> {
        let cluster = match target {
            Target::Local => String::new(),
            Target::Spoke(l) => l.clone(),
            Target::Elsewhere(_) => return Vec::new(),
        };
        let meta = |k: &str| app.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or_default().to_string();
        let Some(list) = app.pointer("/status/resources").and_then(Value::as_array) else { return Vec::new() };
        list.iter()
            .filter(|r| r.get("status").and_then(Value::as_str) == Some("Synced"))
            .filter_map(|r| {
                let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                let class = classes.class_of(s("group"), s("kind"));
                let secret = crate::drift::classes::NOT_READ_BY_DEFAULT.contains(&(s("group"), s("kind")));
                let readable = !s("version").is_empty() && !s("kind").is_empty() && !s("name").is_empty();
                (readable
                    && !secret
                    && crate::drift::classes::holds_security_values(class)
                    && scope.permits(s("group"), s("kind"), s("namespace")).is_ok())
                .then(|| Wanted {
                    object: ResourceRef {
                        group: s("group").into(),
                        kind: s("kind").into(),
                        namespace: s("namespace").into(),
                        name: s("name").into(),
                    },
                    version: s("version").into(),
                    class: class.into(),
                    cluster: cluster.clone(),
                    app_namespace: meta("namespace"),
                    app_name: meta("name"),
                    ignore: ForResource::default(),
                    notes: Vec::new(),
                })
            })
            .collect()
    }
}

impl LiveFetcher {
    /// Reads the resources `wanted` (from [`Wanted::in_sync`]) that have no in-sync
    /// record for `app`'s revision, are not reported drifted by any Application, and
    /// whose read is not on its way; records their security values when the read
    /// completes and the resource was not reported drifted meanwhile. Only with
    /// `diff.enabled` (the whole object is read). Returns how many reads started.
    pub fn record_in_sync(&mut self, app: &Value, wanted: Vec<Wanted>) -> usize {
        if !self.settings.diff.enabled || wanted.is_empty() {
            return 0;
        }
        let rev = revision(app);
        let mut started = 0;
        for w in wanted {
            let key = w.key();
            if self.refs.contains_key(&key) {
                continue;
            }
            {
                let mut book = lock(&self.in_sync);
                let recorded = book.by_key.get(&key).is_some_and(|(r, _)| *r == rev);
                if recorded || book.in_flight.contains(&key) || book.in_flight.len() >= MAX_IN_FLIGHT {
                    continue;
                }
                book.in_flight.insert(key.clone());
            }
            let Some(cluster) = self.clusters.get(&w.cluster).cloned() else {
                lock(&self.in_sync).in_flight.remove(&key);
                continue;
            };
            started += 1;
            let (book, rev) = (self.in_sync.clone(), rev.clone());
            tokio::spawn(async move {
                // `Some(None)`: the object is not there (nothing of it is Git's, and it
                // is not read again for this revision); `None`: the read failed.
                let got = if known_forbidden(&cluster.forbidden, &w).is_some() {
                    None
                } else {
                    match cluster.permits.clone().acquire_owned().await {
                        Ok(_permit) => tokio::time::timeout(READ_TIMEOUT, get_object(&cluster, true, &w)).await.ok().and_then(Result::ok),
                        Err(_) => None,
                    }
                };
                let values = match got {
                    Some(Some(object)) => {
                        let class = w.class.clone();
                        tokio::task::spawn_blocking(move || InSync::of(&object, &class)).await.ok()
                    }
                    Some(None) => Some(InSync::default()),
                    None => None,
                };
                let mut b = lock(&book);
                if b.in_flight.remove(&key)
                    && let Some(values) = values
                {
                    b.insert(key, rev, values);
                    METRICS.diffs.inc("in-sync");
                }
            });
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_record_goes_first_and_a_new_revision_replaces_one() {
        let mut b = InSyncBook::default();
        for i in 0..MAX_CACHED + 2 {
            b.insert(format!("k{i}"), "r1".into(), InSync::default());
        }
        assert_eq!(b.by_key.len(), MAX_CACHED);
        assert!(!b.by_key.contains_key("k0") && !b.by_key.contains_key("k1") && b.by_key.contains_key("k2"));
        b.insert("k2".into(), "r2".into(), InSync::default());
        assert_eq!((b.by_key.len(), b.order.len()), (MAX_CACHED, MAX_CACHED));
        assert_eq!(b.by_key["k2"].0, "r2");
    }

    #[test]
    fn only_synced_resources_holding_security_values_inside_the_project_are_read_in_sync() {
        let app = serde_json::json!({"metadata": {"name": "shop", "namespace": "argocd"}, "status": {"sync": {"revision": "abc"}, "resources": [
            {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web", "status": "Synced"},
            {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "api", "status": "OutOfSync"},
            {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "shop", "name": "cfg", "status": "Synced"},
            {"group": "", "version": "v1", "kind": "Secret", "namespace": "shop", "name": "db", "status": "Synced"},
            {"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "shop", "name": "r", "status": "Synced"}]}});
        let classes = crate::drift::classes::ClassMap::default();
        let got = Wanted::in_sync(&app, &Target::Local, &crate::project::Scope::unrestricted(), &classes);
        assert_eq!(got.iter().map(|w| w.object.name.as_str()).collect::<Vec<_>>(), ["web"]);
        let unseen = crate::project::Scope::of(&app, None, "argocd");
        assert!(Wanted::in_sync(&app, &Target::Local, &unseen, &classes).is_empty(), "an unseen AppProject permits nothing");
        assert_eq!(revision(&app), "abc");
    }
}
