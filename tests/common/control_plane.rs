//! A real Kubernetes control plane for the tests: etcd and kube-apiserver from
//! `KUBEBUILDER_ASSETS` (the layout controller-runtime's envtest uses), on free loopback
//! ports, with a fresh CA, a serving certificate, service-account keys and static
//! tokens for an admin and named people. The Argo CD CRDs (`tests/data/argocd/crds/`)
//! are applied once, with the `default` AppProject Argo CD creates. A test binary
//! starts one etcd and one API server ([`shared`]) the first time a test asks, and more
//! API servers on the same etcd when a test needs one of its own (a spoke, one it
//! restarts with audit flags, one it compacts under).
//!
//! Nothing outlives the test binary: every process is started from one keeper thread
//! with `PR_SET_PDEATHSIG` (killed if the binary dies, however it dies), and an
//! `atexit` handler kills them and removes the temporary directory when the binary
//! exits, also after a failed test.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};

use super::tls::Pki;
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

/// A person or the admin, as the static token file names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who {
    pub name: &'static str,
    pub token: &'static str,
    pub uid: &'static str,
    pub groups: &'static str,
}

pub const ADMIN: Who = Who { name: "admin", token: "admin-token-6d2f1a", uid: "uid-admin", groups: "system:masters" };
pub const ALICE: Who = Who { name: "alice", token: "alice-token-81c3e0", uid: "uid-alice", groups: "sre" };
pub const BOB: Who = Who { name: "bob", token: "bob-token-2b7d94", uid: "uid-bob", groups: "sre" };
pub const MALLORY: Who = Who { name: "mallory", token: "mallory-token-5e0a17", uid: "uid-mallory", groups: "dev" };
const PEOPLE: [Who; 4] = [ADMIN, ALICE, BOB, MALLORY];

/// The folder holding `etcd` and `kube-apiserver`, from `KUBEBUILDER_ASSETS`; `None`
/// when it is unset or does not hold both.
pub fn assets() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("KUBEBUILDER_ASSETS")?);
    (dir.join("etcd").is_file() && dir.join("kube-apiserver").is_file()).then_some(dir)
}

fn assets_or_fail() -> PathBuf {
    assets().unwrap_or_else(|| {
        panic!(
            "KUBEBUILDER_ASSETS does not name a folder with etcd and kube-apiserver: these tests need a real control plane \
             (scripts/test.sh skips them, and says so, when it is missing; README: Tests against a real control plane)"
        )
    })
}

// ---------------------------------------------------------------------------------------
// Processes that die with the test binary.

type Spawn = Box<dyn FnOnce() -> std::io::Result<Child> + Send>;
/// A start for the keeper thread, and where it sends the child back.
type Job = (Spawn, mpsc::Sender<std::io::Result<Child>>);

/// Every process started, by pid, and the folders to remove at exit.
static KEPT: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

extern "C" fn at_exit() {
    let pids = KEPT.lock().map(|p| p.clone()).unwrap_or_default();
    for pid in pids {
        // SAFETY: kill(2) on a pid this binary started; a pid that already exited and was
        // reaped is at worst a process of ours that is gone (ESRCH).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    for pid in KEPT.lock().map(|p| p.clone()).unwrap_or_default() {
        // SAFETY: reaps our own children; WNOHANG-free wait on a killed child returns at once.
        unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), 0) };
    }
    for d in DIRS.lock().map(|d| d.clone()).unwrap_or_default() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Starts processes from one thread that lives as long as the binary: the parent-death
/// signal is tied to the thread that forked, and a test's thread ends with the test.
fn spawn_kept(spawn: Spawn) -> std::io::Result<Child> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        // SAFETY: registers a plain extern "C" function once.
        unsafe { libc::atexit(at_exit) };
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("control-plane-keeper".into())
            .spawn(move || {
                for (spawn, back) in rx {
                    let child = spawn();
                    if let Ok(c) = &child {
                        KEPT.lock().unwrap().push(c.id());
                    }
                    let _ = back.send(child);
                }
            })
            .unwrap();
        Mutex::new(tx)
    });
    let (back_tx, back_rx) = mpsc::channel();
    keeper.lock().unwrap().send((spawn, back_tx)).unwrap();
    back_rx.recv().unwrap()
}

fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// A loopback port free right now. etcd and kube-apiserver cannot be handed a bound
/// socket, so the port is picked, released and given to them; a start that loses the
/// race is tried again on another port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Sends SIGTERM and waits for the process to exit (at most `limit`, then SIGKILL): a
/// process that failed to start.
fn terminate(child: &mut Child, limit: Duration) {
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    KEPT.lock().unwrap().retain(|p| *p != child.id());
}

// ---------------------------------------------------------------------------------------
// The control plane.

/// What every API server of the binary shares: the binaries, the folder with the
/// certificates and tokens, etcd, the runtime kube clients live on.
struct Base {
    assets: PathBuf,
    dir: PathBuf,
    etcd_url: String,
    ca_pem: String,
    runtime: tokio::runtime::Runtime,
}

pub struct ControlPlane {
    base: Arc<Base>,
    /// The API server most tests share; tests keep to namespaces of their own on it.
    pub api: ApiServer,
    /// API servers started so far: each gets the etcd prefix `/cluster-N-NAME`.
    started: AtomicU32,
}

/// The control plane of this test binary, started by the first test that asks.
pub fn shared() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(ControlPlane::start)
}

/// Runs a future on the control plane's runtime (kube clients live there).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    shared().base.runtime.block_on(f)
}

impl ControlPlane {
    fn start() -> ControlPlane {
        driftwatch::tls::init_crypto();
        let assets = assets_or_fail();
        let dir = tempfile::Builder::new().prefix("driftwatch-control-plane-").tempdir().unwrap().keep();
        DIRS.lock().unwrap().push(dir.clone());
        let pki = Pki::new("driftwatch test cluster CA");
        let ca_pem = pki.ca_pem();
        std::fs::write(dir.join("ca.crt"), &ca_pem).unwrap();
        let (cert, key) = pki.serving();
        std::fs::write(dir.join("apiserver.crt"), cert).unwrap();
        std::fs::write(dir.join("apiserver.key"), key).unwrap();
        let sa = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.join("sa.key"), sa.serialize_pem()).unwrap();
        std::fs::write(dir.join("sa.pub"), sa.public_key_pem()).unwrap();
        let tokens: String = PEOPLE.iter().map(|w| format!("{},{},{},\"{}\"\n", w.token, w.name, w.uid, w.groups)).collect();
        std::fs::write(dir.join("tokens.csv"), tokens).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let etcd_url = start_etcd(&assets, &dir, &runtime);
        let base = Arc::new(Base { assets, dir, etcd_url, ca_pem, runtime });
        let api = ApiServer::start_new(&base, "hub", 1, &[]);
        ControlPlane { base, api, started: AtomicU32::new(1) }
    }

    /// Another API server on the same etcd under a prefix of its own: a second cluster
    /// (a spoke), or one a test stops, compacts under and restarts with other flags.
    /// The Argo CD CRDs are applied.
    pub fn start_api_server(&self, name: &str, extra: &[String]) -> ApiServer {
        let n = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        ApiServer::start_new(&self.base, name, n, extra)
    }

    /// Compacts etcd at its current revision, after one write outside every API
    /// server's prefix (so that the revision a watcher last saw is below the compacted
    /// one): a watch resuming from it gets `410 Gone`.
    pub fn compact(&self) {
        let etcd = &self.base.etcd_url;
        self.base.runtime.block_on(async {
            let http = reqwest::Client::new();
            let key = base64_encode(b"/driftwatch-test/compaction-marker");
            let put: Value = http
                .post(format!("{etcd}/v3/kv/put"))
                .json(&json!({"key": key, "value": base64_encode(b"x")}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let rev = put["header"]["revision"].as_str().expect("etcd's revision").to_string();
            let r = http.post(format!("{etcd}/v3/kv/compaction")).json(&json!({"revision": rev, "physical": true})).send().await.unwrap();
            assert!(r.status().is_success(), "compaction: {}", r.text().await.unwrap_or_default());
        });
    }
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn start_etcd(assets: &Path, dir: &Path, rt: &tokio::runtime::Runtime) -> String {
    for _ in 0..3 {
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
        let (bin, data, url2) = (assets.join("etcd"), dir.join("etcd"), url.clone());
        let mut child = spawn_kept(Box::new(move || {
            let mut cmd = Command::new(bin);
            cmd.arg("--data-dir")
                .arg(data)
                .args(["--listen-client-urls", &url2, "--advertise-client-urls", &url2])
                .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
                .args(["--unsafe-no-fsync", "--log-level", "warn"])
                .stdout(Stdio::null())
                .stderr(log);
            die_with_parent(&mut cmd);
            cmd.spawn()
        }))
        .expect("etcd starts");
        let healthy = rt.block_on(async {
            let http = reqwest::Client::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(30) {
                if child.try_wait().ok().flatten().is_some() {
                    return false;
                }
                if let Ok(r) = http.get(format!("{url}/health")).send().await
                    && r.text().await.is_ok_and(|t| t.contains("\"health\":\"true\""))
                {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        });
        if healthy {
            // Owned by the keeper's list; the at-exit handler ends it.
            std::mem::forget(child);
            return url;
        }
        terminate(&mut child, Duration::from_secs(5));
    }
    panic!("etcd did not start: {}", std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default());
}

/// One kube-apiserver on the shared etcd.
pub struct ApiServer {
    pub name: String,
    prefix: String,
    base: Arc<Base>,
    port: Mutex<u16>,
    child: Mutex<Option<Child>>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl ApiServer {
    /// The `n`th API server of the binary, started, with the Argo CD CRDs applied.
    fn start_new(base: &Arc<Base>, name: &str, n: u32, extra: &[String]) -> ApiServer {
        let api = ApiServer {
            name: name.to_string(),
            prefix: format!("/cluster-{n}-{name}"),
            base: base.clone(),
            port: Mutex::new(0),
            child: Mutex::new(None),
        };
        api.start(extra);
        base.runtime.block_on(api.apply_crds());
        api
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port.lock().unwrap())
    }

    /// The CA that signed its serving certificate (PEM).
    pub fn ca_pem(&self) -> String {
        self.base.ca_pem.clone()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.base.dir.join(format!("apiserver{}.log", self.prefix.replace('/', "-")))
    }

    /// Starts the process on a free port (the same one again on a restart) and waits
    /// for `/readyz`.
    fn start(&self, extra: &[String]) {
        let keep_port = *self.port.lock().unwrap();
        for attempt in 0..3 {
            let port = if keep_port != 0 && attempt == 0 { keep_port } else { free_port() };
            let d = &self.base.dir;
            let mut args: Vec<String> = vec![
                format!("--etcd-servers={}", self.base.etcd_url),
                format!("--etcd-prefix={}", self.prefix),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--tls-cert-file={}", d.join("apiserver.crt").display()),
                format!("--tls-private-key-file={}", d.join("apiserver.key").display()),
                format!("--client-ca-file={}", d.join("ca.crt").display()),
                format!("--token-auth-file={}", d.join("tokens.csv").display()),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={}", d.join("sa.pub").display()),
                format!("--service-account-signing-key-file={}", d.join("sa.key").display()),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--authorization-mode=RBAC".into(),
                "--allow-privileged=true".into(),
                "--endpoint-reconciler-type=none".into(),
                "--profiling=false".into(),
            ];
            args.extend(extra.iter().cloned());
            let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
            let bin = self.base.assets.join("kube-apiserver");
            let mut child = spawn_kept(Box::new(move || {
                let mut cmd = Command::new(bin);
                cmd.args(args).stdout(Stdio::null()).stderr(log);
                die_with_parent(&mut cmd);
                cmd.spawn()
            }))
            .expect("kube-apiserver starts");
            *self.port.lock().unwrap() = port;
            let ready = self.base.runtime.block_on(self.wait_ready(&mut child));
            if ready {
                *self.child.lock().unwrap() = Some(child);
                return;
            }
            terminate(&mut child, Duration::from_secs(10));
        }
        panic!("kube-apiserver {} did not become ready:\n{}", self.name, tail(&self.log(), 40));
    }

    async fn wait_ready(&self, child: &mut Child) -> bool {
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(self.base.ca_pem.as_bytes()).unwrap())
            .build()
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(120) {
            if child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if let Ok(r) = http.get(format!("{}/readyz", self.url())).bearer_auth(ADMIN.token).send().await
                && r.status() == 200
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// Stops it, as a crash would (SIGKILL), and waits for the process to exit: its
    /// clients' connections break at once, and nothing after this call talks to the old
    /// process. (After SIGTERM an API server drains its watches for 60 s: a test would
    /// wait that long for what a crash shows at once.)
    pub fn stop(&self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
            KEPT.lock().unwrap().retain(|p| *p != c.id());
        }
    }

    /// Starts it again on the same port and prefix (what it served is kept in etcd),
    /// with `extra` flags.
    pub fn restart(&self, extra: &[String]) {
        self.stop();
        self.start(extra);
    }

    /// A kubeconfig for `who` (a person of the static token file) at `path`.
    pub fn kubeconfig(&self, path: &Path, who: Who) {
        self.kubeconfig_with_token(path, who.name, who.token);
    }

    /// A kubeconfig authenticating with `token` (e.g. a ServiceAccount's).
    pub fn kubeconfig_with_token(&self, path: &Path, user: &str, token: &str) {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.base.ca_pem);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\n\
             users:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\n\
             current-context: {name}\n",
            name = self.name,
            url = self.url(),
        );
        std::fs::write(path, text).unwrap();
    }

    /// A kube client for `who`.
    pub async fn client(&self, who: Who) -> kube::Client {
        self.client_with_token(who.token).await
    }

    pub async fn client_with_token(&self, token: &str) -> kube::Client {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        self.kubeconfig_with_token(&path, "someone", token);
        let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        kube::Client::try_from(config).unwrap()
    }

    async fn apply_crds(&self) {
        let client = self.client(ADMIN).await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        // Argo CD's, and the units of Flux and Fleet (`tests/data/*/README.md`).
        for file in [
            "argocd/crds/application-crd.yaml",
            "argocd/crds/appproject-crd.yaml",
            "flux/crds/kustomizations.yaml",
            "flux/crds/helmreleases.yaml",
            "fleet/crds/bundledeployments.yaml",
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(file);
            let v: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let crd: CustomResourceDefinition = serde_json::from_value(v).unwrap();
            match crds.create(&PostParams::default(), &crd).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("{file}: {e}"),
            }
        }
        // Served once discovery lists both kinds and a list answers.
        let start = Instant::now();
        loop {
            let mut served = true;
            for r in [application_resource(), project_resource()].into_iter().chain(unit_resources()) {
                served &= Api::<DynamicObject>::all_with(client.clone(), &r).list(&Default::default()).await.is_ok();
            }
            if served {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the CRDs were not served within 60 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Argo CD creates the `default` AppProject at start: every destination and kind.
        // The tests keep Applications in namespaces of their own, so these clusters
        // enable Applications in any namespace for it (`sourceNamespaces: ['*']`, an
        // administrator's choice); the attack corpus writes the stock one where it matters.
        self.namespaces(&["argocd"]).await;
        let default = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "default", "namespace": "argocd"},
            "spec": {"sourceRepos": ["*"], "sourceNamespaces": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                     "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}});
        apply_as(&client, "argocd-server", default).await;
    }

    /// Creates each namespace (as the admin); one that exists is fine.
    pub async fn namespaces(&self, names: &[&str]) {
        let client = self.client(ADMIN).await;
        for n in names {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}});
            apply_as(&client, "test-setup", obj).await;
        }
    }

    /// A ServiceAccount's token (TokenRequest), creating the account if needed.
    pub async fn service_account_token(&self, ns: &str, name: &str) -> String {
        let client = self.client(ADMIN).await;
        apply_as(&client, "test-setup", json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}))
            .await;
        let req = http::Request::post(format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"))
            .header("content-type", "application/json")
            .body(
                serde_json::to_vec(
                    &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}),
                )
                .unwrap(),
            )
            .unwrap();
        let answer: Value = client.request(req).await.unwrap();
        answer["status"]["token"].as_str().expect("a token").to_string()
    }
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub fn application_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"), "applications")
}

