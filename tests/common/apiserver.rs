//! A fake Kubernetes API server that speaks the real list/watch protocol over HTTP for
//! its custom resources — `applications.argoproj.io` and `appprojects.argoproj.io`, and
//! Flux's `kustomizations.kustomize.toolkit.fluxcd.io` once installed
//! ([`FakeApiServer::install`]): discovery documents, lists in pages (`limit`,
//! `continue`) with a `resourceVersion`, chunked watch streams of JSON events from a given version,
//! bookmarks, `410 Gone` (an `ERROR` event with `code: 410`) for versions older than the
//! compacted history, label selectors, and connections it can drop on demand. Every
//! resource is served by the same code, its objects kept under their [`Resource`].
//! Like the real Application CRD, it has no status subresource: a status change is an
//! update of the whole object. It enforces RBAC as the API server does, with the rules the
//! project ships for the `driftwatch` service account (`deploy/`): a request they do
//! not allow gets `403 Forbidden`. A request with the bearer token `user-<name>` is a
//! person (`kubeconfig_for`), with their own rights: `SelfSubjectReview` says who they
//! are, a JSON merge patch of an Application (with `resourceVersion` as precondition)
//! is applied, and each such write is kept as the audit event the real server would
//! send (`audit_events`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::rbac::{Rule, service_account_rules};

/// A resource the server keeps objects of: its API group, version, kind and plural.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

