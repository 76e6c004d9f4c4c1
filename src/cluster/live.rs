//! Reads the live objects of drifted resources — outside the evaluation path — for
//! attribution (`managedFields`) and the summarized diff (`drift::diff`). The daemon
//! asks [`LiveFetcher::request`] after an evaluation that found OutOfSync resources;
//! reads run in the background with bounded concurrency per cluster (a spoke that
//! hangs holds only its own permits), the attribution and the diff are computed on a
//! blocking thread, results are cached for a TTL, and each completed read comes back
//! as a [`Fetched`] so the daemon can re-evaluate the Applications that wait for it.
//! Only resources that drifted are read; with `diff.enabled: false` only their
//! metadata (`PartialObjectMetadata`).
//!
//! Clusters: the one driftwatch runs in, and each `clusters:` entry, each with its own
//! client, discovery cache, refused kinds and permits. A spoke whose client could not
//! be built answers every read with that error, at once.
//!
//! Desired state the writer does not control: without Argo CD's API, the security
//! values of a workload are Git's only as driftwatch itself read them while Argo CD
//! reported the resource Synced ([`LiveFetcher::record_in_sync`], once per revision),
//! never as the object's own annotations or manager names say (`drift::diff`).
//!
//! Least privilege: Secrets are not read unless `attribution.readSecrets` opts in (RBAC
//! cannot grant a metadata-only `get`; read, their data is only ever shown as
//! changed), and a kind the API server refuses (403) is remembered for
//! [`FORBIDDEN_BACKOFF`]: later reads of that kind are answered from memory, so missing
//! RBAC costs one request per kind, not a retry storm.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use serde_json::Value;
use tokio::sync::{Mutex, Semaphore, mpsc};

use crate::config::clusters::{DiffSettings, Target};
use crate::drift::Drift;
use crate::drift::attribution::{Attribution, live_key};
use crate::drift::diff::{self, DesiredSource, InSync};
use crate::drift::ignore::{ForResource, IgnoreRules};
use crate::metrics::METRICS;
use crate::model::ResourceRef;

mod analysis;
mod in_sync;

pub use analysis::{analyse, offline_attribution};
use in_sync::{SharedInSync, lock};

/// At most this many resources are remembered (fresh or not); past it the oldest go.
pub const MAX_CACHED: usize = 10_000;
/// One read (discovery and the Argo CD API included) gives up after this long.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// At most this many reads wait for a permit at once, per cluster; more requests are
/// dropped and asked for again at the next evaluation.
pub const MAX_PENDING: usize = 1_000;
/// After a 403, reads of the same kind are not sent again for this long (RBAC is
/// rarely changed; a restart or a new replica asks again at once).
pub const FORBIDDEN_BACKOFF: Duration = Duration::from_secs(600);
/// At most this many forbidden kinds are remembered per cluster.
const MAX_FORBIDDEN_KINDS: usize = 256;
/// What metrics and logs call the cluster driftwatch runs in.
pub const IN_CLUSTER: &str = "in-cluster";

/// One drifted resource to read.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub object: ResourceRef,
    pub version: String,
    /// Its class by kind (what counts as a security field depends on it).
    pub class: String,
    /// The spoke cluster it lives in (empty: the cluster driftwatch runs in).
    pub cluster: String,
    /// The Application that asked (for Argo CD's API).
    pub app_namespace: String,
    pub app_name: String,
    /// Its Application's `ignoreDifferences` for it, and what of them could not be used
    /// (filled in by [`LiveFetcher::request`] when the read starts).
    pub ignore: ForResource,
    pub notes: Vec<String>,
}

impl Wanted {
    pub fn key(&self) -> String {
        live_key(&self.cluster, &self.object)
    }

    /// What metrics and logs call its cluster.
    pub fn cluster_label(&self) -> &str {
        if self.cluster.is_empty() { IN_CLUSTER } else { &self.cluster }
    }

