//! The `driftwatch` command line: flags and telemetry only; the commands live in
//! `driftwatch::cli`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use driftwatch::cli::{self, Format, ReplayOptions, ToolArgs};

/// mimalloc, not glibc's allocator: see `driftwatch::memory`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "driftwatch", version, about = "Watches Argo CD Applications for drift and routes notifications")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Compile every trigger and template, print every error and warning.
    Check {
        /// driftwatch.yaml (the built-in catalog alone when absent).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Trigger commands.
    Trigger {
        #[command(subcommand)]
        command: TriggerCommand,
    },
    /// Template commands.
    Template {
        #[command(subcommand)]
        command: TemplateCommand,
    },
    /// Inspect the notification-state store.
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Watch a cluster and send notifications; with --replay, run on snapshot files.
    Run(RunArgs),
    /// Route-tree commands.
    Routes {
        #[command(subcommand)]
        command: RoutesCommand,
    },
    /// Query the drift history: every drift episode with its duration, classes,
    /// resources, attribution and the notifications sent.
    History {
        /// The state file (default: the config's state.path, else driftwatch-state.redb).
        #[arg(long)]
        state: Option<PathBuf>,
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// With a sharded configuration (sharding.shards): the shard whose state to read.
        #[arg(long, requires = "config")]
        shard: Option<u32>,
        /// Only this Application (`name` or `namespace/name`).
        #[arg(long)]
        app: Option<String>,
        /// Only episodes open since then: a duration back from now (24h, 7d) or an RFC 3339 time.
        #[arg(long)]
        since: Option<String>,
        /// Only episodes opened by then (and operations and exceptions by then): a
        /// duration back from now or an RFC 3339 time; with --since, what went on in
        /// between.
        #[arg(long)]
        until: Option<String>,
        /// Only episodes in which a resource of this class drifted (rbac, network-policy, ...).
        #[arg(long)]
        class: Option<String>,
        /// At most this many episodes, the newest.
        #[arg(long)]
        limit: Option<usize>,
        /// Time to detect (change -> Argo CD reporting it) and to resolve, p50/p95 per
        /// class and per Application, over the episodes selected.
        #[arg(long)]
        stats: bool,
        /// The Application's story, oldest first: the deployment each episode opened
        /// after, the drift or degradation, escalations, and the rollback, Git revision,
        /// self-heal or manual sync that ended it, with who.
        #[arg(long, conflicts_with = "stats")]
        timeline: bool,
        #[arg(long, short = 'o', value_enum, default_value = "table")]
        output: cli::history::HistoryFormat,
    },
    /// The summarized diff of an Application's drifted resources, Git value -> live
    /// value, read from its destination cluster like `argocd app diff`. Exit 0: nothing
    /// differs; 1: something does; 2: unreadable.
    Diff {
        /// `namespace/name` (`name` alone: in argocd).
        app: String,
        #[command(flatten)]
        cluster: ClusterArgs,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
    },
    /// An emergency manual change as a documented exception on one Application, with
    /// your own Kubernetes credentials (docs/break-glass.md). Exit 0: done; 1: the
    /// cluster could not be reached or refused the write; 2: refused.
    BreakGlass {
        #[command(subcommand)]
        command: BreakGlassCommand,
    },
    /// Convert an Argo CD notifications configuration (argocd-notifications-cm, its
    /// Secret, or argo-cd Helm values) into driftwatch.yaml, triggers/ and templates/;
    /// with --flux, Flux's Providers and Alerts into services and subscriptions.
    /// Exit 0: all converted; 3: some items need a hand (marked TODO(import)); 2: input
    /// unreadable.
    Import {
        /// ConfigMap, Secret, List or Helm values files (with --flux: Alert, Provider and
        /// Secret objects).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The files are Flux notification-controller objects: Providers become services,
        /// Alerts subscriptions.
        #[arg(long)]
        flux: bool,
        /// Directory to write into (created when missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Replace an existing driftwatch.yaml in --out.
        #[arg(long)]
        force: bool,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
    },
    /// List undelivered notifications, dead letters and quarantined outbox entries;
    /// `deliveries retry` puts dead letters back in the outbox.
    #[command(args_conflicts_with_subcommands = true)]
    Deliveries {
        #[command(subcommand)]
        command: Option<DeliveriesCommand>,
        #[arg(long)]
        state: Option<PathBuf>,
        /// driftwatch.yaml: the state it names (a file, or PostgreSQL).
        #[arg(long, conflicts_with = "state")]
        config: Option<PathBuf>,
        /// With a sharded configuration (sharding.shards): the shard whose state to read.
        #[arg(long, requires = "config")]
        shard: Option<u32>,
        /// Only what finally failed.
        #[arg(long)]
        failed: bool,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
    },
}