impl Resource {
    fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// Argo CD's Applications: served from the start.
pub const APPLICATIONS: Resource = Resource { group: "argoproj.io", version: "v1alpha1", kind: "Application", plural: "applications" };
/// Argo CD's AppProjects: served from the start.
pub const APPPROJECTS: Resource = Resource { group: "argoproj.io", version: "v1alpha1", kind: "AppProject", plural: "appprojects" };
/// Flux's Kustomizations: served once installed ([`FakeApiServer::install`]), as on a
/// cluster with Flux.
pub const KUSTOMIZATIONS: Resource =
    Resource { group: "kustomize.toolkit.fluxcd.io", version: "v1", kind: "Kustomization", plural: "kustomizations" };
/// Leases (the leader election's), kept with the other objects; not watched.
const LEASES: Resource = Resource { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases" };

/// The custom resources the server can serve: discovery, list, watch and get of one
/// object, all namespaced.
const CUSTOM: [Resource; 3] = [APPLICATIONS, APPPROJECTS, KUSTOMIZATIONS];

/// The resource of `plural` (`applications`, `kustomizations`, `leases`, ...).
fn resource_named(plural: &str) -> Resource {
    CUSTOM
        .into_iter()
        .chain([LEASES])
        .find(|r| r.plural == plural)
        .unwrap_or_else(|| panic!("{plural}: not a resource the fake server keeps"))
}

/// The custom resource of an object, by its `kind` (an Application when it has none).
fn resource_of(obj: &Value) -> Resource {
    let kind = obj["kind"].as_str().unwrap_or("Application");
    CUSTOM.into_iter().find(|r| r.kind == kind).unwrap_or_else(|| panic!("{kind}: not a kind the fake server serves"))
}

#[derive(Clone)]
struct Event {
    rv: u64,
    resource: Resource,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct World {
    rv: u64,
    /// (resource, namespace, name) -> object.
    objects: BTreeMap<(Resource, String, String), Value>,
    /// The custom resources served now (their CRDs installed).
    installed: std::collections::BTreeSet<Resource>,
    history: Vec<Event>,
    /// Watches asking for versions older than this get 410 Gone.
    compacted_below: u64,
    /// The same, for the watches of one namespace only.
    compacted_in: BTreeMap<String, u64>,
    /// Namespaces whose list requests wait until released.
    held_lists: std::collections::BTreeSet<String>,
    /// List requests waiting on `held_lists` now.
    holding: u64,
    /// Every list request, in the order they arrived: its resource, and whether a held
    /// list was waiting then.
    list_arrivals: Vec<(String, bool)>,
    /// When the last page of a list was answered.
    last_page_at: Option<std::time::Instant>,
    lists: u64,
    watches: u64,
    /// Lease requests fail with 503 (the API server unreachable for the elector).
    lease_outage: bool,
    /// Lease requests get no answer at all (a partition that drops packets).
    lease_hang: bool,
    /// Clients (see `kubeconfig_as`) cut off: their requests get no answer.
    cut_off: std::collections::BTreeSet<String>,
    /// Lease updates (PUT) are answered this late (a slow API server).
    lease_put_delay: std::time::Duration,
    /// Live objects of managed resources by request path.
    live: BTreeMap<String, Value>,
    /// `(path, Accept header)` of every GET of a live object.
    live_gets: Vec<(String, String)>,
    /// The rules requests are checked against; `None`: everything is allowed.
    rbac: Option<Vec<Rule>>,
    /// `(verb, path)` of every request RBAC refused.
    refused: Vec<(String, String)>,
    /// The audit events of the writes people made (`user-<name>` tokens): what the API
    /// server's audit webhook would post, at RequestResponse level.
    audit: Vec<Value>,
}

/// (group, version, kind, plural, namespaced) of the resources discovery knows.
const RESOURCES: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("apps", "v1", "Deployment", "deployments", true),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false),
    ("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", true),
    // A custom resource the shipped RBAC does not cover.
    ("example.com", "v1", "Widget", "widgets", true),
];

fn api_prefix(group: &str, version: &str) -> String {
    if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") }
}

/// The discovery document of one group version, if it is known: the kinds of
/// [`RESOURCES`] and the custom resources `installed`.
fn discovery(path: &str, installed: &std::collections::BTreeSet<Resource>) -> Option<Value> {
    let custom = installed.iter().map(|r| (r.group, r.version, r.kind, r.plural, true));
    let resources: Vec<Value> = RESOURCES
        .iter()
        .copied()
        .chain(custom)
        .filter(|(g, v, ..)| api_prefix(g, v) == path)
        .map(|(_, _, kind, plural, namespaced)| {
            json!({"name": plural, "singularName": kind.to_lowercase(), "namespaced": namespaced, "kind": kind,
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let gv = path.trim_start_matches("/apis/").trim_start_matches("/api/");
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

pub struct FakeApiServer {
    pub addr: SocketAddr,
    world: Arc<Mutex<World>>,
    events: broadcast::Sender<Event>,
    /// Closing signal for open watch streams.
    drop_tx: broadcast::Sender<DropTarget>,
    runtime: Option<tokio::runtime::Runtime>,
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// Which open watch streams to close.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DropTarget {
    All,
    Namespace(String),
    /// Those of one client (see [`FakeApiServer::kubeconfig_as`]).
    Client(String),
}

fn full(status: u16, v: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())).boxed())
        .expect("response")
}

fn matches_selector(obj: &Value, selector: Option<&str>) -> bool {
    let Some(sel) = selector else { return true };
    sel.split(',').filter(|s| !s.is_empty()).all(|req| match req.split_once('=') {
        Some((k, v)) => obj.pointer(&format!("/metadata/labels/{}", k.replace('/', "~1"))).and_then(Value::as_str) == Some(v),
        None => obj.pointer(&format!("/metadata/labels/{}", req.replace('/', "~1"))).is_some(),
    })
}

impl FakeApiServer {
    /// Starts on 127.0.0.1 with its own runtime (tests using it may be synchronous),
    /// enforcing the shipped RBAC without the opt-ins.
    pub fn start() -> FakeApiServer {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let mut world = World {
            rv: 100,
            rbac: Some(service_account_rules(false)),
            installed: [APPLICATIONS, APPPROJECTS].into(),
            ..Default::default()
        };
        // Argo CD creates the `default` AppProject at start (permits every destination and kind).
        let default_project = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
            "metadata": {"name": "default", "namespace": "argocd", "uid": "uid-argocd-default", "resourceVersion": "100"},
            "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}});
        world.objects.insert((APPPROJECTS, "argocd".into(), "default".into()), default_project);
        let world = Arc::new(Mutex::new(world));
        let (events, _) = broadcast::channel(1024);
        let (drop_tx, _) = broadcast::channel(16);
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (w, ev, dt) = (world.clone(), events.clone(), drop_tx.clone());
        runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (w, ev, dt) = (w.clone(), ev.clone(), dt.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(req, w.clone(), ev.clone(), dt.clone()));
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        FakeApiServer { addr, world, events, drop_tx, runtime: Some(runtime) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at this server.
    pub fn kubeconfig(&self, path: &std::path::Path) {
        let kc = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\nusers:\n- name: tester\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\ncurrent-context: fake\n",
            self.url()
        );
        std::fs::write(path, kc).expect("write kubeconfig");
    }

    /// A kubeconfig for the person `user` (token `user-<user>`).
    pub fn kubeconfig_for(&self, path: &std::path::Path, user: &str) {
        self.kubeconfig(path);
        let kc = std::fs::read_to_string(path).expect("kubeconfig");
        std::fs::write(path, kc.replace("token: fake-token", &format!("token: user-{user}"))).expect("write kubeconfig");
    }

    /// The audit events of people's writes so far, taken (an `EventList`'s items).
    pub fn take_audit_events(&self) -> Vec<Value> {
        std::mem::take(&mut self.world.lock().unwrap().audit)
    }

    /// One stored object, by its resource's plural (`applications`, `kustomizations`).
    pub fn object(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        self.world.lock().unwrap().objects.get(&(resource_named(plural), ns.to_string(), name.to_string())).cloned()
    }

    /// Installs a custom resource's CRD (as `kubectl apply` of Flux's would): from now
    /// on discovery lists it and its objects are served like Applications (list,
    /// watch, get), and [`FakeApiServer::apply`] takes them.
    pub fn install(&self, resource: Resource) {
        self.world.lock().unwrap().installed.insert(resource);
    }

    /// A kubeconfig whose server URL carries `/clients/<name>`: the server tells this
    /// client's requests apart, so one replica can be cut off while another is not.
    pub fn kubeconfig_as(&self, path: &std::path::Path, name: &str) {
        self.kubeconfig(path);
        let kc = std::fs::read_to_string(path).expect("kubeconfig");
        std::fs::write(path, kc.replace(&self.url(), &format!("{}/clients/{name}", self.url()))).expect("write kubeconfig");
    }

    /// Cuts one client off (a network partition between it and the API server): its
    /// open watches close and its requests get no answer, until `on` is false.
    pub fn cut_off(&self, client: &str, on: bool) {
        let mut w = self.world.lock().unwrap();
        match on {
            true => w.cut_off.insert(client.to_string()),
            false => w.cut_off.remove(client),
        };
        drop(w);
        if on {
            let _ = self.drop_tx.send(DropTarget::Client(client.to_string()));
        }
    }

    /// Creates or replaces an object of a served custom resource (by its `kind`; an
    /// Application when it has none) (ADDED or MODIFIED), as `kubectl apply` would,
    /// including its status: the Application CRD has no status subresource (a
    /// Kustomization's status is written the same way here).
    pub fn apply(&self, mut obj: Value) -> u64 {
        let resource = resource_of(&obj);
        let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("argocd").to_string();
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut w = self.world.lock().unwrap();
        assert!(w.installed.contains(&resource), "{}: not installed (FakeApiServer::install)", resource.plural);
        w.rv += 1;
        let rv = w.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        obj["metadata"]["namespace"] = json!(ns);
        if obj.pointer("/metadata/uid").is_none() {
            obj["metadata"]["uid"] = json!(format!("uid-{ns}-{name}"));
        }
        let key = (resource, ns, name);
        let kind_ev = if w.objects.contains_key(&key) { "MODIFIED" } else { "ADDED" };
        w.objects.insert(key, obj.clone());
        let ev = Event { rv, resource, kind: kind_ev, object: obj };
        w.history.push(ev.clone());
        drop(w);
        let _ = self.events.send(ev);
        rv
    }

    /// Puts the live object of a managed resource (with its `managedFields`).
    pub fn put_live(&self, obj: Value) {
        let api_version = obj["apiVersion"].as_str().unwrap_or("v1");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let kind = obj["kind"].as_str().unwrap_or_default();
        let (_, _, _, plural, namespaced) = RESOURCES.iter().find(|r| r.0 == group && r.2 == kind).expect("a kind the fake server knows");
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let path = if *namespaced {
            let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
            format!("{}/namespaces/{ns}/{plural}/{name}", api_prefix(group, version))
        } else {
            format!("{}/{plural}/{name}", api_prefix(group, version))
        };
        self.world.lock().unwrap().live.insert(path, obj);
    }

    /// Replaces the rules requests are checked against (`None`: allow everything).
    pub fn set_rbac(&self, rules: Option<Vec<Rule>>) {
        self.world.lock().unwrap().rbac = rules;
    }

    /// `(verb, path)` of every request refused so far.
    pub fn refused(&self) -> Vec<(String, String)> {
        self.world.lock().unwrap().refused.clone()
    }

    /// `(path, Accept)` of every GET of a live object so far.
    pub fn live_gets(&self) -> Vec<(String, String)> {
        self.world.lock().unwrap().live_gets.clone()
    }

    /// Deletes an object, by its resource's plural (`applications`, `kustomizations`,
    /// `leases`): DELETED.
    pub fn delete(&self, plural: &str, ns: &str, name: &str) {
        let resource = resource_named(plural);
        let mut w = self.world.lock().unwrap();
        let Some(mut obj) = w.objects.remove(&(resource, ns.to_string(), name.to_string())) else { return };
        w.rv += 1;
        let rv = w.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let ev = Event { rv, resource, kind: "DELETED", object: obj };
        w.history.push(ev.clone());
        drop(w);
        let _ = self.events.send(ev);
    }

    /// Forgets history: a watch resuming from an older version gets 410 Gone.
    pub fn compact(&self) {
        let mut w = self.world.lock().unwrap();
        w.compacted_below = w.rv + 1;
        w.history.clear();
    }

    /// Closes every open watch stream (an API server restart, a load balancer timeout).
    pub fn drop_watches(&self) {
        let _ = self.drop_tx.send(DropTarget::All);
    }

    /// Forgets the history of one namespace's watches only: the watch of that
    /// namespace resuming from an older version gets 410 Gone, others resume.
    pub fn compact_namespace(&self, ns: &str) {
        let mut w = self.world.lock().unwrap();
        // As if etcd moved on (a write elsewhere) and compacted: every version this
        // namespace's watch has seen is gone, a list from now is not.
        w.rv += 1;
        let below = w.rv;
        w.compacted_in.insert(ns.to_string(), below);
    }

    /// Closes the open watch streams of one namespace.
    pub fn drop_watches_in(&self, ns: &str) {
        let _ = self.drop_tx.send(DropTarget::Namespace(ns.to_string()));
    }

    /// Holds (or releases) list requests for one namespace: they get no answer until
    /// released, as a slow API server would.
    pub fn hold_lists(&self, ns: &str, held: bool) {
        let mut w = self.world.lock().unwrap();
        match held {
            true => w.held_lists.insert(ns.to_string()),
            false => w.held_lists.remove(ns),
        };
    }

    /// Makes every Lease request hang (no answer) until turned off.
    pub fn lease_hang(&self, on: bool) {
        self.world.lock().unwrap().lease_hang = on;
    }

    /// Answers Lease updates (renewals) this late.
    pub fn lease_put_delay(&self, delay: std::time::Duration) {
        self.world.lock().unwrap().lease_put_delay = delay;
    }

    /// The Lease object, as stored.
    pub fn lease(&self, ns: &str, name: &str) -> Option<Value> {
        self.world.lock().unwrap().objects.get(&(LEASES, ns.to_string(), name.to_string())).cloned()
    }

    /// Makes every Lease request fail (503) until turned off.
    pub fn lease_outage(&self, on: bool) {
        self.world.lock().unwrap().lease_outage = on;
    }

    /// How many list requests are being held now ([`FakeApiServer::hold_lists`]).
    pub fn holding(&self) -> u64 {
        self.world.lock().unwrap().holding
    }

    /// Every list request so far, in the order they arrived: its resource's plural
    /// (`applications`, `appprojects`, `kustomizations`) and whether a held list was
    /// waiting then.
    pub fn list_arrivals(&self) -> Vec<(String, bool)> {
        self.world.lock().unwrap().list_arrivals.clone()
    }

    /// When the last page of a list was last answered (its body made, not yet sent).
    pub fn last_page_at(&self) -> Option<std::time::Instant> {
        self.world.lock().unwrap().last_page_at
    }

    /// Puts a Lease as it is (its `resourceVersion` set): one left from earlier, as a
    /// test needs it.
    pub fn put_lease(&self, mut lease: Value) {
        let mut w = self.world.lock().unwrap();
        w.rv += 1;
        lease["metadata"]["resourceVersion"] = json!(w.rv.to_string());
        let ns = lease.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string();
        let name = lease.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        w.objects.insert((LEASES, ns, name), lease);
    }

    /// (lists served, watches opened).
    pub fn counts(&self) -> (u64, u64) {
        let w = self.world.lock().unwrap();
        (w.lists, w.watches)
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// A request under an installed custom resource's group version:
/// `/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}]`.
enum CustomRequest {
    /// A list or a watch, in one namespace or in all.
    Collection {
        resource: Resource,
        namespace: Option<String>,
    },
    Object {
        resource: Resource,
        namespace: String,
        name: String,
    },
    /// Anything else under the group version (404).
    Other,
}

/// What `path` asks of the custom resources `installed`; `None` for a path outside
/// their group versions (or their discovery document).
fn custom_request(path: &str, installed: &std::collections::BTreeSet<Resource>) -> Option<CustomRequest> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["apis", group, version, rest @ ..] = parts.as_slice() else { return None };
    if rest.is_empty() || !installed.iter().any(|r| r.group == *group && r.version == *version) {
        return None;
    }
    let served = |plural: &str| installed.iter().copied().find(|r| r.group == *group && r.version == *version && r.plural == plural);
    Some(match rest {
        ["namespaces", ns, plural] => match served(plural) {
            Some(resource) => CustomRequest::Collection { resource, namespace: Some(ns.to_string()) },
            None => CustomRequest::Other,
        },
        ["namespaces", ns, plural, name] => match served(plural) {
            Some(resource) => CustomRequest::Object { resource, namespace: ns.to_string(), name: name.to_string() },
            None => CustomRequest::Other,
        },
        [plural] => match served(plural) {
            Some(resource) => CustomRequest::Collection { resource, namespace: None },
            None => CustomRequest::Other,
        },
        _ => CustomRequest::Other,
    })
}

fn query(req: &Request<Incoming>) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.replace("%3D", "=").replace("%2C", ",").replace("%2F", "/")))
        .collect()
}

async fn handle(
    req: Request<Incoming>,
    world: Arc<Mutex<World>>,
    events: broadcast::Sender<Event>,
    drop_tx: broadcast::Sender<DropTarget>,
) -> Result<Response<Body>, Infallible> {
    let mut path = req.uri().path().to_string();
    let mut client = None;
    if let Some(rest) = path.strip_prefix("/clients/") {
        let (name, rest) = rest.split_once('/').unwrap_or((rest, ""));
        client = Some(name.to_string());
        path = format!("/{rest}");
    }
    while client.as_ref().is_some_and(|c| world.lock().unwrap().cut_off.contains(c)) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let q = query(&req);
    if std::env::var_os("DRIFTWATCH_TEST_LOGS").is_some() {
        eprintln!("fake apiserver: {} {}", req.method(), req.uri());
    }
    let header = |h: &str| req.headers().get(h).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    // A person (not driftwatch's service account): their own rights, not its RBAC.
    let person = header("authorization").strip_prefix("Bearer user-").map(str::to_string);
    // People hold the shipped break-glass role (deploy/kubernetes/break-glass-operators.yaml).
    if person.is_some()
        && let Some((group, resource, verb, ns)) = attributes(req.method().as_str(), &path, false)
        && !super::rbac::break_glass_operator_rules().iter().any(|r| r.allows(&group, &resource, &verb, ns.as_deref()))
    {
        world.lock().unwrap().refused.push((verb.clone(), path.clone()));
        return Ok(status(403, "Forbidden"));
    }
    if path == "/apis/authentication.k8s.io/v1/selfsubjectreviews" && req.method() == hyper::Method::POST {
        let username = person.clone().unwrap_or_else(|| "system:serviceaccount:argocd:driftwatch".into());
        return Ok(full(
            201,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {},
                    "status": {"userInfo": {"username": username, "uid": format!("uid-{username}"), "groups": ["sre", "system:authenticated"]}}}),
        ));
    }
    if let Some(user) = &person
        && req.method() == hyper::Method::PATCH
        && let Some(rest) = path.strip_prefix("/apis/argoproj.io/v1alpha1/namespaces/")
        && let [ns, "applications", name] = rest.split('/').collect::<Vec<_>>().as_slice()
    {
        let (ns, name, user, agent, uri) = (ns.to_string(), name.to_string(), user.clone(), header("user-agent"), req.uri().to_string());
        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let patch: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        return Ok(patch_application(&world, &events, (&ns, &name), patch, (&user, &agent, &uri)));
    }
    if let Some((group, resource, verb, ns)) = attributes(req.method().as_str(), &path, q.get("watch").is_some_and(|w| w == "true"))
        && person.is_none()
    {
        let mut w = world.lock().unwrap();
        if w.rbac.as_ref().is_some_and(|rules| !rules.iter().any(|r| r.allows(&group, &resource, &verb, ns.as_deref()))) {
            w.refused.push((verb.clone(), path.clone()));
            let gr = if group.is_empty() { resource.clone() } else { format!("{resource}.{group}") };
            let scope = ns.map(|n| format!(" in the namespace \"{n}\"")).unwrap_or_else(|| " at the cluster scope".into());
            let message = format!(
                "{gr} is forbidden: User \"system:serviceaccount:argocd:driftwatch\" cannot {verb} resource \"{resource}\" in API group \"{group}\"{scope}"
            );
            return Ok(full(
                403,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                        "reason": "Forbidden", "details": {"group": group, "kind": resource}, "code": 403}),
            ));
        }
    }
    if let Some(rest) = path.strip_prefix("/apis/coordination.k8s.io/v1/namespaces/") {
        return Ok(lease(req, rest, &world).await);
    }
    let (custom, doc) = {
        let w = world.lock().unwrap();
        (custom_request(&path, &w.installed), discovery(&path, &w.installed))
    };
    if let Some(doc) = doc {
        return Ok(full(200, &doc));
    }
    let Some(custom) = custom else {
        let accept = req.headers().get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let mut w = world.lock().unwrap();
        w.live_gets.push((path.clone(), accept.clone()));
        return Ok(match w.live.get(&path) {
            // Asked for metadata only, as driftwatch does: a PartialObjectMetadata.
            Some(o) if accept.contains("as=PartialObjectMetadata") => {
                full(200, &json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}))
            }
            Some(o) => full(200, o),
            None => full(404, &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"})),
        });
    };
    let (resource, ns) = match custom {
        // One object by name (`driftwatch diff`).
        CustomRequest::Object { resource, namespace, name } if req.method() == hyper::Method::GET => {
            let w = world.lock().unwrap();
            return Ok(match w.objects.get(&(resource, namespace, name)) {
                Some(o) => full(200, o),
                None => full(404, &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"})),
            });
        }
        CustomRequest::Collection { resource, namespace } => (resource, namespace),
        _ => return Ok(full(404, &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"}))),
    };
    let plural = resource.plural;
    let selector = q.get("labelSelector").cloned();
    let in_scope = |o: &Value| {
        ns.as_deref().is_none_or(|n| o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(n))
            && matches_selector(o, selector.as_deref())
    };
    if q.get("watch").map(String::as_str) != Some("true") {
        {
            let mut w = world.lock().unwrap();
            let waiting = w.holding > 0;
            w.list_arrivals.push((plural.to_string(), waiting));
        }
        if ns.as_ref().is_some_and(|n| world.lock().unwrap().held_lists.contains(n)) {
            world.lock().unwrap().holding += 1;
            while ns.as_ref().is_some_and(|n| world.lock().unwrap().held_lists.contains(n)) {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            world.lock().unwrap().holding -= 1;
        }
        // kube's `list_metadata` (driftwatch's check that it may list a kind).
        let metadata_only =
            req.headers().get("accept").and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("as=PartialObjectMetadataList"));
        let mut w = world.lock().unwrap();
        w.lists += 1;
        // Pages as the API server serves them: `limit` objects, then a `continue` token
        // (here the list's version and how many objects were served) for the next one.
        let limit: usize = q.get("limit").and_then(|v| v.parse().ok()).unwrap_or(0);
        let (list_rv, offset) = match q.get("continue").and_then(|c| {
            let (rv, n) = c.split_once('.')?;
            Some((rv.parse::<u64>().ok()?, n.parse::<usize>().ok()?))
        }) {
            Some(t) => t,
            None => (w.rv, 0),
        };
        let first = (resource, String::new(), String::new());
        let mut matching = w.objects.range(first..).take_while(|((r, _, _), _)| *r == resource).filter(|(_, o)| in_scope(o)).skip(offset);
        let take = if limit > 0 { limit } else { usize::MAX };
        let items: Vec<Value> = matching
            .by_ref()
            .take(take)
            .map(|(_, o)| match metadata_only {
                true => json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": o["metadata"]}),
                false => o.clone(),
            })
            .collect();
        let more = matching.next().is_some();
        let take = items.len();
        let mut metadata = json!({"resourceVersion": list_rv.to_string()});
        if more {
            metadata["continue"] = json!(format!("{list_rv}.{}", offset + take));
        } else {
            w.last_page_at = Some(std::time::Instant::now());
        }
        let (api_version, kind) = match metadata_only {
            true => ("meta.k8s.io/v1".to_string(), "PartialObjectMetadataList".to_string()),
            false => (resource.api_version(), format!("{}List", resource.kind)),
        };
        return Ok(full(200, &json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "items": items})));
    }
    let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    // Subscribed before the backlog is read, so no event falls between the two.
    let mut live = events.subscribe();
    let (backlog, gone, current) = {
        let mut w = world.lock().unwrap();
        w.watches += 1;
        let gone = from < w.compacted_below || ns.as_ref().and_then(|n| w.compacted_in.get(n)).is_some_and(|below| from < *below);
        let backlog: Vec<Event> =
            w.history.iter().filter(|e| e.rv > from && e.resource == resource && in_scope(&e.object)).cloned().collect();
        (backlog, gone, w.rv)
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let mut dropped = drop_tx.subscribe();
    let last_backlog = backlog.last().map_or(from, |e| e.rv.max(from));
    let scope_ns = ns.clone();
    let scope_client = client.clone();
    let scope_sel = selector.clone();
    tokio::spawn(async move {
        let line = |v: Value| Bytes::from(format!("{v}\n"));
        if gone {
            let status = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {from} ({current})"), "reason": "Expired", "code": 410}});
            let _ = tx.send(line(status)).await;
            return;
        }
        for e in backlog {
            if tx.send(line(json!({"type": e.kind, "object": e.object}))).await.is_err() {
                return;
            }
        }
        if bookmarks {
            let b = json!({"type": "BOOKMARK", "object": {"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": {"resourceVersion": current.to_string()}}});
            let _ = tx.send(line(b)).await;
        }
        loop {
            tokio::select! {
                ev = live.recv() => match ev {
                    Ok(e) if e.resource == resource
                        && e.rv > last_backlog
                        && scope_ns.as_deref().is_none_or(|n| e.object.pointer("/metadata/namespace").and_then(Value::as_str) == Some(n))
                        && matches_selector(&e.object, scope_sel.as_deref()) => {
                        if tx.send(line(json!({"type": e.kind, "object": e.object}))).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                },
                Ok(target) = dropped.recv() => {
                    let hit = match &target {
                        DropTarget::All => true,
                        DropTarget::Namespace(n) => scope_ns.as_ref() == Some(n),
                        DropTarget::Client(c) => scope_client.as_ref() == Some(c),
                    };
                    if hit {
                        return;
                    }
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx)) });
    let body = StreamBody::new(stream).boxed();
    Ok(Response::builder().status(200).header("content-type", "application/json").body(body).expect("response"))
}

/// RFC 7386: `null` removes, an object merges, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (None, Some(_)) => {
            *target = json!({});
            merge_patch(target, patch);
        }
        _ => *target = patch.clone(),
    }
}

