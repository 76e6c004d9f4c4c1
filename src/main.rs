//! The `driftwatch` command line: flags and telemetry only; the commands live in
//! `driftwatch::cli`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use driftwatch::cli::{self, Format, ReplayOptions};

#[derive(Parser)]
#[command(name = "driftwatch", version, about = "Watches Argo CD Applications for drift and routes notifications")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

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
    /// Run the pipeline. With --replay, on a sequence of Application snapshots.
    Run {
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
    },
    /// List undelivered notifications and dead letters.
    Deliveries {
        #[arg(long)]
        state: PathBuf,
        /// Only what finally failed.
        #[arg(long)]
        failed: bool,
        #[arg(long, short = 'o', value_enum, default_value = "text")]
        output: Format,
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
enum StateCommand {
    /// List the delivered-notification keys, per Application.
    List {
        #[arg(long)]
        state: PathBuf,
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

fn init_tracing() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("DRIFTWATCH_LOG").unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

fn main() -> ExitCode {
    let args = Cli::parse();
    driftwatch::deliver::http::init_crypto();
    init_tracing();
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    let result = match args.command {
        Command::Check { config } => cli::check(config.as_deref(), &mut out, &mut err),
        Command::Trigger { command: TriggerCommand::Run { name, app_file, config, output } } => {
            cli::trigger_run(&name, &app_file, config.as_deref(), output, &mut out, &mut err)
        }
        Command::Template { command: TemplateCommand::Notify { name, app_file, recipients, config, output, send } } => {
            cli::template_notify(&name, &app_file, &recipients, config.as_deref(), output, send, &mut out, &mut err)
        }
        Command::State { command: StateCommand::List { state, app, output } } => {
            cli::state_list(&state, app.as_deref(), output, &mut out, &mut err)
        }
        Command::Run { replay: Some(path), config, state, jsonl, deliver } => {
            let deliver = deliver.map(std::time::Duration::from_secs);
            cli::run_replay(&ReplayOptions { path, config, state, jsonl, deliver }, &mut out, &mut err)
        }
        Command::Deliveries { state, failed, output } => cli::deliveries(&state, failed, output, &mut out, &mut err),
        Command::Run { replay: None, .. } => {
            use std::io::Write;
            let _ = writeln!(err, "error: watching a live cluster is not available in this build; run with --replay PATH (see README)");
            Ok(cli::BAD_INPUT)
        }
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(1)
        }
    }
}
