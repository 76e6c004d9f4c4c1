//! `driftwatch run --replay`: shows what the replay driver (`daemon::replay`, beside
//! the daemon's) does with each snapshot file, every notification as it is submitted
//! (`show.rs`).

use crate::daemon::replay::{Replay, Stepped};
use anyhow::Context;

use super::{
    App, Arc, BAD_INPUT, ConsoleWriter, FAILED, JsonLinesWriter, OK, PathBuf, Skip, Snapshot, Store, Utc, Value, Write, load, replay,
};

/// Options of `driftwatch run --replay`.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    pub path: PathBuf,
    pub config: Option<PathBuf>,
    /// Persist notification state here (default: in memory, so every replay starts
    /// from nothing).
    pub state: Option<PathBuf>,
    /// Also append every notification as a JSON line here.
    pub jsonl: Option<PathBuf>,
    /// Deliver through the configured services for real, waiting at most this long at
    /// the end for the outbox to drain (what is left is delivered by the next run with
    /// the same `--state`).
    pub deliver: Option<std::time::Duration>,
}

fn summarize_app(app: &App) -> String {
    let or_dash = |s: &str| if s.is_empty() { "-".to_string() } else { s.to_string() };
    let u = &app.unit;
    let operation = match app.engine() {
        crate::unit::Engine::ArgoCd => app.object.pointer("/status/operationState/phase").and_then(Value::as_str).unwrap_or_default(),
        _ if u.reconcile.failed => u.reconcile.reason.as_str(),
        _ => "",
    };
    let rev = if u.revision.commit.is_empty() { &u.revision.desired } else { &u.revision.commit };
    format!(
        "{}  sync={} health={} operation={} revision={}",
        app.qualified_name(),
        or_dash(app.sync_status()),
        or_dash(app.health_status()),
        or_dash(operation),
        or_dash(&rev.chars().take(7).collect::<String>())
    )
}

/// One line about an episode for replay and `routes test` output.
fn episode_line(ep: &crate::drift::episode::Episode, now: chrono::DateTime<Utc>) -> String {
    let classes: Vec<&str> = ep.classes.iter().map(String::as_str).collect();
    let after = match ep.resolved_at {
        Some(_) => format!(" after {}", crate::duration::human_duration(ep.duration_secs(now))),
        None => String::new(),
    };
    format!("{} severity={} direction={} classes=[{}]{after}", ep.id, ep.severity.as_str(), ep.direction, classes.join(","))
}

/// The JSON lines file of `--jsonl`, appended to.
type JsonLines = JsonLinesWriter<std::io::BufWriter<std::fs::File>>;

/// `driftwatch run --replay PATH`: feeds snapshots through the real pipeline and prints
/// every notification it would send.
pub fn run_replay(opts: &ReplayOptions, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let Some(rt) = load(opts.config.as_deref(), err)? else {
        return Ok(FAILED);
    };
    let state = replay_store(opts, rt.state.max_keys_per_app)?;
    let steps = match replay::read_replay(&opts.path) {
        Ok(s) => s,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            return Ok(BAD_INPUT);
        }
    };
    // Every notification goes through the outbox, whose workers deliver and record:
    // through the configured services with `--deliver` (starting on whatever a
    // previous run left), else through previews that take everything, on the
    // snapshots' clock. Either way what is shown is shown as it is submitted.
    let tokio_rt = tokio::runtime::Runtime::new()?;
    let _entered = tokio_rt.enter();
    let mut replay = match Replay::start(rt, state.clone(), opts.deliver.is_some()) {
        Ok(r) => r,
        Err(errors) => {
            for e in errors {
                writeln!(err, "error: {e}")?;
            }
            return Ok(FAILED);
        }
    };
    let mut jsonl = match &opts.jsonl {
        Some(p) => Some(JsonLinesWriter::new(std::io::BufWriter::new(
            std::fs::OpenOptions::new().create(true).append(true).open(p).with_context(|| format!("opening {}", p.display()))?,
        ))),
        None => None,
    };
    let (mut malformed, mut apps) = (0, 0);
    for step in &steps {
        match tokio_rt.block_on(replay.step(step))? {
            Stepped::Project(name) => writeln!(out, "== {}  AppProject {name}", step.label)?,
            Stepped::Live(a) => show_live(out, &step.label, &step.snapshot, &a)?,
            Stepped::Malformed(reason) => {
                malformed += 1;
                writeln!(out, "== {}  skipped: {reason}", step.label)?;
            }
            Stepped::Pass { now, pass, groups_sent } => {
                let (app, deleted) = match &step.snapshot {
                    Snapshot::Deleted(app) => (app, true),
                    Snapshot::App(app) => (app, false),
                    _ => continue,
                };
                apps += 1;
                writeln!(out, "== {}  {}{}", step.label, summarize_app(app), if deleted { " (deleted)" } else { "" })?;
                show_pass(out, &pass.eval, now)?;
                show_notifications(out, &step.label, (&pass.eval.notifications, &groups_sent), jsonl.as_mut())?;
            }
        }
    }
    let replayed = format!("replayed {} step(s) ({apps} Application snapshot(s))", steps.len());
    match opts.deliver {
        Some(wait) => deliver_the_rest(&tokio_rt, replay, &state, (wait, &replayed), out),
        None => {
            let (sent, failed) = end(&tokio_rt, replay, opts.state.is_none(), out)?;
            writeln!(out, "\n{replayed}: {sent} notification(s) sent, {failed} failed, {malformed} malformed object(s) skipped")?;
            Ok(if failed > 0 { FAILED } else { OK })
        }
    }
}

