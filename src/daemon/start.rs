//! `driftwatch run`'s life, in named steps: the configuration, the cluster's client,
//! where the store is, the operations endpoints, leadership, the audit input, the
//! evaluation threads, then serving until a signal, and the shutdown. A step that
//! cannot go on says why in whole lines ([`StartError::Refused`]), and nothing after
//! it is started.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;

use super::eval_thread::{self, Input, LeadError};
use super::supervisor::{self, RELIST_AFTER, Supervisor};
use super::{CONFIG_POLL, DaemonOptions, LEAD_RETRY, SharedState};
use crate::cluster::client::ApiClient;
use crate::cluster::watch;
use crate::config::{self, Runtime};
use crate::trigger::TriggerEngine;

/// Why the daemon did not start or stopped early.
pub(super) enum StartError {
    /// What to tell the operator, line by line; the exit code says it failed.
    Refused(Vec<String>),
    /// An error of the machine (a signal handler, a directory).
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for StartError {
    fn from(e: anyhow::Error) -> Self {
        StartError::Failed(e)
    }
}

impl From<std::io::Error> for StartError {
    fn from(e: std::io::Error) -> Self {
        StartError::Failed(e.into())
    }
}

/// One `error: …` line.
fn refused(e: impl std::fmt::Display) -> StartError {
    StartError::Refused(vec![format!("error: {e}")])
}

/// How serving ended.
pub(super) enum Ended {
    Stopped,
    /// Another daemon took the PostgreSQL store over.
    Fenced,
}

/// The daemon's life: each step, then serving, then the shutdown.
pub(super) async fn start_and_serve(opts: DaemonOptions) -> Result<Ended, StartError> {
    let (engine, rt) = configuration(&opts)?;
    let client = cluster(&opts).await?;
    let mut opts = opts;
    opts.watch.engines = watch::served_engines(&client, &opts.watch.namespaces).await;
    let store_at = store_location(&rt, &opts)?;
    let ops = operations_endpoints(&opts, &rt).await?;
    let rt = Arc::new(rt);
    let leadership = leadership(&opts, &rt, &client)?;
    let audit = audit_input(&rt).await?;
    let common = Built {
        rt: &rt,
        client: &client,
        engine: &engine,
        opts: &opts,
        store_at: &store_at,
        shared: &ops.shared,
        audit: &audit.shared,
        inbox: &audit.inbox,
    };
    let (supervisor, leading_rx) = evaluation(&common, leadership.elections).await?;
    let supervisor = serve(supervisor, leading_rx, audit.queue, audit.arrived, &client, &opts).await?;
    Ok(shutdown(supervisor, leadership.membership, ops).await)
}

/// Stops watching first (done as `serve` returned), then lets the evaluation threads
/// finish what has arrived and in-flight deliveries finish; what is left stays in the
/// outbox for the next start. `/healthz` answers until the end.
async fn shutdown(supervisor: Supervisor, membership: Option<crate::cluster::shards::Membership>, ops: Operations) -> Ended {
    let fenced = supervisor.stop(membership).await;
    let _ = ops.stop.send(());
    if fenced { Ended::Fenced } else { Ended::Stopped }
}

/// The configuration, and every delivery client built once before anything else
/// happens, so a missing secret or an unreadable CA file is the one error reported,
/// with nothing created.
fn configuration(opts: &DaemonOptions) -> Result<(Arc<TriggerEngine>, Runtime), StartError> {
    let engine = Arc::new(TriggerEngine::new());
    let rt = config::load_with(opts.config.as_deref(), engine.clone())
        .map_err(|errors| StartError::Refused(errors.iter().map(|e| format!("error: {e}")).collect()))?;
    if let Err(problems) = eval_thread::services_problems(&rt) {
        let mut lines: Vec<String> = problems.iter().map(|p| format!("error: {p}")).collect();
        lines.push("driftwatch does not start until the services can be built (`driftwatch check` lists the same)".into());
        return Err(StartError::Refused(lines));
    }
    Ok((engine, rt))
}

/// The cluster's client: without one there is nothing to do, and nothing is created.
async fn cluster(opts: &DaemonOptions) -> Result<ApiClient, StartError> {
    crate::cluster::client::client(opts.kubeconfig.as_deref(), opts.context.as_deref()).await.map_err(|e| {
        StartError::Refused(vec![
            format!("error: {e}"),
            "(to try driftwatch without a cluster: driftwatch run --replay examples/drift-incident)".into(),
        ])
    })
}

/// Where the state is kept: PostgreSQL (`state.postgres`) or a file (`--state`, else
/// `state.path`, else `driftwatch-state.redb`), whose directory is made.
fn store_location(rt: &Runtime, opts: &DaemonOptions) -> Result<eval_thread::StoreAt, StartError> {
    match (&rt.state.postgres, &opts.state) {
        (Some(_), Some(path)) => Err(refused(format!(
            "--state {} names a file, but the configuration keeps the state in PostgreSQL (state.postgres): give one",
            path.display()
        ))),
        (Some(pg), None) => Ok(eval_thread::StoreAt::Postgres(pg.clone())),
        (None, _) => {
            let path = opts.state.clone().or_else(|| rt.state.path.clone()).unwrap_or_else(|| PathBuf::from("driftwatch-state.redb"));
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            Ok(eval_thread::StoreAt::File(path))
        }
    }
}

/// The operations endpoints, serving from now on and stopped last.
struct Operations {
    shared: SharedState,
    stop: tokio::sync::oneshot::Sender<()>,
}

async fn operations_endpoints(opts: &DaemonOptions, rt: &Runtime) -> Result<Operations, StartError> {
    let shared: SharedState = Arc::new(crate::daemon::admin::Shared::default());
    shared.set_config(rt);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let tls = match &rt.operations_tls {
        Some(t) => Some(
            crate::tls::server_config(t, || {
                crate::metrics::METRICS.ops_connections_refused.inc();
            })
            .map_err(|e| refused(format!("operations.tls: {e}")))?,
        ),
        None => None,
    };
    let with_tls = tls.is_some();
    let bound = crate::daemon::admin::serve(opts.listen, shared.clone(), tls, async {
        let _ = stopped.await;
    })
    .await?;
    tracing::info!(%bound, tls = with_tls, "operations endpoints listening");
    Ok(Operations { shared, stop })
}

/// Who sends: one election per unit — the Lease without sharding, one per shard with
/// (and the member Lease that bounds how many one replica holds); none without
/// leader election.
struct Leadership {
    membership: Option<crate::cluster::shards::Membership>,
    elections: Vec<Option<supervisor::Election>>,
}

fn leadership(opts: &DaemonOptions, rt: &Runtime, client: &ApiClient) -> Result<Leadership, StartError> {
    let shards = rt.shards;
    if shards > 1 && opts.lease.is_none() {
        return Err(refused(format!("sharding.shards is {shards}: each shard is held through a Lease; run with --leader-election")));
    }
    Ok(match &opts.lease {
        Some(cfg) if shards > 1 => {
            let (membership, elections) = crate::cluster::shards::spawn(client.clone(), cfg.clone(), shards);
            Leadership { membership: Some(membership), elections: elections.into_iter().map(Some).collect() }
        }
        Some(cfg) => Leadership { membership: None, elections: vec![Some(crate::cluster::lease::spawn(client.clone(), cfg.clone()))] },
        None => Leadership { membership: None, elections: vec![None] },
    })
}

/// The audit input as started: the index unit 0 keeps, the queue of what its listener
/// or file took, and with the state in PostgreSQL the audit inbox every unit reads and
/// the word that a batch arrived here.
struct AuditInput {
    shared: Option<Arc<crate::audit::Shared>>,
    queue: Option<crate::audit::Queue>,
    inbox: Option<crate::state::AuditInbox>,
    arrived: Option<tokio::sync::mpsc::Receiver<()>>,
}

/// The audit input: its listener binds before anything is evaluated, so a port in use
/// or unreadable TLS files are a start-up error. With the state in PostgreSQL the
/// listener writes to the audit inbox (`audit::inbox`), on every replica.
async fn audit_input(rt: &Runtime) -> Result<AuditInput, StartError> {
    if !rt.audit.enabled() {
        return Ok(AuditInput { shared: None, queue: None, inbox: None, arrived: None });
    }
    let settings = &rt.audit;
    let shared = crate::audit::Shared::new(settings);
    for feed in shared.feed_labels() {
        crate::metrics::METRICS.audit_last_batch.set(&feed, 0);
    }
    let (sink, queue) = crate::audit::queue(&shared);
    let (mut inbox, mut arrived) = (None, None);
    if let Some(addr) = settings.listen {
        let tls = match &settings.tls {
            Some(t) => Some(crate::audit::listener::tls_config(t).map_err(refused)?),
            None => None,
        };
        let mut listener_sink = sink.clone();
        if let Some(pg) = rt.state.postgres.clone() {
            // The store every replica shares, opened as a tool: no fencing epoch is
            // taken (the shards' own stores carry theirs). Opened off the workers.
            let opened = tokio::task::spawn_blocking(move || crate::state::Store::open_postgres(&pg, &crate::state::Role::Tool))
                .await
                .map_err(|e| refused(format!("audit inbox: {e}")))?
                .map_err(|e| refused(format!("audit inbox: {e}")))?;
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let relay = crate::audit::inbox::Relay { inbox: opened.audit_inbox(), arrived: tx };
            listener_sink = listener_sink.relaying(relay);
            (inbox, arrived) = (Some(opened.audit_inbox()), Some(rx));
        }
        let bound = crate::audit::listener::serve(addr, tls, listener_sink).await.map_err(refused)?;
        tracing::info!(%bound, tls = settings.tls.is_some(), inbox = inbox.is_some(), "audit webhook listening (POST /audit)");
    }
    if let Some(file) = &settings.file {
        crate::audit::file::follow(file.clone(), shared.clone(), sink).map_err(refused)?;
    }
    Ok(AuditInput { shared: Some(shared), queue: Some(queue), inbox, arrived })
}

/// What the evaluation threads are built from.
struct Built<'a> {
    rt: &'a Arc<Runtime>,
    client: &'a ApiClient,
    engine: &'a Arc<TriggerEngine>,
    opts: &'a DaemonOptions,
    store_at: &'a eval_thread::StoreAt,
    shared: &'a SharedState,
    audit: &'a Option<Arc<crate::audit::Shared>>,
    inbox: &'a Option<crate::state::AuditInbox>,
}

