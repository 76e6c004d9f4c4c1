//! Break-glass: an emergency manual change made as a documented exception. Someone
//! opens it on an Application (`driftwatch break-glass open`: a ticket, a reason, how
//! long), a second, different person approves it (`driftwatch break-glass approve`);
//! both identities are what the API server said they were (`SelfSubjectReview`) and
//! are written into one annotation, [`ANNOTATION`]. While an approved exception is
//! open, live drift on the Application is recorded against the ticket and goes to the
//! break-glass routes instead of paging; when it expires with the Application still
//! off Git it is overdue (`on-break-glass-overdue`).
//!
//! An annotation anyone with `patch` on the Application can write proves nothing by
//! itself: with the audit input, the daemon checks that the write that opened the
//! exception was made by the opener and the one that approved it by the approver,
//! through driftwatch ([`Write`]); without it an approval is `unverifiable`, and says
//! so. A malformed or forged exception is refused with the reason and changes nothing.
//! Pure: the pipeline calls [`evaluate`] once per pass with what the store and the
//! audit input know.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::Pointer;

mod writes;

pub use writes::{MAX_APPS_WITH_WRITES, MAX_WRITES_PER_APP, Write, Writes};

/// The transitions of an exception, as events and metric labels.
pub const EVENTS: &[&str] = &["opened", "approved", "active", "refused", "expired", "overdue", "closed"];

/// The annotation that holds the exception, as JSON ([`Exception`]).
pub const ANNOTATION: &str = "driftwatch.io/break-glass";
/// The user agent `driftwatch break-glass` sends (its prefix); a write of the
/// annotation by another client is an edit by hand.
pub const USER_AGENT: &str = "driftwatch-break-glass/";
/// Bounds on what an exception may hold.
pub const MAX_TICKET_CHARS: usize = 64;
pub const MAX_REASON_CHARS: usize = 500;
pub const MAX_USER_CHARS: usize = 256;
/// At most this many transitions are kept per exception.
pub const MAX_EVENTS: usize = 16;
/// How far in the future an instant written by a client may be (clocks apart).
pub const CLOCK_SKEW: chrono::Duration = chrono::Duration::minutes(5);

/// The exception as the annotation holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exception {
    pub ticket: String,
    pub reason: String,
    pub opened_by: String,
    pub opened_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub approved_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<DateTime<Utc>>,
}

impl Exception {
    /// `<ticket>@<opened at, unix ms>`: one exception, stable as an `oncePer` value.
    pub fn id(&self) -> String {
        format!("{}@{}", self.ticket, self.opened_at.timestamp_millis())
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        // Plain data: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Where an exception stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Opened, not approved by a second person yet: changes nothing.
    #[default]
    Pending,
    /// Approved and not expired: live drift goes to the break-glass routes.
    Active,
    /// Past its expiry.
    Expired,
    /// Malformed or forged: changes nothing.
    Refused,
    /// The annotation was removed.
    Closed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Active => "active",
            State::Expired => "expired",
            State::Refused => "refused",
            State::Closed => "closed",
        }
    }
}

/// What the audit input says of the writes that opened and approved an exception.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Verification {
    /// Both writes seen, each by the person it names, through driftwatch.
    Verified,
    /// The audit input is on but has not shown the writes (yet).
    #[default]
    Unverified,
    /// There is no audit input to check against.
    Unverifiable,
}

impl Verification {
    pub fn as_str(self) -> &'static str {
        match self {
            Verification::Verified => "verified",
            Verification::Unverified => "unverified",
            Verification::Unverifiable => "unverifiable",
        }
    }
}

/// One transition of an exception, for the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub at: DateTime<Utc>,
    /// `opened`, `approved`, `verified`, `active`, `expired`, `refused`, `closed`.
    pub event: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// An exception as the daemon judged it: what triggers and templates see as
/// `drift.breakGlass`, and what the history keeps (per Application, by opening time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct BreakGlass {
    /// [`Exception::id`]; for an unreadable annotation, `refused@<hash>`.
    pub id: String,
    pub ticket: String,
    pub reason: String,
    pub opened_by: String,
    pub opened_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub approved_by: String,
    pub approved_at: Option<DateTime<Utc>>,
    pub state: State,
    /// Why it was refused.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub refusal: String,
    pub verification: Verification,
    /// Approved and in force: live drift goes to the break-glass routes, not to pagers.
    pub effective: bool,
    /// Expired, approved, and the Application is still off Git.
    pub overdue: bool,
    /// Audit IDs of the writes that opened and approved it, when seen.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audit_ids: Vec<String>,
    /// Transitions, oldest first (at most [`MAX_EVENTS`]; the history's copy).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Transition>,
    /// How many of `events` this judgement added (not stored).
    #[serde(skip)]
    pub fresh: usize,
}