// `driftwatch run`'s flags (the variant's comment is the command's help): the
// daemon's, and with --replay those of a replay.
#[derive(clap::Args)]
struct RunArgs {
    /// kubeconfig file (default: in-cluster, then $KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    /// Namespace to watch (repeatable; default: all).
    #[arg(long = "namespace", short = 'n')]
    namespaces: Vec<String>,
    /// Label selector on Applications.
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// Namespace whose AppProjects are watched, whatever -n says (repeatable;
    /// default: all). Argo CD keeps AppProjects in its own namespace: `argocd`.
    #[arg(long = "projects-namespace")]
    projects_namespaces: Vec<String>,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:9090")]
    listen: std::net::SocketAddr,
    /// Seconds between re-evaluations of time-dependent triggers.
    #[arg(long, default_value_t = 60)]
    resync: u64,
    /// Seconds in-flight deliveries get on SIGTERM.
    #[arg(long, default_value_t = 10)]
    shutdown_grace: u64,
    /// Elect one sending replica with a coordination.k8s.io Lease.
    #[arg(long)]
    leader_election: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "driftwatch")]
    lease_name: String,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else argocd).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// Seconds a Lease holds without renewal.
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// A directory of numbered snapshot files, or a multi-document YAML file.
    #[arg(long)]
    replay: Option<PathBuf>,
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Keep notification state in this file (default: in memory).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Also append every notification as a JSON line to this file.
    #[arg(long)]
    jsonl: Option<PathBuf>,
    /// Deliver through the configured services for real; wait at most this many
    /// seconds at the end for deliveries to finish.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "60")]
    deliver: Option<u64>,
}

/// The store a tool that changes or lists it works on: a state file, or the one the
/// configuration names (a file, or PostgreSQL, one shard of it with sharding).
#[derive(clap::Args)]
struct StoreArgs {
    #[arg(long, required_unless_present = "config")]
    state: Option<PathBuf>,
    /// driftwatch.yaml: the state it names (a file, or PostgreSQL).
    #[arg(long, conflicts_with = "state")]
    config: Option<PathBuf>,
    /// With a sharded configuration (sharding.shards): the shard whose state to read.
    #[arg(long, requires = "config")]
    shard: Option<u32>,
}

impl StoreArgs {
    fn at(&self) -> (Option<&std::path::Path>, Option<&std::path::Path>, Option<u32>) {
        (self.state.as_deref(), self.config.as_deref(), self.shard)
    }
}

/// Where `break-glass` finds the cluster and the configuration.
#[derive(clap::Args)]
struct ClusterArgs {
    /// kubeconfig file (default: $KUBECONFIG or ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// kubeconfig context.
    #[arg(long)]
    context: Option<String>,
    /// driftwatch.yaml (the diff's `clusters:` and `argocd:`, break-glass's `breakGlass.maxFor`).
    #[arg(long, short)]
    config: Option<PathBuf>,
}

impl ClusterArgs {
    fn options(&self) -> cli::ClusterOptions<'_> {
        cli::ClusterOptions { kubeconfig: self.kubeconfig.as_deref(), context: self.context.as_deref(), config: self.config.as_deref() }
    }
}

