//! Judging an exception: which writes opened and approved it (through the audit
//! input), whether it is in force, active, expired, closed or overdue, and the
//! transitions since the stored copy ([`evaluate`], [`with_transitions`]).

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    ANNOTATION, BreakGlass, Exception, MAX_EVENTS, Settings, State, Stored, Transition, USER_AGENT, Verification, Write, fill, fnv, millis,
    parse, people, refused,
};
use crate::json::Pointer;

/// The exception a write left (`None`: removed, or not an exception).
fn left(w: &Write) -> Option<Exception> {
    w.value.as_deref().and_then(|v| serde_json::from_str::<Exception>(v).ok())
}

/// The first write (oldest) whose value is an exception for which `is` holds.
fn first_write(writes: &[Write], is: impl Fn(&Exception) -> bool) -> Option<&Write> {
    writes.iter().filter(|w| left(w).is_some_and(|e| is(&e))).min_by_key(|w| w.time)
}

/// Checks a write against the person the exception names: their identity, through
/// driftwatch. `Err` is the refusal.
fn check_write(w: &Write, who: &str, what: &str) -> Result<(), String> {
    if w.username != who {
        return Err(format!("forged: the audit log shows {} wrote the {what} that names {who} (audit ID {})", w.username, w.audit_id));
    }
    if !w.user_agent.starts_with(USER_AGENT) {
        return Err(format!(
            "the {what} was written by hand (user agent {:?}, audit ID {}), not with `driftwatch break-glass`",
            w.user_agent, w.audit_id
        ));
    }
    Ok(())
}

/// Why the store says exception `e` (whose id is `id`) may not be judged again: it was
/// closed or refused, it ended (left the annotation), or a later one opened.
fn ended(e: &Exception, id: &str, stored: &Stored<'_>) -> Option<String> {
    match stored.by_id(id) {
        Some(b) if b.state == State::Closed => {
            return Some(format!("break-glass {} was closed; a closed exception does not reopen (open a new one)", e.ticket));
        }
        // A refusal stands, whatever is written over it.
        Some(b) if b.state == State::Refused => return Some(b.refusal.clone()),
        _ => {}
    }
    let n = stored.newest()?;
    let (ms, hash) = (millis(e.opened_at), fnv(id));
    if ms == n.opened_ms && hash == n.id_hash {
        return n.ended.then(|| {
            format!("break-glass {} ended (closed, replaced or refused); a closed exception does not reopen (open a new one)", e.ticket)
        });
    }
    (ms <= n.opened_ms).then(|| {
        let at = DateTime::<Utc>::from_timestamp_millis(i64::try_from(n.opened_ms).unwrap_or(i64::MAX))
            .map(|t| t.to_rfc3339())
            .unwrap_or_default();
        format!("opened before the latest exception (opened at {at}): an old exception does not come back")
    })
}

/// The audit log's verdict on exception `e`, as the Application holds it now: the write
/// that left exactly this value (the newest write of the annotation) must be by the
/// person it names last (the approver, or the opener while unapproved), through
/// driftwatch; an approved one must also have been opened by its opener (the first
/// write of it unapproved), the two being two people. `verified`: the stored judgement
/// of exactly this value, verified (it stands when a restart emptied the window);
/// `pending`: the stored judgement of this exception while it was unapproved.
fn audited(
    e: &Exception,
    writes: &[Write],
    verified: Option<&BreakGlass>,
    pending: Option<&BreakGlass>,
    s: &Settings,
) -> Result<(Verification, Vec<String>), String> {
    let Some(last) = writes.iter().max_by_key(|w| w.time) else {
        return Ok(verified.map_or((Verification::Unverified, Vec::new()), |b| (Verification::Verified, b.audit_ids.clone())));
    };
    if left(last).as_ref() != Some(e) {
        // The newest write the audit log shows left another value: the write that left
        // this one is not shown yet (or was never made through the API server).
        return Ok((Verification::Unverified, Vec::new()));
    }
    if e.approved_by.is_empty() {
        check_write(last, &e.opened_by, "opening")?;
        if let Some(why) = people::machine(last, s) {
            return Err(format!("opened by {why}"));
        }
        return Ok((Verification::Verified, vec![last.audit_id.clone()]));
    }
    check_write(last, &e.approved_by, "approval")?;
    let unapproved = Exception { approved_by: String::new(), approved_at: None, ..e.clone() };
    let seen = first_write(writes, |x| *x == unapproved).cloned();
    // The opening verified before a restart emptied the window: its opener as the
    // annotation names them (no UID to compare; names and groups still are).
    let remembered = || {
        pending.filter(|b| b.verification == Verification::Verified && b.holds(&unapproved)).map(|b| Write {
            username: e.opened_by.clone(),
            user_agent: USER_AGENT.into(),
            audit_id: b.audit_ids.first().cloned().unwrap_or_default(),
            ..Write::default()
        })
    };
    let Some(opening) = seen.or_else(remembered) else { return Ok((Verification::Unverified, Vec::new())) };
    check_write(&opening, &e.opened_by, "opening")?;
    people::two_people(&opening, last, s)?;
    let mut ids = vec![opening.audit_id.clone(), last.audit_id.clone()];
    ids.dedup();
    Ok((Verification::Verified, ids))
}