/// The store a replay keeps its state in: `--state`, else one in memory.
fn replay_store(opts: &ReplayOptions, max_keys: Option<usize>) -> anyhow::Result<Arc<Store>> {
    let state = match &opts.state {
        Some(p) => Store::open(p)?,
        None => Store::in_memory()?,
    };
    Ok(Arc::new(match max_keys {
        Some(n) => state.with_max_keys_per_app(n),
        None => state,
    }))
}

/// A pass's notifications as they are submitted (and to `--jsonl`), then the group
/// messages that went out after it.
fn show_notifications(
    out: &mut dyn Write,
    label: &str,
    (submitted, groups_sent): (&[crate::model::Notification], &[crate::model::Notification]),
    mut jsonl: Option<&mut JsonLines>,
) -> anyhow::Result<()> {
    let mut console = ConsoleWriter::new(&mut *out);
    for n in submitted {
        // A group member's notification is a join (or a leave); the group's
        // message is shown once, when it goes out.
        match &n.group {
            Some(g) => console.show_member(n, g)?,
            None => console.show(n)?,
        }
        if let Some(j) = jsonl.as_mut() {
            j.step = label.to_string();
            j.show(n)?;
        }
    }
    for n in groups_sent {
        console.show(n)?;
    }
    Ok(())
}

/// `--deliver`: waits (at most `wait`) for the outbox to drain, and says what is left.
fn deliver_the_rest(
    tokio_rt: &tokio::runtime::Runtime,
    replay: Replay,
    state: &Store,
    (wait, replayed): (std::time::Duration, &str),
    out: &mut dyn Write,
) -> anyhow::Result<i32> {
    writeln!(out, "\n{replayed}; delivering (waiting at most {wait:?})")?;
    out.flush()?;
    tokio_rt.block_on(replay.drain(wait));
    tokio_rt.block_on(replay.shutdown());
    let dead = state.outbox().dead_letters()?.len();
    let pending = state.outbox().entries(None)?.len();
    writeln!(out, "deliveries: {pending} still pending, {dead} dead letter(s) in the store; see `driftwatch deliveries --state …`")?;
    Ok(if dead > 0 || pending > 0 { FAILED } else { OK })
}

/// Without `--deliver`: the group messages still waiting sent (`end_groups`: without a
/// state file, as nothing would ever send them; with one they stay queued for a later
/// run), then the previews stopped. Returns how many were sent and how many failed.
fn end(tokio_rt: &tokio::runtime::Runtime, mut replay: Replay, end_groups: bool, out: &mut dyn Write) -> anyhow::Result<(u64, u64)> {
    if end_groups {
        let sent = tokio_rt.block_on(replay.end_groups());
        if !sent.is_empty() {
            writeln!(out, "== after the last snapshot, when the groups' waits end")?;
        }
        let mut console = ConsoleWriter::new(&mut *out);
        for n in &sent {
            console.show(n)?;
        }
    }
    let unconfigured = replay.unconfigured;
    let (sent, dead) = tokio_rt.block_on(replay.shutdown());
    Ok((sent, dead + unconfigured as u64))
}

/// A live object's step: who changed it, and its diff.
fn show_live(out: &mut dyn Write, label: &str, snapshot: &Snapshot, a: &crate::drift::attribution::Attribution) -> std::io::Result<()> {
    let Snapshot::Live(object) = snapshot else { return Ok(()) };
    let who: Vec<String> = a
        .managers
        .iter()
        .map(|m| format!("{}{}", m.manager, if m.security_fields.is_empty() { "" } else { " (security fields)" }))
        .collect();
    let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let what = format!("{} {}/{}", s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
    let who = if who.is_empty() { "only Argo CD".to_string() } else { format!("changed by {}", who.join(", ")) };
    writeln!(out, "== {label}  live object {what}: {who}")?;
    if let Some(d) = &a.diff {
        for c in &d.changes {
            let by = if c.manager.is_empty() { String::new() } else { format!(" ({})", c.manager) };
            writeln!(out, "     {}: {} -> {}{by}", c.path, c.desired, c.live)?;
        }
        if d.more > 0 {
            writeln!(out, "     and {} more", d.more)?;
        }
    }
    Ok(())
}

/// What a pass decided besides its notifications: annotation errors, the episode, the
/// break-glass exception, the skips.
fn show_pass(out: &mut dyn Write, eval: &crate::pipeline::Evaluation, now: chrono::DateTime<Utc>) -> std::io::Result<()> {
    for e in &eval.annotation_errors {
        writeln!(out, "  ! {e}")?;
    }
    if eval.stale {
        return writeln!(out, "  (sync status is stale: skipped until Argo CD re-reconciles)");
    }
    if let (Some(ep), Some(event)) = (&eval.episode, eval.episode_event) {
        writeln!(out, "  episode {}: {}", event.as_str(), episode_line(ep, now))?;
    }
    if let Some(b) = eval.break_glass.as_ref().map(|r| &r.break_glass) {
        match b.state {
            crate::drift::break_glass::State::Refused => writeln!(out, "  break-glass {}: refused: {}", b.ticket, b.refusal)?,
            state => {
                let force = if b.effective {
                    ", in force"
                } else if b.overdue {
                    ", overdue"
                } else {
                    ""
                };
                writeln!(out, "  break-glass {}: {} ({}{force})", b.ticket, state.as_str(), b.verification.as_str())?
            }
        }
    }
    for s in &eval.skipped {
        match s {
            Skip::AlreadyNotified { .. } => {}
            Skip::HeldDown { .. } | Skip::BreakGlass { .. } => writeln!(out, "  ({s})")?,
            other => writeln!(out, "  ! {other}")?,
        }
    }
    if eval.notifications.is_empty() {
        writeln!(out, "  (no new notifications)")?;
    }
    Ok(())
}
