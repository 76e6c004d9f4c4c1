//! End-to-end benchmark of the live daemon, as users run it: the real `driftwatch run`
//! binary (release build) against the fake API server of the tests (real list/watch
//! protocol, through the real kube client) and a keep-alive loopback webhook receiver.
//!
//! `cargo bench --bench live` runs every scenario; `cargo bench --bench live -- NAME`
//! one of them:
//!
//! - `latency`: 1,000 Applications, 100 status changes/s for 30 s, then 1,000/s for
//!   10 s: watch event -> receiver p50/p99/max, deliveries/s, queue depth over time.
//!   With `KUBEBUILDER_ASSETS` set, on a real etcd and kube-apiserver instead, the
//!   changes patched through its API at 100 and 500/s: end to end, the API server's
//!   write, from its answer to the receiver and driftwatch's own share side by side
//!   (`live/real.rs`).
//! - `ready`: 10,000 Applications of ~5 KB (with managedFields): process start ->
//!   `/readyz`, and RSS once ready. With `KUBEBUILDER_ASSETS` set, on a real etcd and
//!   kube-apiserver instead, the daemon started `LIVE_BENCH_RUNS` times, each run every
//!   build of `LIVE_BENCH_BINS` in turn (`live/real.rs`).
//! - `drain`: 10,000 notifications queued while the receiver answers 429 with
//!   `Retry-After: 3`, then the receiver recovers: drain time and deliveries/s; CPU
//!   while idle-waiting.
//! - `outage`: 1,000 Applications go OutOfSync while the receiver answers 503 for 30 s
//!   (no `Retry-After`; the service's default retry settings: each entry used to wait
//!   out a backoff of its own), then it recovers: time from recovery to the last
//!   delivery, attempts while down, CPU while waiting, each notification once.
//! - `flood`: one Application whose annotation names 25,000 recipients for two
//!   triggers changes, then another Application on the same service: when the second
//!   one's notification arrives, and RSS.
//!
//! - `audit`: 1,000 Applications and the audit webhook (`POST /audit`, token, loopback):
//!   batches of 400 events as a broad policy sends them (reads, watches, controller
//!   churn) each with one person's patch on a managed Deployment, 20 batches/s for
//!   20 s: POST -> notification at the receiver p50/p99, daemon CPU per event; then
//!   irrelevant batches as fast as one client posts them for 10 s: events/s and events
//!   per daemon CPU-second.
//!
//! - `ui`: the web view over 10,000 Applications and 100,000 history entries: a state
//!   file seeded with 10 episodes per Application (the last one open; each a copy of the
//!   critical episode a replay of `examples/production` records, with its resources,
//!   changes and notifications), the daemon started on it with those 10,000
//!   Applications OutOfSync; then sequential requests with the operations token:
//!   `/ui/api/fleet` (first page, a filtered page, a deep page), an Application's story,
//!   `/history?limit=1000` and a `/metrics` scrape: p50/p99 per request, bytes, RSS.
//!
//! - `group`: an ApplicationSet's fleet, 10,000 Applications on one route grouped by
//!   revision (Slack's Web API, a loopback stand-in), all moved OutOfSync by one push
//!   in 5 s, then all Synced again: the evaluation thread's CPU per change with and
//!   without `group:`, from the last change to the group's message and to the message
//!   counting all 10,000, the largest message, Slack calls in all, from the last
//!   resolve to "Resolved", RSS.
//!
//! - `units`: `LIVE_BENCH_APPS` Flux Kustomizations (10,000 unless set; an inventory of 20
//!   objects each) and as many Applications as `ready` makes them: the lists alone,
//!   process start -> `/readyz`, RSS, evaluations; then 100 Kustomizations/s turn
//!   `Ready=False` with a new reason and revision for 30 s: change -> receiver p50/p99/max
//!   of `on-reconcile-failed`.
//!
//! - `pgscale`: the store in PostgreSQL (in process, no daemon) with 10,000 and then
//!   1,000,000 history rows and as many delivered keys of other Applications: the time
//!   of a pass's view of its Application and of its write (an episode of ~3 KB), over
//!   2,000 passes — whether a pass's cost grows with the tables.
//!
//! - `fleet` (only when named; needs `KUBEBUILDER_ASSETS`): 100,000 Applications
//!   (`LIVE_BENCH_APPS`) on a real control plane, 3 replicas and 8 shards in
//!   PostgreSQL: the list time, each replica's start → ready and to its shards' Applications
//!   kept, RSS, and a replica's `kill -9` taken over (`live/fleet.rs`).
//!
//! `LIVE_BENCH_STATE=postgres` keeps the daemon's state in PostgreSQL instead of the
//! redb file: a private server (`driftwatch::state::pgtest`) on a Unix socket, a fresh
//! schema per daemon (`LIVE_BENCH_PG_SCHEMA=name`: one for all, so a daemon finds the
//! state of the one before it); with `DRIFTWATCH_PG_FSYNC=on` the server waits for the
//! disk as a production server does.
//!
//! - `detect`: time to detect on a real etcd and kube-apiserver (`KUBEBUILDER_ASSETS`;
//!   nothing without it): people's privileged patches, each taken back at once by Argo
//!   CD, posted by the API servers' audit webhooks (batch mode, 1 s), at 10 and 50
//!   writes/s, on one replica and on 3 replicas × 4 shards: write -> page p50/p99, the
//!   API server's batch wait apart, unpaged writes, CPU per audit event (`live/detect.rs`).
//!
//! Figures go to BENCHMARKS.md with the command, machine and date.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "live/detect.rs"]
mod detect;
#[path = "live/fleet.rs"]
mod fleet;
#[path = "live/real.rs"]
mod real;
#[path = "live/relay.rs"]
mod relay;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::apiserver::{FakeApiServer, KUSTOMIZATIONS};
use common::receiver::get;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// A keep-alive HTTP receiver: records when each revision arrived (and the last
/// arrival); answers 429 with `Retry-After: 3` while `failing`.
struct Receiver {
    addr: SocketAddr,
    arrivals: Arc<Mutex<HashMap<String, Instant>>>,
    count: Arc<AtomicU64>,
    last: Arc<Mutex<Option<Instant>>>,
    failing: Arc<AtomicBool>,
    /// Answers 503 (no `Retry-After`) while set; counts those answers.
    unavailable: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    /// Every body received, in order.
    bodies: Arc<Mutex<Vec<String>>>,
    _rt: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let arrivals: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let count = Arc::new(AtomicU64::new(0));
        let failing = Arc::new(AtomicBool::new(false));
        let last: Arc<Mutex<Option<Instant>>> = Arc::default();
        let unavailable = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
        let (a, c, f, l) = (arrivals.clone(), count.clone(), failing.clone(), last.clone());
        let (u, r, b) = (unavailable.clone(), refused.clone(), bodies.clone());
        rt.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (a, c, f, l) = (a.clone(), c.clone(), f.clone(), l.clone());
                let (u, r, b) = (u.clone(), r.clone(), b.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (a, c, f, l) = (a.clone(), c.clone(), f.clone(), l.clone());
                        let (u, r, b) = (u.clone(), r.clone(), b.clone());
                        async move {
                            let is_bulk = req.uri().path().ends_with("/_bulk");
                            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            if u.load(Ordering::Relaxed) {
                                r.fetch_add(1, Ordering::Relaxed);
                                let mut resp = Response::new(Full::new(Bytes::from_static(b"unavailable")));
                                *resp.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
                                return Ok::<_, Infallible>(resp);
                            }
                            b.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
                            if f.load(Ordering::Relaxed) {
                                let mut r = Response::new(Full::new(Bytes::from_static(b"slow down")));
                                *r.status_mut() = hyper::StatusCode::TOO_MANY_REQUESTS;
                                r.headers_mut().insert("retry-after", hyper::header::HeaderValue::from_static("3"));
                                return Ok::<_, Infallible>(r);
                            }
                            let now = Instant::now();
                            if let Ok(v) = serde_json::from_slice::<Value>(&body)
                                && let Some(rev) = v["rev"].as_str()
                            {
                                a.lock().unwrap().entry(rev.to_string()).or_insert(now);
                            }
                            c.fetch_add(1, Ordering::Relaxed);
                            *l.lock().unwrap() = Some(now);
                            if is_bulk {
                                // Elasticsearch's `_bulk`: an item per action, all created.
                                let n = body.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count() / 2;
                                let items: Vec<Value> = (0..n).map(|_| json!({"create": {"status": 201}})).collect();
                                let answer = json!({"errors": false, "items": items}).to_string();
                                return Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(answer))));
                            }
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Receiver { addr, arrivals, count, last, failing, unavailable, refused, bodies, _rt: rt }
    }
}

