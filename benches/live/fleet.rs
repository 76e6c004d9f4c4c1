//! `fleet`: 100,000 Applications over 3 replicas and 8 shards on a real control plane
//! (issue 55, item 8). Needs `KUBEBUILDER_ASSETS` (a folder with `etcd` and
//! `kube-apiserver`; the control plane of `tests/common/control_plane.rs`) and runs only
//! when named: `cargo bench --bench live -- fleet`. `LIVE_BENCH_APPS` changes the count
//! (100,000 unless set), `LIVE_BENCH_LEASE` the lease duration (15 s unless set).
//!
//! 1. The Applications are created through the API, concurrently over HTTP/2 (the
//!    `app()` of the other scenarios: 20 resources, history, an operation state; spread
//!    over 300 destination clusters so that 8 shards are balanced): how long it took,
//!    and etcd's and the API server's memory.
//! 2. The list time: a plain paginated list of every Application as a client makes it,
//!    pages of 500 (kube's watcher's page size, which driftwatch's watch keeps), from
//!    this process, before any daemon runs. Twice; the faster is the bar.
//! 3. Three replicas of the release binary, started together, the state in PostgreSQL
//!    (`sharding.shards: 8`, `--leader-election`): per replica, start → `/readyz`,
//!    start → its shards held and their Applications kept (`driftwatch_leader`,
//!    `driftwatch_applications`), RSS once ready and after settling, CPU.
//! 4. `kill -9` of a replica holding the most shards, and at once a change to an
//!    Application of one of its shards: from the kill to each of its shards held by
//!    another replica (the Leases), to every Application kept again, and to the
//!    change's notification at the receiver.
//!
//! Memory of etcd, the API server and PostgreSQL is sampled throughout (`VmRSS`; for
//! PostgreSQL the sum of its processes' `Pss`), and the machine's `MemAvailable`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use super::common::control_plane::{self as cp, ADMIN};
use super::{Daemon, Receiver, app, ms};

const SHARDS: u32 = 8;
const REPLICAS: usize = 3;
const CLUSTERS: usize = 300;
/// Creates in flight at once.
const IN_FLIGHT: usize = 64;

/// The load driver's HTTP/2 client on a runtime of its own, with the admin's token.
struct Http {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    base: String,
}

impl Http {
    fn new(api: &cp::ApiServer) -> Http {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let ca = reqwest::Certificate::from_pem(api.ca_pem().as_bytes()).unwrap();
        let client = reqwest::Client::builder().add_root_certificate(ca).build().unwrap();
        Http { rt, client, base: api.url() }
    }

    fn apps_url(&self) -> String {
        format!("{}/apis/argoproj.io/v1alpha1/namespaces/argocd/applications", self.base)
    }

    fn get_json(&self, path: &str) -> Value {
        self.rt.block_on(async {
            let r = self.client.get(format!("{}{path}", self.base)).bearer_auth(ADMIN.token).send().await.unwrap();
            r.json().await.unwrap()
        })
    }

