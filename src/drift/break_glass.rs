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

mod judge;
mod people;
mod writes;

pub use judge::{evaluate, with_transitions};
pub use people::BUILT_IN_MACHINE_USERS;
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

    /// When it opened (unix ms; 0 for an unreadable one).
    pub fn opened_ms(&self) -> u64 {
        self.opened_at.map_or(0, millis)
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
    /// The Application's newest exception after this judgement: the store keeps it
    /// beside the records, not in them (see [`Newest`]).
    #[serde(skip)]
    pub newest: Option<Newest>,
}

impl Record {
    /// Where the history keeps it: when it opened (unix ms; 0 for an unreadable one).
    pub fn opened_ms(&self) -> u64 {
        self.break_glass.opened_ms()
    }
}

/// Unix milliseconds of an instant, 0 before 1970.
pub(super) fn millis(t: DateTime<Utc>) -> u64 {
    u64::try_from(t.timestamp_millis()).unwrap_or(0)
}

/// The newest exception (by `openedAt`) an Application has had, and whether it has
/// ended: left the annotation (closed, or replaced by any other value, readable or
/// not) or been refused. The store keeps it in the Application's short `latest` value,
/// which neither the history's bounds nor the per-Application bound on records prune,
/// so no run of writes can make it forget: an exception opened before it never comes
/// back, and neither does it once ended (review N2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Newest {
    pub opened_ms: u64,
    /// FNV-1a of its id (`ticket@ms`): two exceptions opened at the same instant are
    /// told apart without storing a ticket the store's separators might be in.
    pub id_hash: u64,
    pub ended: bool,
}

impl Newest {
    /// The newest exception as a stored judgement alone tells it (a store written
    /// before `Newest` was kept): `None` for an unreadable value.
    pub fn of(b: &BreakGlass) -> Option<Newest> {
        b.opened_at.map(|t| Newest { opened_ms: millis(t), id_hash: fnv(&b.id), ended: matches!(b.state, State::Closed | State::Refused) })
    }

    /// The newest exception after `judged` (this pass's judgement of the annotation):
    /// a readable exception opened later becomes it (its opening time bounded by
    /// `now`, so a refused claim from the future cannot fence out every later one);
    /// the same one ends when closed or refused; anything else in the annotation ends
    /// it.
    pub fn after(prev: Option<&Newest>, judged: &BreakGlass, now: DateTime<Utc>) -> Option<Newest> {
        let ended = matches!(judged.state, State::Closed | State::Refused);
        let candidate =
            judged.opened_at.filter(|t| *t <= now + CLOCK_SKEW).map(|t| Newest { opened_ms: millis(t), id_hash: fnv(&judged.id), ended });
        match (prev, candidate) {
            (None, c) => c,
            (Some(p), Some(c)) if c.id_hash == p.id_hash && c.opened_ms == p.opened_ms => Some(Newest { ended: p.ended || ended, ..c }),
            (Some(p), Some(c)) if c.opened_ms > p.opened_ms => Some(c),
            (Some(p), _) => Some(Newest { ended: true, ..p.clone() }),
        }
    }
}

/// What the store holds of an Application's exceptions when a pass judges its
/// annotation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stored<'a> {
    /// The judgement the last pass saved (what the annotation was then).
    pub latest: Option<&'a BreakGlass>,
    /// The stored record of the newest exception, when it is not `latest`.
    pub newest_record: Option<&'a BreakGlass>,
    pub newest: Option<&'a Newest>,
}

impl<'a> Stored<'a> {
    /// Only the last judgement (a store written before `Newest` was kept, or a test).
    pub fn latest(b: Option<&'a BreakGlass>) -> Stored<'a> {
        Stored { latest: b, ..Stored::default() }
    }

    /// The stored record of exception `id`, if the store has it at hand.
    pub fn by_id(&self, id: &str) -> Option<&'a BreakGlass> {
        [self.latest, self.newest_record].into_iter().flatten().find(|b| b.id == id)
    }