/// Where a unit's election says whether it leads, as `(unit, leading)`.
type LeadingRx = tokio::sync::mpsc::Receiver<(usize, Option<bool>)>;

/// One evaluation thread per unit (the whole daemon without sharding, one shard with),
/// each started; without leader election a store that cannot be opened is a start-up
/// error.
async fn evaluation(b: &Built<'_>, elections: Vec<Option<supervisor::Election>>) -> Result<(Supervisor, LeadingRx), StartError> {
    let step_down_grace = match &b.opts.lease {
        Some(l) => b.opts.shutdown_grace.min(l.duration / 4),
        None => b.opts.shutdown_grace,
    };
    let shards = b.rt.shards;
    let sharded = shards > 1;
    let (leading_tx, leading_rx) = tokio::sync::mpsc::channel::<(usize, Option<bool>)>(elections.len().max(1) * 4);
    let common = supervisor::Common {
        rt: b.rt,
        client: b.client,
        engine: b.engine,
        opts: b.opts,
        store_at: b.store_at,
        shared: b.shared,
        audit: b.audit,
        inbox: b.inbox,
        step_down_grace,
        sharded,
        leading_tx: &leading_tx,
    };
    let mut units = Vec::with_capacity(elections.len());
    for (i, election) in elections.into_iter().enumerate() {
        units.push(supervisor::spawn(&common, i, election).await?);
    }
    drop(leading_tx);
    for unit in &mut units {
        let Some(started) = unit.started.take() else { continue };
        match started.await {
            Ok(Ok(())) => {}
            Ok(Err(LeadError::Store(e))) => return Err(refused(e)),
            Ok(Err(LeadError::Services(errors))) => {
                return Err(StartError::Refused(errors.iter().map(|e| format!("error: {e}")).collect()));
            }
            Err(_) => return Err(anyhow::anyhow!("the evaluation thread stopped while starting").into()),
        }
    }
    let supervisor = Supervisor::new(units, sharded, shards);
    Ok((supervisor, leading_rx))
}