    /// Who holds each shard's Lease (`holderIdentity`, empty when released).
    fn holders(&self) -> BTreeMap<u32, String> {
        let leases = self.get_json("/apis/coordination.k8s.io/v1/namespaces/argocd/leases");
        let mut out = BTreeMap::new();
        for l in leases["items"].as_array().into_iter().flatten() {
            let name = l["metadata"]["name"].as_str().unwrap_or_default();
            if let Some(i) = name.strip_prefix("driftwatch-shard-").and_then(|i| i.parse().ok()) {
                out.insert(i, l["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string());
            }
        }
        out
    }

    /// Creates Applications `0..n`, `IN_FLIGHT` at a time; retries what failed but a 409.
    fn create(&self, n: usize) {
        let url = self.apps_url();
        self.rt.block_on(async {
            let posts = futures::stream::iter(0..n).map(|i| {
                let (client, url) = (self.client.clone(), url.clone());
                async move {
                    let body = serde_json::to_vec(&fleet_app(i)).unwrap();
                    for attempt in 0.. {
                        let r = client
                            .post(&url)
                            .bearer_auth(ADMIN.token)
                            .header("content-type", "application/json")
                            .body(body.clone())
                            .send()
                            .await;
                        match r {
                            Ok(r) if r.status().is_success() || r.status() == 409 => return,
                            Ok(r) if attempt >= 5 => panic!("create app {i}: {}: {}", r.status(), r.text().await.unwrap_or_default()),
                            Err(e) if attempt >= 5 => panic!("create app {i}: {e}"),
                            _ => tokio::time::sleep(Duration::from_secs(1)).await,
                        }
                    }
                }
            });
            posts.buffer_unordered(IN_FLIGHT).for_each(|()| async {}).await;
        });
    }

    /// Lists every Application in pages of 500, each page read whole and dropped: the
    /// pages, the bytes and the time.
    fn list(&self) -> (usize, usize, Duration) {
        #[derive(serde::Deserialize)]
        struct Meta {
            #[serde(rename = "continue", default)]
            cont: String,
        }
        #[derive(serde::Deserialize)]
        struct Page {
            metadata: Meta,
        }
        let url = self.apps_url();
        self.rt.block_on(async {
            let started = Instant::now();
            let (mut pages, mut bytes, mut token) = (0, 0, String::new());
            loop {
                let mut page = format!("{url}?limit=500");
                if !token.is_empty() {
                    // A continue token is base64 (`+`, `/`, `=`): escaped byte by byte.
                    let escaped: String = token
                        .bytes()
                        .map(|b| {
                            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                                char::from(b).to_string()
                            } else {
                                format!("%{b:02X}")
                            }
                        })
                        .collect();
                    page.push_str(&format!("&continue={escaped}"));
                }
                let body = self.client.get(&page).bearer_auth(ADMIN.token).send().await.unwrap().bytes().await.unwrap();
                pages += 1;
                bytes += body.len();
                token = serde_json::from_slice::<Page>(&body).unwrap().metadata.cont;
                if token.is_empty() {
                    return (pages, bytes, started.elapsed());
                }
            }
        })
    }

    /// Application `i` OutOfSync at `rev` (a merge patch of its status).
    fn drift(&self, i: usize, rev: &str) {
        let url = format!("{}/app-{i:05}", self.apps_url());
        let body = json!({"status": {"sync": {"status": "OutOfSync", "revision": rev}}}).to_string();
        self.rt.block_on(async {
            let r = self
                .client
                .patch(url)
                .bearer_auth(ADMIN.token)
                .header("content-type", "application/merge-patch+json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "patch: {}", r.status());
        });
    }
}

fn cluster(i: usize) -> String {
    format!("https://cluster-{}.example:6443", i % CLUSTERS)
}

/// `app(i)` as a client creates it: no uid or managed fields (the API server sets
/// them), the operation the CRD's schema requires, one of `CLUSTERS` destinations.
fn fleet_app(i: usize) -> Value {
    let mut a = app(i, "Synced", "r0");
    if let Some(meta) = a["metadata"].as_object_mut() {
        meta.remove("uid");
        meta.remove("managedFields");
    }
    a["status"]["operationState"]["operation"] = json!({"sync": {"revision": "r0"}});
    a["spec"]["destination"]["server"] = json!(cluster(i));
    a
}

// ---------------------------------------------------------------------------------------
// Memory of the processes around the daemons.

fn status_kb(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// Processes whose `comm` is `name`, whose parent is `parent` (any when `None`).
fn pids(name: &str, parent: Option<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let comm = head.split_once('(').map(|(_, c)| c).unwrap_or_default();
        let ppid: u32 = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        if comm == name && parent.is_none_or(|p| p == ppid) {
            out.push(pid);
        }
    }
    out
}

/// The private PostgreSQL's processes: its postmaster (started with its socket folder)
/// and the postmaster's children.
fn postgres_pids() -> Vec<u32> {
    let Ok(server) = driftwatch::state::pgtest::server() else { return Vec::new() };
    let dir = server.socket_dir.to_string_lossy().to_string();
    let Some(master) = pids("postgres", None)
        .into_iter()
        .find(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(dir.as_str())))
    else {
        return Vec::new();
    };
    let mut all = pids("postgres", Some(master));
    all.push(master);
    all
}

fn pss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("Pss:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

fn mem_available_mb() -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("MemAvailable:")).and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok()).unwrap_or(0)
        / 1024
}

