//! `latency` on a real kube-apiserver, when `KUBEBUILDER_ASSETS` names a folder with
//! `etcd` and `kube-apiserver`: the control plane the tests start
//! (`tests/common/control_plane.rs`: etcd without fsync, one API server, Argo CD's CRDs —
//! the Application's has no status subresource, so a status is written with the
//! object), 1,000 Applications created through the API, then merge patches of their
//! status (a new revision, OutOfSync: one notification each) sent through the API at
//! 100 changes/s for 30 s and then 500/s for 20 s (`LIVE_BENCH_RATES=100:30,500:20`),
//! over HTTP/2 as client-go sends them. Reported side by side for each rate:
//!
//! - end to end: the patch sent -> its notification at the receiver;
//! - the API server's write: the patch sent -> its answer, as the client saw it, and
//!   the API server's own `apiserver_request_duration_seconds` for these PATCHes (from
//!   its `/metrics`, the buckets' difference over the phase);
//! - from the API server's answer -> the receiver;
//! - driftwatch's share: `driftwatch_notification_latency_seconds{kind="webhook"}` from
//!   the daemon's `/metrics` (the watch event's arrival -> the delivery acknowledged).
//!
//! Quantiles of the two histograms are interpolated within their buckets as
//! Prometheus's `histogram_quantile` does.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use super::common::control_plane::{self as cp, ADMIN};
use super::{Cluster, Daemon, Receiver, app, machine_busy, ms, percentile, report_load, settle, stat_cpu};

impl Cluster for cp::ApiServer {
    fn kubeconfig(&self, path: &Path) {
        cp::ApiServer::kubeconfig(self, path, ADMIN);
    }
}

/// When a patch was sent and answered, and whether it was accepted.
#[derive(Clone, Copy)]
struct Write {
    sent: Instant,
    answered: Instant,
    ok: bool,
}

/// The load driver: its own runtime and an HTTP/2 client with the admin's token.
struct Driver {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    apps: String,
    metrics: String,
}

const APPS: usize = 1_000;

impl Driver {
    fn new(api: &cp::ApiServer) -> Driver {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let ca = reqwest::Certificate::from_pem(api.ca_pem().as_bytes()).unwrap();
        let http = reqwest::Client::builder().add_root_certificate(ca).build().unwrap();
        let apps = format!("{}/apis/argoproj.io/v1alpha1/namespaces/argocd/applications", api.url());
        Driver { rt, http, apps, metrics: format!("{}/metrics", api.url()) }
    }

    /// Creates `n` Applications (50 requests at a time), Synced at `r0`.
    fn create(&self, n: usize) {
        self.rt.block_on(async {
            for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
                let mut posts = tokio::task::JoinSet::new();
                for i in chunk {
                    let mut obj = app(*i, "Synced", "r0");
                    // The API server sets its own uid and managed fields.
                    if let Some(meta) = obj["metadata"].as_object_mut() {
                        meta.remove("uid");
                        meta.remove("managedFields");
                    }
                    // Required by the CRD's schema (the fake API server does not check).
                    obj["status"]["operationState"]["operation"] = json!({"sync": {"revision": "r0"}});
                    let post = self.http.post(&self.apps).bearer_auth(ADMIN.token).json(&obj);
                    posts.spawn(async move {
                        // The API server may end an HTTP/2 connection with GOAWAY
                        // (`too_many_internal_resets`) over thousands of creates: a
                        // request on it is sent again on a new connection.
                        let mut tries = 0;
                        loop {
                            let Some(req) = post.try_clone() else { return post.send().await };
                            match req.send().await {
                                Err(e) if tries < 5 && e.is_request() => tries += 1,
                                r => return r,
                            }
                        }
                    });
                }
                while let Some(r) = posts.join_next().await {
                    let r = r.unwrap().expect("create an Application");
                    let status = r.status();
                    assert!(status.is_success() || status == 409, "create: {status}: {}", r.text().await.unwrap_or_default());
                }
            }
        });
    }

    /// Patches `rate` Applications a second for `secs` (round robin), each a new
    /// revision `rev-<first + n>`, OutOfSync; each patch's send and answer.
    fn drive(&self, rate: u64, secs: u64, first: usize) -> HashMap<String, Write> {
        let writes: Arc<Mutex<HashMap<String, Write>>> = Arc::default();
        self.rt.block_on(async {
            let start = tokio::time::Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for n in 0..(rate * secs) as usize {
                tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / rate as f64)).await;
                let rev = format!("rev-{}", first + n);
                let url = format!("{}/app-{:05}?fieldManager=argocd-application-controller", self.apps, n % APPS);
                let body = json!({"status": {"sync": {"status": "OutOfSync", "revision": rev}}}).to_string();
                let (http, writes) = (self.http.clone(), writes.clone());
                tasks.spawn(async move {
                    let sent = Instant::now();
                    let answer = http
                        .patch(url)
                        .bearer_auth(ADMIN.token)
                        .header("content-type", "application/merge-patch+json")
                        .body(body)
                        .send()
                        .await;
                    let ok = match answer {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    writes.lock().unwrap().insert(rev, Write { sent, answered: Instant::now(), ok });
                });
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        });
        std::mem::take(&mut *writes.lock().unwrap())
    }

    /// The API server's `/metrics`.
    fn api_metrics(&self) -> String {
        self.rt.block_on(async {
            let r = self.http.get(&self.metrics).bearer_auth(ADMIN.token).send().await.expect("the API server's /metrics");
            r.text().await.unwrap_or_default()
        })
    }
}

