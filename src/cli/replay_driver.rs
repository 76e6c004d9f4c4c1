//! `driftwatch run --replay`: snapshot files fed through the real pipeline, the same
//! pass driver as the daemon's (`pipeline::pass::run`), on the snapshots' clock, with
//! every notification printed as it is submitted (`show.rs`).

use super::*;

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
    let s = |p: &str| app.object.pointer(p).and_then(Value::as_str).unwrap_or("-").to_string();
    let rev = s("/status/sync/revision");
    let rev = if rev.len() > 7 { rev[..7].to_string() } else { rev };
    format!(
        "{}  sync={} health={} operation={} revision={}",
        app.qualified_name(),
        s("/status/sync/status"),
        s("/status/health/status"),
        s("/status/operationState/phase"),
        rev
    )
}

/// When Argo CD produced this snapshot: `status.reconciledAt`, else `observedAt`.
fn observed_at(app: &App) -> Option<chrono::DateTime<Utc>> {
    ["/status/reconciledAt", "/status/observedAt"]
        .iter()
        .filter_map(|p| app.object.pointer(p).and_then(Value::as_str))
        .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .max()
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

/// `driftwatch run --replay PATH`: feeds snapshots through the real pipeline and prints
/// every notification it would send.
pub fn run_replay(opts: &ReplayOptions, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let Some(rt) = load(opts.config.as_deref(), err)? else {
        return Ok(FAILED);
    };
    let max_keys = rt.state.max_keys_per_app;
    let state = match &opts.state {
        Some(p) => StateStore::open(p)?,
        None => StateStore::in_memory()?,
    };
    let state = Arc::new(match max_keys {
        Some(n) => state.with_max_keys_per_app(n),
        None => state,
    });
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
    let clock = crate::deliver::queue::OutboxClock::manual(0);
    let preview = Arc::new(crate::pipeline::pass::Preview::default());
    let delivery = match opts.deliver {
        Some(_) => match crate::pipeline::wiring::service_clients(&rt, &state) {
            Ok(services) => crate::deliver::Delivery::start(services, state.clone()),
            Err(errors) => {
                for e in errors {
                    writeln!(err, "error: {e}")?;
                }
                return Ok(FAILED);
            }
        },
        None => crate::pipeline::pass::start_preview(&rt, state.clone(), clock.clone(), preview.clone()),
    };
    let pipeline = Pipeline::new(Arc::new(rt));
    let mut inputs = crate::pipeline::Inputs::default();
    let mut jsonl = match &opts.jsonl {
        Some(p) => Some(JsonLinesWriter::new(std::io::BufWriter::new(
            std::fs::OpenOptions::new().create(true).append(true).open(p).with_context(|| format!("opening {}", p.display()))?,
        ))),
        None => None,
    };
    let (mut unconfigured, mut malformed, mut apps) = (0, 0, 0);
    // The latest snapshot of each Application: whose ignoreDifferences a live object's diff honors.
    let mut seen: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    let mut now = chrono::DateTime::<Utc>::MIN_UTC;
    for step in &steps {
        let (app, deleted) = match &step.snapshot {
            Snapshot::Project(p) => {
                writeln!(out, "== {}  AppProject {}", step.label, p.name)?;
                inputs.project_seen(p.clone());
                continue;
            }
            Snapshot::Live(object) => {
                let (key, a) = crate::cluster::live::offline_attribution(&pipeline.runtime, object, seen.values());
                let who: Vec<String> = a
                    .managers
                    .iter()
                    .map(|m| format!("{}{}", m.manager, if m.security_fields.is_empty() { "" } else { " (security fields)" }))
                    .collect();
                let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
                let what = format!("{} {}/{}", s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
                let who = if who.is_empty() { "only Argo CD".to_string() } else { format!("changed by {}", who.join(", ")) };
                writeln!(out, "== {}  live object {what}: {who}", step.label)?;
                if let Some(d) = &a.diff {
                    for c in &d.changes {
                        let by = if c.manager.is_empty() { String::new() } else { format!(" ({})", c.manager) };
                        writeln!(out, "     {}: {} -> {}{by}", c.path, c.desired, c.live)?;
                    }
                    if d.more > 0 {
                        writeln!(out, "     and {} more", d.more)?;
                    }
                }
                inputs.live_read(key, Some(a), false);
                continue;
            }
            Snapshot::Malformed(reason) => {
                malformed += 1;
                writeln!(out, "== {}  skipped: {reason}", step.label)?;
                tracing::warn!(step = %step.label, %reason, "malformed object skipped");
                continue;
            }
            Snapshot::App(app) => (app.as_ref(), false),
            Snapshot::Deleted(app) => (app.as_ref(), true),
        };
        apps += 1;
        if !deleted {
            seen.insert(app.qualified_name(), app.object.clone());
        }
        writeln!(out, "== {}  {}{}", step.label, summarize_app(app), if deleted { " (deleted)" } else { "" })?;
        // A snapshot is what Argo CD reported when it last reconciled: replays run on
        // that clock (hold-downs and episode durations), never going backwards.
        now = observed_at(app).unwrap_or_else(Utc::now).max(now);
        clock.set(crate::state::to_millis(now));
        let pass = crate::pipeline::pass::run(&pipeline, &inputs, &state, &delivery, app, deleted, now)?;
        let eval = &pass.eval;
        for e in &eval.annotation_errors {
            writeln!(out, "  ! {e}")?;
        }
        if eval.stale {
            writeln!(out, "  (sync status is stale: skipped until Argo CD re-reconciles)")?;
            continue;
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
        let mut console = ConsoleWriter::new(&mut *out);
        for n in &eval.notifications {
            // A group member's notification is a join (or a leave); the group's message
            // is shown once, when it goes out (below).
            match &n.group {
                Some(g) => console.show_member(n, g)?,
                None => console.show(n)?,
            }
            if let Some(j) = jsonl.as_mut() {
                j.step = step.label.clone();
                j.show(n)?;
            }
        }
        unconfigured += pass.submitted.unconfigured;
        if opts.deliver.is_none() {
            // The next snapshot is evaluated on what this one's previews recorded. Only
            // what is due on the snapshot's clock can be: a group's message waiting for
            // its `wait` is due at a later snapshot (the clock stands still meanwhile).
            tokio_rt.block_on(delivery.settle(std::time::Duration::ZERO, std::time::Duration::from_secs(60)));
            for n in preview.take_sent_groups() {
                ConsoleWriter::new(&mut *out).show(&n)?;
            }
        }
    }
    if let Some(wait) = opts.deliver {
        writeln!(out, "\nreplayed {} step(s) ({apps} Application snapshot(s)); delivering (waiting at most {wait:?})", steps.len())?;
        out.flush()?;
        tokio_rt.block_on(delivery.settle(std::time::Duration::from_secs(3600), wait));
        tokio_rt.block_on(delivery.shutdown(std::time::Duration::from_secs(5)));
        let dead = state.dead_letters()?.len();
        let pending = state.outbox(None)?.len();
        writeln!(out, "deliveries: {pending} still pending, {dead} dead letter(s) in the store; see `driftwatch deliveries --state …`")?;
        return Ok(if dead > 0 || pending > 0 { FAILED } else { OK });
    }
    // Without a state file nothing would ever send the group messages still waiting for
    // their wait after the last snapshot: they go out now, as they would once it ended
    // (the snapshots' clock moved past it). With one, they stay queued for a later run.
    if opts.state.is_none() {
        clock.set(crate::state::to_millis(now.checked_add_signed(chrono::Duration::days(1)).unwrap_or(now)));
        tokio_rt.block_on(delivery.settle(std::time::Duration::ZERO, std::time::Duration::from_secs(60)));
        let sent = preview.take_sent_groups();
        if !sent.is_empty() {
            writeln!(out, "== after the last snapshot, when the groups' waits end")?;
        }
        let mut console = ConsoleWriter::new(&mut *out);
        for n in &sent {
            console.show(n)?;
        }
    }
    let (sent, dead) = delivery.totals();
    tokio_rt.block_on(delivery.shutdown(std::time::Duration::from_secs(5)));
    let failed = dead + unconfigured as u64;
    writeln!(
        out,
        "\nreplayed {} step(s) ({apps} Application snapshot(s)): {sent} notification(s) sent, {failed} failed, {malformed} malformed object(s) skipped",
        steps.len()
    )?;
    Ok(if failed > 0 { FAILED } else { OK })
}
