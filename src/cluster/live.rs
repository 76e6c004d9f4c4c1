//! Reads the live objects of drifted resources for attribution — outside the
//! evaluation path. The daemon asks [`LiveFetcher::request`] after an evaluation that
//! found OutOfSync resources; reads run in the background with bounded concurrency,
//! only object *metadata* is requested (`PartialObjectMetadata`: managed fields, never
//! a Secret's data), results are cached for a TTL, and each completed read comes back
//! as a [`Fetched`] so the daemon can re-evaluate the Applications that wait for it.
//!
//! Least privilege: Secrets are not read unless `attribution.readSecrets` opts in (RBAC
//! cannot grant a metadata-only `get`), and a kind the API server refuses (403) is
//! remembered for [`FORBIDDEN_BACKOFF`]: later reads of that kind are answered from
//! memory, so missing RBAC costs one request per kind, not a retry storm.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use serde_json::Value;
use tokio::sync::{Mutex, Semaphore, mpsc};

use crate::drift::Drift;
use crate::drift::attribution::resource_key;
use crate::metrics::METRICS;

/// At most this many resources are remembered (fresh or not); past it the oldest go.
pub const MAX_CACHED: usize = 10_000;
/// One read (discovery included) gives up after this long.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// At most this many reads wait for a permit at once; more requests are dropped and
/// asked for again at the next evaluation.
pub const MAX_PENDING: usize = 1_000;
/// After a 403, reads of the same kind are not sent again for this long (RBAC is
/// rarely changed; a restart or a new replica asks again at once).
pub const FORBIDDEN_BACKOFF: Duration = Duration::from_secs(600);
/// At most this many forbidden kinds are remembered.
const MAX_FORBIDDEN_KINDS: usize = 256;

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
    pub fn from_drift(drift: &Drift) -> Vec<Wanted> {
        drift
            .resources
            .iter()
            .filter(|r| !r.version.is_empty() && !r.kind.is_empty() && !r.name.is_empty())
            .map(|r| Wanted {
                group: r.group.clone(),
                version: r.version.clone(),
                kind: r.kind.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                class: r.kind_class.clone(),
            })
            .collect()
    }
}

/// A completed read.
#[derive(Debug)]
pub struct Fetched {
    pub wanted: Wanted,
    /// The object's metadata as JSON (`{"metadata": {...managedFields}}`), `None` when
    /// it does not exist (any more), or why there is none.
    pub object: Result<Option<Value>, ReadError>,
}

/// Why a read gave no object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The API server answered 403 (now, or for this kind within
    /// [`FORBIDDEN_BACKOFF`]): the RBAC does not grant `get` on `resource` in `group`.
    Forbidden { group: String, resource: String },
    /// A Secret, with `attribution.readSecrets` off: not asked for at all.
    SecretsOff,
    /// Anything else (no answer, a kind the API server does not serve, a connection
    /// error): tried again after the TTL.
    Failed(String),
}

impl ReadError {
    /// `deployments.apps`, `configmaps`: how RBAC and metrics name the resource.
    pub fn resource_label(group: &str, resource: &str) -> String {
        if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") }
    }

    /// The RBAC rule that would allow the read, for logs and the attribution's note.
    pub fn rule(group: &str, resource: &str) -> String {
        format!(r#"{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["get"]}}"#)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Forbidden { group, resource } => write!(
                f,
                "the API server forbids get on {}: a ClusterRole labelled {AGGREGATE_LABEL}: \"true\" with {} allows it",
                ReadError::resource_label(group, resource),
                ReadError::rule(group, resource)
            ),
            ReadError::SecretsOff => {
                write!(f, "Secrets are not read unless attribution.readSecrets is true (and the opt-in RBAC grants get on secrets)")
            }
            ReadError::Failed(e) => f.write_str(e),
        }
    }
}

/// The label that aggregates a ClusterRole's rules into driftwatch's attribution role
/// (`deploy/kubernetes/rbac.yaml`).
pub const AGGREGATE_LABEL: &str = "driftwatch.io/aggregate-to-attribution";

type DiscoveryCache = Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>;
/// Kinds the API server refused, by (group, kind): their resource name, and until when
/// the refusal is taken as still standing.
type ForbiddenKinds = std::sync::Mutex<HashMap<(String, String), (String, Instant)>>;

/// The background reader and its cache bookkeeping (the attributions themselves live
/// in the pipeline's `LiveIndex`).
pub struct LiveFetcher {
    client: kube::Client,
    permits: Arc<Semaphore>,
    results: mpsc::Sender<Fetched>,
    discovery: Arc<DiscoveryCache>,
    forbidden: Arc<ForbiddenKinds>,
    /// Whether Secrets are read (`attribution.readSecrets`).
    read_secrets: bool,
    /// When each resource was last read.
    fetched: HashMap<String, Instant>,
    /// Reads in flight, and the Applications waiting for each.
    pending: HashMap<String, BTreeSet<String>>,
    /// The drifted resources each Application asked for last, and how many
    /// Applications ask for each resource.
    by_app: HashMap<String, BTreeSet<String>>,
    refs: HashMap<String, usize>,
    ttl: Duration,
}