fn config(port: u16) -> String {
    let services = format!(
        r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:{port}
    rateLimit: {{perSecond: 2000, burst: 100}}
    retry: {{initialBackoff: 200ms, maxBackoff: 1s, maxAttempts: 1000, deadline: 1h}}
"#
    );
    services + common::DRIFT_TRIGGER + state_config().as_str()
}

/// With `LIVE_BENCH_STATE=postgres`, the state in PostgreSQL (a schema of its own).
fn state_config() -> String {
    match std::env::var("LIVE_BENCH_STATE").as_deref() {
        // LIVE_BENCH_PG_SCHEMA: one schema for every daemon (a second start finds the
        // first one's state, as a standby taking over does).
        Ok("postgres") => format!(
            "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg-url\n    schema: {}\n",
            std::env::var("LIVE_BENCH_PG_SCHEMA").unwrap_or_else(|_| driftwatch::state::pgtest::fresh_schema())
        ),
        _ => String::new(),
    }
}

/// An Application of about 5 KB as the API server returns it: 20 resources, history,
/// an operation state and managedFields.
fn app(i: usize, sync: &str, rev: &str) -> Value {
    let resources: Vec<Value> = (0..20)
        .map(|r| {
            json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": format!("res-{r}"),
                   "status": "Synced", "health": {"status": "Healthy"}})
        })
        .collect();
    let managed: Vec<Value> = ["argocd-controller", "argocd-server", "kubectl-client-side-apply"]
        .iter()
        .map(|m| {
            json!({"manager": m, "operation": "Update", "apiVersion": "argoproj.io/v1alpha1", "time": "2026-03-01T09:00:00Z",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:sync": {"f:status": {}, "f:revision": {}},
                   "f:health": {"f:status": {}}, "f:resources": {}, "f:history": {}, "f:operationState": {"f:phase": {}}}}})
        })
        .collect();
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i:05}"), "namespace": "argocd", "uid": format!("uid-{i}"), "managedFields": managed,
                     "labels": {"team": "shop"},
                     "annotations": {"notifications.argoproj.io/subscribe.on-drift.hook": ""}},
        "spec": {"project": "default", "source": {"repoURL": "https://git.example.com/shop.git", "path": format!("apps/{i}"), "targetRevision": "main"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "shop"}},
        "status": {"sync": {"status": sync, "revision": rev}, "health": {"status": "Healthy"},
                   "reconciledAt": "2026-03-01T09:01:00Z", "resources": resources,
                   "history": [{"id": 1, "revision": "r0", "deployedAt": "2026-03-01T08:00:00Z"}],
                   "operationState": {"phase": "Succeeded", "message": "successfully synced", "startedAt": "2026-03-01T09:00:00Z",
                                      "finishedAt": "2026-03-01T09:00:30Z"}}
    })
}

/// What a daemon is pointed at: the fake API server, or a real one (`real.rs`).
trait Cluster {
    /// Writes a kubeconfig for the daemon at `path`.
    fn kubeconfig(&self, path: &std::path::Path);
}

impl Cluster for FakeApiServer {
    fn kubeconfig(&self, path: &std::path::Path) {
        FakeApiServer::kubeconfig(self, path);
    }
}

/// The daemon binary: the one a scenario chose ([`use_binary`]), else `LIVE_BENCH_BIN`,
/// else this build's.
fn binary() -> String {
    if let Some(bin) = CHOSEN_BINARY.lock().unwrap().clone() {
        return bin;
    }
    std::env::var("LIVE_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_driftwatch").to_string())
}

/// A scenario that alternates builds names the next daemon's binary (`None`: back to
/// [`binary`]'s default).
fn use_binary(bin: Option<String>) {
    *CHOSEN_BINARY.lock().unwrap() = bin;
}

static CHOSEN_BINARY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

struct Daemon {
    child: Child,
    admin: String,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(api: &dyn Cluster, receiver_port: u16) -> (Daemon, Duration) {
        Daemon::start_with(api, &config(receiver_port))
    }

    fn start_with(api: &dyn Cluster, config: &str) -> (Daemon, Duration) {
        Daemon::start_in(api, config, tempfile::tempdir().unwrap())
    }

    /// Starts the daemon in `dir` (whose `state.redb` may be seeded already).
    fn start_in(api: &dyn Cluster, config: &str, dir: tempfile::TempDir) -> (Daemon, Duration) {
        let started = Instant::now();
        let d = Daemon::spawn_in(api, config, dir, &[]);
        d.wait_ready(started);
        (d, started.elapsed())
    }