#[derive(Subcommand)]
enum BreakGlassCommand {
    /// Open an exception: a ticket, a reason, how long. It changes nothing until a
    /// second, different person approves it.
    Open {
        /// `namespace/name` (`name` alone: in argocd).
        app: String,
        /// The incident ticket (`INC-1234`).
        #[arg(long)]
        ticket: String,
        #[arg(long)]
        reason: String,
        /// How long it lasts (at most `breakGlass.maxFor`, 72h by default).
        #[arg(long = "for", default_value = "24h")]
        duration: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Approve an open exception (not the person who opened it): it is in force from now.
    Approve {
        app: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Close the exception (the change is in Git, or undone).
    Close {
        app: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Show the exception on an Application.
    Show {
        app: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
}

#[derive(Subcommand)]
enum DeliveriesCommand {
    /// Put dead letters back in the outbox, due now with their attempts reset (the
    /// next start of the daemon delivers them). Run it while no driftwatch holds the
    /// state file.
    Retry {
        #[command(flatten)]
        store: StoreArgs,
        /// Dead letter ids (as `deliveries --failed` lists them).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<u64>,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
enum TriggerCommand {
    /// Evaluate a trigger on an Application file; one row per condition.
    Run {
        name: String,
        app_file: PathBuf,
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
    },
}

#[derive(Subcommand)]
enum RoutesCommand {
    /// Which destinations an Application's drift would reach, and why (which route
    /// matched, which subscription), as if driftwatch met it for the first time.
    Test {
        /// The Application (YAML or JSON).
        #[arg(long)]
        app: PathBuf,
        /// Live objects of its resources (with metadata.managedFields), for attribution;
        /// repeatable, multi-document files accepted.
        #[arg(long)]
        live: Vec<PathBuf>,
        /// Audit events (an EventList as the webhook receives it, or JSON lines as the
        /// audit log holds them): who changed or tried to change its objects; repeatable.
        #[arg(long)]
        audit: Vec<PathBuf>,
        /// The Application's AppProject, for project-level subscription annotations.
        #[arg(long)]
        project: Option<PathBuf>,
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
    },
}

#[derive(Subcommand)]
enum StateCommand {
    /// List the delivered-notification keys, per Application.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only Applications whose key (`namespace/name@uid`) starts with this.
        #[arg(long)]
        app: Option<String>,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
    },
}

#[derive(Subcommand)]
enum TemplateCommand {
    /// Render a template for an Application file, per recipient.
    Notify {
        name: String,
        app_file: PathBuf,
        /// SERVICE:RECIPIENT, e.g. slack:my-channel (default: console).
        #[arg(long = "recipient", short)]
        recipients: Vec<String>,
        #[arg(long, short)]
        config: Option<PathBuf>,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
        /// Also deliver it for real through the configured services.
        #[arg(long)]
        send: bool,
    },
}

fn init_tracing(default: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("DRIFTWATCH_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only on a terminal: a pod's log (not a terminal) stays plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
}

fn main() -> ExitCode {
    driftwatch::memory::configure();
    let args = Cli::parse();
    driftwatch::tls::init_crypto();
    // The daemon reports what it does; the one-shot commands only warn.
    init_tracing(if matches!(args.command, Command::Run(RunArgs { replay: None, .. })) { "info" } else { "warn" });
    // Unlocked handles: worker threads log to stderr and the console service prints to
    // stdout while a command runs; a lock held here for the whole run would block them.
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    match dispatch(args.command, &mut out, &mut err) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Runs the command; its exit code.
fn dispatch(command: Command, out: &mut dyn std::io::Write, err: &mut dyn std::io::Write) -> anyhow::Result<i32> {
    match command {
        Command::Check { config } => cli::check(config.as_deref(), out, err),
        Command::Trigger { command: TriggerCommand::Run { name, app_file, config, output } } => {
            cli::trigger_run(&name, &ToolArgs { config: config.as_deref(), app_file: &app_file, format: output }, out, err)
        }
        Command::Template { command: TemplateCommand::Notify { name, app_file, recipients, config, output, send } } => {
            let args = ToolArgs { config: config.as_deref(), app_file: &app_file, format: output };
            cli::template_notify(&name, &args, (&recipients, send), out, err)
        }
        Command::State { command: StateCommand::List { store, app, output } } => {
            cli::with_store(store.at(), None, err, |s, _| cli::state_list(s, app.as_deref(), output, out))
        }
        Command::Run(args) => run(args, out, err),
        Command::Routes { command: RoutesCommand::Test { app, live, audit, project, config, output } } => {
            let args = ToolArgs { config: config.as_deref(), app_file: &app, format: output };
            cli::explain_routes(&args, (&live, &audit), project.as_deref(), out, err)
        }
        Command::History { state, config, shard, app, since, until, class, limit, stats, timeline, output } => {
            cli::history::history_command(
                (state.as_deref(), config.as_deref(), shard),
                driftwatch::state::HistoryQuery { app, class, limit, ..Default::default() },
                (since, until),
                (output, stats, timeline),
                err,
            )
        }
        Command::Deliveries { command: Some(DeliveriesCommand::Retry { store, ids, all }), .. } => {
            cli::with_store(store.at(), None, err, |s, err| cli::retry_dead_letters(s, (!all).then_some(ids.as_slice()), out, err))
        }
        Command::Deliveries { command: None, state, config, shard, failed, output } => {
            cli::with_store((state.as_deref(), config.as_deref(), shard), None, err, |s, _| cli::deliveries(s, failed, output, out))
        }
        Command::BreakGlass { command } => break_glass(command, out, err),
        Command::Diff { app, cluster, output } => {
            cli::diff::diff_command(&cli::diff::DiffOptions { app: &app, cluster: cluster.options(), output }, out, err)
        }
        Command::Import { files, flux, out: dir, force, output } => cli::import(&files, &dir, force, flux, output, out, err),
    }
}

/// `driftwatch break-glass open|approve|close|show`: the flags as the command's options.
fn break_glass(command: BreakGlassCommand, out: &mut dyn std::io::Write, err: &mut dyn std::io::Write) -> anyhow::Result<i32> {
    let (app, cluster, action) = match command {
        BreakGlassCommand::Open { app, ticket, reason, duration, cluster } => match driftwatch::duration::parse(&duration) {
            Ok(d) if d > chrono::Duration::zero() => (app, cluster, cli::break_glass::Action::Open { ticket, reason, duration: d }),
            Ok(_) => {
                writeln!(err, "error: --for {duration}: must be positive")?;
                return Ok(driftwatch::exit::BAD_INPUT);
            }
            Err(e) => {
                writeln!(err, "error: --for {duration}: {e}")?;
                return Ok(driftwatch::exit::BAD_INPUT);
            }
        },
        BreakGlassCommand::Approve { app, cluster } => (app, cluster, cli::break_glass::Action::Approve),
        BreakGlassCommand::Close { app, cluster } => (app, cluster, cli::break_glass::Action::Close),
        BreakGlassCommand::Show { app, cluster } => (app, cluster, cli::break_glass::Action::Show),
    };
    cli::break_glass::command(&cli::break_glass::Options { app: &app, cluster: cluster.options(), action }, out, err)
}

/// `driftwatch run`: the daemon, or with --replay a replay of snapshot files.
fn run(args: RunArgs, out: &mut dyn std::io::Write, err: &mut dyn std::io::Write) -> anyhow::Result<i32> {
    let RunArgs { replay, config, state, jsonl, deliver, .. } = args;
    if let Some(path) = replay {
        let deliver = deliver.map(std::time::Duration::from_secs);
        return cli::run_replay(&ReplayOptions { path, config, state, jsonl, deliver }, out, err);
    }
    let lease = args.leader_election.then(|| driftwatch::cluster::lease::LeaseConfig {
        name: args.lease_name,
        namespace: args.lease_namespace.or_else(|| std::env::var("POD_NAMESPACE").ok()).unwrap_or_else(|| "argocd".into()),
        identity: format!("{}-{}", driftwatch::deliver::hostname(), std::process::id()),
        duration: std::time::Duration::from_secs(args.lease_duration.max(2)),
    });
    let opts = driftwatch::daemon::DaemonOptions {
        config,
        kubeconfig: args.kubeconfig,
        context: args.context,
        watch: driftwatch::cluster::watch::WatchOptions {
            namespaces: args.namespaces,
            selector: args.selector,
            project_namespaces: args.projects_namespaces,
            engines: Vec::new(),
        },
        state,
        listen: args.listen,
        resync: std::time::Duration::from_secs(args.resync.max(1)),
        shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace),
        lease,
    };
    let tokio_rt = tokio::runtime::Runtime::new()?;
    tokio_rt.block_on(driftwatch::daemon::run(opts, err))
}
