//! `detect`: time to detect, measured as a product promise (issue 55 item 3). Needs a
//! real control plane (`KUBEBUILDER_ASSETS`: etcd and kube-apiserver); without one it
//! says so and does nothing.
//!
//! Two kube-apiservers on one etcd: the hub, where the Applications are, and a spoke
//! they deploy to, each posting its own audit batches (batch mode,
//! `--audit-webhook-batch-max-wait=1s`, the policy of the tests) over TLS with its own
//! token, through a TCP relay of its own standing for the Service (`relay.rs`). Half the
//! Deployments are in the hub (Applications deploying `in-cluster`), half in the spoke
//! (Applications deploying to it by name), three per Application, all written by Argo
//! CD's identities there. `LIVE_BENCH_PEOPLE` people (30 unless set) are granted
//! `patch` on them by RBAC (a RoleBinding of their group); each write is one person's
//! strategic-merge patch setting `securityContext.privileged: true` (a security class)
//! on one Deployment, taken back at once by Argo CD's identity (self-heal), sent by a
//! load driver on its own runtime at a steady rate: 10 writes/s for 30 s, then 50/s
//! for 30 s (`LIVE_BENCH_RATES=10:30,50:30`). Each (person, Deployment) pair is written
//! once per set-up: a person's second identical security write on one object within
//! `audit.window` is folded into the first (`drift::audit::AttemptIndex::record`), so
//! every write here must page on its own. The page (a webhook, the `on-attempt` rule of
//! the tests limited to security writes) names the person and the resource.
//!
//! Two set-ups, one after the other, on the same two API servers
//! (`LIVE_BENCH_SETUPS=single,sharded`): **single**, one replica with its state in redb;
//! **sharded**, 3 replicas × 4 shards with the state in PostgreSQL (the private server,
//! `DRIFTWATCH_PG_FSYNC=on` for a production one), leader election, each feed's relay
//! sending its connections to a replica that does not hold that cluster's shard, so
//! every batch goes through the audit inbox to another replica's poll. The hub's and the
//! spoke's Applications are on two different shards.
//!
//! Reported per set-up and rate: writes, paged, unpaged (listed); write sent → page at
//! the receiver; the part before the write's batch reached a daemon (the relay's view of
//! the batch's first bytes: the API server's batch wait) and the part after (ours);
//! the daemons' own histograms; CPU of the daemons (all replicas) per audit event the API
//! servers sent and per write, and of the API servers, etcd and PostgreSQL; the load.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::control_plane as cp;
use super::real::{buckets, in_ms, phases, quantile, stats};
use super::relay::Burst;
use super::{Daemon, Receiver, ms};

#[path = "detect_setup.rs"]
mod setup;
use setup::{Bench, Driver, Write};

const SHARDS: u32 = 4;
const REPLICAS: usize = 3;