/// One sample: etcd's and the API server's RSS, PostgreSQL's PSS, the machine's
/// available memory (MB).
#[derive(Clone, Copy, Default)]
struct Sample {
    etcd: u64,
    api: u64,
    pg: u64,
    available: u64,
}

/// Samples [`Sample`] every 500 ms on a thread of its own; each phase reads the peaks
/// since its mark.
struct Sampler {
    samples: Arc<Mutex<Vec<(Instant, Sample)>>>,
    on: Arc<AtomicBool>,
}

impl Sampler {
    fn start() -> Sampler {
        let me = std::process::id();
        let (etcd, api) = (pids("etcd", Some(me)), pids("kube-apiserver", Some(me)));
        let samples: Arc<Mutex<Vec<(Instant, Sample)>>> = Arc::default();
        let on = Arc::new(AtomicBool::new(true));
        let (s, o) = (samples.clone(), on.clone());
        std::thread::spawn(move || {
            let mut pg = postgres_pids();
            let mut n = 0u64;
            while o.load(Ordering::Relaxed) {
                if n.is_multiple_of(20) {
                    pg = postgres_pids();
                }
                n += 1;
                let sample = Sample {
                    etcd: etcd.iter().map(|p| status_kb(*p, "VmRSS:")).sum::<u64>() / 1024,
                    api: api.iter().map(|p| status_kb(*p, "VmRSS:")).sum::<u64>() / 1024,
                    pg: pg.iter().map(|p| pss_kb(*p)).sum::<u64>() / 1024,
                    available: mem_available_mb(),
                };
                s.lock().unwrap().push((Instant::now(), sample));
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        Sampler { samples, on }
    }

    /// The peaks (the least available) since `since`, and the last sample.
    fn report(&self, label: &str, since: Instant) {
        let samples = self.samples.lock().unwrap();
        let within: Vec<Sample> = samples.iter().filter(|(t, _)| *t >= since).map(|(_, s)| *s).collect();
        let last = within.last().copied().unwrap_or_default();
        let peak = |f: fn(&Sample) -> u64| within.iter().map(f).max().unwrap_or(0);
        let least = within.iter().map(|s| s.available).min().unwrap_or(0);
        println!(
            "{label}: memory: etcd {} MB (peak {}), kube-apiserver {} MB (peak {}), PostgreSQL {} MB PSS (peak {}); machine's MemAvailable {} MB (least {least})",
            last.etcd,
            peak(|s| s.etcd),
            last.api,
            peak(|s| s.api),
            last.pg,
            peak(|s| s.pg),
            last.available
        );
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.on.store(false, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// The replicas.

/// What the bench follows of one replica while the fleet settles.
#[derive(Default, Clone)]
struct Seen {
    ready: Option<Duration>,
    rss_ready: f64,
    cpu_ready: f64,
    /// Its shards and Applications, and when they last changed.
    held: f64,
    kept: f64,
    changed: Duration,
}

fn identity_pid(identity: &str) -> Option<u32> {
    identity.rsplit('-').next()?.parse().ok()
}

/// The configuration of the replicas: the drift trigger to the receiver, the state
/// in PostgreSQL, 8 shards.
fn config(receiver: u16) -> String {
    let schema = driftwatch::state::pgtest::fresh_schema();
    format!(
        "services:\n  hook:\n    type: webhook\n    url: http://127.0.0.1:{receiver}\n{}secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg-url\n    schema: {schema}\n    maxConnections: 4\nsharding:\n  shards: {SHARDS}\n",
        super::common::DRIFT_TRIGGER
    )
}

/// Follows the replicas from `started` until every shard is held, at most
/// ceil(8 / 3) each, and every Application kept; per replica what it saw.
fn settle(ds: &[Daemon], started: Instant, apps: usize) -> (Vec<Seen>, Option<Duration>) {
    let mut seen = vec![Seen::default(); ds.len()];
    let bound = (SHARDS as usize).div_ceil(ds.len()) as f64;
    while started.elapsed() < Duration::from_secs(900) {
        for (d, s) in ds.iter().zip(seen.iter_mut()) {
            if s.ready.is_none() && super::common::receiver::get(&d.admin, "/readyz").is_some_and(|(c, _)| c == 200) {
                s.ready = Some(started.elapsed());
                (s.rss_ready, s.cpu_ready) = (d.rss_mb(), d.cpu_seconds());
            }
            let (held, kept) = (d.metric("driftwatch_leader"), d.metric("driftwatch_applications"));
            if (held, kept) != (s.held, s.kept) {
                (s.held, s.kept, s.changed) = (held, kept, started.elapsed());
            }
        }
        let held: f64 = seen.iter().map(|s| s.held).sum();
        let kept: f64 = seen.iter().map(|s| s.kept).sum();
        if seen.iter().all(|s| s.ready.is_some() && s.held <= bound) && held == f64::from(SHARDS) && kept == apps as f64 {
            return (seen, Some(started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (seen, None)
}

/// The scenario (see the module's comment).
pub fn fleet() {
    if cp::assets().is_none() {
        println!(
            "fleet: skipped: KUBEBUILDER_ASSETS must name a folder with etcd and kube-apiserver \
             (this scenario runs on a real control plane only; e.g. KUBEBUILDER_ASSETS=/work/shared/k8s/bin)"
        );
        return;
    }
    let apps: usize = std::env::var("LIVE_BENCH_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let lease: u64 = std::env::var("LIVE_BENCH_LEASE").ok().and_then(|v| v.parse().ok()).unwrap_or(15);
    let t = Instant::now();
    let plane = cp::shared();
    println!("fleet: control plane (etcd, kube-apiserver {}) up in {}", plane.api.url(), ms(t.elapsed()));
    let sampler = Sampler::start();
    let http = Http::new(&plane.api);
    let t = Instant::now();
    http.create(apps);
    let took = t.elapsed();
    println!(
        "fleet: {apps} Applications created in {:.1} s ({:.0}/s, {IN_FLIGHT} in flight over HTTP/2), over {CLUSTERS} clusters",
        took.as_secs_f64(),
        apps as f64 / took.as_secs_f64()
    );
    sampler.report("fleet: after the creates", t);
    let mut per_shard = [0usize; SHARDS as usize];
    for i in 0..apps.min(CLUSTERS) {
        let n = apps / CLUSTERS + usize::from(i < apps % CLUSTERS);
        per_shard[driftwatch::shard::of_cluster(&cluster(i), SHARDS) as usize] += n;
    }
    println!("fleet: Applications per shard: {per_shard:?}");
    let mut list = Duration::MAX;
    for run in 1..=2 {
        let (pages, bytes, took) = http.list();
        list = list.min(took);
        println!("fleet: the list alone ({run}): {pages} pages of 500, {:.0} MB, {}", bytes as f64 / 1e6, ms(took));
    }
    let rx = Receiver::start();
    let survivors = replicas(&plane.api, &http, &sampler, &rx, (apps, lease, list));
    takeover(&http, &sampler, &rx, survivors, (apps, lease));
}

/// Starts the replicas together and reports how each settled; returns what the
/// takeover needs.
fn replicas(
    api: &cp::ApiServer,
    http: &Http,
    sampler: &Sampler,
    rx: &Receiver,
    (apps, lease, list): (usize, u64, Duration),
) -> Vec<Daemon> {
    let config = config(rx.addr.port());
    let lease_s = lease.to_string();
    let elected = ["--leader-election", "--lease-duration", lease_s.as_str(), "--lease-namespace", "argocd"];
    let started = Instant::now();
    let ds: Vec<Daemon> = (0..REPLICAS).map(|_| Daemon::spawn_in(api, &config, tempfile::tempdir().unwrap(), &elected)).collect();
    let (seen, settled) = settle(&ds, started, apps);
    let label = format!("fleet: {REPLICAS} replicas, {SHARDS} shards, {apps} Applications, lease {lease} s");
    match settled {
        Some(s) => println!("{label}: every shard held and every Application kept {} after the start", ms(s)),
        None => println!("{label}: NOT settled within 900 s"),
    }
    let holders = http.holders();
    for (i, (d, s)) in ds.iter().zip(&seen).enumerate() {
        let shards: Vec<u32> = holders.iter().filter(|(_, h)| identity_pid(h) == Some(d.child.id())).map(|(s, _)| *s).collect();
        let ready = s.ready.unwrap_or_default();
        println!(
            "{label}: replica {i}: ready {} (list + {:.1} s; goal ≤ + 5 s), shards {shards:?} held and {} Applications kept {} after the start; \
             RSS once ready {:.0} MB, CPU until ready {:.1} s",
            ms(ready),
            ready.as_secs_f64() - list.as_secs_f64(),
            s.kept,
            ms(s.changed),
            s.rss_ready,
            s.cpu_ready
        );
    }
    std::thread::sleep(Duration::from_secs(10));
    for (i, d) in ds.iter().enumerate() {
        println!(
            "{label}: replica {i}: 10 s after settling RSS {:.0} MB (goal < 200 MB), CPU in all {:.1} s, evaluations {}",
            d.rss_mb(),
            d.cpu_seconds(),
            d.metric("driftwatch_evaluations_total")
        );
        d.print_smaps("fleet");
    }
    sampler.report(&format!("{label}: from the start"), started);
    ds
}

/// Kills a replica holding the most shards, changes an Application of one of them, and
/// follows the others taking its shards over.
fn takeover(http: &Http, sampler: &Sampler, rx: &Receiver, mut ds: Vec<Daemon>, (apps, lease): (usize, u64)) {
    let holders = http.holders();
    let held = |d: &Daemon| holders.values().filter(|h| identity_pid(h) == Some(d.child.id())).count();
    let Some(victim) = (0..ds.len()).max_by_key(|i| held(&ds[*i])) else { return };
    let mut dead = ds.remove(victim);
    let pid = dead.child.id();
    let shards: Vec<u32> = holders.iter().filter(|(_, h)| identity_pid(h) == Some(pid)).map(|(s, _)| *s).collect();
    let changed = (0..apps).find(|i| shards.contains(&driftwatch::shard::of_cluster(&cluster(*i), SHARDS))).unwrap_or(0);
    let label = format!("fleet: kill -9 of replica {victim} (shards {shards:?})");
    let killed = Instant::now();
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    http.drift(changed, "takeover-1");
    let patched = killed.elapsed();
    let mut taken: HashMap<u32, Duration> = HashMap::new();
    let (mut all_held, mut all_kept, mut delivered) = (None, None, None);
    let survivors: Vec<String> = ds.iter().map(|d| format!("-{}", d.child.id())).collect();
    while killed.elapsed() < Duration::from_secs(600) && (all_kept.is_none() || delivered.is_none()) {
        for (s, h) in http.holders() {
            if shards.contains(&s) && survivors.iter().any(|p| h.ends_with(p.as_str())) {
                taken.entry(s).or_insert_with(|| killed.elapsed());
            }
        }
        let held: f64 = ds.iter().map(|d| d.metric("driftwatch_leader")).sum();
        let kept: f64 = ds.iter().map(|d| d.metric("driftwatch_applications")).sum();
        if all_held.is_none() && held == f64::from(SHARDS) {
            all_held = Some(killed.elapsed());
        }
        if all_kept.is_none() && held == f64::from(SHARDS) && kept == apps as f64 {
            all_kept = Some(killed.elapsed());
        }
        if delivered.is_none() && rx.arrivals.lock().unwrap().contains_key("takeover-1") {
            delivered = Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let show = |d: Option<Duration>| d.map_or("never (600 s)".into(), ms);
    println!("{label}: app-{changed:05} patched OutOfSync {} after the kill; goal: within lease + 2 s = {} s", ms(patched), lease + 2);
    for s in &shards {
        println!("{label}: shard {s} held by another replica {} after the kill", show(taken.get(s).copied()));
    }
    println!(
        "{label}: every shard held {} after the kill (survivors' driftwatch_leader), every Application kept {}, the change delivered {}",
        show(all_held),
        show(all_kept),
        show(delivered)
    );
    for d in &ds {
        println!(
            "{label}: survivor pid {}: {} shards, {} Applications, RSS {:.0} MB, CPU in all {:.1} s",
            d.child.id(),
            d.metric("driftwatch_leader"),
            d.metric("driftwatch_applications"),
            d.rss_mb(),
            d.cpu_seconds()
        );
    }
    sampler.report(&format!("{label}: since the kill"), killed);
}