    /// The resources of an Application's `drift` that have what a read needs, in the
    /// cluster `target` (none when its destination is neither this cluster nor a
    /// configured spoke: a same-named object here would be the wrong one), and that its
    /// AppProject permits as `scope` judges them (those `notRead: outside-project` by it
    /// are never asked for). One refused by the read itself (its kind's scope is not the
    /// claimed one) is still asked for, so that its refusal stays fresh in the cache
    /// rather than being forgotten and asked for again at every evaluation.
    pub fn from_drift(drift: &Drift, target: &Target, app: &Value, scope: &crate::project::Scope) -> Vec<Wanted> {
        let cluster = match target {
            Target::Local => String::new(),
            Target::Spoke(l) => l.clone(),
            Target::Elsewhere(_) => return Vec::new(),
        };
        let readable: Vec<_> = drift
            .resources
            .iter()
            .filter(|r| !r.version.is_empty() && !r.object.kind.is_empty() && !r.object.name.is_empty())
            .filter(|r| scope.permits(&r.object.group, &r.object.kind, &r.object.namespace).is_ok())
            .collect();
        if readable.is_empty() {
            return Vec::new();
        }
        let meta = |k: &str| app.pointer(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or_default().to_string();
        readable
            .into_iter()
            .map(|r| Wanted {
                object: r.object.clone(),
                version: r.version.clone(),
                class: r.kind_class.clone(),
                cluster: cluster.clone(),
                app_namespace: meta("namespace"),
                app_name: meta("name"),
                ignore: ForResource::default(),
                notes: Vec::new(),
            })
            .collect()
    }
}

/// A completed read.
#[derive(Debug)]
pub struct Fetched {
    pub wanted: Wanted,
    /// The object's attribution and diff, `None` when it does not exist (any more), or
    /// why there is none.
    pub result: Result<Option<Attribution>, ReadError>,
}

impl Fetched {
    /// What is known of the resource after this read: its attribution and diff, why it
    /// was not read, or `None` when it does not exist.
    pub fn attribution(&self) -> Option<Attribution> {
        use crate::drift::attribution::NotReadReason;
        match &self.result {
            Ok(a) => a.clone(),
            Err(e @ ReadError::Forbidden { .. }) => Some(Attribution::not_read(NotReadReason::Forbidden, e.to_string())),
            Err(e @ ReadError::SecretsOff) => Some(Attribution::not_read(NotReadReason::SecretsOff, e.to_string())),
            Err(ReadError::Failed(e)) => {
                Some(Attribution::not_read(NotReadReason::Unreachable, format!("cluster {}: {e}", self.wanted.cluster_label())))
            }
            Err(ReadError::Refused(e)) => {
                Some(Attribution::not_read(NotReadReason::Error, format!("cluster {}: {e}", self.wanted.cluster_label())))
            }
            Err(ReadError::OutsideProject(e)) => Some(Attribution::not_read(NotReadReason::OutsideProject, e.clone())),
        }
    }
}

/// The Application `namespace/name` as the API server has it (for `driftwatch diff`).
pub async fn get_application(client: &kube::Client, namespace: &str, name: &str) -> Result<Option<Value>, String> {
    get_argocd_object(client, "Application", "applications", namespace, name).await
}

/// An AppProject by name, from Argo CD's namespace (`control_plane`): the only one
/// Argo CD reads projects from, whatever namespace the Application is in.
pub async fn get_project(client: &kube::Client, control_plane: &str, name: &str) -> Result<Option<Value>, String> {
    get_argocd_object(client, "AppProject", "appprojects", control_plane, name).await
}

async fn get_argocd_object(client: &kube::Client, kind: &str, plural: &str, namespace: &str, name: &str) -> Result<Option<Value>, String> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", kind), plural);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    match api.get_opt(name).await {
        Ok(Some(o)) => serde_json::to_value(&o).map(Some).map_err(|e| e.to_string()),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("reading {kind} {namespace}/{name}: {e}")),
    }
}

