//! The commands behind the `driftwatch` binary. Each writes to the given output and
//! returns the process exit code, so tests call them directly.

pub mod break_glass;
mod check;
mod deliveries;
pub mod diff;
pub mod history;
mod import;
mod routes;
mod run_replay;
mod show;
mod state_list;
mod try_out;

pub use check::check;
pub use deliveries::{deliveries, retry_dead_letters};
pub use import::import;
pub use routes::explain_routes;
pub use run_replay::{ReplayOptions, run_replay};
pub use state_list::state_list;
pub use try_out::{template_notify, trigger_run};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};

use crate::config::{self, Runtime};
use crate::drift::Drift;
use crate::drift::episode::Episode;
use crate::model::{Action, App, AppMeta, Destination, DestinationKind, Notification};
use crate::pipeline::Skip;
use crate::replay::{self, Snapshot};
use crate::source::ConfigError;
use crate::state::Store;
use crate::template::{RenderContext, Target};
use show::{ConsoleWriter, JsonLinesWriter};

pub use crate::exit::{BAD_INPUT, FAILED, NEEDS_HAND, OK};

/// Output format of `trigger run` and `template notify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

fn print_errors(err: &mut dyn Write, errors: &[ConfigError]) -> std::io::Result<()> {
    for e in errors {
        writeln!(err, "error: {e}")?;
    }
    Ok(())
}

/// Loads the configuration or prints every error.
fn load(config: Option<&Path>, err: &mut dyn Write) -> anyhow::Result<Option<Runtime>> {
    match config::load(config) {
        Ok(rt) => Ok(Some(rt)),
        Err(errors) => {
            print_errors(err, &errors)?;
            writeln!(err, "{} configuration error(s)", errors.len())?;
            Ok(None)
        }
    }
}

/// Rich Applications every template is rendered against by `check`, so a JSON field
/// that cannot render to JSON is found before a real notification needs it.
const CHECK_SAMPLES: &[&str] = &[include_str!("check_sample_single_source.json"), include_str!("check_sample_multi_source.json")];

/// Reports a trigger or template name that does not exist, with the known ones.
fn unknown<'a>(err: &mut dyn Write, what: &str, name: &str, known: impl Iterator<Item = &'a str>) -> anyhow::Result<i32> {
    writeln!(err, "error: {what} {name:?} does not exist (known: {})", known.collect::<Vec<_>>().join(", "))?;
    Ok(BAD_INPUT)
}

/// Reads the one Application a command works on, or reports why it cannot.
fn read_app(path: &Path, err: &mut dyn Write) -> anyhow::Result<Option<App>> {
    match replay::read_app(path) {
        Ok(a) => Ok(Some(a)),
        Err(e) => {
            writeln!(err, "error: {e}")?;
            Ok(None)
        }
    }
}

/// The inputs of a command that tries the configuration on one Application file:
/// `trigger run`, `template notify` and `routes test`.
#[derive(Debug, Clone, Copy)]
pub struct ToolArgs<'a> {
    /// `--config` (the built-in catalog alone when absent).
    pub config: Option<&'a Path>,
    /// The Application (YAML or JSON).
    pub app_file: &'a Path,
    pub format: Format,
}

/// What a tool names in the configuration, checked before the Application is read.
#[derive(Debug, Clone, Copy)]
enum Named<'a> {
    Trigger(&'a str),
    Template(&'a str),
    Nothing,
}

/// What a tool starts from: the configuration loaded, and the Application read.
struct Tool {
    rt: Runtime,
    app: App,
}

impl Tool {
    /// Loads the configuration, checks that what the command names in it exists, then
    /// reads the Application. `Err` carries the exit code once the error is written:
    /// [`FAILED`] for a configuration that does not load, [`BAD_INPUT`] for an unknown
    /// name or an Application file that cannot be read.
    fn load(args: &ToolArgs<'_>, named: Named<'_>, err: &mut dyn Write) -> anyhow::Result<Result<Tool, i32>> {
        let Some(rt) = load(args.config, err)? else { return Ok(Err(FAILED)) };
        match named {
            Named::Trigger(name) if !rt.triggers.contains_key(name) => {
                return unknown(err, "trigger", name, rt.triggers.keys().map(String::as_str)).map(Err);
            }
            Named::Template(name) if !rt.templates.contains(name) => {
                return unknown(err, "template", name, rt.templates.names()).map(Err);
            }
            _ => {}
        }
        let Some(app) = read_app(args.app_file, err)? else { return Ok(Err(BAD_INPUT)) };
        Ok(Ok(Tool { rt, app }))
    }
}

/// Where a command that reads the cluster connects, with the operator's credentials:
/// `--kubeconfig`, `--context`, and the configuration it reads (`--config`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterOptions<'a> {
    pub kubeconfig: Option<&'a Path>,
    pub context: Option<&'a str>,
    pub config: Option<&'a Path>,
}