impl BreakGlass {
    /// What a change of it is told by: a different id, state, verification, refusal
    /// or overdue means a transition to record.
    pub fn fingerprint(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{:?}|{}|{}",
            self.id,
            self.state.as_str(),
            self.verification.as_str(),
            self.refusal,
            self.overdue,
            self.approved_by,
            self.expires_at,
            self.opened_by,
            self.reason
        )
    }

    /// Whether it holds exactly the exception `e` (every field the annotation has).
    fn holds(&self, e: &Exception) -> bool {
        let mut b = BreakGlass::default();
        fill(&mut b, e);
        (&self.ticket, &self.reason, &self.opened_by, self.opened_at, self.expires_at, &self.approved_by, self.approved_at)
            == (&b.ticket, &b.reason, &b.opened_by, b.opened_at, b.expires_at, &b.approved_by, b.approved_at)
    }

    /// The exception an episode is recorded against.
    pub fn reference(&self) -> Reference {
        Reference {
            id: self.id.clone(),
            ticket: self.ticket.clone(),
            opened_by: self.opened_by.clone(),
            approved_by: self.approved_by.clone(),
            verification: self.verification,
        }
    }
}

/// An exception as the history keeps it: with its Application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Record {
    pub app_key: String,
    pub namespace: String,
    pub name: String,
    #[serde(flatten)]
    pub break_glass: BreakGlass,
}

impl Record {
    /// Where the history keeps it: when it opened (unix ms; 0 for an unreadable one).
    pub fn opened_ms(&self) -> u64 {
        self.break_glass.opened_at.map_or(0, |t| u64::try_from(t.timestamp_millis()).unwrap_or(0))
    }
}

/// The exception a drift episode happened under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    pub id: String,
    pub ticket: String,
    pub opened_by: String,
    pub approved_by: String,
    pub verification: Verification,
}

/// What the configuration says (`breakGlass:`) and whether there is an audit input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The longest exception accepted (`breakGlass.maxFor`, 72h).
    pub max_for: chrono::Duration,
    /// Only a verified approval takes effect (`breakGlass.requireVerified`).
    pub require_verified: bool,
    /// The audit input is on: approvals are checked against it.
    pub audited: bool,
    /// Groups one of which an approver must be in, as the audit log shows the approving
    /// write (`breakGlass.approvers.groups`; empty: any group).
    pub approver_groups: Vec<String>,
    /// A ServiceAccount may approve (`breakGlass.approvers.serviceAccounts`, false): a
    /// token anyone with `create serviceaccounts/token` can mint is no second person.
    pub service_account_approvers: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_for: chrono::Duration::hours(72),
            require_verified: false,
            audited: false,
            approver_groups: Vec::new(),
            service_account_approvers: false,
        }
    }
}

fn refused(id: String, why: String) -> BreakGlass {
    BreakGlass { id, state: State::Refused, refusal: why, ..BreakGlass::default() }
}