/// Why a read gave no object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The API server answered 403 (now, or for this kind within
    /// [`FORBIDDEN_BACKOFF`]): the RBAC does not grant `get` on `resource` in `group`.
    Forbidden { group: String, resource: String },
    /// A Secret, with `attribution.readSecrets` off: not asked for at all.
    SecretsOff,
    /// No answer (a connection error, a timeout, a spoke whose client could not be
    /// built): the cluster is taken as down until a read succeeds; tried again after
    /// the TTL.
    Failed(String),
    /// The API server answered with an error other than 403 (a kind it does not serve,
    /// a 500): the cluster is up; tried again after the TTL.
    Refused(String),
    /// The API server serves the kind with the other scope than `status.resources`
    /// claims (a cluster-scoped kind under a namespace, a namespaced one without): a
    /// hand-written status, not read (`project::scope_mismatch`).
    OutsideProject(String),
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
            ReadError::Failed(e) | ReadError::Refused(e) | ReadError::OutsideProject(e) => f.write_str(e),
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

/// One cluster's client and what is remembered about it.
struct Cluster {
    client: Result<kube::Client, super::client::ConnectError>,
    discovery: DiscoveryCache,
    forbidden: ForbiddenKinds,
    permits: Arc<Semaphore>,
}

/// What every read needs besides its cluster.
pub struct ReadSettings {
    /// Whether Secrets are read (`attribution.readSecrets`).
    pub read_secrets: bool,
    /// Field managers whose writes are desired state (`attribution.ignoreManagers`).
    pub ignore_managers: Vec<String>,
    pub diff: DiffSettings,
    /// Argo CD's API, when configured (`argocd:`).
    pub argocd: Option<super::argocd::ArgocdApi>,
}

/// The background reader and its cache bookkeeping (the attributions themselves live
/// in the pipeline's `LiveIndex`).
pub struct LiveFetcher {
    clusters: HashMap<String, Arc<Cluster>>,
    settings: Arc<ReadSettings>,
    results: mpsc::Sender<Fetched>,
    /// When each resource was last read.
    fetched: HashMap<String, Instant>,
    /// Reads in flight, and the Applications waiting for each; how many per cluster.
    pending: HashMap<String, BTreeSet<String>>,
    pending_by_cluster: HashMap<String, usize>,
    /// The drifted resources each Application asked for last, and how many
    /// Applications ask for each resource.
    by_app: HashMap<String, BTreeSet<String>>,
    refs: HashMap<String, usize>,
    ttl: Duration,
    in_sync: SharedInSync,
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
    /// A fetcher for the cluster driftwatch runs in (`local`) and the spokes (by label;
    /// a client that could not be built is its error), and the receiving end of its
    /// results.
    pub fn new(
        local: kube::Client,
        spokes: Vec<(String, Result<kube::Client, super::client::ConnectError>)>,
        concurrency: usize,
        ttl: Duration,
        settings: ReadSettings,
    ) -> (LiveFetcher, mpsc::Receiver<Fetched>) {
        let (tx, rx) = mpsc::channel(256);
        let cluster = |client| {
            Arc::new(Cluster {
                client,
                discovery: Mutex::new(HashMap::new()),
                forbidden: std::sync::Mutex::new(HashMap::new()),
                permits: Arc::new(Semaphore::new(concurrency.max(1))),
            })
        };
        let mut clusters = HashMap::from([(String::new(), cluster(Ok(local)))]);
        for (label, client) in spokes {
            clusters.insert(label, cluster(client));
        }
        let f = LiveFetcher {
            clusters,
            settings: Arc::new(settings),
            results: tx,
            fetched: HashMap::new(),
            pending: HashMap::new(),
            pending_by_cluster: HashMap::new(),
            by_app: HashMap::new(),
            refs: HashMap::new(),
            ttl,
            in_sync: SharedInSync::default(),
        };
        (f, rx)
    }