/// Runs `command` on the store a command-line tool reads or changes: the state file
/// `--state` names, or the one the configuration (`--config`) names — a file, or
/// PostgreSQL (`state.postgres`), opened beside a running daemon without taking it
/// over; with sharding, the schema of the shard `--shard` names — else `default`
/// (`history`'s `driftwatch-state.redb`). A store that cannot be opened is an error
/// written to `err` and its exit code.
pub fn with_store(
    (state, config, shard): (Option<&Path>, Option<&Path>, Option<u32>),
    default: Option<&Path>,
    err: &mut dyn Write,
    command: impl FnOnce(&Store, &mut dyn Write) -> anyhow::Result<i32>,
) -> anyhow::Result<i32> {
    match open_tool_store(state, (config, shard), default, err)? {
        Ok(store) => command(&store, err),
        Err(code) => Ok(code),
    }
}

/// [`with_store`]'s opening; `Err` carries the exit code after the error was written.
fn open_tool_store(
    state: Option<&Path>,
    (config, shard): (Option<&Path>, Option<u32>),
    default: Option<&Path>,
    err: &mut dyn Write,
) -> anyhow::Result<Result<Store, i32>> {
    let named = match (state, config) {
        (Some(p), _) => Some(p.to_path_buf()),
        (None, Some(c)) => match config::load(Some(c)) {
            Ok(rt) => match (&rt.state.postgres, &rt.state.path) {
                (Some(pg), _) => {
                    let pg = match (rt.shards, shard) {
                        (1, None) => pg.clone(),
                        (n, Some(s)) if n > 1 && s < n => pg.for_shard(s),
                        (1, Some(s)) => {
                            writeln!(err, "error: --shard {s}: the configuration has no shards (sharding.shards)")?;
                            return Ok(Err(BAD_INPUT));
                        }
                        (n, s) => {
                            let given = s.map_or_else(|| "no --shard".to_string(), |s| format!("--shard {s}"));
                            writeln!(
                                err,
                                "error: {given}: the state is in {n} shards (sharding.shards), each in a schema of its own: give --shard 0 to {}",
                                n - 1
                            )?;
                            return Ok(Err(BAD_INPUT));
                        }
                    };
                    return match Store::open_postgres(&pg, &crate::state::Role::Tool) {
                        Ok(s) => Ok(Ok(s)),
                        Err(e) => {
                            writeln!(err, "error: {e}")?;
                            Ok(Err(FAILED))
                        }
                    };
                }
                (None, path) => path.clone(),
            },
            Err(errors) => {
                for e in &errors {
                    writeln!(err, "error: {e}")?;
                }
                return Ok(Err(FAILED));
            }
        },
        (None, None) => None,
    };
    let Some(path) = named.or_else(|| default.map(Path::to_path_buf)) else {
        writeln!(err, "error: needs --state FILE, or --config naming the state (state.path or state.postgres)")?;
        return Ok(Err(BAD_INPUT));
    };
    if !path.exists() {
        writeln!(err, "error: {}: no such state file", path.display())?;
        return Ok(Err(BAD_INPUT));
    }
    match Store::open(&path) {
        Ok(s) => Ok(Ok(s)),
        Err(e) => {
            let held = matches!(e, crate::state::StateError::Locked { .. });
            writeln!(err, "error: {e}")?;
            if held {
                writeln!(err, "(a running driftwatch holds the file; its /history endpoint and web view (/ui) answer meanwhile)")?;
            }
            Ok(Err(FAILED))
        }
    }
}