/// The scenario (see the module's comment).
pub fn detect() {
    if cp::assets().is_none() {
        println!("detect: needs a real control plane: set KUBEBUILDER_ASSETS to a folder with etcd and kube-apiserver (nothing was run)");
        return;
    }
    let phases = phases("10:30,50:30");
    let total: u64 = phases.iter().map(|(r, s)| r * s).sum();
    let people: usize = std::env::var("LIVE_BENCH_PEOPLE").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let setups = std::env::var("LIVE_BENCH_SETUPS").unwrap_or_else(|_| "single,sharded".into());
    let started = Instant::now();
    let bench = Bench::start(people, total as usize);
    println!(
        "detect: hub {} and spoke {} ({}), {} people, {} Deployments in each ({} Applications each), set up in {}",
        bench.clusters[0].api.url(),
        bench.clusters[1].api.url(),
        bench.clusters[1].label,
        bench.people.len(),
        bench.clusters[0].deployments,
        bench.clusters[0].deployments / setup::PER_APP,
        ms(started.elapsed())
    );
    let driver = Driver::new(&bench);
    for s in setups.split(',').map(str::trim) {
        let rx = Receiver::start();
        let daemons = match s {
            "single" => single(&bench, &rx),
            "sharded" => sharded(&bench, &driver, &rx),
            other => {
                println!("detect: no set-up {other:?} (single, sharded)");
                continue;
            }
        };
        let mut all: Vec<String> = warm_up(&bench, &driver, &rx);
        let mut first = 0;
        for (rate, secs) in &phases {
            let label = format!("detect ({}): {rate} writes/s for {secs} s", name(s));
            let before = Snapshot::take(&bench, &driver, &daemons);
            let writes = driver.drive(&bench, (*rate, *secs, first));
            first += (rate * secs) as usize;
            let last = writes.iter().map(|w| w.sent).max().unwrap_or_else(Instant::now);
            let paged = |rx: &Receiver| {
                let got = rx.arrivals.lock().unwrap();
                writes.iter().filter(|w| w.ok).all(|w| got.contains_key(&w.rev))
            };
            while !paged(&rx) && last.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let after = Snapshot::take(&bench, &driver, &daemons);
            report(&label, &bench, &writes, &rx, (&before, &after));
            all.extend(writes.into_iter().map(|w| w.rev));
        }
        strays(&format!("detect ({})", name(s)), &all, &rx);
        drop(daemons);
        for c in &bench.clusters {
            c.relay.route(&[]);
        }
    }
}

fn name(setup: &str) -> &str {
    match setup {
        "single" => "1 replica, redb",
        _ => "3 replicas × 4 shards, PostgreSQL",
    }
}

/// One replica, the state in redb: both feeds' relays go to it.
fn single(bench: &Bench, rx: &Receiver) -> Vec<Daemon> {
    let (dir, audit) = bench.daemon_dir(None);
    let cfg = bench.config(rx.addr.port(), audit, None);
    let started = Instant::now();
    let d = Daemon::spawn_in(&bench.clusters[0].api, &cfg, dir, &[]);
    d.wait_ready(started);
    let addr = format!("127.0.0.1:{audit}");
    for c in &bench.clusters {
        c.relay.route(std::slice::from_ref(&addr));
    }
    println!("detect (1 replica, redb): ready in {}", ms(started.elapsed()));
    vec![d]
}

/// Three replicas, four shards, the state in PostgreSQL; each feed's relay goes first
/// to a replica that does not hold its cluster's shard.
fn sharded(bench: &Bench, driver: &Driver, rx: &Receiver) -> Vec<Daemon> {
    let pg = driftwatch::state::pgtest::server().expect("PostgreSQL");
    let schema = driftwatch::state::pgtest::fresh_schema();
    let elected = ["--leader-election", "--lease-duration", "15", "--lease-namespace", "argocd"];
    let started = Instant::now();
    let mut audit = Vec::new();
    let ds: Vec<Daemon> = (0..REPLICAS)
        .map(|_| {
            let (dir, port) = bench.daemon_dir(Some(&pg.url()));
            audit.push(format!("127.0.0.1:{port}"));
            Daemon::spawn_in(&bench.clusters[0].api, &bench.config(rx.addr.port(), port, Some(&schema)), dir, &elected)
        })
        .collect();
    for d in &ds {
        d.wait_ready(started);
    }
    let bound = SHARDS.div_ceil(REPLICAS as u32) as f64;
    let apps = (bench.clusters.iter().map(|c| c.deployments).sum::<usize>() / setup::PER_APP) as f64;
    super::until(Duration::from_secs(300), || {
        let held: Vec<f64> = ds.iter().map(|d| d.metric("driftwatch_leader")).collect();
        let kept: f64 = ds.iter().map(|d| d.metric("driftwatch_applications")).sum();
        held.iter().sum::<f64>() == f64::from(SHARDS) && held.iter().all(|h| *h <= bound) && kept == apps
    })
    .expect("every shard held and every Application kept");
    let owners = shard_owners(driver, bench, &ds);
    for c in &bench.clusters {
        let owner = owners[c.shard as usize];
        // Another cluster's owner first (it takes a batch that is not its own), then the
        // others, the owner last (only if no other accepts).
        let other = bench.clusters.iter().map(|o| owners[o.shard as usize]).find(|o| *o != owner);
        let mut order: Vec<usize> = Vec::new();
        for r in other.into_iter().chain((0..REPLICAS).filter(|r| *r != owner)).chain([owner]) {
            if !order.contains(&r) {
                order.push(r);
            }
        }
        c.relay.route(&order.iter().map(|r| audit[*r].clone()).collect::<Vec<_>>());
        println!(
            "detect (3 replicas × 4 shards): {}'s shard {} held by replica {owner}; its feed's batches go to replica {}",
            c.label, c.shard, order[0]
        );
    }
    println!("detect (3 replicas × 4 shards): every shard held {} after the start", ms(started.elapsed()));
    ds
}