    /// The fetcher a configuration asks for: the cluster driftwatch runs in (`local`),
    /// a client per `clusters:` entry (one that cannot be built is logged and answers
    /// its reads with why, never fatal: the other clusters go on), Argo CD's API when
    /// `argocd:` is configured, and the attribution and diff settings.
    pub async fn for_runtime(rt: &crate::config::Runtime, local: kube::Client) -> (LiveFetcher, mpsc::Receiver<Fetched>) {
        let mut spokes = Vec::new();
        for spec in &rt.clusters {
            let c = super::client::spoke(spec, &local).await;
            if let Err(e) = &c {
                tracing::warn!(cluster = %spec.label, error = %e, "a spoke cluster's client could not be built; its reads fail until a restart");
            }
            spokes.push((spec.label.clone(), c));
        }
        let argocd = match rt.argocd.as_ref().map(super::argocd::ArgocdApi::new) {
            Some(Ok(a)) => Some(a),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "Argo CD's API cannot be used; desired values come from the last-applied annotation");
                None
            }
            None => None,
        };
        let settings = ReadSettings {
            read_secrets: rt.attribution.read_secrets,
            ignore_managers: rt.attribution.ignore_managers.clone(),
            diff: rt.diff.clone(),
            argocd,
        };
        LiveFetcher::new(local, spokes, rt.attribution.concurrency, rt.attribution.ttl, settings)
    }

    /// Asks for the resources of `app`'s drift that were never read or are stale, and
    /// forgets those `app` no longer reports (with no other Application reporting
    /// them). An empty `wanted` is how a synced or deleted Application lets go.
    /// `rules` gives the Application's `ignoreDifferences`: parsed only when a read
    /// starts (most requests find every resource fresh).
    pub fn request(&mut self, app: &str, wanted: Vec<Wanted>, rules: impl FnOnce() -> IgnoreRules) -> Requested {
        let mut rules = Some(rules);
        let mut parsed: Option<IgnoreRules> = None;
        let mut out = Requested::default();
        let now: BTreeSet<String> = wanted.iter().map(Wanted::key).collect();
        let before = if now.is_empty() {
            self.by_app.remove(app).unwrap_or_default()
        } else {
            self.by_app.insert(app.to_string(), now.clone()).unwrap_or_default()
        };
        for k in now.difference(&before) {
            *self.refs.entry(k.clone()).or_default() += 1;
            // An in-sync read still on its way may read the drift: it is not kept.
            lock(&self.in_sync).in_flight.remove(k);
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
            let in_cluster = self.pending_by_cluster.entry(w.cluster.clone()).or_default();
            if *in_cluster >= MAX_PENDING {
                tracing::debug!(resource = %key, "live reads of this cluster are saturated; will ask again");
                continue;
            }
            *in_cluster += 1;
            let mut w = w;
            if parsed.is_none() {
                parsed = rules.take().map(|f| f());
            }
            if let Some(r) = &parsed {
                w.ignore = r.for_resource(&w.object.group, &w.object.kind, &w.object.namespace, &w.object.name);
                w.notes = r.notes.clone();
            }
            self.pending.insert(key, BTreeSet::from([app.to_string()]));
            out.started += 1;
            let (results, settings, in_sync) = (self.results.clone(), self.settings.clone(), self.in_sync.clone());
            let Some(cluster) = self.clusters.get(&w.cluster).cloned() else {
                // Configured by a reload after start-up: no client until a restart.
                let why = format!("cluster {} was configured after start-up: live reads from it need a restart", w.cluster_label());
                tokio::spawn(async move {
                    let _ = results.send(Fetched { wanted: w, result: Err(ReadError::Refused(why)) }).await;
                });
                continue;
            };
            tokio::spawn(async move {
                let not_read = crate::drift::classes::NOT_READ_BY_DEFAULT.contains(&(w.object.group.as_str(), w.object.kind.as_str()));
                let result = if not_read && !settings.read_secrets {
                    Err(ReadError::SecretsOff)
                } else if let Some(e) = known_forbidden(&cluster.forbidden, &w) {
                    Err(e)
                } else {
                    match cluster.permits.clone().acquire_owned().await {
                        // A hung request must not hold a permit for long.
                        Ok(_permit) => match tokio::time::timeout(READ_TIMEOUT, read(&cluster, &settings, &w, &in_sync)).await {
                            Ok(r) => r,
                            Err(_) => Err(ReadError::Failed(format!("no answer within {READ_TIMEOUT:?}"))),
                        },
                        Err(_) => Err(ReadError::Failed("closed".into())),
                    }
                };
                let outcome = match &result {
                    Err(ReadError::Failed(_)) => "failed",
                    Err(ReadError::Refused(_)) => "error",
                    _ => "ok",
                };
                METRICS.cluster_reads.inc(&format!("{outcome}:{}", w.cluster_label()));
                // The receiver is gone only when the daemon is shutting down.
                let _ = results.send(Fetched { wanted: w, result }).await;
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
        if let Some(n) = self.pending_by_cluster.get_mut(&f.wanted.cluster) {
            *n = n.saturating_sub(1);
        }
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
    let key = (w.object.group.clone(), w.object.kind.clone());
    match kinds.get(&key) {
        Some((resource, until)) if Instant::now() < *until => {
            Some(ReadError::Forbidden { group: w.object.group.clone(), resource: resource.clone() })
        }
        Some(_) => {
            kinds.remove(&key);
            None
        }
        None => None,
    }
}

async fn read(
    cluster: &Cluster,
    settings: &Arc<ReadSettings>,
    w: &Wanted,
    in_sync: &SharedInSync,
) -> Result<Option<Attribution>, ReadError> {
    let Some(object) = get_object(cluster, settings.diff.enabled, w).await? else { return Ok(None) };
    // Argo CD's view of the desired state, when its API is configured.
    let argocd = match (&settings.argocd, settings.diff.enabled) {
        (Some(api), true) => Some(
            api.target(&super::argocd::Resource {
                app_namespace: &w.app_namespace,
                app_name: &w.app_name,
                group: &w.object.group,
                version: &w.version,
                kind: &w.object.kind,
                namespace: &w.object.namespace,
                name: &w.object.name,
            })
            .await,
        ),
        _ => None,
    };
    let recorded = lock(in_sync).by_key.get(&w.key()).map(|(_, v)| v.clone());
    let what = format!("{} {}/{}", w.object.kind, w.object.namespace, w.object.name);
    let (settings, w) = (settings.clone(), w.clone());
    tokio::task::spawn_blocking(move || Some(analyse(&object, &settings, &w, argocd.map(|r| r.map_err(|e| e.0)), recorded.as_deref())))
        .await
        .map_err(|e| ReadError::Failed(format!("diffing {what}: {e}")))
}

/// The live object `w` names (`full`: the whole object, else its metadata), `None`
/// when it does not exist; a 403 is remembered for the kind.
async fn get_object(cluster: &Cluster, full: bool, w: &Wanted) -> Result<Option<Value>, ReadError> {
    let client = cluster.client.as_ref().map_err(|e| ReadError::Failed(e.0.clone()))?;
    let gvk = GroupVersionKind::gvk(&w.object.group, &w.version, &w.object.kind);
    let known = cluster.discovery.lock().await.get(&gvk).cloned();
    let (ar, caps) = match known {
        Some(k) => k,
        None => {
            let found = kube::discovery::pinned_kind(client, &gvk).await.map_err(|e| {
                let why = format!("discovery of {} in {}: {e}", w.object.kind, w.cluster_label());
                if matches!(e, kube::Error::Api(_) | kube::Error::Discovery(_)) { ReadError::Refused(why) } else { ReadError::Failed(why) }
            })?;
            cluster.discovery.lock().await.insert(gvk, found.clone());
            found
        }
    };
    // Whether the object is namespaced is the API server's answer, never the claim the
    // project's rule was applied to: a mismatch is refused before any request for it.
    if let Some(why) = crate::project::scope_mismatch(&w.object.group, &w.object.kind, &w.object.namespace, caps.scope == Scope::Namespaced)
    {
        return Err(ReadError::OutsideProject(why));
    }
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &ar),
        Scope::Namespaced => Api::namespaced_with(client.clone(), &w.object.namespace, &ar),
    };
    METRICS.live_reads.inc();
    let got = if full {
        api.get_opt(&w.object.name).await.map(|o| o.map(|o| serde_json::to_value(&o)))
    } else {
        api.get_metadata_opt(&w.object.name).await.map(|o| o.map(|o| serde_json::to_value(&o)))
    };
    match got {
        Ok(Some(Ok(v))) => Ok(Some(v)),
        Ok(Some(Err(e))) => Err(ReadError::Failed(e.to_string())),
        Ok(None) => Ok(None),
        Err(kube::Error::Api(status)) if status.is_forbidden() => {
            let mut kinds = cluster.forbidden.lock().unwrap_or_else(|p| p.into_inner());
            if kinds.len() < MAX_FORBIDDEN_KINDS {
                kinds.insert((w.object.group.clone(), w.object.kind.clone()), (ar.plural.clone(), Instant::now() + FORBIDDEN_BACKOFF));
            }
            Err(ReadError::Forbidden { group: w.object.group.clone(), resource: ar.plural.clone() })
        }
        Err(e) => {
            let why = format!("reading {} {}/{} in {}: {e}", w.object.kind, w.object.namespace, w.object.name, w.cluster_label());
            Err(if matches!(e, kube::Error::Api(_)) { ReadError::Refused(why) } else { ReadError::Failed(why) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(name: &str) -> Wanted {
        Wanted {
            object: ResourceRef { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: name.into() },
            version: "v1".into(),
            class: "workload".into(),
            cluster: String::new(),
            app_namespace: "argocd".into(),
            app_name: "shop".into(),
            ignore: ForResource::default(),
            notes: Vec::new(),
        }
    }

    fn settings() -> ReadSettings {
        ReadSettings { read_secrets: false, ignore_managers: Vec::new(), diff: DiffSettings::default(), argocd: None }
    }

    #[tokio::test]
    async fn requests_are_shared_and_released_when_no_application_reports_the_drift() {
        crate::tls::init_crypto();
        // Nothing listens there: reads fail, which is all this test needs.
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let (mut f, mut rx) = LiveFetcher::new(client, Vec::new(), 2, Duration::from_secs(60), settings());
        // The Application's ignoreDifferences are parsed once for the reads that start,
        // not at all when none does.
        let parsed = std::cell::Cell::new(0);
        let rules = || {
            parsed.set(parsed.get() + 1);
            IgnoreRules::of(&serde_json::json!({"spec": {"ignoreDifferences": [
                {"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]}}))
        };
        assert_eq!(f.request("a", vec![wanted("web"), wanted("api")], rules).started, 2);
        assert_eq!(parsed.get(), 1);
        // Another Application with the same drifted resource waits for the same read.
        assert_eq!(f.request("b", vec![wanted("web")], rules).started, 0);
        assert_eq!(parsed.get(), 1, "nothing started: nothing parsed");
        assert_eq!(f.request("a", vec![wanted("web")], IgnoreRules::default).forgotten, vec![wanted("api").key()]);
        assert!(f.request("a", Vec::new(), IgnoreRules::default).forgotten.is_empty(), "b still reports web");
        assert_eq!(f.request("b", Vec::new(), IgnoreRules::default).forgotten, vec![wanted("web").key()]);
        // Completed reads of resources nobody reports any more are dropped.
        for _ in 0..2 {
            let done = rx.recv().await.unwrap();
            assert!(!done.wanted.ignore.is_empty(), "the read carries the rules for its resource");
            assert!(matches!(done.result, Err(ReadError::Failed(_))), "nothing listens there");
            assert_eq!(f.complete(&done), None);
        }
        assert!(f.fetched.is_empty());
        assert_eq!(
            Wanted::from_drift(
                &serde_json::from_value(serde_json::json!({"resources": [{"kind": "X", "name": "n"}]})).unwrap(),
                &Target::Local,
                &serde_json::json!({}),
                &crate::project::Scope::unrestricted()
            ),
            vec![],
            "no version: cannot be read"
        );
    }

    #[tokio::test]
    async fn a_cluster_configured_after_start_up_is_answered_with_why() {
        crate::tls::init_crypto();
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let (mut f, mut rx) = LiveFetcher::new(client, Vec::new(), 2, Duration::from_secs(60), settings());
        let late = Wanted { cluster: "spoke-9".into(), ..wanted("web") };
        assert_eq!(f.request("a", vec![late], IgnoreRules::default).started, 1);
        let done = rx.recv().await.unwrap();
        assert!(matches!(&done.result, Err(ReadError::Refused(e)) if e.contains("configured after start-up")), "{:?}", done.result);
        assert_eq!(f.complete(&done).map(|apps| apps.len()), Some(1));
        let nr = done.attribution().and_then(|a| a.not_read).unwrap();
        assert!(nr.message.starts_with("cluster spoke-9: "), "{}", nr.message);
    }

    #[tokio::test]
    async fn secrets_are_not_asked_for_and_a_refused_kind_is_remembered() {
        crate::tls::init_crypto();
        let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let (mut f, mut rx) = LiveFetcher::new(client, Vec::new(), 2, Duration::from_secs(60), settings());
        let secret = Wanted {
            object: ResourceRef { group: String::new(), kind: "Secret".into(), ..wanted("db").object },
            class: "secret".into(),
            ..wanted("db")
        };
        assert_eq!(f.request("a", vec![secret], IgnoreRules::default).started, 1);
        let done = rx.recv().await.unwrap();
        assert_eq!(done.result, Err(ReadError::SecretsOff), "answered without a request");

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

    /// Desired values from Argo CD's API when it answered; else the last-applied
    /// annotation, else not known, with why in the note.
    #[test]
    fn the_desired_values_come_from_argo_cd_when_it_answers() {
        use serde_json::json;
        let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 3}});
        // Through the read's analysis: the desired values are Argo CD's.
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop",
            "managedFields": [{"manager": "kubectl-scale", "operation": "Update", "time": "2026-12-03T10:00:00Z", "subresource": "scale",
                               "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 7}});
        let settings = ReadSettings { read_secrets: false, ignore_managers: Vec::new(), diff: DiffSettings::default(), argocd: None };
        let w = Wanted {
            object: ResourceRef { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() },
            version: "v1".into(),
            class: "workload".into(),
            cluster: String::new(),
            app_namespace: "argocd".into(),
            app_name: "shop".into(),
            ignore: Default::default(),
            notes: Vec::new(),
        };
        let a = analyse(&live, &settings, &w, Some(Ok(Some(target))), None);
        let d = a.diff.unwrap();
        assert_eq!(d.source, crate::drift::diff::DesiredSource::Argocd);
        assert_eq!((d.changes[0].path.as_str(), d.changes[0].desired.as_str(), d.changes[0].live.as_str()), ("spec.replicas", "3", "7"));
        let a = analyse(&live, &settings, &w, Some(Err("Argo CD API answered 503".into())), None);
        let d = a.diff.unwrap();
        assert_eq!(d.source, crate::drift::diff::DesiredSource::NotKnown, "no last-applied annotation to fall back on");
        assert!(d.note.contains("503"), "{}", d.note);
    }
}