/// What [`LiveFetcher::request`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Requested {
    /// Reads started.
    pub started: usize,
    /// Resources no Application reports as drifted any more: their attribution is
    /// stale (Argo CD may have taken the fields back) and must be dropped, so a later
    /// drift of the same resource is read afresh.
    pub forgotten: Vec<String>,
}

impl LiveFetcher {
    /// A fetcher and the receiving end of its results.
    pub fn new(client: kube::Client, concurrency: usize, ttl: Duration, read_secrets: bool) -> (LiveFetcher, mpsc::Receiver<Fetched>) {
        let (tx, rx) = mpsc::channel(256);
        let f = LiveFetcher {
            client,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            results: tx,
            discovery: Arc::new(Mutex::new(HashMap::new())),
            forbidden: Arc::new(std::sync::Mutex::new(HashMap::new())),
            read_secrets,
            fetched: HashMap::new(),
            pending: HashMap::new(),
            by_app: HashMap::new(),
            refs: HashMap::new(),
            ttl,
        };
        (f, rx)
    }

    /// Asks for the resources of `app`'s drift that were never read or are stale, and
    /// forgets those `app` no longer reports (with no other Application reporting
    /// them). An empty `wanted` is how a synced or deleted Application lets go.
    pub fn request(&mut self, app: &str, wanted: Vec<Wanted>) -> Requested {
        let mut out = Requested::default();
        let now: BTreeSet<String> = wanted.iter().map(Wanted::key).collect();
        let before = if now.is_empty() {
            self.by_app.remove(app).unwrap_or_default()
        } else {
            self.by_app.insert(app.to_string(), now.clone()).unwrap_or_default()
        };
        for k in now.difference(&before) {
            *self.refs.entry(k.clone()).or_default() += 1;
        }
        for k in before.difference(&now) {
            let n = self.refs.get_mut(k).map(|n| {
                *n = n.saturating_sub(1);
                *n
            });
            if n == Some(0) {
                self.refs.remove(k);
                self.fetched.remove(k);
                out.forgotten.push(k.clone());
            }
        }
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
            out.started += 1;
            let (client, permits, results, discovery, forbidden) =
                (self.client.clone(), self.permits.clone(), self.results.clone(), self.discovery.clone(), self.forbidden.clone());
            let read_secrets = self.read_secrets;
            tokio::spawn(async move {
                let not_read = crate::drift::classes::NOT_READ_BY_DEFAULT.contains(&(w.group.as_str(), w.kind.as_str()));
                let object = if not_read && !read_secrets {
                    Err(ReadError::SecretsOff)
                } else if let Some(e) = known_forbidden(&forbidden, &w) {
                    Err(e)
                } else {
                    match permits.acquire_owned().await {
                        // A hung request must not hold a permit for long.
                        Ok(_permit) => match tokio::time::timeout(READ_TIMEOUT, read(&client, &discovery, &forbidden, &w)).await {
                            Ok(r) => r,
                            Err(_) => Err(ReadError::Failed(format!("no answer within {READ_TIMEOUT:?}"))),
                        },
                        Err(_) => Err(ReadError::Failed("closed".into())),
                    }
                };
                // The receiver is gone only when the daemon is shutting down.
                let _ = results.send(Fetched { wanted: w, object }).await;
            });
        }
        out
    }

    /// Takes a completed read: marks it fresh (a failed one too, so it is tried again
    /// after the TTL rather than at every evaluation: a kind the API server does not
    /// serve would fail every time) and returns the Applications waiting for it, or
    /// `None` when no Application reports the resource as drifted any more (the result
    /// is to be dropped).
    pub fn complete(&mut self, f: &Fetched) -> Option<BTreeSet<String>> {
        let key = f.wanted.key();
        let apps = self.pending.remove(&key).unwrap_or_default();
        if !self.refs.contains_key(&key) {
            return None;
        }
        self.fetched.insert(key, Instant::now());
        while self.fetched.len() > MAX_CACHED {
            let Some(oldest) = self.fetched.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone()) else { break };
            self.fetched.remove(&oldest);
        }
        Some(apps)
    }
}

/// The refusal remembered for `w`'s kind, while it is recent.
fn known_forbidden(forbidden: &ForbiddenKinds, w: &Wanted) -> Option<ReadError> {
    let mut kinds = forbidden.lock().unwrap_or_else(|p| p.into_inner());
    let key = (w.group.clone(), w.kind.clone());
    match kinds.get(&key) {
        Some((resource, until)) if Instant::now() < *until => {
            Some(ReadError::Forbidden { group: w.group.clone(), resource: resource.clone() })
        }
        Some(_) => {
            kinds.remove(&key);
            None
        }
        None => None,
    }
}

