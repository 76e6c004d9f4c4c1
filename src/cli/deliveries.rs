//! `driftwatch deliveries`: undelivered notifications, dead letters and quarantined
//! entries; `deliveries retry` puts dead letters back in the outbox.

use super::{BAD_INPUT, FAILED, Format, OK, Store, Write, json};

/// `driftwatch deliveries retry (--state FILE | --config FILE) (ID... | --all)`: dead
/// letters back into the outbox. Exit 2 when an id names no dead letter, 1 when a
/// service's outbox is full.
pub fn retry_dead_letters(state: &Store, ids: Option<&[u64]>, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let r = state.outbox().requeue_dead(ids, crate::state::to_millis(chrono::Utc::now()))?;
    for (id, service) in &r.queued {
        writeln!(out, "#{id}: queued again for {service}")?;
    }
    for id in &r.in_flight {
        writeln!(out, "#{id}: already in flight again (decided anew); dead letter removed")?;
    }
    for id in &r.full {
        writeln!(err, "error: #{id}: its service's outbox is full; left in the dead letters")?;
    }
    for id in &r.missing {
        writeln!(err, "error: #{id}: no such dead letter")?;
    }
    let when = match state.engine() {
        // In PostgreSQL the running leader's workers take them at their next look.
        "postgres" => "the leading driftwatch delivers them",
        _ => "the next start of driftwatch on this state file delivers them",
    };
    writeln!(out, "{} queued again; {when}", r.queued.len())?;
    Ok(if !r.missing.is_empty() {
        BAD_INPUT
    } else if !r.full.is_empty() {
        FAILED
    } else {
        OK
    })
}

/// `driftwatch deliveries (--state FILE | --config FILE) [--failed]`: undelivered
/// notifications (the outbox), dead letters and quarantined entries.
pub fn deliveries(state: &Store, failed_only: bool, format: Format, out: &mut dyn Write) -> anyhow::Result<i32> {
    let dead = state.outbox().dead_letters()?;
    let quarantined = state.outbox().quarantined()?;
    let pending = if failed_only { Vec::new() } else { state.outbox().entries(None)? };
    let groups = if failed_only { Vec::new() } else { state.outbox().groups()? };
    let time = |ms: u64| crate::state::from_millis(ms).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // A group's entry is about the group, not the member whose pass queued it.
    let about = |n: &crate::model::Notification| match &n.group {
        Some(g) => format!("group {}", g.key),
        None => n.app.clone(),
    };
    let labels =
        |g: &crate::state::Group| g.notification.as_ref().and_then(|n| n.group.as_ref()).map(|r| r.labels.clone()).unwrap_or_default();
    match format {
        Format::Json => {
            let v = json!({
                "failed": dead.iter().map(|d| json!({"id": d.id, "failedAt": time(d.failed_ms), "attempts": d.attempts, "permanent": d.permanent,
                    "error": d.error, "app": d.notification.app, "trigger": d.notification.trigger, "destination": d.notification.destination,
                    "kind": d.notification.kind, "action": d.notification.action})).collect::<Vec<_>>(),
                "quarantined": quarantined.iter().map(|q| json!({"id": q.id, "at": time(q.at_ms), "service": q.service, "error": q.error,
                    "raw": q.raw})).collect::<Vec<_>>(),
                "pending": pending.iter().map(|p| json!({"id": p.id, "enqueuedAt": time(p.enqueued_ms), "nextAttemptAt": time(p.next_attempt_ms),
                    "attempts": p.attempts, "lastError": p.last_error, "app": p.notification.app, "trigger": p.notification.trigger,
                    "destination": p.notification.destination, "kind": p.notification.kind,
                    "group": p.notification.group.as_ref().map(|g| &g.key)})).collect::<Vec<_>>(),
                "groups": groups.iter().map(|g| json!({"key": g.key, "labels": labels(g), "openedAt": time(g.opened_ms),
                    "firing": g.firing, "resolved": g.resolved, "lastSentAt": g.last_sent_ms.map(time), "entry": g.entry,
                    "trigger": g.notification.as_ref().map(|n| &n.trigger),
                    "destination": g.notification.as_ref().map(|n| &n.destination)})).collect::<Vec<_>>(),
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => {
            writeln!(out, "FAILED ({})", dead.len())?;
            for d in &dead {
                let kind = if d.permanent { "permanent" } else { "gave up" };
                writeln!(
                    out,
                    "  #{} {} {} {} -> {} after {} attempt(s), {kind}: {}",
                    d.id,
                    time(d.failed_ms),
                    d.notification.app,
                    d.notification.trigger,
                    d.notification.destination,
                    d.attempts,
                    d.error
                )?;
            }
            if !quarantined.is_empty() {
                writeln!(out, "QUARANTINED ({}): outbox entries that could not be read", quarantined.len())?;
                for q in &quarantined {
                    writeln!(out, "  #{} {} {}: {}", q.id, time(q.at_ms), q.service, q.error)?;
                }
            }
            if !failed_only {
                writeln!(out, "PENDING ({})", pending.len())?;
                for p in &pending {
                    writeln!(
                        out,
                        "  #{} {} {} -> {} attempts {} next {}{}",
                        p.id,
                        about(&p.notification),
                        p.notification.trigger,
                        p.notification.destination,
                        p.attempts,
                        time(p.next_attempt_ms),
                        p.last_error.as_deref().map(|e| format!(" last error: {e}")).unwrap_or_default()
                    )?;
                }
                if !groups.is_empty() {
                    writeln!(out, "GROUPS ({})", groups.len())?;
                }
                for g in &groups {
                    let by: Vec<String> = labels(g).iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let (trigger, destination) =
                        g.notification.as_ref().map(|n| (n.trigger.clone(), n.destination.to_string())).unwrap_or_default();
                    let sent = g.last_sent_ms.map_or("not sent yet".to_string(), |at| format!("last sent {}", time(at)));
                    writeln!(
                        out,
                        "  {} {trigger} -> {destination} ({}): {} of {} firing, opened {}, {sent}{}",
                        g.key,
                        by.join(", "),
                        g.firing,
                        g.firing + g.resolved,
                        time(g.opened_ms),
                        g.entry.map(|id| format!(", message #{id} pending")).unwrap_or_default()
                    )?;
                }
            }
        }
    }
    Ok(OK)
}