/// The cumulative buckets (upper bound, count) of histogram `name`, summed over its
/// series whose labels include every one of `labels`.
pub(super) fn buckets(text: &str, name: &str, labels: &[&str]) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else { continue };
        let Some((lbls, value)) = rest.rsplit_once("} ") else { continue };
        if !labels.iter().all(|l| lbls.contains(l)) {
            continue;
        }
        let Some(le) = lbls.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else { continue };
        let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::NAN) };
        let count: f64 = value.trim().parse().unwrap_or(0.0);
        match out.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += count,
            None => out.push((le, count)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// The `q` quantile (seconds) of what a histogram counted between two scrapes, and
/// how many it counted, interpolated within the bucket as `histogram_quantile` does.
pub(super) fn quantile(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> (Option<f64>, f64) {
    let delta: Vec<(f64, f64)> =
        after.iter().map(|(le, c)| (*le, c - before.iter().find(|(b, _)| b == le).map_or(0.0, |(_, b)| *b))).collect();
    let total = delta.last().map_or(0.0, |(_, c)| *c);
    if total <= 0.0 {
        return (None, 0.0);
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for (le, c) in &delta {
        if *c >= rank {
            if le.is_infinite() {
                return (Some(prev.0), total);
            }
            let within = if c - prev.1 > 0.0 { (rank - prev.1) / (c - prev.1) } else { 1.0 };
            return (Some(prev.0 + (le - prev.0) * within), total);
        }
        prev = (*le, *c);
    }
    (None, total)
}

pub(super) fn in_ms(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{:.1} ms", s * 1000.0))
}

pub(super) fn stats(mut lat: Vec<Duration>) -> String {
    lat.sort();
    format!("p50 {}, p99 {}, max {}", ms(percentile(&lat, 0.5)), ms(percentile(&lat, 0.99)), ms(lat.last().copied().unwrap_or_default()))
}

/// The rates and durations of the phases: `LIVE_BENCH_RATES=100:30,500:20` (`default`
/// when unset).
pub(super) fn phases(default: &str) -> Vec<(u64, u64)> {
    let spec = std::env::var("LIVE_BENCH_RATES").unwrap_or_else(|_| default.into());
    spec.split(',').filter_map(|p| p.split_once(':')).filter_map(|(r, s)| Some((r.trim().parse().ok()?, s.trim().parse().ok()?))).collect()
}

/// The hook's queue depth once a second while `on` holds.
fn sample_depth(admin: String, on: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(u64, f64)>> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut out = Vec::new();
        while on.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(1));
            let depth = super::common::receiver::get(&admin, "/metrics")
                .and_then(|(_, b)| {
                    b.lines().find(|l| l.starts_with(r#"driftwatch_queue_depth{service="hook"}"#))?.rsplit(' ').next()?.parse().ok()
                })
                .unwrap_or(0.0);
            out.push((start.elapsed().as_secs(), depth));
        }
        out
    })
}

/// The scenario (see the module's comment).
pub fn latency() {
    let plane = cp::shared();
    let api = &plane.api;
    let driver = Driver::new(api);
    let created = Instant::now();
    driver.create(APPS);
    println!("latency (real API server {}): {APPS} Applications created in {}", api.url(), ms(created.elapsed()));
    let rx = Receiver::start();
    let (d, ready) = Daemon::start(api, rx.addr.port());
    println!("latency (real API server): ready in {}, RSS {:.0} MB", ms(ready), d.rss_mb());
    let mut first = 0;
    for (rate, secs) in phases("100:30,500:20") {
        let label = format!("latency (real API server): {APPS} apps @ {rate}/s for {secs} s");
        let cpu_before = d.cpu_by_thread();
        let (bench_before, machine_before) = (stat_cpu("/proc/self/stat"), machine_busy());
        let (api_before, ours_before) = (driver.api_metrics(), super::common::receiver::get(&d.admin, "/metrics").unwrap_or_default().1);
        let on = Arc::new(AtomicBool::new(true));
        let sampler = sample_depth(d.admin.clone(), on.clone());
        let start = Instant::now();
        let writes = driver.drive(rate, secs, first);
        first += (rate * secs) as usize;
        let applied: HashMap<String, Instant> = writes.iter().filter(|(_, w)| w.ok).map(|(r, w)| (r.clone(), w.sent)).collect();
        let took = settle(&rx, &applied, start, Duration::from_secs(120));
        on.store(false, Ordering::Relaxed);
        let depth = sampler.join().unwrap_or_default();
        let (api_after, ours_after) = (driver.api_metrics(), super::common::receiver::get(&d.admin, "/metrics").unwrap_or_default().1);
        report(&label, &writes, &rx, took);
        let patch = ["resource=\"applications\"", "verb=\"PATCH\""];
        let (a, b) = (
            buckets(&api_before, "apiserver_request_duration_seconds", &patch),
            buckets(&api_after, "apiserver_request_duration_seconds", &patch),
        );
        let ours = ["kind=\"webhook\""];
        let (o, p) = (
            buckets(&ours_before, "driftwatch_notification_latency_seconds", &ours),
            buckets(&ours_after, "driftwatch_notification_latency_seconds", &ours),
        );
        println!(
            "{label}:   apiserver_request_duration_seconds (PATCH applications): p50 {}, p99 {} over {} requests",
            in_ms(quantile(&a, &b, 0.5).0),
            in_ms(quantile(&a, &b, 0.99).0),
            quantile(&a, &b, 0.99).1
        );
        println!(
            "{label}:   driftwatch's share (driftwatch_notification_latency_seconds, webhook): p50 {}, p99 {} over {} deliveries",
            in_ms(quantile(&o, &p, 0.5).0),
            in_ms(quantile(&o, &p, 0.99).0),
            quantile(&o, &p, 0.99).1
        );
        let (e, f) = (
            buckets(&ours_before, "driftwatch_evaluation_duration_seconds", &[]),
            buckets(&ours_after, "driftwatch_evaluation_duration_seconds", &[]),
        );
        println!(
            "{label}:   passes (driftwatch_evaluation_duration_seconds, view and write): p50 {}, p99 {} over {} passes",
            in_ms(quantile(&e, &f, 0.5).0),
            in_ms(quantile(&e, &f, 0.99).0),
            quantile(&e, &f, 0.99).1
        );
        report_load("latency (real API server)", &d, &cpu_before, (bench_before, machine_before), &depth);
    }
}

/// End to end, the API server's answer, and from the answer to the receiver.
fn report(label: &str, writes: &HashMap<String, Write>, rx: &Receiver, took: Duration) {
    let arrivals = rx.arrivals.lock().unwrap().clone();
    let accepted = writes.values().filter(|w| w.ok).count();
    let got: Vec<(&Write, Instant)> = writes.iter().filter(|(_, w)| w.ok).filter_map(|(r, w)| Some((w, *arrivals.get(r)?))).collect();
    println!(
        "{label}: {} patches, {accepted} accepted, {} delivered, {:.0} deliveries/s over {:.1} s",
        writes.len(),
        got.len(),
        got.len() as f64 / took.as_secs_f64(),
        took.as_secs_f64()
    );
    println!(
        "{label}:   end to end (patch sent -> receiver): {}",
        stats(got.iter().map(|(w, at)| at.saturating_duration_since(w.sent)).collect())
    );
    println!(
        "{label}:   the API server's answer (patch sent -> answered): {}",
        stats(writes.values().filter(|w| w.ok).map(|w| w.answered.saturating_duration_since(w.sent)).collect())
    );
    println!(
        "{label}:   from the answer -> receiver: {}",
        stats(got.iter().map(|(w, at)| at.saturating_duration_since(w.answered)).collect())
    );
}

/// `ready` on a real kube-apiserver: `LIVE_BENCH_APPS` (10,000) Applications created
/// through the API once, then the daemon started `LIVE_BENCH_RUNS` (3) times on them,
/// each run every binary of `LIVE_BENCH_BINS` (comma-separated paths; this build by
/// default) in turn, so an old and a new build alternate on the same control plane:
/// start -> `/readyz`, and RSS at ready, 2 s and 10 s after (idle: nothing changes).
pub fn ready() {
    let plane = cp::shared();
    let api = &plane.api;
    let driver = Driver::new(api);
    let apps: usize = std::env::var("LIVE_BENCH_APPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let runs: usize = std::env::var("LIVE_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let bins: Vec<String> = std::env::var("LIVE_BENCH_BINS")
        .map(|v| v.split(',').map(|b| b.trim().to_string()).filter(|b| !b.is_empty()).collect())
        .unwrap_or_else(|_| vec![super::binary()]);
    let created = Instant::now();
    driver.create(apps);
    println!("ready (real API server {}): {apps} Applications created in {}", api.url(), ms(created.elapsed()));
    let rx = Receiver::start();
    for run in 1..=runs {
        for bin in &bins {
            super::use_binary(Some(bin.clone()));
            let (d, ready) = Daemon::start(api, rx.addr.port());
            let at_ready = d.rss_mb();
            std::thread::sleep(Duration::from_secs(2));
            let two = d.rss_mb();
            d.print_smaps("ready (real API server)");
            std::thread::sleep(Duration::from_secs(8));
            println!(
                "ready (real API server): run {run}, {bin}: start -> /readyz {}, RSS at ready {at_ready:.0} MB, 2 s after {two:.0} MB, 10 s after {:.0} MB, {} Applications kept",
                ms(ready),
                d.rss_mb(),
                d.metric("driftwatch_applications")
            );
        }
    }
    super::use_binary(None);
}