/// A write by the admin on each cluster's first Deployment, waited for: the feeds post
/// to the daemons and every shard reads its index whole.
fn warm_up(bench: &Bench, driver: &Driver, rx: &Receiver) -> Vec<String> {
    let started = Instant::now();
    let revs = driver.warm_up(bench);
    super::until(Duration::from_secs(120), || {
        let got = rx.arrivals.lock().unwrap();
        revs.iter().all(|r| got.contains_key(r))
    })
    .expect("the warm-up writes paged");
    println!("detect: warm-up writes paged within {}", ms(started.elapsed()));
    revs
}

/// Every page of a set-up that names no write of it (a wrong person or resource, or
/// none: a page's `rev` is the person and the resource it names).
fn strays(label: &str, revs: &[String], rx: &Receiver) {
    let revs: std::collections::HashSet<&str> = revs.iter().map(String::as_str).collect();
    let bodies = rx.bodies.lock().unwrap().clone();
    let stray: Vec<&String> = bodies
        .iter()
        .filter(|b| serde_json::from_str::<Value>(b).ok().and_then(|v| v["rev"].as_str().map(|r| revs.contains(r))) != Some(true))
        .collect();
    println!("{label}: {} pages in all, {} naming no write of the bench (a wrong person or resource, or none)", bodies.len(), stray.len());
    for b in stray.iter().take(5) {
        println!("{label}:   STRAY: {}", b.chars().take(300).collect::<String>());
    }
}

/// What is counted before and after a phase.
struct Snapshot {
    /// Each replica's CPU seconds and `/metrics`.
    daemons: Vec<(f64, String)>,
    /// The daemons' CPU seconds by thread name, all replicas summed.
    threads: HashMap<String, f64>,
    /// CPU seconds of this process's other descendants, by command name.
    procs: HashMap<String, f64>,
    bench: f64,
    machine: f64,
    /// Each API server's `/metrics`.
    apis: Vec<String>,
}

impl Snapshot {
    fn take(bench: &Bench, driver: &Driver, daemons: &[Daemon]) -> Snapshot {
        Snapshot {
            daemons: daemons
                .iter()
                .map(|d| (d.cpu_seconds(), super::common::receiver::get(&d.admin, "/metrics").unwrap_or_default().1))
                .collect(),
            threads: daemons.iter().flat_map(|d| d.cpu_by_thread()).fold(HashMap::new(), |mut m, (n, c)| {
                *m.entry(n).or_default() += c;
                m
            }),
            procs: descendants_cpu(),
            bench: super::stat_cpu("/proc/self/stat"),
            machine: super::machine_busy(),
            apis: bench.clusters.iter().map(|c| driver.api_metrics(&c.api)).collect(),
        }
    }

    /// The daemons' `/metrics`, one after the other (histograms summed by `buckets`).
    fn daemon_metrics(&self) -> String {
        self.daemons.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>().join("\n")
    }
}

