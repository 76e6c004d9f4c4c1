//! `driftwatch run` against a live cluster: watches Applications and AppProjects,
//! evaluates an Application when it changes (and on a schedule only when a trigger
//! reads the clock), hands notifications to the delivery workers, reloads the
//! configuration on SIGHUP or when its files change, serves the operations endpoints,
//! and stops cleanly on SIGTERM.
//!
//! Two halves: this module is the asynchronous shell (the watch streams, leader
//! election, signals, timers, the operations server), which only forwards what happens
//! as `core::Input`s; `core` owns everything that evaluates and writes the state
//! store, on a thread of its own, so a pass (rhai, handlebars, redb) never runs on a
//! tokio worker, and decoding the watch overlaps with evaluating.

pub mod admin;
mod core;
mod fingerprint;
pub mod replay;
mod units;
mod wakeups;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::cluster::watch::{self, WatchOptions};
use crate::config;
use crate::trigger::TriggerEngine;

pub use self::admin::SharedState;
use self::core::{Input, LeadError};
use self::units::{RELIST_AFTER, Shell};

/// Options of `driftwatch run` (live).
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub config: Option<PathBuf>,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub watch: WatchOptions,
    /// The state file; the config's `state.path`, else `driftwatch-state.redb`.
    pub state: Option<PathBuf>,
    /// Where `/healthz`, `/readyz` and `/metrics` listen.
    pub listen: SocketAddr,
    /// How often time-dependent triggers are re-evaluated.
    pub resync: Duration,
    /// How long in-flight deliveries get on shutdown.
    pub shutdown_grace: Duration,
    /// Leader election between replicas; `None`: this process always sends.
    pub lease: Option<crate::cluster::lease::LeaseConfig>,
}

/// How many inputs wait for the evaluation thread before the shell stops reading the
/// watch (the API server's connection then holds the rest). Two list pages: while the
/// evaluation thread works through one page, the shell fetches and decodes the next
/// (with a queue smaller than a page the two took turns, and 10,000 Applications took
/// 9 s to be ready instead of 3.5 s). The memory this peak takes is handed back once
/// ready ([`crate::memory::ready`]).
const INPUT_QUEUE: usize = 1024;

/// How often a replica that should send but could not open the store (or build its
/// clients) tries again.
const LEAD_RETRY: Duration = Duration::from_millis(500);

/// How often the configuration files are looked at.
const CONFIG_POLL: Duration = Duration::from_secs(2);

/// Starts the audit input of `settings`: the listener (bound now) and the file
/// follower, both feeding one bounded queue.
async fn start_audit(settings: &crate::config::AuditSettings) -> anyhow::Result<(Arc<crate::audit::Shared>, crate::audit::Queue)> {
    let shared = crate::audit::Shared::new(settings);
    let (sink, queue) = crate::audit::queue(&shared);
    if let Some(addr) = settings.listen {
        let tls = match &settings.tls {
            Some(t) => Some(crate::audit::listener::tls_config(t)?),
            None => None,
        };
        let bound = crate::audit::listener::serve(addr, tls, sink.clone()).await?;
        tracing::info!(%bound, tls = settings.tls.is_some(), "audit webhook listening (POST /audit)");
    }
    if let Some(file) = &settings.file {
        crate::audit::file::follow(file.clone(), shared.clone(), sink)?;
    }
    Ok((shared, queue))
}