/// Judges the Application's exception at `now`: from its annotation, what the store
/// holds of its exceptions (`stored`: a verdict stands, so a restart that emptied the
/// audit window does not undo it; a closed or ended exception never comes back) and
/// the audit input's writes of the annotation. `off_git`: the Application is not
/// Synced. `None`: no exception, and none to close.
pub fn evaluate(app: &Value, stored: Stored<'_>, writes: &[Write], s: &Settings, off_git: bool, now: DateTime<Utc>) -> Option<BreakGlass> {
    let annotation = app.at("/metadata/annotations").and_then(|a| a.get(ANNOTATION)).and_then(Value::as_str);
    let Some(value) = annotation else {
        // Removed: the exception it was is closed (once).
        return stored.latest.filter(|b| b.state != State::Closed).map(|b| BreakGlass {
            state: State::Closed,
            effective: false,
            overdue: false,
            ..b.clone()
        });
    };
    let e = match parse(value, s, now) {
        Err(why) => {
            // A value that is not an exception at all has no id of its own.
            let readable = serde_json::from_str::<Exception>(value).ok();
            let id = readable.as_ref().map_or_else(|| format!("refused@{:x}", fnv(value)), Exception::id);
            let mut b = refused(id, why.0);
            if let Some(e) = &readable {
                fill(&mut b, e);
            }
            return Some(b);
        }
        Ok(e) => e,
    };
    let mut out = BreakGlass { id: e.id(), ..BreakGlass::default() };
    fill(&mut out, &e);
    let approved = !e.approved_by.is_empty();
    if let Some(why) = ended(&e, &out.id, &stored) {
        out.state = State::Refused;
        out.refusal = why;
        return Some(out);
    }
    // The stored judgement of this same exception stands: a refusal whatever the audit
    // setting, a verification only for exactly the value verified (any other value,
    // an edited expiry or opener, is judged again from the writes).
    let this = stored.by_id(&out.id);
    let same = this.filter(|b| b.approved_by == out.approved_by && b.approved_at == out.approved_at);
    let verdict = if let Some(b) = same.filter(|b| b.state == State::Refused) {
        Err(b.refusal.clone())
    } else if !s.audited {
        Ok((Verification::Unverifiable, Vec::new()))
    } else {
        let verified = same.filter(|b| b.verification == Verification::Verified && b.holds(&e));
        audited(&e, writes, verified, this.filter(|b| b.approved_by.is_empty()), s)
    };
    match verdict {
        Err(why) => {
            out.state = State::Refused;
            out.refusal = why;
            out.verification = Verification::Unverified;
        }
        Ok((v, ids)) => {
            out.verification = v;
            out.audit_ids = ids;
            out.state = match (approved, now < e.expires_at) {
                (_, false) => State::Expired,
                (true, true) => State::Active,
                (false, true) => State::Pending,
            };
            let trusted = v == Verification::Verified || (v == Verification::Unverifiable && !s.require_verified);
            out.effective = out.state == State::Active && trusted;
            out.overdue = out.state == State::Expired && approved && trusted && off_git;
        }
    }
    Some(out)
}

/// The transitions from `before` (the stored copy, if the same exception) to `now`'s
/// judgement, appended to its history (bounded).
pub fn with_transitions(mut current: BreakGlass, before: Option<&BreakGlass>, now: DateTime<Utc>) -> BreakGlass {
    let prior = before.filter(|b| b.id == current.id);
    current.events = prior.map(|b| b.events.clone()).unwrap_or_default();
    let was = prior.map(|b| (b.state, b.verification, b.approved_by.as_str(), b.overdue));
    // Opened and approved when they say (bounded by now: a claim from the future is
    // refused anyway); the rest when the daemon saw them.
    let (opened_at, approved_at) = (current.opened_at.map_or(now, |t| t.min(now)), current.approved_at.map_or(now, |t| t.min(now)));
    let mut push = |at: DateTime<Utc>, event: &str, by: &str, detail: String| {
        current.events.push(Transition { at, event: event.into(), by: by.into(), detail });
    };
    if prior.is_none() {
        push(opened_at, "opened", &current.opened_by.clone(), current.reason.clone());
    }
    // A refused approval is no approval: the refusal says whose it claimed to be.
    if !current.approved_by.is_empty() && current.state != State::Refused && was.is_none_or(|w| w.2 != current.approved_by) {
        push(approved_at, "approved", &current.approved_by.clone(), String::new());
    }
    let mut push = |event: &str, by: &str, detail: String| push(now, event, by, detail);
    let state_changed = was.is_none_or(|w| w.0 != current.state);
    match current.state {
        State::Refused if state_changed => push("refused", "", current.refusal.clone()),
        State::Active if state_changed || was.is_some_and(|w| w.1 != current.verification) => {
            let detail = format!("{}{}", current.verification.as_str(), if current.effective { "" } else { " (not in force)" });
            push("active", "", detail)
        }
        State::Expired if state_changed => push("expired", "", String::new()),
        State::Closed if state_changed => push("closed", "", String::new()),
        _ => {}
    }
    if current.overdue && was.is_none_or(|w| !w.3) {
        push("overdue", "", "expired with the Application still off Git".into());
    }
    current.fresh = current.events.len().saturating_sub(prior.map_or(0, |b| b.events.len()));
    let excess = current.events.len().saturating_sub(MAX_EVENTS);
    current.events.drain(..excess);
    current.fresh = current.fresh.min(current.events.len());
    current
}