/// Checks an annotation's exception (format and bounds), at `now`.
pub fn parse(value: &str, s: &Settings, now: DateTime<Utc>) -> Result<Exception, String> {
    let e: Exception = serde_json::from_str(value).map_err(|e| format!("the annotation is not a break-glass exception: {e}"))?;
    let bad_text = |v: &str, max: usize| v.trim().is_empty() || v.chars().count() > max || v.chars().any(char::is_control);
    if bad_text(&e.ticket, MAX_TICKET_CHARS) {
        return Err(format!("no ticket (one of at most {MAX_TICKET_CHARS} characters, no control characters)"));
    }
    if bad_text(&e.reason, MAX_REASON_CHARS) {
        return Err(format!("no reason (at most {MAX_REASON_CHARS} characters)"));
    }
    if bad_text(&e.opened_by, MAX_USER_CHARS) {
        return Err("no opener (openedBy)".into());
    }
    if e.opened_at > now + CLOCK_SKEW {
        return Err(format!("opened in the future ({})", e.opened_at.to_rfc3339()));
    }
    if e.expires_at <= e.opened_at {
        return Err(format!("expires ({}) before it opened ({})", e.expires_at.to_rfc3339(), e.opened_at.to_rfc3339()));
    }
    if e.expires_at - e.opened_at > s.max_for {
        return Err(format!("lasts longer than breakGlass.maxFor ({})", crate::duration::format(s.max_for)));
    }
    match (e.approved_by.is_empty(), e.approved_at) {
        (true, None) => {}
        (false, Some(at)) => {
            if e.approved_by == e.opened_by {
                return Err(format!("approved by {}, who opened it: a second person must approve", e.opened_by));
            }
            if at < e.opened_at || at > now + CLOCK_SKEW {
                return Err(format!("approved at {} (outside the exception)", at.to_rfc3339()));
            }
            if bad_text(&e.approved_by, MAX_USER_CHARS) {
                return Err("the approver's name is not readable".into());
            }
        }
        _ => return Err("approvedBy and approvedAt go together".into()),
    }
    Ok(e)
}