/// CPU seconds of every process descending from this one, but the daemons, by command
/// name (`kube-apiserver`, `etcd`, `postgres`...).
fn descendants_cpu() -> HashMap<String, f64> {
    let me = std::process::id();
    let mut procs: Vec<(u32, u32, String, f64)> = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let path = e.path().join("stat");
        let stat = std::fs::read_to_string(&path).unwrap_or_default();
        let Some((head, rest)) = stat.rsplit_once(')') else { continue };
        let comm = head.split_once('(').map(|(_, c)| c.to_string()).unwrap_or_default();
        let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        procs.push((pid, ppid, comm, super::stat_cpu(&path.to_string_lossy())));
    }
    let mut mine = vec![me];
    let mut out: HashMap<String, f64> = HashMap::new();
    while let Some(parent) = mine.pop() {
        for (pid, ppid, comm, cpu) in &procs {
            if *ppid == parent {
                mine.push(*pid);
                if comm != "driftwatch" {
                    *out.entry(comm.clone()).or_default() += cpu;
                }
            }
        }
    }
    out
}

/// A write's batch (an estimate; the relay sees TLS, not the events): the last burst on
/// its cluster's feed that began after it was sent and before its page. The daemons
/// take a batch in tens of milliseconds and batches come about a second apart, so the
/// page follows its own batch before the next one begins; wrong only when a page comes
/// more than a batch interval after its batch (then "ours" reads short and the wait
/// long: the daemons' own histograms tell). The second value: more than one burst began
/// between the write's answer and its page (the estimate chose among them).
fn batch_of(w: &Write, page: Instant, bursts: &[Burst]) -> Option<(Instant, bool)> {
    let within: Vec<Instant> = bursts.iter().map(|b| b.at).filter(|at| *at >= w.sent && *at <= page).collect();
    let after_answer = within.iter().filter(|at| **at >= w.answered).count();
    within.last().map(|at| (*at, after_answer > 1))
}

/// The figures of one phase.
fn report(label: &str, bench: &Bench, writes: &[Write], rx: &Receiver, (before, after): (&Snapshot, &Snapshot)) {
    let arrivals = rx.arrivals.lock().unwrap().clone();
    let since = writes.iter().map(|w| w.sent).min().unwrap_or_else(Instant::now);
    let bursts: Vec<Vec<Burst>> = bench.clusters.iter().map(|c| c.relay.bursts_since(since)).collect();
    let ok: Vec<&Write> = writes.iter().filter(|w| w.ok).collect();
    let unpaged: Vec<&Write> = ok.iter().copied().filter(|w| !arrivals.contains_key(&w.rev)).collect();
    let (mut e2e, mut wait, mut ours, mut chosen) = (Vec::new(), Vec::new(), Vec::new(), 0);
    // The slowest pages after their batch: the write, then from its send its answer,
    // its batch and its page.
    let mut slowest: Vec<(Duration, &str, [Duration; 3])> = Vec::new();
    for w in &ok {
        let Some(page) = arrivals.get(&w.rev) else { continue };
        e2e.push(page.saturating_duration_since(w.sent));
        if let Some((b, among)) = batch_of(w, *page, &bursts[w.cluster]) {
            chosen += usize::from(among);
            wait.push(b.saturating_duration_since(w.sent));
            ours.push(page.saturating_duration_since(b));
            let from = |t: Instant| t.saturating_duration_since(w.sent);
            slowest.push((page.saturating_duration_since(b), &w.rev, [from(w.answered), from(b), from(*page)]));
        }
    }
    slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
    let bodies = rx.bodies.lock().unwrap().clone();
    let revs: std::collections::HashSet<&str> = writes.iter().map(|w| w.rev.as_str()).collect();
    let pages = bodies
        .iter()
        .filter_map(|b| serde_json::from_str::<Value>(b).ok())
        .filter(|v| v["rev"].as_str().is_some_and(|r| revs.contains(r)))
        .count();
    println!(
        "{label}: {} writes sent, {} refused by the API server, {} paged, {} unpaged; {pages} pages for them ({} repeats)",
        writes.len(),
        writes.len() - ok.len(),
        e2e.len(),
        unpaged.len(),
        pages.saturating_sub(e2e.len())
    );
    for w in writes.iter().filter(|w| !w.ok).take(10) {
        println!("{label}:   refused: {} ({})", w.rev, w.error);
    }
    for w in unpaged.iter().take(20) {
        println!("{label}:   UNPAGED: {} on {}", w.rev, bench.clusters[w.cluster].label);
    }
    println!("{label}:   write sent -> page at the receiver: {}", stats(e2e));
    println!(
        "{label}:   write sent -> its batch's first bytes at a daemon (the API server's batch wait; {} of the paged writes told): {}",
        wait.len(),
        stats(wait)
    );
    println!(
        "{label}:   its batch at a daemon -> page (ours: listener, inbox, evaluation, delivery): {} ({chosen} writes had two batches or more between their answer and their page: the last taken)",
        stats(ours)
    );
    for (_, rev, [answered, batch, page]) in slowest.iter().take(3) {
        println!("{label}:     slow: {rev}: answered {}, its batch {}, paged {} after it was sent", ms(*answered), ms(*batch), ms(*page));
    }
    report_daemon_metrics(label, before, after);
    report_feeds(label, bench, &bursts);
    report_cpu(label, ok.len(), (before, after));
}