/// Runs until SIGTERM or SIGINT. Returns the exit code.
pub async fn run(opts: DaemonOptions, err: &mut dyn std::io::Write) -> anyhow::Result<i32> {
    let engine = Arc::new(TriggerEngine::new());
    let rt = match config::load_with(opts.config.as_deref(), engine.clone()) {
        Ok(rt) => rt,
        Err(errors) => {
            for e in &errors {
                writeln!(err, "error: {e}")?;
            }
            return Ok(crate::exit::FAILED);
        }
    };
    // Every delivery client is built once before anything else happens, so a missing
    // secret or an unreadable CA file is the one error reported, with nothing created.
    if let Err(problems) = core::services_problems(&rt) {
        for p in &problems {
            writeln!(err, "error: {p}")?;
        }
        writeln!(err, "driftwatch does not start until the services can be built (`driftwatch check` lists the same)")?;
        return Ok(crate::exit::FAILED);
    }
    // The cluster first: without one there is nothing to do, and nothing is created.
    let client = match crate::cluster::client::client(opts.kubeconfig.as_deref(), opts.context.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            writeln!(err, "(to try driftwatch without a cluster: driftwatch run --replay examples/drift-incident)")?;
            return Ok(crate::exit::FAILED);
        }
    };
    let store_at = match (&rt.state.postgres, &opts.state) {
        (Some(_), Some(path)) => {
            writeln!(
                err,
                "error: --state {} names a file, but the configuration keeps the state in PostgreSQL (state.postgres): give one",
                path.display()
            )?;
            return Ok(crate::exit::FAILED);
        }
        (Some(pg), None) => core::StoreAt::Postgres(pg.clone()),
        (None, _) => {
            let path = opts.state.clone().or_else(|| rt.state.path.clone()).unwrap_or_else(|| PathBuf::from("driftwatch-state.redb"));
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            core::StoreAt::File(path)
        }
    };
    let shared: SharedState = Arc::new(crate::daemon::admin::Shared::default());
    shared.set_config(&rt);
    // Stopped last: `/healthz` answers while the shutdown drains.
    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let ops_tls = match &rt.operations_tls {
        Some(t) => match crate::tls::server_config(t, || {
            crate::metrics::METRICS.ops_connections_refused.inc();
        }) {
            Ok(c) => Some(c),
            Err(e) => {
                writeln!(err, "error: operations.tls: {e}")?;
                return Ok(crate::exit::FAILED);
            }
        },
        None => None,
    };
    let tls = ops_tls.is_some();
    let bound = crate::daemon::admin::serve(opts.listen, shared.clone(), ops_tls, async {
        let _ = admin_stopped.await;
    })
    .await?;
    tracing::info!(%bound, tls, "operations endpoints listening");
    let shards = rt.shards;
    // One configuration for every unit; each reloads its own.
    let rt = Arc::new(rt);
    let sharded = shards > 1;
    if sharded && opts.lease.is_none() {
        writeln!(err, "error: sharding.shards is {shards}: each shard is held through a Lease; run with --leader-election")?;
        return Ok(crate::exit::FAILED);
    }
    // One election per unit: the Lease without sharding, one per shard with (and the
    // member Lease that bounds how many one replica holds); none without election.
    let (membership, elections) = match &opts.lease {
        Some(cfg) if sharded => {
            let (membership, elections) = crate::cluster::shards::spawn(client.clone(), cfg.clone(), shards);
            (Some(membership), elections.into_iter().map(Some).collect())
        }
        Some(cfg) => (None, vec![Some(crate::cluster::lease::spawn(client.clone(), cfg.clone()))]),
        None => (None, vec![None]),
    };
    // The audit input: its listener binds before anything is evaluated, so a port in use
    // or unreadable TLS files are a start-up error. (Not with sharding: refused at load.)
    let (audit, mut audit_rx) = match rt.audit.enabled() {
        true => match start_audit(&rt.audit).await {
            Ok((shared, queue)) => (Some(shared), Some(queue)),
            Err(e) => {
                writeln!(err, "error: {e}")?;
                return Ok(crate::exit::FAILED);
            }
        },
        false => (None, None),
    };
    let step_down_grace = match &opts.lease {
        Some(l) => opts.shutdown_grace.min(l.duration / 4),
        None => opts.shutdown_grace,
    };
    // One evaluation thread per unit: the whole daemon without sharding, one shard with.
    let (leading_tx, mut leading_rx) = tokio::sync::mpsc::channel::<(usize, Option<bool>)>(elections.len().max(1) * 4);
    let common = units::Common {
        rt: &rt,
        client: &client,
        engine: &engine,
        opts: &opts,
        store_at: &store_at,
        shared: &shared,
        audit: &audit,
        step_down_grace,
        sharded,
        leading_tx: &leading_tx,
    };
    let mut units = Vec::with_capacity(elections.len());
    for (i, election) in elections.into_iter().enumerate() {
        units.push(units::spawn(&common, i, election).await?);
    }
    drop(leading_tx);
    // Without leader election, a store that cannot be opened is a start-up error.
    for unit in &mut units {
        let Some(started) = unit.started.take() else { continue };
        match started.await {
            Ok(Ok(())) => {}
            Ok(Err(LeadError::Store(e))) => {
                writeln!(err, "error: {e}")?;
                return Ok(crate::exit::FAILED);
            }
            Ok(Err(LeadError::Services(errors))) => {
                for e in errors {
                    writeln!(err, "error: {e}")?;
                }
                return Ok(crate::exit::FAILED);
            }
            Err(_) => anyhow::bail!("the evaluation thread stopped while starting"),
        }
    }
    let mut shell = Shell { units, owned: vec![!sharded; usize::try_from(shards).unwrap_or(1)], sharded, shards, placed: HashMap::new() };
    let mut changes = watch::changes(client.clone(), &opts.watch).boxed();
    // With sharding, a shard taken over needs its Applications: the watch lists again,
    // once for the shards taken within RELIST_AFTER of each other.
    let mut relist_at: Option<tokio::time::Instant> = None;
    let mut lead_retry = tokio::time::interval(LEAD_RETRY);
    let mut config_poll = tokio::time::interval(CONFIG_POLL);
    let mut resync = tokio::time::interval(opts.resync);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    loop {
        let sent = tokio::select! {
            Some((arrived, batch)) = async { match audit_rx.as_mut() { Some(q) => q.recv().await, None => None } }, if audit_rx.is_some() => {
                shell.send(0, Input::Audit(batch, arrived)).await
            }
            change = changes.next() => match change {
                Some(c) => shell.change(c).await,
                None => {
                    tracing::error!("watch streams ended");
                    break;
                }
            },
            _ = async { match relist_at { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                relist_at = None;
                tracing::info!(shards = ?shell.held(), "listing the Applications again for the shards taken over");
                changes = watch::changes(client.clone(), &opts.watch).boxed();
                true
            }
            _ = sighup.recv() => {
                tracing::info!("SIGHUP: reloading the configuration");
                shell.broadcast(|| Input::Reload).await
            }
            _ = lead_retry.tick() => shell.broadcast(|| Input::RetryLead).await,
            _ = config_poll.tick() => shell.broadcast(|| Input::PollConfig).await,
            _ = resync.tick() => shell.broadcast(|| Input::Resync).await,
            Some((i, leading)) = leading_rx.recv() => {
                let Some(leading) = leading else {
                    tracing::error!("leader election stopped");
                    break;
                };
                if shell.sharded && leading && !shell.owned.get(i).copied().unwrap_or(true) {
                    relist_at.get_or_insert_with(|| tokio::time::Instant::now() + RELIST_AFTER);
                }
                // Owned before the unit leads, and no longer before it stands down: the
                // shell forwards a shard's Applications only while its unit holds it.
                if let Some(o) = shell.owned.get_mut(i) {
                    *o = leading || !shell.sharded;
                }
                if !leading {
                    shell.placed.retain(|_, s| *s != i);
                }
                shell.send(i, Input::Leading(leading)).await
            }
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM: stopping");
                break;
            }
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("interrupted: stopping");
                break;
            }
        };
        if !sent {
            tracing::error!("an evaluation thread stopped");
            break;
        }
    }
    // Stop watching first, then let the evaluation threads finish what has arrived and
    // in-flight deliveries finish; what is left stays in the outbox for the next start.
    drop(changes);
    let fenced = shell.stop(membership).await;
    let _ = stop_admin.send(());
    if fenced {
        writeln!(
            err,
            "error: another driftwatch took the state store in PostgreSQL over; run one daemon per state schema, or several with --leader-election"
        )?;
        return Ok(crate::exit::FAILED);
    }
    Ok(crate::exit::OK)
}