/// A person's merge patch of an Application: 409 when its `resourceVersion` is not the
/// current one, else applied (MODIFIED) and kept as an audit event.
fn patch_application(
    world: &Arc<Mutex<World>>,
    events: &broadcast::Sender<Event>,
    (ns, name): (&str, &str),
    mut patch: Value,
    (user, agent, uri): (&str, &str, &str),
) -> Response<Body> {
    let mut w = world.lock().unwrap();
    let key = (APPLICATIONS, ns.to_string(), name.to_string());
    let Some(mut obj) = w.objects.get(&key).cloned() else { return status(404, "NotFound") };
    let wanted = patch.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
    if wanted.is_some_and(|v| Some(v.as_str()) != obj.pointer("/metadata/resourceVersion").and_then(Value::as_str)) {
        return status(409, "Conflict");
    }
    let request = patch.clone();
    if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    merge_patch(&mut obj, &patch);
    w.rv += 1;
    let rv = w.rv;
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    w.objects.insert(key, obj.clone());
    let n = w.audit.len();
    w.audit.push(json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse",
        "auditID": format!("audit-{user}-{n}"), "stage": "ResponseComplete", "requestURI": uri, "verb": "patch",
        "user": {"username": user, "groups": ["sre", "system:authenticated"]}, "sourceIPs": ["127.0.0.1"], "userAgent": agent,
        "objectRef": {"resource": "applications", "namespace": ns, "name": name, "apiGroup": "argoproj.io", "apiVersion": "v1alpha1"},
        "responseStatus": {"metadata": {}, "code": 200}, "requestObject": request, "responseObject": obj,
        "requestReceivedTimestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "stageTimestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)}));
    let ev = Event { rv, resource: APPLICATIONS, kind: "MODIFIED", object: obj.clone() };
    w.history.push(ev.clone());
    drop(w);
    let _ = events.send(ev);
    full(200, &obj)
}