/// Serves until a signal, the watch's end or a unit's: hands the watch's changes, the
/// audit batches, the timers, reloads and the elections' word to the units. Returns the
/// supervisor to stop, the watch already dropped.
async fn serve(
    mut supervisor: Supervisor,
    mut leading_rx: LeadingRx,
    mut audit_rx: Option<crate::audit::Queue>,
    mut inbox_rx: Option<tokio::sync::mpsc::Receiver<()>>,
    client: &ApiClient,
    opts: &DaemonOptions,
) -> Result<Supervisor, StartError> {
    let mut inbox_poll = tokio::time::interval(eval_thread::INBOX_POLL);
    let reads_inbox = inbox_rx.is_some();
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
                supervisor.send(0, Input::Audit(batch, arrived)).await
            }
            Some(()) = async { match inbox_rx.as_mut() { Some(rx) => rx.recv().await, None => None } }, if inbox_rx.is_some() => {
                supervisor.broadcast(|| Input::Inbox).await
            }
            _ = inbox_poll.tick(), if reads_inbox => supervisor.broadcast(|| Input::Inbox).await,
            change = changes.next() => match change {
                Some(c) => supervisor.change(c).await,
                None => {
                    tracing::error!("watch streams ended");
                    break;
                }
            },
            _ = async { match relist_at { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                relist_at = None;
                tracing::info!(shards = ?supervisor.held(), "listing the Applications again for the shards taken over");
                changes = watch::changes(client.clone(), &opts.watch).boxed();
                true
            }
            _ = sighup.recv() => {
                tracing::info!("SIGHUP: reloading the configuration");
                supervisor.broadcast(|| Input::Reload).await
            }
            _ = lead_retry.tick() => supervisor.broadcast(|| Input::RetryLead).await,
            _ = config_poll.tick() => supervisor.broadcast(|| Input::PollConfig).await,
            _ = resync.tick() => supervisor.broadcast(|| Input::Resync).await,
            Some((i, leading)) = leading_rx.recv() => {
                let Some(leading) = leading else {
                    tracing::error!("leader election stopped");
                    break;
                };
                if supervisor.took_over(i, leading) {
                    relist_at.get_or_insert_with(|| tokio::time::Instant::now() + RELIST_AFTER);
                }
                supervisor.send(i, Input::Leading(leading)).await
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
    Ok(supervisor)
}