/// The first write (oldest) whose value is an exception for which `is` holds.
fn first_write(writes: &[Write], is: impl Fn(&Exception) -> bool) -> Option<&Write> {
    writes
        .iter()
        .filter(|w| w.value.as_deref().and_then(|v| serde_json::from_str::<Exception>(v).ok()).is_some_and(|e| is(&e)))
        .min_by_key(|w| w.time)
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

/// The two-person rule on the audited writes: the approver is another person than the
/// opener (another UID as well as another name), not a ServiceAccount unless allowed,
/// and in one of `breakGlass.approvers.groups` when set.
fn two_people(opening: &Write, approval: &Write, s: &Settings) -> Result<(), String> {
    if !approval.uid.is_empty() && approval.uid == opening.uid {
        return Err(format!(
            "{} and {} are one identity (UID {}): a second person must approve",
            opening.username, approval.username, approval.uid
        ));
    }
    if approval.username.starts_with("system:serviceaccount:") && !s.service_account_approvers {
        return Err(format!(
            "approved by the ServiceAccount {}: a token is no second person (breakGlass.approvers.serviceAccounts allows it)",
            approval.username
        ));
    }
    if !s.approver_groups.is_empty() && !approval.groups.iter().any(|g| s.approver_groups.contains(g)) {
        return Err(format!("approved by {}, who is in none of breakGlass.approvers.groups", approval.username));
    }
    Ok(())
}

/// Judges the Application's exception at `now`: from its annotation, the stored copy
/// (`stored`, the latest the history has; its verification stands, so a restart that
/// emptied the audit window does not undo it) and the audit input's writes of the
/// annotation. `off_git`: the Application is not Synced. `None`: no exception, and
/// none to close.
pub fn evaluate(
    app: &Value,
    stored: Option<&BreakGlass>,
    writes: &[Write],
    s: &Settings,
    off_git: bool,
    now: DateTime<Utc>,
) -> Option<BreakGlass> {
    let annotation = app.at("/metadata/annotations").and_then(|a| a.get(ANNOTATION)).and_then(Value::as_str);
    let Some(value) = annotation else {
        // Removed: the exception it was is closed (once).
        return stored.filter(|b| b.state != State::Closed).map(|b| BreakGlass {
            state: State::Closed,
            effective: false,
            overdue: false,
            ..b.clone()
        });
    };
    let mut out = match parse(value, s, now) {
        Err(why) => {
            // A value that is not an exception at all has no id of its own.
            let id = serde_json::from_str::<Exception>(value).map(|e| e.id()).unwrap_or_else(|_| format!("refused@{:x}", fnv(value)));
            let mut b = refused(id, why);
            if let Ok(e) = serde_json::from_str::<Exception>(value) {
                fill(&mut b, &e);
            }
            return Some(b);
        }
        Ok(e) => {
            let mut b = BreakGlass { id: e.id(), ..BreakGlass::default() };
            fill(&mut b, &e);
            b
        }
    };
    let e = match serde_json::from_str::<Exception>(value) {
        Ok(e) => e,
        Err(_) => return Some(out),
    };
    let approved = !e.approved_by.is_empty();
    // A closed exception never comes back, nor one older than the latest: a new
    // exception has a new `openedAt`.
    if let Some(b) = stored {
        let why = if b.id == out.id && b.state == State::Closed {
            Some(format!("break-glass {} was closed; a closed exception does not reopen (open a new one)", e.ticket))
        } else if b.id != out.id && b.opened_at.is_some_and(|t| t > e.opened_at) {
            Some(format!("opened before the latest exception ({}): an old exception does not come back", b.id))
        } else {
            None
        };
        if let Some(why) = why {
            out.state = State::Refused;
            out.refusal = why;
            return Some(out);
        }
    }
    // The stored judgement of this same exception stands: a refusal whatever the audit
    // setting, a verification only for exactly the value verified (any other value,
    // an edited expiry or opener, is judged again from the writes).
    let same_id = stored.filter(|b| b.id == out.id && b.approved_by == out.approved_by && b.approved_at == out.approved_at);
    let verdict = if let Some(b) = same_id.filter(|b| b.state == State::Refused) {
        Err(b.refusal.clone())
    } else if !s.audited {
        Ok(Verification::Unverifiable)
    } else if let Some(b) = same_id.filter(|b| b.verification == Verification::Verified && b.holds(&e)) {
        out.audit_ids = b.audit_ids.clone();
        Ok(Verification::Verified)
    } else {
        // The opening: the first write that left this exception unapproved, as it is
        // now; the approval: the first write that left exactly the value there is now.
        let unapproved = Exception { approved_by: String::new(), approved_at: None, ..e.clone() };
        let opened = first_write(writes, |x| *x == unapproved);
        let approval = first_write(writes, |x| *x == e);
        let checked = opened
            .map(|w| check_write(w, &e.opened_by, "opening"))
            .transpose()
            .and_then(|_| if approved { approval.map(|w| check_write(w, &e.approved_by, "approval")).transpose() } else { Ok(None) })
            .and_then(|_| match (approved, opened, approval) {
                (true, Some(o), Some(a)) => two_people(o, a, s).map(|()| None::<()>),
                _ => Ok(None),
            });
        match checked {
            Err(why) => Err(why),
            Ok(_) => {
                out.audit_ids = opened.iter().chain(approval.iter().filter(|_| approved)).map(|w| w.audit_id.clone()).collect();
                out.audit_ids.dedup();
                let seen = opened.is_some() && (!approved || approval.is_some());
                Ok(if seen { Verification::Verified } else { Verification::Unverified })
            }
        }
    };
    match verdict {
        Err(why) => {
            out.state = State::Refused;
            out.refusal = why;
            out.verification = Verification::Unverified;
        }
        Ok(v) => {
            out.verification = v;
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

fn fill(b: &mut BreakGlass, e: &Exception) {
    b.ticket = e.ticket.chars().take(MAX_TICKET_CHARS).collect();
    b.reason = e.reason.chars().take(MAX_REASON_CHARS).collect();
    b.opened_by = e.opened_by.chars().take(MAX_USER_CHARS).collect();
    b.opened_at = Some(e.opened_at);
    b.expires_at = Some(e.expires_at);
    b.approved_by = e.approved_by.chars().take(MAX_USER_CHARS).collect();
    b.approved_at = e.approved_at;
}

/// FNV-1a: a short stable name for an unreadable value.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn exception(approved_by: &str) -> Exception {
        Exception {
            ticket: "INC-1234".into(),
            reason: "payments down, raising replicas by hand".into(),
            opened_by: "alice".into(),
            opened_at: t("2026-12-04T10:00:00Z"),
            expires_at: t("2026-12-05T10:00:00Z"),
            approved_by: approved_by.into(),
            approved_at: (!approved_by.is_empty()).then(|| t("2026-12-04T10:02:00Z")),
        }
    }

    fn app(e: &Exception) -> Value {
        json!({"metadata": {"annotations": {ANNOTATION: e.to_annotation()}}})
    }

    fn write(e: &Exception, who: &str, agent: &str, min: i64) -> Write {
        Write {
            app_key: "argocd/shop@u".into(),
            username: who.into(),
            uid: format!("uid-{who}"),
            groups: vec!["sre".into()],
            user_agent: agent.into(),
            audit_id: format!("audit-{who}-{min}"),
            id: format!("event-{who}-{min}"),
            time: t("2026-12-04T10:00:00Z") + chrono::Duration::minutes(min),
            value: Some(e.to_annotation()),
        }
    }

    const NOW: &str = "2026-12-04T11:00:00Z";

    #[test]
    fn an_approved_exception_is_active_until_it_expires_and_then_overdue_while_off_git() {
        let s = Settings::default();
        let e = exception("bob");
        let b = evaluate(&app(&e), None, &[], &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.verification, b.effective, b.overdue), (State::Active, Verification::Unverifiable, true, false));
        assert_eq!(b.id, "INC-1234@1796378400000");
        let later = t("2026-12-05T10:00:00Z");
        let b = evaluate(&app(&e), None, &[], &s, true, later).unwrap();
        assert_eq!((b.state, b.effective, b.overdue), (State::Expired, false, true));
        assert!(!evaluate(&app(&e), None, &[], &s, false, later).unwrap().overdue, "back on Git: not overdue");
        // Opened but not approved: nothing changes, and it is never overdue.
        let pending = evaluate(&app(&exception("")), None, &[], &s, true, t(NOW)).unwrap();
        assert_eq!((pending.state, pending.effective), (State::Pending, false));
        assert!(!evaluate(&app(&exception("")), None, &[], &s, true, later).unwrap().overdue);
        // Unverifiable approvals can be refused by configuration.
        let strict = Settings { require_verified: true, ..s.clone() };
        assert!(!evaluate(&app(&e), None, &[], &strict, true, t(NOW)).unwrap().effective);
        // Removed: closed once, then nothing.
        let active = evaluate(&app(&e), None, &[], &s, true, t(NOW)).unwrap();
        let closed = evaluate(&json!({"metadata": {}}), Some(&active), &[], &s, true, t(NOW)).unwrap();
        assert_eq!((closed.state, closed.effective), (State::Closed, false));
        assert_eq!(evaluate(&json!({"metadata": {}}), Some(&closed), &[], &s, true, t(NOW)), None);
    }

    /// Malformed and out-of-range exceptions are refused with the reason.
    #[test]
    fn bad_exceptions_are_refused_with_why() {
        let s = Settings::default();
        let refusal = |e: Value| {
            let b = evaluate(&json!({"metadata": {"annotations": {ANNOTATION: e.to_string()}}}), None, &[], &s, true, t(NOW)).unwrap();
            assert_eq!((b.state, b.effective), (State::Refused, false));
            b.refusal
        };
        let base = serde_json::to_value(exception("bob")).unwrap();
        let with = |k: &str, v: Value| {
            let mut e = base.clone();
            e[k] = v;
            e
        };
        assert!(refusal(with("ticket", json!(""))).starts_with("no ticket"));
        assert!(refusal(with("ticket", json!("x".repeat(65)))).starts_with("no ticket"));
        assert!(refusal(with("expiresAt", json!("2026-12-04T09:00:00Z"))).contains("before it opened"));
        assert!(refusal(with("expiresAt", json!("2029-12-04T09:00:00Z"))).contains("longer than breakGlass.maxFor (72h)"));
        assert!(refusal(with("openedAt", json!("2026-12-24T09:00:00Z"))).contains("in the future"));
        assert!(refusal(with("approvedBy", json!("alice"))).contains("approved by alice, who opened it"));
        assert!(refusal(with("approvedAt", Value::Null)).contains("go together"));
        let b = evaluate(&json!({"metadata": {"annotations": {ANNOTATION: "yes please"}}}), None, &[], &s, true, t(NOW)).unwrap();
        assert!(b.refusal.starts_with("the annotation is not a break-glass exception"), "{}", b.refusal);
        assert!(b.id.starts_with("refused@"));
    }

    /// With the audit input, each write must be by the person it names, through
    /// driftwatch: else refused (forged, or by hand); not seen yet: unverified and not
    /// in force; verified once, it stays verified without the writes (a restart).
    #[test]
    fn the_audit_input_verifies_or_refuses_the_writes() {
        let s = Settings { audited: true, ..Settings::default() };
        let (opened, approved) = (exception(""), exception("bob"));
        let cli = "driftwatch-break-glass/0.1.0";
        let good = [write(&opened, "alice", cli, 0), write(&approved, "bob", cli, 2)];
        let b = evaluate(&app(&approved), None, &good, &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.verification, b.effective), (State::Active, Verification::Verified, true));
        assert_eq!(b.audit_ids, ["audit-alice-0", "audit-bob-2"]);
        let unseen = evaluate(&app(&approved), None, &good[..1], &s, true, t(NOW)).unwrap();
        assert_eq!((unseen.verification, unseen.effective), (Verification::Unverified, false));
        let after_restart = evaluate(&app(&approved), Some(&b), &[], &s, true, t(NOW)).unwrap();
        assert_eq!((after_restart.verification, after_restart.effective), (Verification::Verified, true));
        // Alice wrote bob's approval herself.
        let forged = [write(&opened, "alice", cli, 0), write(&approved, "alice", cli, 2)];
        let b = evaluate(&app(&approved), None, &forged, &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.effective), (State::Refused, false));
        assert!(b.refusal.starts_with("forged: the audit log shows alice wrote the approval that names bob"), "{}", b.refusal);
        // Bob, but by hand.
        let by_hand = [write(&opened, "alice", cli, 0), write(&approved, "bob", "kubectl/v1.36.0", 2)];
        let b = evaluate(&app(&approved), None, &by_hand, &s, true, t(NOW)).unwrap();
        assert!(b.refusal.contains("written by hand (user agent \"kubectl/v1.36.0\""), "{}", b.refusal);
        assert_eq!(evaluate(&app(&approved), Some(&b), &[], &s, true, t(NOW)).unwrap().state, State::Refused, "a refusal stands");
    }

    #[test]
    fn transitions_are_recorded_once_each() {
        let s = Settings::default();
        let pending = with_transitions(evaluate(&app(&exception("")), None, &[], &s, true, t(NOW)).unwrap(), None, t(NOW));
        assert_eq!(pending.events.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), ["opened"]);
        let active = with_transitions(evaluate(&app(&exception("bob")), None, &[], &s, true, t(NOW)).unwrap(), Some(&pending), t(NOW));
        assert_eq!(
            active.events.iter().map(|e| (e.event.as_str(), e.by.as_str())).collect::<Vec<_>>(),
            [("opened", "alice"), ("approved", "bob"), ("active", "")]
        );
        assert_eq!(active.events[2].detail, "unverifiable");
        let later = t("2026-12-05T10:00:00Z");
        let overdue = with_transitions(evaluate(&app(&exception("bob")), None, &[], &s, true, later).unwrap(), Some(&active), later);
        assert_eq!(overdue.events.iter().skip(3).map(|e| e.event.as_str()).collect::<Vec<_>>(), ["expired", "overdue"]);
        let again = with_transitions(evaluate(&app(&exception("bob")), None, &[], &s, true, later).unwrap(), Some(&overdue), later);
        assert_eq!(again.events.len(), 5, "nothing new");
    }

    /// Review H2: after a verified approval, one person alone edits the expiry, rewrites
    /// the opener or puts a closed exception back: none is in force; the fingerprint
    /// sees the edit (so the history records it). A stored refusal stands even when the
    /// audit input is turned off.
    #[test]
    fn a_verified_exception_edited_by_one_person_is_not_in_force() {
        let s = Settings { audited: true, ..Settings::default() };
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let good = vec![write(&opened, "alice", cli, 0), write(&approved, "bob", cli, 2)];
        let verified = evaluate(&app(&approved), None, &good, &s, true, t(NOW)).unwrap();
        assert!(verified.effective);
        let longer = Exception { expires_at: t("2026-12-07T10:00:00Z"), ..approved.clone() };
        let carol = Exception { opened_by: "carol".into(), ..approved.clone() };
        for edited in [&longer, &carol] {
            // The stored verdict is not reused for another value; alice's hand write is
            // the write that left it.
            let unseen = evaluate(&app(edited), Some(&verified), &good, &s, true, t(NOW)).unwrap();
            assert!(!unseen.effective, "{unseen:?}");
            let mut writes = good.clone();
            writes.push(write(edited, "alice", "kubectl/v1.36.0", 30));
            let b = evaluate(&app(edited), Some(&verified), &writes, &s, true, t(NOW)).unwrap();
            assert_eq!((b.state, b.effective), (State::Refused, false), "{b:?}");
            assert_ne!(b.fingerprint(), verified.fingerprint());
        }
        assert_ne!(
            evaluate(&app(&longer), None, &[], &Settings::default(), true, t(NOW)).unwrap().fingerprint(),
            evaluate(&app(&approved), None, &[], &Settings::default(), true, t(NOW)).unwrap().fingerprint(),
            "an edited expiry is a transition to record"
        );
        // Closed, then the saved value put back: refused, also with a new expiry.
        let closed = evaluate(&json!({"metadata": {}}), Some(&verified), &good, &s, true, t(NOW)).unwrap();
        for back in [&approved, &longer] {
            let b = evaluate(&app(back), Some(&closed), &good, &s, true, t(NOW)).unwrap();
            assert_eq!((b.state, b.effective), (State::Refused, false));
            assert!(b.refusal.contains("does not reopen"), "{}", b.refusal);
        }
        // An older exception than the latest does not come back either.
        let newer = Exception { opened_at: t("2026-12-04T10:30:00Z"), ..exception("") };
        let latest = evaluate(&app(&newer), None, &[], &s, true, t(NOW)).unwrap();
        assert!(evaluate(&app(&approved), Some(&latest), &good, &s, true, t(NOW)).unwrap().refusal.contains("does not come back"));
        // A refusal stands whatever the audit setting.
        let forged = [write(&opened, "alice", cli, 0), write(&approved, "alice", cli, 2)];
        let refused = evaluate(&app(&approved), None, &forged, &s, true, t(NOW)).unwrap();
        let unaudited = evaluate(&app(&approved), Some(&refused), &[], &Settings::default(), true, t(NOW)).unwrap();
        assert_eq!((unaudited.state, unaudited.effective), (State::Refused, false));
    }

    /// Review M6: the two-person rule compares people: one UID under two names, a
    /// ServiceAccount (unless allowed) and an approver outside the configured groups are
    /// refused.
    #[test]
    fn the_second_person_is_another_person() {
        let s = Settings { audited: true, ..Settings::default() };
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let judge = |approval: Write, s: &Settings| {
            evaluate(&app(&approved), None, &[write(&opened, "alice", cli, 0), approval], s, true, t(NOW)).unwrap()
        };
        let mut same_person = write(&approved, "bob", cli, 2);
        same_person.uid = "uid-alice".into();
        assert!(judge(same_person, &s).refusal.contains("one identity (UID uid-alice)"));
        let sa = Exception { approved_by: "system:serviceaccount:ci:deployer".into(), ..approved.clone() };
        let b = evaluate(
            &app(&sa),
            None,
            &[write(&opened, "alice", cli, 0), write(&sa, "system:serviceaccount:ci:deployer", cli, 2)],
            &s,
            true,
            t(NOW),
        )
        .unwrap();
        assert!(b.refusal.contains("a token is no second person"), "{}", b.refusal);
        let groups = Settings { approver_groups: vec!["incident-commanders".into()], ..s.clone() };
        assert!(judge(write(&approved, "bob", cli, 2), &groups).refusal.contains("in none of breakGlass.approvers.groups"));
        let mut commander = write(&approved, "bob", cli, 2);
        commander.groups.push("incident-commanders".into());
        assert!(judge(commander, &groups).effective);
    }

    /// Review L1: no-op writes of the annotation between open and approve cannot push
    /// the opening out of the bounded window.
    #[test]
    fn no_op_writes_cannot_push_the_opening_out() {
        let s = Settings { audited: true, ..Settings::default() };
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let mut w = Writes::default();
        w.record(write(&opened, "alice", cli, 0));
        for i in 1..=MAX_WRITES_PER_APP as i64 + 2 {
            w.record(write(&opened, "bob", "kubectl/v1.36.0", i));
        }
        w.record(write(&approved, "bob", cli, 20));
        assert_eq!(w.of("argocd/shop@u").len(), MAX_WRITES_PER_APP);
        let b = evaluate(&app(&approved), None, w.of("argocd/shop@u"), &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.verification, b.effective), (State::Active, Verification::Verified, true), "{}", b.refusal);
    }
}
#[cfg(test)]
mod roundtrip {
    #[test]
    fn a_record_reads_back() {
        let b = super::BreakGlass { id: "x@1".into(), ticket: "x".into(), opened_at: Some(chrono::Utc::now()), ..Default::default() };
        let r = super::Record { app_key: "a".into(), namespace: "n".into(), name: "m".into(), break_glass: b };
        let json = serde_json::to_string(&r).unwrap();
        let back: Result<super::Record, _> = serde_json::from_str(&json);
        assert_eq!(back.as_ref().ok(), Some(&r), "{json} {back:?}");
    }
}