fn status(code: u16, reason: &str) -> Response<Body> {
    full(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": reason, "reason": reason, "code": code}),
    )
}

/// `(group, resource, verb, namespace)` of a resource request as RBAC sees it; `None`
/// for discovery documents (allowed to every authenticated user).
fn attributes(method: &str, path: &str, watch: bool) -> Option<(String, String, String, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
        _ => return None,
    };
    let (ns, resource, named) = match rest {
        ["namespaces", ns, resource] => (Some(ns.to_string()), resource, false),
        ["namespaces", ns, resource, _name] => (Some(ns.to_string()), resource, true),
        [resource] => (None, resource, false),
        [resource, _name] => (None, resource, true),
        _ => return None,
    };
    let verb = match (method, named) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        _ => "unknown",
    };
    Some((group, resource.to_string(), verb.to_string(), ns))
}

/// Leases: GET, POST (create; 409 if it exists), PUT (replace; 409 unless the
/// resourceVersion matches), as the API server does for optimistic concurrency; a list
/// of a namespace's Leases by one `key=value` label selector, and DELETE.
async fn lease(req: Request<Incoming>, rest: &str, world: &Arc<Mutex<World>>) -> Response<Body> {
    let selector = req
        .uri()
        .query()
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "labelSelector").map(|(_, v)| v.into_owned()));
    let parts: Vec<&str> = rest.split('/').collect();
    let (ns, name) = match parts.as_slice() {
        [ns, "leases"] => (ns.to_string(), None),
        [ns, "leases", name] => (ns.to_string(), Some(name.to_string())),
        _ => return status(404, "NotFound"),
    };
    let method = req.method().clone();
    let body: Value = match req.into_body().collect().await {
        Ok(b) => serde_json::from_slice(&b.to_bytes()).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    while world.lock().unwrap().lease_hang {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    if method == hyper::Method::PUT {
        let delay = world.lock().unwrap().lease_put_delay;
        tokio::time::sleep(delay).await;
    }
    let mut w = world.lock().unwrap();
    if w.lease_outage {
        return status(503, "ServiceUnavailable");
    }
    let key = |n: &str| (LEASES, ns.clone(), n.to_string());
    match (method.as_str(), name) {
        ("GET", Some(n)) => match w.objects.get(&key(&n)) {
            Some(o) => full(200, o),
            None => status(404, "NotFound"),
        },
        ("GET", None) => {
            let (label, value) = selector.as_deref().and_then(|s| s.split_once('=')).unwrap_or_default();
            let items: Vec<Value> = w
                .objects
                .iter()
                .filter(|((r, n, _), o)| {
                    *r == LEASES
                        && *n == ns
                        && (label.is_empty()
                            || o.pointer("/metadata/labels").and_then(|l| l.get(label)).and_then(Value::as_str) == Some(value))
                })
                .map(|(_, o)| o.clone())
                .collect();
            full(
                200,
                &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList", "metadata": {"resourceVersion": w.rv.to_string()}, "items": items}),
            )
        }
        ("DELETE", Some(n)) => match w.objects.remove(&key(&n)) {
            Some(o) => full(200, &o),
            None => status(404, "NotFound"),
        },
        ("POST", _) => {
            let n = body.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
            if w.objects.contains_key(&key(&n)) {
                return status(409, "AlreadyExists");
            }
            w.rv += 1;
            let mut o = body;
            o["metadata"]["resourceVersion"] = json!(w.rv.to_string());
            o["metadata"]["namespace"] = json!(ns);
            // The API server stamps these, whatever the client sent.
            o["metadata"]["uid"] = json!(format!("lease-uid-{}", w.rv));
            o["metadata"]["creationTimestamp"] = json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            w.objects.insert(key(&n), o.clone());
            full(201, &o)
        }
        ("PUT", Some(n)) => {
            let current = w.objects.get(&key(&n)).and_then(|o| o.pointer("/metadata/resourceVersion")).cloned();
            if current.is_none() {
                return status(404, "NotFound");
            }
            if body.pointer("/metadata/resourceVersion") != current.as_ref() {
                return status(409, "Conflict");
            }
            w.rv += 1;
            let mut o = body;
            o["metadata"]["resourceVersion"] = json!(w.rv.to_string());
            for kept in ["uid", "creationTimestamp"] {
                match w.objects.get(&key(&n)).and_then(|c| c.pointer(&format!("/metadata/{kept}"))).cloned() {
                    Some(v) => o["metadata"][kept] = v,
                    None => {
                        if let Some(m) = o["metadata"].as_object_mut() {
                            m.remove(kept);
                        }
                    }
                }
            }
            w.objects.insert(key(&n), o.clone());
            full(200, &o)
        }
        _ => status(405, "MethodNotAllowed"),
    }
}