/// The units of Flux and Fleet: Kustomization, HelmRelease, BundleDeployment.
pub fn unit_resources() -> Vec<kube::discovery::ApiResource> {
    [
        ("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations"),
        ("helm.toolkit.fluxcd.io", "v2", "HelmRelease", "helmreleases"),
        ("fleet.cattle.io", "v1alpha1", "BundleDeployment", "bundledeployments"),
    ]
    .into_iter()
    .map(|(g, v, k, plural)| kube::discovery::ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), plural))
    .collect()
}

pub fn project_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "AppProject"), "appprojects")
}

/// The API and resource of an object, by its `apiVersion` and `kind` (discovery).
pub async fn api_of(client: &kube::Client, obj: &Value) -> Api<DynamicObject> {
    try_api_of(client, obj).await.unwrap_or_else(|e| panic!("{}/{}: {e}", obj["apiVersion"], obj["kind"]))
}

/// [`api_of`], or the discovery error (a kind whose CRD is not served yet).
pub async fn try_api_of(client: &kube::Client, obj: &Value) -> Result<Api<DynamicObject>, kube::Error> {
    let (group, version) = match obj["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), obj["apiVersion"].as_str().unwrap().to_string()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, obj["kind"].as_str().unwrap());
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    Ok(match (caps.scope, obj["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    })
}

/// Server-side applies `obj` as `manager` (forcing ownership), as `kubectl apply
/// --server-side` or Argo CD's server-side sync does; the object as stored.
pub async fn apply_as(client: &kube::Client, manager: &str, obj: Value) -> Value {
    try_apply_as(client, manager, obj).await.unwrap_or_else(|e| panic!("apply: {e}"))
}

pub async fn try_apply_as(client: &kube::Client, manager: &str, obj: Value) -> Result<Value, kube::Error> {
    let api = try_api_of(client, &obj).await?;
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let stored = api.patch(&name, &PatchParams::apply(manager).force(), &Patch::Apply(&obj)).await?;
    Ok(serde_json::to_value(stored).unwrap())
}

/// A patch of `kind` (merge, strategic or JSON) by `manager`, as `kubectl patch` or
/// `kubectl edit` sends it (a client-side update: the manager's operation is `Update`).
pub async fn patch_as(client: &kube::Client, manager: &str, target: &Value, patch: Patch<Value>) -> Result<Value, kube::Error> {
    let api = api_of(client, target).await;
    let name = target["metadata"]["name"].as_str().unwrap().to_string();
    let pp = PatchParams { field_manager: Some(manager.to_string()), ..Default::default() };
    let stored = api.patch(&name, &pp, &patch).await?;
    Ok(serde_json::to_value(stored).unwrap())
}

/// Reads an object (by the `apiVersion`, `kind` and metadata of `target`).
pub async fn get(client: &kube::Client, target: &Value) -> Option<Value> {
    let api = api_of(client, target).await;
    let name = target["metadata"]["name"].as_str().unwrap();
    api.get_opt(name).await.unwrap().map(|o| serde_json::to_value(o).unwrap())
}