/// The daemons' own histograms over the phase, all replicas summed.
fn report_daemon_metrics(label: &str, before: &Snapshot, after: &Snapshot) {
    let (b, a) = (before.daemon_metrics(), after.daemon_metrics());
    let pair = |name: &str, labels: &[&str]| (buckets(&b, name, labels), buckets(&a, name, labels));
    let (e0, e1) = pair("driftwatch_audit_evaluated_seconds", &[]);
    let (n0, n1) = pair("driftwatch_notification_latency_seconds", &["kind=\"webhook\""]);
    let (p0, p1) = pair("driftwatch_evaluation_duration_seconds", &[]);
    println!(
        "{label}:   the daemons' histograms: a batch's arrival -> its attempts evaluated (driftwatch_audit_evaluated_seconds) p50 {}, p99 {} over {} batches; -> page acknowledged (driftwatch_notification_latency_seconds) p50 {}, p99 {} over {}; passes p50 {}, p99 {} over {}",
        in_ms(quantile(&e0, &e1, 0.5).0),
        in_ms(quantile(&e0, &e1, 0.99).0),
        quantile(&e0, &e1, 0.99).1,
        in_ms(quantile(&n0, &n1, 0.5).0),
        in_ms(quantile(&n0, &n1, 0.99).0),
        quantile(&n0, &n1, 0.99).1,
        in_ms(quantile(&p0, &p1, 0.5).0),
        in_ms(quantile(&p0, &p1, 0.99).0),
        quantile(&p0, &p1, 0.99).1,
    );
    let sum = |text: &str, name: &str| -> HashMap<String, f64> {
        let mut out = HashMap::new();
        for l in text.lines().filter(|l| l.starts_with(name)) {
            if let Some((series, v)) = l.rsplit_once(' ') {
                *out.entry(series.trim_start_matches(name).to_string()).or_insert(0.0) += v.parse::<f64>().unwrap_or(0.0);
            }
        }
        out
    };
    let (r0, r1) = (sum(&b, "driftwatch_audit_events_total"), sum(&a, "driftwatch_audit_events_total"));
    let (d0, d1) = (sum(&b, "driftwatch_audit_dropped_total"), sum(&a, "driftwatch_audit_dropped_total"));
    let delta = |x: &HashMap<String, f64>, y: &HashMap<String, f64>| {
        let mut v: Vec<String> = y
            .iter()
            .map(|(k, n)| (k, n - x.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, n)| *n > 0.0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        v.sort();
        v.join(", ")
    };
    println!(
        "{label}:   audit events by result (all replicas): {}; dropped: {}",
        delta(&r0, &r1),
        Some(delta(&d0, &d1)).filter(|s| !s.is_empty()).unwrap_or_else(|| "none".into())
    );
}

/// Each feed's batches over the phase: how many, their size, which replica took them.
fn report_feeds(label: &str, bench: &Bench, bursts: &[Vec<Burst>]) {
    for (c, bs) in bench.clusters.iter().zip(bursts) {
        let mut to: Vec<String> = bs.iter().map(|b| b.backend.clone()).collect();
        to.sort();
        to.dedup();
        let mut gaps: Vec<Duration> = bs.windows(2).map(|w| w[1].at.saturating_duration_since(w[0].at)).collect();
        gaps.sort();
        println!(
            "{label}:   {}'s feed: {} batches, {:.0} KB on average, {} apart (p50), to {}",
            c.label,
            bs.len(),
            bs.iter().map(|b| b.bytes).sum::<usize>() as f64 / 1024.0 / bs.len().max(1) as f64,
            ms(super::percentile(&gaps, 0.5)),
            to.join(", ")
        );
    }
}

/// CPU over the phase: the daemons per audit event the API servers sent and per write,
/// the control plane, PostgreSQL, this process, the rest; the load.
fn report_cpu(label: &str, writes: usize, (before, after): (&Snapshot, &Snapshot)) {
    // A counter's growth over the phase, summed over the API servers.
    let grown = |name: &str| -> f64 { after.apis.iter().zip(&before.apis).map(|(a, b)| counter(a, name) - counter(b, name)).sum() };
    let events = grown("apiserver_audit_event_total");
    let errors = grown("apiserver_audit_error_total");
    let per: Vec<f64> = after.daemons.iter().zip(&before.daemons).map(|(a, b)| a.0 - b.0).collect();
    let daemons: f64 = per.iter().sum();
    let proc = |name: &str| after.procs.get(name).copied().unwrap_or(0.0) - before.procs.get(name).copied().unwrap_or(0.0);
    let (apis, etcd, pg) = (proc("kube-apiserver"), proc("etcd"), proc("postgres"));
    let bench = after.bench - before.bench;
    let machine = after.machine - before.machine;
    println!(
        "{label}:   daemons' CPU {daemons:.2} s ({}): {:.0} µs per audit event ({events:.0} events sent by the API servers, {errors:.0} send errors), {:.2} ms per write",
        per.iter().map(|c| format!("{c:.2} s")).collect::<Vec<_>>().join(" + "),
        daemons * 1e6 / events.max(1.0),
        daemons * 1e3 / writes.max(1) as f64
    );
    let mut threads: Vec<(&String, f64)> =
        after.threads.iter().map(|(n, c)| (n, c - before.threads.get(n).copied().unwrap_or(0.0))).filter(|(_, c)| *c >= 0.01).collect();
    threads.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("{label}:   daemons' CPU by thread: {}", threads.iter().map(|(n, c)| format!("{n} {c:.2} s")).collect::<Vec<_>>().join(", "));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let pressure = std::fs::read_to_string("/proc/pressure/cpu").unwrap_or_default();
    println!(
        "{label}:   CPU of the rest: API servers {apis:.1} s, etcd {etcd:.1} s, PostgreSQL {pg:.1} s, this process (driver, relays, receiver) {bench:.1} s, other processes {:.1} s; load average {}; cpu pressure {}",
        (machine - daemons - apis - etcd - pg - bench).max(0.0),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        pressure.lines().next().unwrap_or("-")
    );
}

/// The sum of every series of counter `name` in a `/metrics` text.
fn counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(['{', ' '])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Which replica holds each shard: its Lease's holder (`host-pid`).
fn owner_of(lease: &Value, ds: &[Daemon]) -> Option<usize> {
    let holder = lease.pointer("/spec/holderIdentity")?.as_str()?;
    let pid: u32 = holder.rsplit('-').next()?.parse().ok()?;
    ds.iter().position(|d| d.child.id() == pid)
}

/// The replica holding each shard.
fn shard_owners(driver: &Driver, bench: &Bench, ds: &[Daemon]) -> Vec<usize> {
    (0..SHARDS)
        .map(|s| {
            let path = format!("/apis/coordination.k8s.io/v1/namespaces/argocd/leases/driftwatch-shard-{s}");
            let lease: Value = serde_json::from_str(&driver.get(&bench.clusters[0].api, &path)).unwrap_or_default();
            owner_of(&lease, ds).unwrap_or_else(|| panic!("shard {s}'s Lease names no replica: {lease}"))
        })
        .collect()
}
