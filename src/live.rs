//! Reads the live objects of drifted resources for attribution — outside the
//! evaluation path. The daemon asks [`LiveFetcher::request`] after an evaluation that
//! found OutOfSync resources; reads run in the background with bounded concurrency,
//! only object *metadata* is requested (`PartialObjectMetadata`: managed fields, never
//! a Secret's data), results are cached for a TTL, and each completed read comes back
//! as a [`Fetched`] so the daemon can re-evaluate the Applications that wait for it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use serde_json::Value;
use tokio::sync::{Mutex, Semaphore, mpsc};

use crate::attribution::resource_key;

/// At most this many resources are remembered (fresh or not); past it the oldest go.
pub const MAX_CACHED: usize = 10_000;
/// At most this many reads wait for a permit at once; more requests are dropped and
/// asked for again at the next evaluation.
pub const MAX_PENDING: usize = 1_000;

/// One drifted resource to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Its class by kind (what counts as a security field depends on it).
    pub class: String,
}

impl Wanted {
    pub fn key(&self) -> String {
        resource_key(&self.group, &self.kind, &self.namespace, &self.name)
    }

    /// The resources of a `drift` value that have what a read needs.
    pub fn from_drift(drift: &Value) -> Vec<Wanted> {
        let Some(list) = drift.get("resources").and_then(Value::as_array) else { return Vec::new() };
        list.iter()
            .filter_map(|r| {
                let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let w = Wanted {
                    group: s("group"),
                    version: s("version"),
                    kind: s("kind"),
                    namespace: s("namespace"),
                    name: s("name"),
                    class: s("kindClass"),
                };
                (!w.version.is_empty() && !w.kind.is_empty() && !w.name.is_empty()).then_some(w)
            })
            .collect()
    }
}

/// A completed read.
#[derive(Debug)]
pub struct Fetched {
    pub wanted: Wanted,
    /// The object's metadata as JSON (`{"metadata": {...managedFields}}`), `None` when
    /// it does not exist (any more), or why the read failed.
    pub object: Result<Option<Value>, String>,
    /// The Applications (state keys) that asked for it.
    pub apps: BTreeSet<String>,
}

/// The background reader and its cache bookkeeping (the attributions themselves live
/// in the pipeline's `LiveIndex`).
pub struct LiveFetcher {
    client: kube::Client,
    permits: Arc<Semaphore>,
    results: mpsc::Sender<Fetched>,
    discovery: Arc<Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>>,
    /// When each resource was last read.
    fetched: HashMap<String, Instant>,
    /// Reads in flight, and the Applications waiting for each.
    pending: HashMap<String, BTreeSet<String>>,
    ttl: Duration,
}

impl LiveFetcher {
    /// A fetcher and the receiving end of its results.
    pub fn new(client: kube::Client, concurrency: usize, ttl: Duration) -> (LiveFetcher, mpsc::Receiver<Fetched>) {
        let (tx, rx) = mpsc::channel(256);
        let f = LiveFetcher {
            client,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            results: tx,
            discovery: Arc::new(Mutex::new(HashMap::new())),
            fetched: HashMap::new(),
            pending: HashMap::new(),
            ttl,
        };
        (f, rx)
    }

    /// Asks for the resources of `app`'s drift that were never read or are stale.
    /// Returns how many reads were started.
    pub fn request(&mut self, app: &str, wanted: Vec<Wanted>) -> usize {
        let mut started = 0;
        for w in wanted {
            let key = w.key();
            if let Some(waiting) = self.pending.get_mut(&key) {
                waiting.insert(app.to_string());
                continue;
            }
            if self.fetched.get(&key).is_some_and(|at| at.elapsed() < self.ttl) {
                continue;
            }
            if self.pending.len() >= MAX_PENDING {
                tracing::debug!(resource = %key, "attribution reads are saturated; will ask again");
                continue;
            }
            self.pending.insert(key, BTreeSet::from([app.to_string()]));
            started += 1;
            let (client, permits, results, discovery) =
                (self.client.clone(), self.permits.clone(), self.results.clone(), self.discovery.clone());
            tokio::spawn(async move {
                let object = match permits.acquire_owned().await {
                    Ok(_permit) => read(&client, &discovery, &w).await,
                    Err(_) => Err("closed".into()),
                };
                // The receiver is gone only when the daemon is shutting down.
                let _ = results.send(Fetched { wanted: w, object, apps: BTreeSet::new() }).await;
            });
        }
        started
    }

    /// Takes a completed read: marks it fresh and returns it with the Applications
    /// that were waiting for it.
    pub fn complete(&mut self, mut f: Fetched) -> Fetched {
        let key = f.wanted.key();
        f.apps = self.pending.remove(&key).unwrap_or_default();
        if f.object.is_ok() {
            self.fetched.insert(key, Instant::now());
        }
        if self.fetched.len() > MAX_CACHED {
            let mut by_age: Vec<(String, Instant)> = self.fetched.iter().map(|(k, v)| (k.clone(), *v)).collect();
            by_age.sort_by_key(|(_, at)| *at);
            for (k, _) in by_age.into_iter().take(self.fetched.len() - MAX_CACHED) {
                self.fetched.remove(&k);
            }
        }
        f
    }
}

async fn read(
    client: &kube::Client,
    discovery: &Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>,
    w: &Wanted,
) -> Result<Option<Value>, String> {
    let gvk = GroupVersionKind::gvk(&w.group, &w.version, &w.kind);
    let known = discovery.lock().await.get(&gvk).cloned();
    let (ar, caps) = match known {
        Some(k) => k,
        None => {
            let found = kube::discovery::pinned_kind(client, &gvk).await.map_err(|e| format!("discovery of {}: {e}", w.kind))?;
            discovery.lock().await.insert(gvk, found.clone());
            found
        }
    };
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &ar),
        Scope::Namespaced => Api::namespaced_with(client.clone(), &w.namespace, &ar),
    };
    let meta = api.get_metadata_opt(&w.name).await.map_err(|e| format!("reading {} {}/{}: {e}", w.kind, w.namespace, w.name))?;
    match meta {
        Some(m) => serde_json::to_value(&m).map(Some).map_err(|e| e.to_string()),
        None => Ok(None),
    }
}
