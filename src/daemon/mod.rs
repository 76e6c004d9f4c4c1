//! `driftwatch run` against a live cluster: watches Applications and AppProjects,
//! evaluates an Application when it changes (and on a schedule only when a trigger
//! reads the clock), hands notifications to the delivery workers, reloads the
//! configuration on SIGHUP or when its files change, serves the operations endpoints,
//! and stops cleanly on SIGTERM.
//!
//! Two halves: the asynchronous shell (`start`'s steps and the
//! `supervisor::Supervisor`: the watch streams, leader election, signals, timers,
//! the operations server), which only forwards what happens as `eval_thread::Input`s;
//! and `eval_thread`, which owns everything that evaluates and writes the state
//! store, on a thread of its own, so a pass (rhai, handlebars, redb) never runs on a
//! tokio worker, and decoding the watch overlaps with evaluating.

pub mod admin;
mod eval_thread;
mod fingerprint;
pub mod replay;
mod start;
mod supervisor;
mod wakeups;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::watch::WatchOptions;

pub use self::admin::SharedState;

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

/// Runs until SIGTERM or SIGINT. Returns the exit code; what stopped the start-up is
/// written to `err`. The steps, each a function of `start.rs` called in this order by
/// `start_and_serve`: `configuration` (and every delivery client), `cluster` (the API
/// client), `store_location`, `operations_endpoints`, `leadership`, `audit_input`,
/// `evaluation` (the evaluation threads under a `Supervisor`), `serve` (the watches,
/// signals and timers, until a signal) and `shutdown`.
pub async fn run(opts: DaemonOptions, err: &mut dyn std::io::Write) -> anyhow::Result<i32> {
    match start::start_and_serve(opts).await {
        Ok(start::Ended::Stopped) => Ok(crate::exit::OK),
        Ok(start::Ended::Fenced) => {
            writeln!(
                err,
                "error: another driftwatch took the state store in PostgreSQL over; run one daemon per state schema, or several with --leader-election"
            )?;
            Ok(crate::exit::FAILED)
        }
        Err(start::StartError::Refused(lines)) => {
            for line in lines {
                writeln!(err, "{line}")?;
            }
            Ok(crate::exit::FAILED)
        }
        Err(start::StartError::Failed(e)) => Err(e),
    }
}