    /// Waits for `/readyz` (at most 300 s from `started`).
    fn wait_ready(&self, started: Instant) {
        while get(&self.admin, "/readyz").is_none_or(|(s, _)| s != 200) {
            assert!(started.elapsed() < Duration::from_secs(300), "not ready after 300 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts the daemon in `dir` with `extra` arguments, without waiting for it.
    fn spawn_in(api: &dyn Cluster, config: &str, dir: tempfile::TempDir, extra: &[&str]) -> Daemon {
        api.kubeconfig(&dir.path().join("kubeconfig"));
        std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
        if config.contains("$pg-url") {
            let pg = driftwatch::state::pgtest::server().expect("PostgreSQL for LIVE_BENCH_STATE=postgres");
            std::fs::write(dir.path().join("secrets.yaml"), format!("pg-url: {:?}\n", pg.url())).unwrap();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let admin = format!("127.0.0.1:{port}");
        // LIVE_BENCH_WRAP="valgrind --tool=massif ..." runs the daemon under a profiler;
        // LIVE_BENCH_BIN=path runs another build (an earlier commit's, to compare).
        let mut cmd = match std::env::var("LIVE_BENCH_WRAP") {
            Ok(wrap) if !wrap.trim().is_empty() => {
                let mut parts = wrap.split_whitespace();
                let mut c = Command::new(parts.next().unwrap_or("env"));
                c.args(parts).arg(binary());
                c
            }
            _ => Command::new(binary()),
        };
        let child = cmd
            .args(common::daemon::run_args(dir.path()))
            .args(["--listen", &admin])
            .args(extra)
            .env("DRIFTWATCH_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Daemon { child, admin, _dir: dir }
    }

    fn metric(&self, prefix: &str) -> f64 {
        get(&self.admin, "/metrics")
            .and_then(|(_, b)| b.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok()))
            .unwrap_or(0.0)
    }

    /// The sum of every series of the metric `name` (all its labels).
    fn metric_sum(&self, name: &str) -> f64 {
        let Some((_, body)) = get(&self.admin, "/metrics") else { return 0.0 };
        body.lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// With `LIVE_BENCH_SMAPS` set, the eight largest resident regions of the daemon.
    fn print_smaps(&self, label: &str) {
        if std::env::var_os("LIVE_BENCH_SMAPS").is_none() {
            return;
        }
        let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", self.child.id())).unwrap_or_default();
        let mut regions: Vec<(u64, String)> = Vec::new();
        let mut name = String::new();
        for l in smaps.lines() {
            if l.contains('-') && !l.starts_with(|c: char| c.is_ascii_uppercase()) {
                name = l.to_string();
            } else if let Some(v) = l.strip_prefix("Rss:") {
                let kb: u64 = v.split_whitespace().next().and_then(|x| x.parse().ok()).unwrap_or(0);
                regions.push((kb, name.clone()));
            }
        }
        regions.sort_by_key(|r| std::cmp::Reverse(r.0));
        for (kb, n) in regions.iter().take(8) {
            println!("{label}:   {kb} KB  {n}");
        }
    }

    fn rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let kib: f64 =
            status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0.0);
        kib / 1024.0
    }

    fn cpu_seconds(&self) -> f64 {
        stat_cpu(&format!("/proc/{}/stat", self.child.id()))
    }

    /// CPU seconds of the daemon's threads, by thread name (`driftwatch-eval`: the
    /// evaluation thread; `driftwatch`: the shell, decoding the watch; `tokio-rt-worker`:
    /// delivery, live reads, the operations server).
    fn cpu_by_thread(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = Vec::new();
        let dir = format!("/proc/{}/task", self.child.id());
        for task in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = task.path();
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string();
            let cpu = stat_cpu(&path.join("stat").to_string_lossy());
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += cpu,
                None => out.push((name, cpu)),
            }
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }
}

impl Drop for Daemon {
    /// SIGTERM first (a profiler the daemon runs under writes its report on exit).
    fn drop(&mut self) {
        // Already ended (killed by the scenario): its pid may be another process's now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// utime + stime of a `/proc/.../stat` file, in seconds.
fn stat_cpu(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// CPU seconds the whole machine has been busy (`/proc/stat`'s first line: user, nice,
/// system, irq, softirq and steal of every CPU): less the daemon's and this process's,
/// what other processes took meanwhile (the VM's two cores are shared with builds).
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> = stat.lines().next().unwrap_or_default().split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0.0)).collect();
    [0, 1, 2, 5, 6, 7].iter().map(|i| f.get(*i).copied().unwrap_or(0.0)).sum::<f64>() / 100.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Makes `rate` changes a second for `secs`: change `n` applies `change(n, rev)`, whose
/// notification carries `rev` (`rev-<first + n>`, new each time), so each is one
/// notification. Returns when each revision was applied, and the hook's queue depth
/// each second.
fn drive(
    api: &FakeApiServer,
    d: &Daemon,
    (rate, secs, first): (u64, u64, usize),
    change: impl Fn(usize, &str) -> Value,
) -> (HashMap<String, Instant>, Vec<(u64, f64)>) {
    let mut applied = HashMap::new();
    let mut depth = Vec::new();
    let start = Instant::now();
    let total = (rate * secs) as usize;
    let mut last_sample = 0;
    for n in 0..total {
        let due = start + Duration::from_secs_f64(n as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let rev = format!("rev-{}", first + n);
        api.apply(change(n, &rev));
        applied.insert(rev, Instant::now());
        let second = start.elapsed().as_secs();
        if second > last_sample {
            last_sample = second;
            depth.push((second, d.metric(r#"driftwatch_queue_depth{service="hook"}"#)));
        }
    }
    (applied, depth)
}

fn report_latency(label: &str, applied: &HashMap<String, Instant>, rx: &Receiver, took: Duration) {
    let arrivals = rx.arrivals.lock().unwrap().clone();
    let mut lat: Vec<Duration> =
        applied.iter().filter_map(|(rev, at)| arrivals.get(rev).map(|got| got.saturating_duration_since(*at))).collect();
    lat.sort();
    let delivered = lat.len();
    println!(
        "{label}: {} changes, {delivered} delivered, p50 {}, p99 {}, max {}, {:.0} deliveries/s over {:.1} s",
        applied.len(),
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.99)),
        ms(lat.last().copied().unwrap_or_default()),
        delivered as f64 / took.as_secs_f64(),
        took.as_secs_f64()
    );
}

/// Waits until every applied revision arrived (or `limit` passed); returns how long.
fn settle(rx: &Receiver, applied: &HashMap<String, Instant>, since: Instant, limit: Duration) -> Duration {
    loop {
        let arrived = { rx.arrivals.lock().unwrap().keys().filter(|k| applied.contains_key(*k)).count() };
        if arrived >= applied.len() || since.elapsed() > limit {
            return since.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn latency() {
    let api = FakeApiServer::start();
    api.set_rbac(None);
    let rx = Receiver::start();
    const APPS: usize = 1_000;
    for i in 0..APPS {
        api.apply(app(i, "Synced", "r0"));
    }
    let (d, ready) = Daemon::start(&api, rx.addr.port());
    println!("latency: {APPS} Applications ready in {}, RSS {:.0} MB", ms(ready), d.rss_mb());
    for (rate, secs, first) in [(100u64, 30u64, 0usize), (1_000, 10, 1_000_000)] {
        let cpu_before = d.cpu_by_thread();
        let (bench_before, machine_before) = (stat_cpu("/proc/self/stat"), machine_busy());
        let start = Instant::now();
        // Each change a new revision, OutOfSync: one notification (on-drift).
        let (applied, depth) = drive(&api, &d, (rate, secs, first), |n, rev| app(n % APPS, "OutOfSync", rev));
        let took = settle(&rx, &applied, start, Duration::from_secs(120));
        report_latency(&format!("latency: {APPS} apps @ {rate}/s for {secs} s"), &applied, &rx, took);
        report_load("latency", &d, &cpu_before, (bench_before, machine_before), &depth);
    }
}

/// Where the two cores went during a load (the daemon's threads since `cpu_before`,
/// this process since `bench_before`: the fake API server, the receiver, the driver;
/// other processes since `machine_before`), the hook's queue depth each second, and RSS.
fn report_load(label: &str, d: &Daemon, cpu_before: &[(String, f64)], (bench_before, machine_before): (f64, f64), depth: &[(u64, f64)]) {
    let now = d.cpu_by_thread();
    let spent: Vec<(String, f64)> =
        now.iter().map(|(n, c)| (n.clone(), c - cpu_before.iter().find(|(b, _)| b == n).map_or(0.0, |(_, b)| *b))).collect();
    let bench = stat_cpu("/proc/self/stat") - bench_before;
    let others = machine_busy() - machine_before - bench - spent.iter().map(|(_, c)| c).sum::<f64>();
    println!(
        "{label}:   CPU: daemon {}; bench process {bench:.1} s; other processes {:.1} s",
        spent.iter().map(|(n, c)| format!("{n} {c:.1} s")).collect::<Vec<_>>().join(", "),
        others.max(0.0)
    );
    let max_depth = depth.iter().map(|(_, q)| *q).fold(0.0, f64::max);
    println!(
        "{label}:   queue depth per second {:?} (max {max_depth}), RSS {:.0} MB; so far: drift episode transitions {}, live reads {}",
        depth.iter().map(|(_, q)| *q as u64).collect::<Vec<_>>(),
        d.rss_mb(),
        d.metric_sum("driftwatch_drift_episodes_total"),
        d.metric_sum("driftwatch_live_reads_total")
    );
}

/// The fake API server's own share of a list: `path`'s list in pages of 500, read and
/// dropped (one client, nothing else running); the pages and the time.
fn list_alone(api: &FakeApiServer, path: &str) -> (usize, Duration) {
    let addr = api.url().trim_start_matches("http://").to_string();
    let listed = Instant::now();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = format!("{path}?limit=500{}", if token.is_empty() { String::new() } else { format!("&continue={token}") });
        let (_, body) = get(&addr, &page).expect("list page");
        pages += 1;
        token = body.split_once(r#""continue":""#).and_then(|(_, r)| r.split_once('"')).map(|(t, _)| t.to_string()).unwrap_or_default();
        if token.is_empty() {
            return (pages, listed.elapsed());
        }
    }
}

/// Where a start's time went: when the fake API server answered the daemon's last list
/// page (the server sharing the machine with it) and how long after it the daemon was
/// ready; the daemon's CPU until ready, per thread.
fn report_start(label: &str, api: &FakeApiServer, d: &Daemon, started: Instant, ready: Duration) {
    if let Some(last) = api.last_page_at().filter(|t| *t > started) {
        println!(
            "{label}: the daemon's list answered {} after its start; ready {} after the last page",
            ms(last - started),
            ms((started + ready).saturating_duration_since(last))
        );
    }
    let threads = d.cpu_by_thread();
    println!(
        "{label}: daemon CPU until ready {:.2} s: {}",
        threads.iter().map(|(_, c)| c).sum::<f64>(),
        threads.iter().map(|(n, c)| format!("{n} {c:.2} s")).collect::<Vec<_>>().join(", ")
    );
}

const APPLICATIONS_PATH: &str = "/apis/argoproj.io/v1alpha1/applications";
const KUSTOMIZATIONS_PATH: &str = "/apis/kustomize.toolkit.fluxcd.io/v1/kustomizations";

/// The bench's configuration with Flux: the catalog's `on-reconcile-failed` to the hook
/// for every Flux unit, its webhook body carrying the revision attempted as `rev`.
fn units_config(port: u16) -> String {
    let templates = format!("templates:\n{}", common::RECONCILE_FAILED_TEMPLATE);
    config(port).replacen("templates:\n", &templates, 1) + common::FLUX_SUBSCRIPTION
}

/// The `units` scenario's Kustomization `i`: Ready, 20 objects in its inventory.
fn unit_kustomization(i: usize) -> Value {
    common::kustomization(&format!("ks-{i:05}"), "main@sha1:0000000000000000000000000000000000000000", 20)
}

/// `LIVE_BENCH_APPS` Kustomizations (10,000 unless set; an inventory of 20, Ready) and as
/// many Applications (as `ready` makes them), on one replica: the lists alone, start ->
/// `/readyz` against them (issue 54: within the list time + 5 s), RSS, evaluations; then
/// 100 changes/s for 30 s over the Kustomizations, each one `Ready=False` with a new
/// reason and revision (one `on-reconcile-failed` each): change -> receiver p50/p99/max.
fn units() {
    let api = FakeApiServer::start();
    api.set_rbac(None);
    api.install(KUSTOMIZATIONS);
    let rx = Receiver::start();
    let n: usize = std::env::var("LIVE_BENCH_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    for i in 0..n {
        api.apply(app(i, "Synced", "r0"));
        api.apply(unit_kustomization(i));
    }
    let size = |v: Value| serde_json::to_string(&v).unwrap().len();
    let (ks_size, app_size) = (size(unit_kustomization(0)), size(app(0, "Synced", "r0")));
    let (ks_pages, ks_listed) = list_alone(&api, KUSTOMIZATIONS_PATH);
    let (app_pages, app_listed) = list_alone(&api, APPLICATIONS_PATH);
    let listed = ks_listed + app_listed;
    println!(
        "units: the lists alone (the fake API server, one after the other, read and dropped): {} ({n} Kustomizations of {ks_size} bytes, {ks_pages} pages: {}; {n} Applications of {app_size} bytes, {app_pages} pages: {})",
        ms(listed),
        ms(ks_listed),
        ms(app_listed)
    );
    let (bench_before, machine_before) = (stat_cpu("/proc/self/stat"), machine_busy());
    let started = Instant::now();
    let (d, ready) = Daemon::start_with(&api, &units_config(rx.addr.port()));
    let (bench, machine) = (stat_cpu("/proc/self/stat") - bench_before, machine_busy() - machine_before);
    report_start("units", &api, &d, started, ready);
    let daemon: f64 = d.cpu_by_thread().iter().map(|(_, c)| c).sum();
    println!(
        "units: CPU from start to ready ({:.1} s on {} cores): the daemon {daemon:.2} s, this process (the fake API server) {bench:.2} s, other processes {:.2} s",
        ready.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        (machine - daemon - bench).max(0.0)
    );
    let over = ready.as_secs_f64() - listed.as_secs_f64();
    println!(
        "units: start -> /readyz {}, {:+.2} s over the lists alone (bar: <= 5 s{})",
        ms(ready),
        over,
        if over > 5.0 { ": MISSED" } else { "" }
    );
    std::thread::sleep(Duration::from_secs(2));
    d.print_smaps("units");
    println!(
        "units: RSS {:.0} MB, {} evaluations, {} notifications sent at the start",
        d.rss_mb(),
        d.metric("driftwatch_evaluations_total"),
        rx.count.load(Ordering::Relaxed)
    );
    // Each change one Kustomization (round robin) failing with a new reason and revision.
    const REASONS: [&str; 4] = ["BuildFailed", "HealthCheckFailed", "ReconciliationFailed", "ArtifactFailed"];
    let (rate, secs) = (100u64, 30u64);
    let cpu_before = d.cpu_by_thread();
    let (bench_before, machine_before) = (stat_cpu("/proc/self/stat"), machine_busy());
    let start = Instant::now();
    let (applied, depth) = drive(&api, &d, (rate, secs, 0), |c, rev| {
        let reason = REASONS[c % REASONS.len()];
        common::reconcile_failed(unit_kustomization(c % n), reason, &format!("{reason}: change {c}"), rev)
    });
    let took = settle(&rx, &applied, start, Duration::from_secs(120));
    report_latency(
        &format!("units: {n} Kustomizations + {n} Applications, Kustomizations failing @ {rate}/s for {secs} s"),
        &applied,
        &rx,
        took,
    );
    report_load("units", &d, &cpu_before, (bench_before, machine_before), &depth);
    println!("units: {} evaluations in all", d.metric("driftwatch_evaluations_total"));
}

fn ready() {
    let api = FakeApiServer::start();
    api.set_rbac(None);
    let rx = Receiver::start();
    let apps: usize = std::env::var("LIVE_BENCH_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    for i in 0..apps {
        api.apply(app(i, "Synced", "r0"));
    }
    let size = serde_json::to_string(&app(0, "Synced", "r0")).unwrap().len();
    let (pages, listed) = list_alone(&api, APPLICATIONS_PATH);
    println!("ready: the list alone (the fake API server, {pages} pages read and dropped): {}", ms(listed));
    let started = Instant::now();
    let (d, ready) = Daemon::start(&api, rx.addr.port());
    report_start("ready", &api, &d, started, ready);
    std::thread::sleep(Duration::from_secs(2));
    d.print_smaps("ready");
    println!(
        "ready: {apps} Applications of {size} bytes: start -> /readyz {}, RSS {:.0} MB ({:.1} KB per Application), {} evaluations",
        ms(ready),
        d.rss_mb(),
        d.rss_mb() * 1024.0 / apps as f64,
        d.metric("driftwatch_evaluations_total")
    );
    if std::env::var_os("LIVE_BENCH_PG_SCHEMA").is_some() {
        // As a standby taking over: the first daemon gone, a second on its state.
        drop(d);
        let (again, took) = Daemon::start(&api, rx.addr.port());
        println!(
            "ready: a second daemon on the first one's state in PostgreSQL: start -> /readyz {}, {} evaluations",
            ms(took),
            again.metric("driftwatch_evaluations_total")
        );
    }
}

/// A fake API server with `n` Applications OutOfSync on revisions `<prefix>-<i>`, and
/// a receiver answering `429 Retry-After: 3` until the caller lets it recover.
fn drifted_fleet(n: usize, prefix: &str) -> (FakeApiServer, Receiver) {
    let api = FakeApiServer::start();
    api.set_rbac(None);
    let rx = Receiver::start();
    rx.failing.store(true, Ordering::Relaxed);
    for i in 0..n {
        api.apply(app(i, "OutOfSync", &format!("{prefix}-{i}")));
    }
    (api, rx)
}

/// A receiver outage answered with `429 Retry-After: 3` while 10,000 notifications
/// queue up: the service pauses (CPU while waiting), then the receiver recovers and the
/// queue drains (deliveries/s from the first delivery to the last).
fn drain() {
    const N: usize = 10_000;
    let (api, rx) = drifted_fleet(N, "q");
    let (d, _) = Daemon::start(&api, rx.addr.port());
    let start = Instant::now();
    let queued = wait_queued(&d, N);
    let cpu = d.cpu_seconds();
    std::thread::sleep(Duration::from_secs(6));
    let idle_cpu = d.cpu_seconds() - cpu;
    println!(
        "drain: {queued} queued in {:.1} s; CPU while the receiver says Retry-After: {:.2} s in 6 s",
        start.elapsed().as_secs_f64(),
        idle_cpu
    );
    rx.failing.store(false, Ordering::Relaxed);
    let before = rx.count.load(Ordering::Relaxed);
    let switched = Instant::now();
    let first = loop {
        if rx.count.load(Ordering::Relaxed) > before || switched.elapsed() > Duration::from_secs(60) {
            break Instant::now();
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    while (rx.count.load(Ordering::Relaxed) - before) < N as u64 && switched.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let n = rx.count.load(Ordering::Relaxed) - before;
    let last = rx.last.lock().unwrap().unwrap_or(first);
    let draining = last.saturating_duration_since(first).max(Duration::from_millis(1));
    println!(
        "drain: {n} delivered {:.1} s after recovery (first after {:.1} s, the pause): {:.0} deliveries/s from the first to the last, RSS {:.0} MB",
        last.saturating_duration_since(switched).as_secs_f64(),
        first.saturating_duration_since(switched).as_secs_f64(),
        n as f64 / draining.as_secs_f64(),
        d.rss_mb()
    );
}

/// Waits (at most 5 min) until `n` entries are queued for the service `hook`; returns
/// how many are.
fn wait_queued(d: &Daemon, n: usize) -> f64 {
    let start = Instant::now();
    while d.metric(r#"driftwatch_queue_depth{service="hook"}"#) < n as f64 && start.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(100));
    }
    d.metric(r#"driftwatch_queue_depth{service="hook"}"#)
}

fn outage() {
    let api = FakeApiServer::start();
    api.set_rbac(None);
    let rx = Receiver::start();
    const N: usize = 1_000;
    for i in 0..N {
        api.apply(app(i, "Synced", "base"));
    }
    // The service's default retry settings (1 s doubling to 5 min), as users run it.
    let cfg = config(rx.addr.port()).replace("    retry: {initialBackoff: 200ms, maxBackoff: 1s, maxAttempts: 1000, deadline: 1h}\n", "");
    let (d, _) = Daemon::start_with(&api, &cfg);
    rx.unavailable.store(true, Ordering::Relaxed);
    for i in 0..N {
        api.apply(app(i, "OutOfSync", &format!("o-{i}")));
    }
    let start = Instant::now();
    while d.metric(r#"driftwatch_queue_depth{service="hook"}"#) < N as f64 && start.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Down for a while (30 s), as a real outage is: every entry's own backoff grows.
    std::thread::sleep(Duration::from_secs(24));
    let (cpu, refused) = (d.cpu_seconds(), rx.refused.load(Ordering::Relaxed));
    std::thread::sleep(Duration::from_secs(6));
    let idle_cpu = d.cpu_seconds() - cpu;
    let refused_while_waiting = rx.refused.load(Ordering::Relaxed) - refused;
    rx.unavailable.store(false, Ordering::Relaxed);
    let switched = Instant::now();
    let before = rx.count.load(Ordering::Relaxed);
    // The first delivery after recovery is the probe's (it waits out the probe's
    // backoff); the rest is the drain.
    let mut first = None;
    while (rx.count.load(Ordering::Relaxed) - before) < N as u64 && switched.elapsed() < Duration::from_secs(300) {
        if first.is_none() && rx.count.load(Ordering::Relaxed) > before {
            first = Some(switched.elapsed());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let last = rx.last.lock().unwrap().unwrap_or(switched);
    std::thread::sleep(Duration::from_secs(2));
    let bodies = rx.bodies.lock().unwrap().clone();
    let distinct: std::collections::BTreeSet<&String> = bodies.iter().collect();
    println!(
        "outage: {N} queued while the receiver answered 503; {} answers of 503 in all, {refused_while_waiting} in 6 s of waiting, CPU {idle_cpu:.3} s in those 6 s ({:.3} core); after recovery the first (the probe) in {:.2} s, every notification in {:.2} s, {} delivered, {} distinct (repeats: {})",
        rx.refused.load(Ordering::Relaxed),
        idle_cpu / 6.0,
        first.unwrap_or_default().as_secs_f64(),
        last.saturating_duration_since(switched).as_secs_f64(),
        bodies.len(),
        distinct.len(),
        bodies.len() - distinct.len()
    );
}

/// 10,000 drift episodes queued for a SIEM service of `kind` in `format` while it
/// answers 429, then drained: records per second from the receiver's recovery to the
/// last delivery (the pause its last `Retry-After` asked for included), and the
/// daemon's CPU per record meanwhile.
fn siem_kind(kind: &str, format: &str) {
    const N: usize = 10_000;
    let (api, rx) = drifted_fleet(N, "s");
    let url = format!("http://127.0.0.1:{}", rx.addr.port());
    let settings = match kind {
        "splunk" => format!("type: splunk\n    url: {url}\n    token: t\n    batchSize: 100"),
        "elasticsearch" => format!("type: elasticsearch\n    url: {url}\n    batchSize: 100"),
        "loki" => format!("type: loki\n    url: {url}\n    batchSize: 100"),
        "otlp" => format!("type: otlp\n    url: {url}\n    batchSize: 100"),
        other => panic!("no bench for {other}"),
    };
    let cfg = format!(
        "services:\n  hook:\n    {settings}\n    format: {format}\n    rateLimit: {{perSecond: 2000, burst: 100}}\n    retry: {{initialBackoff: 200ms, maxBackoff: 1s, maxAttempts: 1000, deadline: 1h}}\n{}",
        common::DRIFT_TRIGGER
    );
    let (d, _) = Daemon::start_with(&api, &cfg);
    wait_queued(&d, N);
    let sent = format!(r#"driftwatch_notifications_sent_total{{kind="{kind}"}}"#);
    let cpu = d.cpu_seconds();
    rx.failing.store(false, Ordering::Relaxed);
    let switched = Instant::now();
    while d.metric(&sent) < N as f64 && switched.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = switched.elapsed();
    let (n, cpu) = (d.metric(&sent), d.cpu_seconds() - cpu);
    let requests = rx.count.load(Ordering::Relaxed);
    println!(
        "siem: {kind} {format}: {n} records in {:.2} s after the receiver recovered ({:.0} records/s, {requests} requests), daemon CPU {:.3} s ({:.0} µs per record), RSS {:.0} MB",
        took.as_secs_f64(),
        n / took.as_secs_f64().max(1e-3),
        cpu,
        cpu * 1e6 / n.max(1.0),
        d.rss_mb()
    );
}

fn siem() {
    for (kind, format) in
        [("splunk", "ecs"), ("splunk", "ocsf"), ("elasticsearch", "ecs"), ("elasticsearch", "ocsf"), ("loki", "ocsf"), ("otlp", "ocsf")]
    {
        siem_kind(kind, format);
    }
}

fn flood() {
    let api = FakeApiServer::start();
    api.set_rbac(None);
    let rx = Receiver::start();
    let (d, _) = Daemon::start(&api, rx.addr.port());
    let channels: Vec<String> = (0..25_000).map(|i| format!("c{i:05}")).collect();
    let mut flooding = app(0, "OutOfSync", "flood-rev");
    flooding["metadata"]["annotations"] = json!({
        "notifications.argoproj.io/subscriptions":
            format!("- trigger: [on-drift, on-drift]\n  destinations:\n    - service: hook\n      recipients: [{}]\n", channels.join(", "))
    });
    let rss_before = d.rss_mb();
    let t0 = Instant::now();
    api.apply(flooding);
    std::thread::sleep(Duration::from_secs(2));
    let page_at = Instant::now();
    api.apply(app(1, "OutOfSync", "page-rev"));
    while !rx.arrivals.lock().unwrap().contains_key("page-rev") && page_at.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let page = rx.arrivals.lock().unwrap().get("page-rev").map(|t| t.saturating_duration_since(page_at));
    std::thread::sleep(Duration::from_secs(3));
    println!(
        "flood: an annotation of {} KB naming 25,000 recipients; the other Application's notification {} after its change; {} flood deliveries in {:.1} s; capped evaluations {}; RSS {rss_before:.0} MB -> {:.0} MB",
        (channels.join(", ").len() / 1024),
        page.map_or("never (60 s)".to_string(), |p| format!("{:.0} ms", p.as_secs_f64() * 1000.0)),
        rx.count.load(Ordering::Relaxed).saturating_sub(1),
        t0.elapsed().as_secs_f64(),
        d.metric("driftwatch_subscriptions_capped_total"),
        d.rss_mb()
    );
}

/// An audit `EventList` of `noise` events from the captured noise batch (cycled) and,
/// when `person` is given, one patch by that person of Application `app`'s first
/// Deployment.
fn audit_batch(noise_items: &[Value], noise: usize, person: Option<(&str, usize)>) -> Vec<u8> {
    let mut items: Vec<Value> = noise_items.iter().cycle().take(noise).cloned().collect();
    if let Some((who, app)) = person {
        items.push(json!({"level": "RequestResponse", "auditID": who, "stage": "ResponseComplete",
            "requestURI": format!("/apis/apps/v1/namespaces/shop/deployments/res-{app}-0?fieldManager=kubectl-patch"),
            "verb": "patch", "user": {"username": who, "groups": ["sre", "system:authenticated"]}, "sourceIPs": ["10.1.2.3"],
            "userAgent": "kubectl/v1.36.2 (linux/amd64) kubernetes/abc", "responseStatus": {"code": 200},
            "objectRef": {"resource": "deployments", "namespace": "shop", "name": format!("res-{app}-0"), "apiGroup": "apps", "apiVersion": "v1"},
            "requestObject": {"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}},
            "requestReceivedTimestamp": chrono::Utc::now().to_rfc3339()}));
    }
    serde_json::to_vec(&json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items})).unwrap()
}

fn audit() {
    let api = FakeApiServer::start();
    api.set_rbac(None);
    let rx = Receiver::start();
    const APPS: usize = 1_000;
    for i in 0..APPS {
        let mut a = app(i, "Synced", "r0");
        for (r, res) in a["status"]["resources"].as_array_mut().unwrap().iter_mut().enumerate() {
            res["name"] = json!(format!("res-{i}-{r}"));
        }
        api.apply(a);
    }
    let secrets = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secrets.path(), "audit-token: bench-audit-token-0123456789\n").unwrap();
    let audit_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = format!(
        r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:{port}
    rateLimit: {{perSecond: 2000, burst: 100}}
secretsFile: {secrets}
templates:
  attempt:
    message: attempt
    webhook:
      hook:
        body: '{{"rev": "{{{{drift.attempts.[0].id}}}}"}}'
triggers:
  on-attempt:
    - when: drift.attempts.len() > 0
      oncePer: drift.attempts[0].id
      send: [attempt]
routes:
  - triggers: [on-attempt]
    recipients: [hook]
audit:
  listen: 127.0.0.1:{audit_port}
  token: $audit-token
"#,
        port = rx.addr.port(),
        secrets = secrets.path().display()
    );
    let (d, ready) = Daemon::start_with(&api, &cfg);
    println!("audit: {APPS} Applications ready in {}", ms(ready));
    let noise_file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-audit/eventlist-noise.json");
    let noise: Value = serde_json::from_slice(&std::fs::read(noise_file).unwrap()).unwrap();
    let noise_items = noise["items"].as_array().unwrap().clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    driftwatch::tls::init_crypto();
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{audit_port}/audit?timeout=30s");
    let post = |body: Vec<u8>| {
        rt.block_on(async {
            client.post(&url).bearer_auth("bench-audit-token-0123456789").body(body).send().await.map(|r| r.status().as_u16()).unwrap_or(0)
        })
    };
    // Steady: 20 batches/s, each 399 irrelevant events and one person's patch.
    const RATE: u64 = 20;
    const SECS: u64 = 20;
    let mut applied = HashMap::new();
    let cpu_before = d.cpu_seconds();
    let start = Instant::now();
    for n in 0..(RATE * SECS) as usize {
        let due = start + Duration::from_secs_f64(n as f64 / RATE as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let who = format!("person-{n}");
        let body = audit_batch(&noise_items, 399, Some((&who, n % APPS)));
        let sent = Instant::now();
        assert_eq!(post(body), 200);
        applied.insert(who, sent);
    }
    let took = settle(&rx, &applied, start, Duration::from_secs(60));
    let events = (RATE * SECS * 400) as f64;
    let cpu = d.cpu_seconds() - cpu_before;
    report_latency(&format!("audit: {RATE} batches/s of 400 events (1 relevant) for {SECS} s, POST -> receiver"), &applied, &rx, took);
    let buckets: Vec<String> = ["0.001", "0.005", "0.01", "0.05"]
        .iter()
        .map(|le| {
            format!(
                "<= {} ms: {}",
                le.parse::<f64>().unwrap_or(0.0) * 1000.0,
                d.metric(&format!("driftwatch_audit_evaluated_seconds_bucket{{le=\"{le}\"}}"))
            )
        })
        .collect();
    println!(
        "audit:   arrival -> evaluated (driftwatch_audit_evaluated_seconds), of {}: {}",
        d.metric("driftwatch_audit_evaluated_seconds_count"),
        buckets.join(", ")
    );
    println!(
        "audit:   daemon CPU {cpu:.2} s for {events:.0} events ({:.0} events per CPU-second, evaluation and delivery included)",
        events / cpu
    );
    // Flood: irrelevant batches as fast as one client posts them.
    let body = audit_batch(&noise_items, 400, None);
    let cpu_before = d.cpu_seconds();
    let start = Instant::now();
    let mut batches = 0u64;
    while start.elapsed() < Duration::from_secs(10) {
        assert_eq!(post(body.clone()), 200);
        batches += 1;
    }
    let took = start.elapsed().as_secs_f64();
    let cpu = d.cpu_seconds() - cpu_before;
    let events = (batches * 400) as f64;
    println!(
        "audit: flood of irrelevant batches: {events:.0} events in {took:.1} s ({:.0} events/s, one client), daemon CPU {cpu:.2} s = {:.0} events per CPU-second, RSS {:.0} MB",
        events / took,
        events / cpu,
        d.rss_mb()
    );
}

/// A GET with the operations token on a connection of its own: status, body, time.
fn get_token(addr: &str, path: &str, token: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let (status, body) = common::receiver::get_as(addr, path, Some(token)).unwrap_or_default();
    (status, body, started.elapsed())
}

fn ui() {
    use driftwatch::state::{Retention, Store};
    const TOKEN: &str = "ui-bench-operations-token-0123456789";
    let apps: usize = std::env::var("LIVE_BENCH_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let per_app = 10;
    let dir = tempfile::tempdir().unwrap();
    let template = replayed_episode(dir.path());
    let size = serde_json::to_string(&template).unwrap().len();
    // 10 episodes per Application, 10 days apart, the last one open; opened in the last
    // 100 days (the daemon runs with a 10-year age bound).
    let seeded = Instant::now();
    let now = chrono::Utc::now();
    let retention = Retention { max_episodes: apps * per_app, max_age: chrono::Duration::days(3650) };
    {
        let store = Store::open(&dir.path().join("state.redb")).unwrap();
        let mut batch = Vec::with_capacity(apps);
        for round in 0..per_app {
            for i in 0..apps {
                let mut ep = template.clone();
                let name = format!("app-{i:05}");
                let opened = now - chrono::Duration::hours(((per_app - round) * 240) as i64) + chrono::Duration::seconds(i as i64);
                ep.name = name.clone();
                ep.app_key = format!("argocd/{name}@uid-{name}");
                ep.id = format!("argocd/{name}@{}", opened.timestamp_millis());
                ep.project = format!("team-{:02}", i % 40);
                ep.cluster = format!("prod-{:02}", i % 25);
                ep.opened_at = opened;
                ep.resolved_at = (round + 1 < per_app).then(|| opened + chrono::Duration::minutes(14));
                batch.push(ep);
            }
            store.history().save_episodes(&batch, retention, now).unwrap();
            batch.clear();
        }
    }
    println!(
        "ui: seeded {} episodes of {size} bytes ({apps} Applications, {} open) in {:.1} s",
        apps * per_app,
        apps,
        seeded.elapsed().as_secs_f64()
    );
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/ops-token"), TOKEN).unwrap();
    let api = FakeApiServer::start();
    api.set_rbac(None);
    for i in 0..apps {
        let name = format!("app-{i:05}");
        api.apply(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "argocd", "uid": format!("uid-{name}"), "resourceVersion": "1"},
            "spec": {"project": format!("team-{:02}", i % 40), "destination": {"name": format!("prod-{:02}", i % 25), "namespace": "payments"},
                     "source": {"repoURL": "https://git.example.com/payments/api.git", "path": "deploy", "targetRevision": "main"}},
            "status": {"sync": {"status": "OutOfSync", "revision": "r1"}, "health": {"status": "Healthy"},
                       "reconciledAt": "2026-03-01T09:01:00Z"}
        }));
    }
    let config = format!(
        "secretsFile: {}\noperations: {{token: $ops-token}}\nhistory: {{maxEpisodes: {}, maxAge: 3650d}}\ncontext: {{argocdUrl: https://argocd.example.com}}\n",
        dir.path().join("secrets").display(),
        apps * per_app
    );
    let (d, ready) = Daemon::start_in(&api, &config, dir);
    while d.metric("driftwatch_evaluations_total") < apps as f64 {
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("ui: start -> /readyz {} with the seeded state, RSS {:.0} MB", ms(ready), d.rss_mb());
    let rounds: usize = std::env::var("LIVE_BENCH_UI_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let deep = format!("/ui/api/fleet?limit=50&offset={}", apps.saturating_sub(50));
    let story = format!("/ui/api/app?app=argocd%2Fapp-{:05}", apps / 2);
    for (what, path) in [
        ("fleet, first page of 50", "/ui/api/fleet?limit=50"),
        ("fleet, filtered (class, project, since)", "/ui/api/fleet?class=rbac&project=team-07&since=30d&limit=50"),
        ("fleet, the last page", deep.as_str()),
        ("an Application's story (its 10 episodes)", story.as_str()),
        ("/history?limit=1000", "/history?limit=1000"),
        ("/metrics", "/metrics"),
        ("/ui (the page)", "/ui"),
    ] {
        let mut took = Vec::with_capacity(rounds);
        let mut bytes = 0;
        for _ in 0..rounds {
            let (status, body, t) = get_token(&d.admin, path, TOKEN);
            assert_eq!(status, 200, "{path}: {body}");
            bytes = body.len();
            took.push(t);
        }
        took.sort();
        println!(
            "ui: {what}: p50 {}, p99 {}, max {}, {bytes} bytes ({rounds} sequential requests)",
            ms(percentile(&took, 0.5)),
            ms(percentile(&took, 0.99)),
            ms(took.last().copied().unwrap_or_default())
        );
    }
    let (_, fleet, _) = get_token(&d.admin, "/ui/api/fleet?limit=1", TOKEN);
    let total = serde_json::from_str::<Value>(&fleet).ok().and_then(|v| v["total"].as_u64()).unwrap_or(0);
    println!("ui: {total} open episodes in the fleet; daemon CPU {:.2} s in all, RSS {:.0} MB", d.cpu_seconds(), d.rss_mb());
}

/// The `group` scenario's configuration: the catalog's on-out-of-sync to Slack, with
/// `group:` or without.
fn group_config(slack: u16, grouped: bool) -> String {
    let group = if grouped { "    group: {by: [revision], wait: 10s, interval: 5s}\n" } else { "" };
    format!(
        "services:\n  chat:\n    type: slack\n    token: $slack-token\n    apiUrl: http://127.0.0.1:{slack}\nsecretsFile: secrets\n\
         routes:\n  - name: fleet\n    triggers: [on-out-of-sync]\n    recipients: [chat:fleet]\n{group}"
    )
}

/// Applications without a subscription of their own: the route does everything.
fn fleet_app(i: usize, sync: &str, rev: &str) -> Value {
    let mut v = app(i, sync, rev);
    v["metadata"]["annotations"] = json!({});
    v
}

/// Applies `apps` Applications at `sync`/`rev`, evenly over `secs`; returns when the last was applied.
fn push(api: &FakeApiServer, apps: usize, sync: &str, rev: &str, secs: f64) -> Instant {
    let start = Instant::now();
    for i in 0..apps {
        if let Some(wait) = (start + Duration::from_secs_f64(secs * i as f64 / apps as f64)).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        api.apply(fleet_app(i, sync, rev));
    }
    Instant::now()
}

/// Waits for `what` (at most `limit`); the time it took, or `None` if it never came.
fn until(limit: Duration, mut what: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while !what() {
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(start.elapsed())
}

fn group() {
    const N: usize = 10_000;
    for grouped in [false, true] {
        let api = FakeApiServer::start();
        api.set_rbac(None);
        for i in 0..N {
            api.apply(fleet_app(i, "Synced", "r0"));
        }
        let slack = common::receiver::SlackApi::start();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("secrets")).unwrap();
        std::fs::write(dir.path().join("secrets/slack-token"), "xoxb-bench-token").unwrap();
        let (d, _) = Daemon::start_in(&api, &group_config(slack.port, grouped), dir);
        let evaluations = || d.metric("driftwatch_evaluations_total");
        until(Duration::from_secs(120), || evaluations() >= N as f64).expect("the first pass");
        let eval_cpu = |d: &Daemon| d.cpu_by_thread().into_iter().find(|(n, _)| n == "driftwatch-eval").map_or(0.0, |(_, c)| c);
        let (cpu0, evals0) = (eval_cpu(&d), evaluations());
        let pushed = push(&api, N, "OutOfSync", "g1", 5.0);
        until(Duration::from_secs(120), || evaluations() >= evals0 + N as f64).expect("every change evaluated");
        let per_change = (eval_cpu(&d) - cpu0) / (evaluations() - evals0);
        let label = if grouped { "grouped" } else { "ungrouped" };
        println!("group ({label}): {N} changes in 5 s, evaluation thread {:.0} µs CPU per change", per_change * 1e6);
        if !grouped {
            continue;
        }
        let first = until(Duration::from_secs(120), || !slack.of("chat.postMessage").is_empty()).map(|_| pushed.elapsed());
        let all = format!("on-out-of-sync: {N} of {N} Applications");
        let counted = until(Duration::from_secs(120), || slack.texts().iter().any(|t| t.contains(&all))).map(|_| pushed.elapsed());
        let largest = slack.texts().iter().map(String::len).max().unwrap_or(0);
        println!(
            "group (grouped): from the last change to the message {}, to the message counting all {N} {}; largest message {largest} bytes",
            first.map_or("never".into(), ms),
            counted.map_or("never".into(), ms),
        );
        let resolved_at = push(&api, N, "Synced", "g1", 5.0);
        let done = format!("Resolved: all {N} Applications");
        let resolved =
            until(Duration::from_secs(120), || slack.texts().last().is_some_and(|t| t.contains(&done))).map(|_| resolved_at.elapsed());
        let calls = slack.calls();
        println!(
            "group (grouped): from the last resolve to \"Resolved\" {}; Slack calls in all: {} chat.postMessage, {} chat.update; RSS {:.0} MB",
            resolved.map_or("never".into(), ms),
            calls.iter().filter(|(m, _)| m == "chat.postMessage").count(),
            calls.iter().filter(|(m, _)| m == "chat.update").count(),
            d.rss_mb()
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let all = args.is_empty();
    let want = |name: &str| all || args.iter().any(|a| a == name);
    println!(
        "live benchmark: the release binary, the fake API server (a real one for `latency` with KUBEBUILDER_ASSETS), a keep-alive loopback receiver"
    );
    if want("ready") {
        match common::control_plane::assets() {
            // KUBEBUILDER_ASSETS: on a real kube-apiserver (real.rs).
            Some(_) => real::ready(),
            None => ready(),
        }
    }
    if want("latency") {
        match common::control_plane::assets() {
            // KUBEBUILDER_ASSETS: on a real kube-apiserver (real.rs).
            Some(_) => real::latency(),
            None => latency(),
        }
    }
    if want("drain") {
        drain();
    }
    if want("outage") {
        outage();
    }
    if want("flood") {
        flood();
    }
    if want("audit") {
        audit();
    }
    if want("ui") {
        ui();
    }
    if want("siem") {
        siem();
    }
    if want("group") {
        group();
    }
    if want("pgscale") {
        pgscale();
    }
    if want("shards") {
        shards();
    }
    if want("units") {
        units();
    }
    if want("detect") {
        detect::detect();
    }
    // Only when named: minutes long, and gigabytes in etcd and the API server.
    if args.iter().any(|a| a == "fleet") {
        fleet::fleet();
    }
}

/// The episode a replay of examples/production records for its live drift (critical,
/// three resources with their changes and attribution, eight notifications), replayed
/// into `dir`.
fn replayed_episode(dir: &std::path::Path) -> driftwatch::drift::episode::Episode {
    use driftwatch::state::{HistoryQuery, Store};
    let replayed = dir.join("replayed.redb");
    common::daemon::replay_production(&binary(), &replayed);
    Store::open(&replayed)
        .unwrap()
        .history()
        .episodes(&HistoryQuery::default())
        .unwrap()
        .into_iter()
        .max_by_key(|e| e.resources.len())
        .expect("the replay's episodes")
}

fn pgscale() {
    use driftwatch::state::{PassWrite, Retention, Role, Store, pgtest};
    let dir = tempfile::tempdir().unwrap();
    let template = replayed_episode(dir.path());
    let json = serde_json::to_string(&template).unwrap();
    let server = pgtest::server().expect("PostgreSQL");
    let retention = Retention { max_episodes: 10_000_000, max_age: chrono::Duration::days(3650) };
    for rows in [10_000u64, 1_000_000] {
        let schema = pgtest::fresh_schema();
        let store = Store::open_postgres(&server.options(&schema), &Role::Tool).unwrap();
        let seeded = Instant::now();
        let mut sql = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
        sql.batch_execute(&format!(
            "SET search_path = {schema};
             INSERT INTO kv (t, k, v) SELECT 'episodes', convert_to('argocd/other-' || g || '@' || g, 'UTF8'), convert_to($j${json}$j$, 'UTF8') FROM generate_series(1, {rows}) g;
             INSERT INTO kv (t, k, v) SELECT 'notified', convert_to('argocd/other-' || g || '@u', 'UTF8') || '\\x00'::bytea || convert_to(':on-drift:[0]:hook:', 'UTF8'), int8send(g) FROM generate_series(1, {rows}) g;
             INSERT INTO kv_len (t, n) VALUES ('episodes', {rows}), ('notified', {rows});
             ANALYZE kv;"
        ))
        .unwrap();
        println!("pgscale: {rows} history rows and {rows} delivered keys seeded in {:.1} s", seeded.elapsed().as_secs_f64());
        const PASSES: usize = 2_000;
        let (mut viewing, mut writing) = (Duration::ZERO, Duration::ZERO);
        let now = chrono::Utc::now();
        for i in 0..PASSES {
            let app = format!("argocd/app-{i}@u");
            let t = Instant::now();
            let st = store.pass().view().unwrap().app_state(&app).unwrap();
            assert!(st.episode.is_none());
            viewing += t.elapsed();
            let mut ep = template.clone();
            ep.app_key = app.clone();
            ep.id = format!("{app}@{i}");
            let pass = PassWrite {
                app_key: &app,
                at_ms: driftwatch::state::to_millis(now),
                episode: Some((&ep, retention)),
                retention,
                ..PassWrite::default()
            };
            let t = Instant::now();
            store.pass().write_pass(&pass, &[], driftwatch::state::to_millis(now)).unwrap();
            writing += t.elapsed();
        }
        println!(
            "pgscale: {rows} rows: a pass's view {:.0} µs, its write (an episode) {:.0} µs, over {PASSES} passes",
            viewing.as_secs_f64() * 1e6 / PASSES as f64,
            writing.as_secs_f64() * 1e6 / PASSES as f64
        );
    }
}

/// `LIVE_BENCH_REPLICAS` replicas (4 unless set) with `sharding.shards: 4` on one
/// PostgreSQL, started together, and `LIVE_BENCH_APPS` Applications (10,000 unless
/// set) over 400 destination clusters: how long until every shard is held, one per
/// replica, and each replica keeps its shards' Applications; then each replica's RSS
/// and what it keeps.
fn shards() {
    const SHARDS: usize = 4;
    let api = FakeApiServer::start();
    api.set_rbac(None);
    let rx = Receiver::start();
    let apps: usize = std::env::var("LIVE_BENCH_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let replicas: usize = std::env::var("LIVE_BENCH_REPLICAS").ok().and_then(|v| v.parse().ok()).unwrap_or(SHARDS);
    for i in 0..apps {
        let mut a = app(i, "Synced", "r0");
        a["spec"]["destination"]["server"] = json!(format!("https://cluster-{}.example:6443", i % 400));
        api.apply(a);
    }
    let schema = driftwatch::state::pgtest::fresh_schema();
    let config = format!(
        "services:\n  hook:\n    type: webhook\n    url: http://127.0.0.1:{}\n{}secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg-url\n    schema: {schema}\n    maxConnections: 4\nsharding:\n  shards: {SHARDS}\n",
        rx.addr.port(),
        common::DRIFT_TRIGGER
    );
    let elected = ["--leader-election", "--lease-duration", "15", "--lease-namespace", "argocd"];
    let started = Instant::now();
    let ds: Vec<Daemon> = (0..replicas).map(|_| Daemon::spawn_in(&api, &config, tempfile::tempdir().unwrap(), &elected)).collect();
    for d in &ds {
        d.wait_ready(started);
    }
    let bound = SHARDS.div_ceil(replicas) as f64;
    let settled = until(Duration::from_secs(600), || {
        let held: Vec<f64> = ds.iter().map(|d| d.metric("driftwatch_leader")).collect();
        let kept: f64 = ds.iter().map(|d| d.metric("driftwatch_applications")).sum();
        held.iter().sum::<f64>() == SHARDS as f64 && held.iter().all(|h| *h <= bound) && kept == apps as f64
    });
    let Some(settled) = settled.map(|_| started.elapsed()) else {
        panic!("shards never settled");
    };
    std::thread::sleep(Duration::from_secs(2));
    crate::common::daemon::wait_for("evaluated", Duration::from_secs(300), || {
        ds.iter().map(|d| d.metric("driftwatch_evaluations_total")).sum::<f64>() >= apps as f64
    });
    println!(
        "shards: {replicas} replicas, {SHARDS} shards, {apps} Applications over 400 clusters: every shard held and every Application kept {} after the start",
        ms(settled)
    );
    for (i, d) in ds.iter().enumerate() {
        let kept = d.metric("driftwatch_applications");
        println!(
            "shards: replica {i}: {} shard(s), {kept} Applications kept, RSS {:.0} MB, CPU {:.1} s",
            d.metric("driftwatch_leader"),
            d.rss_mb(),
            d.cpu_seconds()
        );
        d.print_smaps("shards");
    }
}