    fn newest(&self) -> Option<Newest> {
        self.newest.cloned().or_else(|| self.latest.and_then(Newest::of))
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
    /// write (`breakGlass.approvers.groups`). Empty: no audited approval takes effect
    /// (the configuration refuses break-glass routes without it).
    pub approver_groups: Vec<String>,
    /// A ServiceAccount may approve (`breakGlass.approvers.serviceAccounts`, false): a
    /// token anyone with `create serviceaccounts/token` can mint is no second person.
    pub service_account_approvers: bool,
    /// Groups whose members are machines, besides `system:serviceaccounts` and
    /// `system:nodes` (`breakGlass.approvers.refuseGroups`).
    pub machine_groups: Vec<String>,
    /// Username patterns (`*` for any run) of machines, besides
    /// [`BUILT_IN_MACHINE_USERS`] and `system:*` (`breakGlass.approvers.refuseUsers`).
    pub machine_users: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_for: chrono::Duration::hours(72),
            require_verified: false,
            audited: false,
            approver_groups: Vec::new(),
            service_account_approvers: false,
            machine_groups: Vec::new(),
            machine_users: Vec::new(),
        }
    }
}

pub(super) fn refused(id: String, why: String) -> BreakGlass {
    BreakGlass { id, state: State::Refused, refusal: why, ..BreakGlass::default() }
}

/// Checks an annotation's exception (format and bounds), at `now`.
pub fn parse(value: &str, s: &Settings, now: DateTime<Utc>) -> Result<Exception, Malformed> {
    parse_text(value, s, now).map_err(Malformed)
}