async fn read(
    client: &kube::Client,
    discovery: &DiscoveryCache,
    forbidden: &ForbiddenKinds,
    w: &Wanted,
) -> Result<Option<Value>, ReadError> {
    let gvk = GroupVersionKind::gvk(&w.group, &w.version, &w.kind);
    let known = discovery.lock().await.get(&gvk).cloned();
    let (ar, caps) = match known {
        Some(k) => k,
        None => {
            let found =
                kube::discovery::pinned_kind(client, &gvk).await.map_err(|e| ReadError::Failed(format!("discovery of {}: {e}", w.kind)))?;
            discovery.lock().await.insert(gvk, found.clone());
            found
        }
    };
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &ar),
        Scope::Namespaced => Api::namespaced_with(client.clone(), &w.namespace, &ar),
    };
    METRICS.live_reads.inc();
    let meta = match api.get_metadata_opt(&w.name).await {
        Ok(m) => m,
        Err(kube::Error::Api(status)) if status.is_forbidden() => {
            let mut kinds = forbidden.lock().unwrap_or_else(|p| p.into_inner());
            if kinds.len() < MAX_FORBIDDEN_KINDS {
                kinds.insert((w.group.clone(), w.kind.clone()), (ar.plural.clone(), Instant::now() + FORBIDDEN_BACKOFF));
            }
            return Err(ReadError::Forbidden { group: w.group.clone(), resource: ar.plural.clone() });
        }
        Err(e) => return Err(ReadError::Failed(format!("reading {} {}/{}: {e}", w.kind, w.namespace, w.name))),
    };
    match meta {
        Some(m) => serde_json::to_value(&m).map(Some).map_err(|e| ReadError::Failed(e.to_string())),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(name: &str) -> Wanted {
        Wanted {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: name.into(),
            class: "workload".into(),
        }
    }

    #[tokio::test]
    async fn requests_are_shared_and_released_when_no_application_reports_the_drift() {
        crate::tls::init_crypto();
        // Nothing listens there: reads fail, which is all this test needs.
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let (mut f, mut rx) = LiveFetcher::new(client, 2, Duration::from_secs(60), false);
        assert_eq!(f.request("a", vec![wanted("web"), wanted("api")]).started, 2);
        // Another Application with the same drifted resource waits for the same read.
        assert_eq!(f.request("b", vec![wanted("web")]).started, 0);
        assert_eq!(f.request("a", vec![wanted("web")]).forgotten, vec![wanted("api").key()]);
        assert!(f.request("a", Vec::new()).forgotten.is_empty(), "b still reports web");
        assert_eq!(f.request("b", Vec::new()).forgotten, vec![wanted("web").key()]);
        // Completed reads of resources nobody reports any more are dropped.
        for _ in 0..2 {
            let done = rx.recv().await.unwrap();
            assert!(matches!(done.object, Err(ReadError::Failed(_))), "nothing listens there");
            assert_eq!(f.complete(&done), None);
        }
        assert!(f.fetched.is_empty());
        assert_eq!(
            Wanted::from_drift(&serde_json::from_value(serde_json::json!({"resources": [{"kind": "X", "name": "n"}]})).unwrap()),
            vec![],
            "no version: cannot be read"
        );
    }

    #[tokio::test]
    async fn secrets_are_not_asked_for_and_a_refused_kind_is_remembered() {
        crate::tls::init_crypto();
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let (mut f, mut rx) = LiveFetcher::new(client, 2, Duration::from_secs(60), false);
        let secret = Wanted { group: String::new(), kind: "Secret".into(), class: "secret".into(), ..wanted("db") };
        assert_eq!(f.request("a", vec![secret]).started, 1);
        let done = rx.recv().await.unwrap();
        assert_eq!(done.object, Err(ReadError::SecretsOff), "answered without a request");

        let forbidden = ForbiddenKinds::default();
        let w = wanted("web");
        assert_eq!(known_forbidden(&forbidden, &w), None);
        forbidden.lock().unwrap().insert(("apps".into(), "Deployment".into()), ("deployments".into(), Instant::now() + FORBIDDEN_BACKOFF));
        let e = known_forbidden(&forbidden, &wanted("api")).unwrap();
        assert_eq!(e, ReadError::Forbidden { group: "apps".into(), resource: "deployments".into() }, "any object of the kind");
        assert!(e.to_string().contains(r#"{apiGroups: ["apps"], resources: ["deployments"], verbs: ["get"]}"#), "{e}");
        assert!(e.to_string().contains(AGGREGATE_LABEL), "{e}");
        forbidden.lock().unwrap().insert(("apps".into(), "Deployment".into()), ("deployments".into(), Instant::now()));
        assert_eq!(known_forbidden(&forbidden, &w), None, "asked again once the back-off is over");
        assert!(forbidden.lock().unwrap().is_empty());
    }
}