/// [`parse`], its refusal as text.
fn parse_text(value: &str, s: &Settings, now: DateTime<Utc>) -> Result<Exception, String> {
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
            if people::look_alike(&e.opened_by, &e.approved_by) {
                return Err(format!(
                    "approved by {}, who opened it as {}: they look like one person's two accounts; a second person must approve",
                    e.approved_by, e.opened_by
                ));
            }
            if let Some(why) = people::machine_name(&e.approved_by, s) {
                return Err(format!("approved by {why}"));
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

pub(super) fn fill(b: &mut BreakGlass, e: &Exception) {
    b.ticket = e.ticket.chars().take(MAX_TICKET_CHARS).collect();
    b.reason = e.reason.chars().take(MAX_REASON_CHARS).collect();
    b.opened_by = e.opened_by.chars().take(MAX_USER_CHARS).collect();
    b.opened_at = Some(e.opened_at);
    b.expires_at = Some(e.expires_at);
    b.approved_by = e.approved_by.chars().take(MAX_USER_CHARS).collect();
    b.approved_at = e.approved_at;
}

/// FNV-1a: a short stable name for an unreadable value.
pub(super) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Why a break-glass annotation is not an exception.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

impl From<Malformed> for String {
    fn from(e: Malformed) -> String {
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
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

    /// With the audit input, and `sre` (every test person's group) may approve.
    fn audited() -> Settings {
        Settings { audited: true, approver_groups: vec!["sre".into()], ..Settings::default() }
    }

    #[test]
    fn an_approved_exception_is_active_until_it_expires_and_then_overdue_while_off_git() {
        let s = Settings::default();
        let e = exception("bob");
        let b = evaluate(&app(&e), Stored::default(), &[], &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.verification, b.effective, b.overdue), (State::Active, Verification::Unverifiable, true, false));
        assert_eq!(b.id, "INC-1234@1796378400000");
        let later = t("2026-12-05T10:00:00Z");
        let b = evaluate(&app(&e), Stored::default(), &[], &s, true, later).unwrap();
        assert_eq!((b.state, b.effective, b.overdue), (State::Expired, false, true));
        assert!(!evaluate(&app(&e), Stored::default(), &[], &s, false, later).unwrap().overdue, "back on Git: not overdue");
        // Opened but not approved: nothing changes, and it is never overdue.
        let pending = evaluate(&app(&exception("")), Stored::default(), &[], &s, true, t(NOW)).unwrap();
        assert_eq!((pending.state, pending.effective), (State::Pending, false));
        assert!(!evaluate(&app(&exception("")), Stored::default(), &[], &s, true, later).unwrap().overdue);
        // Unverifiable approvals can be refused by configuration.
        let strict = Settings { require_verified: true, ..s.clone() };
        assert!(!evaluate(&app(&e), Stored::default(), &[], &strict, true, t(NOW)).unwrap().effective);
        // Removed: closed once, then nothing.
        let active = evaluate(&app(&e), Stored::default(), &[], &s, true, t(NOW)).unwrap();
        let closed = evaluate(&json!({"metadata": {}}), Stored::latest(Some(&active)), &[], &s, true, t(NOW)).unwrap();
        assert_eq!((closed.state, closed.effective), (State::Closed, false));
        assert_eq!(evaluate(&json!({"metadata": {}}), Stored::latest(Some(&closed)), &[], &s, true, t(NOW)), None);
    }

    /// Malformed and out-of-range exceptions are refused with the reason.
    #[test]
    fn bad_exceptions_are_refused_with_why() {
        let s = Settings::default();
        let refusal = |e: Value| {
            let b = evaluate(&json!({"metadata": {"annotations": {ANNOTATION: e.to_string()}}}), Stored::default(), &[], &s, true, t(NOW))
                .unwrap();
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
        let b =
            evaluate(&json!({"metadata": {"annotations": {ANNOTATION: "yes please"}}}), Stored::default(), &[], &s, true, t(NOW)).unwrap();
        assert!(b.refusal.starts_with("the annotation is not a break-glass exception"), "{}", b.refusal);
        assert!(b.id.starts_with("refused@"));
    }

    /// With the audit input, each write must be by the person it names, through
    /// driftwatch: else refused (forged, or by hand); not seen yet: unverified and not
    /// in force; verified once, it stays verified without the writes (a restart).
    #[test]
    fn the_audit_input_verifies_or_refuses_the_writes() {
        let s = audited();
        let (opened, approved) = (exception(""), exception("bob"));
        let cli = "driftwatch-break-glass/0.1.0";
        let good = [write(&opened, "alice", cli, 0), write(&approved, "bob", cli, 2)];
        let b = evaluate(&app(&approved), Stored::default(), &good, &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.verification, b.effective), (State::Active, Verification::Verified, true));
        assert_eq!(b.audit_ids, ["audit-alice-0", "audit-bob-2"]);
        let unseen = evaluate(&app(&approved), Stored::default(), &good[..1], &s, true, t(NOW)).unwrap();
        assert_eq!((unseen.verification, unseen.effective), (Verification::Unverified, false));
        let after_restart = evaluate(&app(&approved), Stored::latest(Some(&b)), &[], &s, true, t(NOW)).unwrap();
        assert_eq!((after_restart.verification, after_restart.effective), (Verification::Verified, true));
        // Alice wrote bob's approval herself.
        let forged = [write(&opened, "alice", cli, 0), write(&approved, "alice", cli, 2)];
        let b = evaluate(&app(&approved), Stored::default(), &forged, &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.effective), (State::Refused, false));
        assert!(b.refusal.starts_with("forged: the audit log shows alice wrote the approval that names bob"), "{}", b.refusal);
        // Bob, but by hand.
        let by_hand = [write(&opened, "alice", cli, 0), write(&approved, "bob", "kubectl/v1.36.0", 2)];
        let b = evaluate(&app(&approved), Stored::default(), &by_hand, &s, true, t(NOW)).unwrap();
        assert!(b.refusal.contains("written by hand (user agent \"kubectl/v1.36.0\""), "{}", b.refusal);
        assert_eq!(
            evaluate(&app(&approved), Stored::latest(Some(&b)), &[], &s, true, t(NOW)).unwrap().state,
            State::Refused,
            "a refusal stands"
        );
    }

    #[test]
    fn transitions_are_recorded_once_each() {
        let s = Settings::default();
        let pending = with_transitions(evaluate(&app(&exception("")), Stored::default(), &[], &s, true, t(NOW)).unwrap(), None, t(NOW));
        assert_eq!(pending.events.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(), ["opened"]);
        let active =
            with_transitions(evaluate(&app(&exception("bob")), Stored::default(), &[], &s, true, t(NOW)).unwrap(), Some(&pending), t(NOW));
        assert_eq!(
            active.events.iter().map(|e| (e.event.as_str(), e.by.as_str())).collect::<Vec<_>>(),
            [("opened", "alice"), ("approved", "bob"), ("active", "")]
        );
        assert_eq!(active.events[2].detail, "unverifiable");
        let later = t("2026-12-05T10:00:00Z");
        let overdue =
            with_transitions(evaluate(&app(&exception("bob")), Stored::default(), &[], &s, true, later).unwrap(), Some(&active), later);
        assert_eq!(overdue.events.iter().skip(3).map(|e| e.event.as_str()).collect::<Vec<_>>(), ["expired", "overdue"]);
        let again =
            with_transitions(evaluate(&app(&exception("bob")), Stored::default(), &[], &s, true, later).unwrap(), Some(&overdue), later);
        assert_eq!(again.events.len(), 5, "nothing new");
    }

    /// Review H2: after a verified approval, one person alone edits the expiry, rewrites
    /// the opener or puts a closed exception back: none is in force; the fingerprint
    /// sees the edit (so the history records it). A stored refusal stands even when the
    /// audit input is turned off.
    #[test]
    fn a_verified_exception_edited_by_one_person_is_not_in_force() {
        let s = audited();
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let good = vec![write(&opened, "alice", cli, 0), write(&approved, "bob", cli, 2)];
        let verified = evaluate(&app(&approved), Stored::default(), &good, &s, true, t(NOW)).unwrap();
        assert!(verified.effective);
        let longer = Exception { expires_at: t("2026-12-07T10:00:00Z"), ..approved.clone() };
        let carol = Exception { opened_by: "carol".into(), ..approved.clone() };
        for edited in [&longer, &carol] {
            // The stored verdict is not reused for another value; alice's hand write is
            // the write that left it.
            let unseen = evaluate(&app(edited), Stored::latest(Some(&verified)), &good, &s, true, t(NOW)).unwrap();
            assert!(!unseen.effective, "{unseen:?}");
            let mut writes = good.clone();
            writes.push(write(edited, "alice", "kubectl/v1.36.0", 30));
            let b = evaluate(&app(edited), Stored::latest(Some(&verified)), &writes, &s, true, t(NOW)).unwrap();
            assert_eq!((b.state, b.effective), (State::Refused, false), "{b:?}");
            assert_ne!(b.fingerprint(), verified.fingerprint());
        }
        assert_ne!(
            evaluate(&app(&longer), Stored::default(), &[], &Settings::default(), true, t(NOW)).unwrap().fingerprint(),
            evaluate(&app(&approved), Stored::default(), &[], &Settings::default(), true, t(NOW)).unwrap().fingerprint(),
            "an edited expiry is a transition to record"
        );
        // Closed, then the saved value put back: refused, also with a new expiry.
        let closed = evaluate(&json!({"metadata": {}}), Stored::latest(Some(&verified)), &good, &s, true, t(NOW)).unwrap();
        for back in [&approved, &longer] {
            let b = evaluate(&app(back), Stored::latest(Some(&closed)), &good, &s, true, t(NOW)).unwrap();
            assert_eq!((b.state, b.effective), (State::Refused, false));
            assert!(b.refusal.contains("does not reopen"), "{}", b.refusal);
        }
        // An older exception than the latest does not come back either.
        let newer = Exception { opened_at: t("2026-12-04T10:30:00Z"), ..exception("") };
        let latest = evaluate(&app(&newer), Stored::default(), &[], &s, true, t(NOW)).unwrap();
        assert!(
            evaluate(&app(&approved), Stored::latest(Some(&latest)), &good, &s, true, t(NOW))
                .unwrap()
                .refusal
                .contains("does not come back")
        );
        // A refusal stands whatever the audit setting.
        let forged = [write(&opened, "alice", cli, 0), write(&approved, "alice", cli, 2)];
        let refused = evaluate(&app(&approved), Stored::default(), &forged, &s, true, t(NOW)).unwrap();
        let unaudited = evaluate(&app(&approved), Stored::latest(Some(&refused)), &[], &Settings::default(), true, t(NOW)).unwrap();
        assert_eq!((unaudited.state, unaudited.effective), (State::Refused, false));
    }

    /// Review M6: the two-person rule compares people: one UID under two names, a
    /// ServiceAccount (unless allowed) and an approver outside the configured groups are
    /// refused.
    #[test]
    fn the_second_person_is_another_person() {
        let s = audited();
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let judge = |approval: Write, s: &Settings| {
            evaluate(&app(&approved), Stored::default(), &[write(&opened, "alice", cli, 0), approval], s, true, t(NOW)).unwrap()
        };
        let mut same_person = write(&approved, "bob", cli, 2);
        same_person.uid = "uid-alice".into();
        assert!(judge(same_person, &s).refusal.contains("one identity (UID uid-alice)"));
        let sa = Exception { approved_by: "system:serviceaccount:ci:deployer".into(), ..approved.clone() };
        let b = evaluate(
            &app(&sa),
            Stored::default(),
            &[write(&opened, "alice", cli, 0), write(&sa, "system:serviceaccount:ci:deployer", cli, 2)],
            &s,
            true,
            t(NOW),
        )
        .unwrap();
        assert!(b.refusal.contains("a token is no second person"), "{}", b.refusal);
        let groups = Settings { approver_groups: vec!["incident-commanders".into()], ..s.clone() };
        assert!(
            judge(write(&approved, "bob", cli, 2), &Settings { approver_groups: vec![], ..s.clone() }).refusal.contains("groups is empty")
        );
        assert!(judge(write(&approved, "bob", cli, 2), &groups).refusal.contains("in none of breakGlass.approvers.groups"));
        let mut commander = write(&approved, "bob", cli, 2);
        commander.groups.push("incident-commanders".into());
        assert!(judge(commander, &groups).effective);
    }

    /// Review L1: no-op writes of the annotation between open and approve cannot push
    /// the opening out of the bounded window.
    #[test]
    fn no_op_writes_cannot_push_the_opening_out() {
        let s = audited();
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let mut w = Writes::default();
        w.record(write(&opened, "alice", cli, 0));
        for i in 1..=MAX_WRITES_PER_APP as i64 + 2 {
            w.record(write(&opened, "bob", "kubectl/v1.36.0", i));
        }
        w.record(write(&approved, "bob", cli, 20));
        assert_eq!(w.of("argocd/shop@u").len(), MAX_WRITES_PER_APP);
        let b = evaluate(&app(&approved), Stored::default(), w.of("argocd/shop@u"), &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.verification, b.effective), (State::Active, Verification::Verified, true), "{}", b.refusal);
    }

    /// What the store keeps between passes, as the pipeline's stage keeps it: the
    /// records by opening time, the last judged one, the newest exception.
    #[derive(Default)]
    struct Store {
        records: std::collections::BTreeMap<u64, BreakGlass>,
        latest: Option<u64>,
        newest: Option<Newest>,
    }

    impl Store {
        /// One pass over `app` with the audit input's `writes`: judged, then kept.
        fn pass(&mut self, app: &Value, writes: &[Write], s: &Settings) -> Option<BreakGlass> {
            let latest = self.latest.and_then(|ms| self.records.get(&ms));
            let newest_record = self.newest.as_ref().and_then(|n| self.records.get(&n.opened_ms));
            let stored = Stored { latest, newest_record, newest: self.newest.as_ref() };
            let judged = evaluate(app, stored, writes, s, true, t(NOW))?;
            let newest = Newest::after(stored.newest().as_ref(), &judged, t(NOW));
            let kept = with_transitions(judged.clone(), stored.by_id(&judged.id).or(latest), t(NOW));
            self.latest = Some(kept.opened_ms());
            self.records.insert(kept.opened_ms(), kept);
            self.newest = newest;
            Some(judged)
        }
    }

    fn raw(value: &str) -> Value {
        json!({"metadata": {"annotations": {ANNOTATION: value}}})
    }

    /// Review N2: opened, approved (verified), closed; then an unreadable value, or an
    /// older exception, written by hand; then the saved approved value put back. The
    /// store looks the exception up by its id and by the newest the Application had:
    /// refused, whatever was written in between, and the closed record keeps its story.
    #[test]
    fn a_closed_exception_does_not_come_back_whatever_is_written_in_between() {
        let s = audited();
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let older = Exception { ticket: "INC-1".into(), opened_at: t("2026-12-04T09:00:00Z"), ..exception("") };
        for between in [raw("x"), app(&older)] {
            let good = vec![write(&opened, "alice", cli, 0), write(&approved, "bob", cli, 2)];
            let mut store = Store::default();
            assert!(store.pass(&app(&opened), &good[..1], &s).unwrap().verification == Verification::Verified);
            assert!(store.pass(&app(&approved), &good, &s).unwrap().effective);
            assert_eq!(store.pass(&json!({"metadata": {}}), &good, &s).unwrap().state, State::Closed);
            let b = store.pass(&between, &good, &s).unwrap();
            assert_eq!(b.state, State::Refused, "{b:?}");
            // The hand-written value back: the audit input has not shown that write yet.
            let back = store.pass(&app(&approved), &good, &s).unwrap();
            assert_eq!((back.state, back.effective), (State::Refused, false), "{back:?}");
            assert!(back.refusal.contains("does not reopen"), "{}", back.refusal);
            let story: Vec<&str> = store.records[&back.opened_ms()].events.iter().map(|e| e.event.as_str()).collect();
            assert_eq!(story, ["opened", "approved", "active", "closed", "refused"]);
        }
    }

    /// Review N2: the write that left the value the Application holds must be the
    /// approver's, through driftwatch. alice writes the approved value again (with
    /// driftwatch's user agent, which a client chooses): an earlier write of an equal
    /// value by bob does not make hers his.
    #[test]
    fn the_write_that_left_the_value_is_the_one_judged() {
        let s = audited();
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let mut writes = vec![write(&opened, "alice", cli, 0), write(&approved, "bob", cli, 2)];
        let verified = evaluate(&app(&approved), Stored::default(), &writes, &s, true, t(NOW)).unwrap();
        assert!(verified.effective);
        writes.push(Write { value: None, ..write(&approved, "alice", cli, 10) });
        writes.push(write(&approved, "alice", cli, 11));
        let b = evaluate(&app(&approved), Stored::latest(Some(&verified)), &writes, &s, true, t(NOW)).unwrap();
        assert_eq!((b.state, b.effective), (State::Refused, false), "{b:?}");
        assert!(b.refusal.starts_with("forged: the audit log shows alice wrote the approval that names bob"), "{}", b.refusal);
    }

    /// Review N11: people without a UID (client certificates, OIDC by default) are told
    /// apart by name and group: the opener's second account, a robot in
    /// `system:serviceaccounts` or `system:nodes`, a cloud service account, a member of
    /// a configured machine group, and anyone when no approver group is set, are
    /// refused; another person in the approvers' group is not.
    #[test]
    fn identities_without_a_uid_and_machines_are_no_second_person() {
        let cli = "driftwatch-break-glass/0.1.0";
        let s = Settings { machine_groups: vec!["robots".into()], ..audited() };
        let judge = |approver: &str, uid: &str, groups: &[&str], s: &Settings| {
            let approved = exception(approver);
            let mut approval = write(&approved, approver, cli, 2);
            approval.uid = uid.into();
            approval.groups = groups.iter().map(|g| g.to_string()).collect();
            let mut opening = write(&exception(""), "alice", cli, 0);
            opening.uid = String::new();
            evaluate(&app(&approved), Stored::default(), &[opening, approval], s, true, t(NOW)).unwrap()
        };
        for (who, groups, why) in [
            ("alice-admin@corp.example", &["sre"][..], "one person's two accounts"),
            ("deploy-bot", &["system:serviceaccounts", "sre"][..], "in the group system:serviceaccounts"),
            ("node-7", &["system:nodes", "sre"][..], "a node is no person"),
            ("ci@shop.iam.gserviceaccount.com", &["sre"][..], "machine identity"),
            ("robot-1", &["robots", "sre"][..], "breakGlass.approvers.refuseGroups"),
            ("carol", &["dev"][..], "in none of breakGlass.approvers.groups"),
        ] {
            let b = judge(who, "", groups, &s);
            assert_eq!((b.state, b.effective), (State::Refused, false), "{who}: {b:?}");
            assert!(b.refusal.contains(why), "{who}: {}", b.refusal);
        }
        assert!(judge("bob", "", &["sre"], &Settings { approver_groups: vec![], ..s.clone() }).refusal.contains("groups is empty"));
        assert!(judge("bob", "", &["sre"], &s).effective, "another person, in the approvers' group");
        // Without the audit input the names alone still tell a second account.
        let b = evaluate(&app(&exception("alice-admin")), Stored::default(), &[], &Settings::default(), true, t(NOW)).unwrap();
        assert!(b.refusal.contains("one person's two accounts"), "{}", b.refusal);
    }

    /// Review L-a: nine writes with distinct exceptions by one person do not push
    /// another's opening out of the window; the approval after them verifies.
    #[test]
    fn one_writers_many_exceptions_cannot_push_the_opening_out() {
        let s = audited();
        let cli = "driftwatch-break-glass/0.1.0";
        let (opened, approved) = (exception(""), exception("bob"));
        let mut w = Writes::default();
        w.record(write(&opened, "alice", cli, 0));
        for i in 1..=MAX_WRITES_PER_APP as i64 + 1 {
            let other = Exception { ticket: format!("FAKE-{i}"), ..exception("") };
            w.record(write(&other, "mallory", "kubectl/v1.36.0", i));
        }
        w.record(write(&approved, "bob", cli, 20));
        let kept = w.of("argocd/shop@u");
        assert_eq!(kept.len(), MAX_WRITES_PER_APP);
        assert!(kept.iter().any(|x| x.audit_id == "audit-alice-0"), "the opening was pushed out");
        let b = evaluate(&app(&approved), Stored::default(), kept, &s, true, t(NOW)).unwrap();
        assert_eq!((b.verification, b.effective), (Verification::Verified, true), "{}", b.refusal);
    }
}
#[cfg(test)]
mod roundtrip {
    #[test]
    fn a_record_reads_back() {
        let b = super::BreakGlass { id: "x@1".into(), ticket: "x".into(), opened_at: Some(chrono::Utc::now()), ..Default::default() };
        let r = super::Record { app_key: "a".into(), namespace: "n".into(), name: "m".into(), break_glass: b, newest: None };
        let json = serde_json::to_string(&r).unwrap();
        let back: Result<super::Record, _> = serde_json::from_str(&json);
        assert_eq!(back.as_ref().ok(), Some(&r), "{json} {back:?}");
    }
}
