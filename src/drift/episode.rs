//! Drift episodes: an Application's stretch of time away from its desired state.
//!
//! An episode opens when the Application goes OutOfSync or Degraded, gathers what
//! drifted (classes, resources, attribution) while it lasts, escalates when its
//! severity rises, and resolves when the Application is Synced and not Degraded again
//! (or is deleted). [`observe`] is the pure transition; the pipeline calls it once per
//! evaluation and the caller stores the result (`state::history`). Triggers and
//! templates see the episode as `episode` ([`Episode::view`]).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::audit::{Attempt, Decision};
use super::classes::SECURITY_CLASSES;
pub use super::operation::OpRef;
use super::{AttributedChange, Direction, Drift, DriftResource};
use crate::json::Pointer;
use crate::model::{Action, App, Severity};

/// Bounds on what one episode keeps.
pub const MAX_RESOURCES: usize = 64;
pub const MAX_ATTRIBUTION: usize = 32;
pub const MAX_NOTIFICATIONS: usize = 64;
pub const MAX_ATTEMPTS: usize = 32;
/// Attempts on an Application that shows nothing (it stays Synced) within this long of
/// its last such episode's opening join that episode instead of opening another: the
/// history holds at most one attempt-only episode per Application per span however
/// many requests arrive (review M2: a loop of refused no-op patches must not push the
/// history out).
pub const ATTEMPT_EPISODE_SPAN: chrono::Duration = chrono::Duration::hours(1);

/// Most of a failure's text an episode keeps.
pub const MAX_FAILURE: usize = 256;

/// A notification of an episode and its outcome (kept in its history): delivered, or
/// failed for good (a dead letter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub trigger: String,
    pub service: String,
    pub recipient: String,
    pub action: Action,
    pub at: DateTime<Utc>,
    /// Why it never reached the destination (refused, or out of attempts: the dead
    /// letter's error, redacted, at most [`MAX_FAILURE`] bytes); absent when delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl Sent {
    /// The outcome of a dead letter: its error, cut to [`MAX_FAILURE`] bytes.
    pub fn failure(error: &str) -> String {
        crate::text::prefix(error, MAX_FAILURE).to_string()
    }
}

/// One drift episode, as stored in the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Episode {
    /// `<namespace>/<name>@<opened unix ms>`: unique, and stable as an `oncePer` value.
    pub id: String,
    /// The state-store key of the Application (`namespace/name@uid`).
    pub app_key: String,
    pub namespace: String,
    pub name: String,
    /// The unit's engine and kind (`flux`, `Kustomization`); empty for an Argo CD
    /// Application (and in episodes stored before other engines were watched).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub engine: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unit_kind: String,
    pub project: String,
    /// `spec.destination.name`, else `spec.destination.server`; a Flux or Fleet
    /// unit's destination cluster (`unit.destination.cluster`).
    pub cluster: String,
    pub opened_at: DateTime<Utc>,
    /// Set when it resolved; an episode without it is open.
    #[serde(default)]
    pub resolved_at: Option<DateTime<Utc>>,
    /// When the severity last rose.
    #[serde(default)]
    pub escalated_at: Option<DateTime<Utc>>,
    /// How many times the severity rose.
    #[serde(default)]
    pub escalations: u32,
    /// How it resolved.
    #[serde(default)]
    pub resolution: Option<Resolution>,
    /// The highest severity reached.
    pub severity: Severity,
    /// `live` if any observation of the episode was live drift, else `git`, `unknown`.
    pub direction: Direction,
    /// `status.sync.revision` when it opened, and the deployed one then.
    pub revision: String,
    #[serde(default)]
    pub deployed_revision: String,
    /// Whether it was ever OutOfSync / Degraded.
    pub out_of_sync: bool,
    pub degraded: bool,
    /// The health status last seen.
    #[serde(default)]
    pub health: String,
    /// When health came back from Degraded while the episode lasted.
    #[serde(default)]
    pub health_recovered_at: Option<DateTime<Utc>>,
    pub classes: BTreeSet<String>,
    /// Every resource that drifted during the episode, with class and attribution.
    pub resources: Vec<DriftResource>,
    /// Field managers other than Argo CD's that changed drifted resources: those that
    /// changed a security field first, then the latest.
    pub attribution: Vec<AttributedChange>,
    #[serde(default)]
    pub notifications: Vec<Sent>,
    /// Changes and refused attempts the audit input matched to the episode (newest
    /// first, at most [`MAX_ATTEMPTS`]).
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// When the change happened: the audit request time of the change, else the time
    /// its field manager last wrote (`managedFields`).
    #[serde(default)]
    pub changed_at: Option<DateTime<Utc>>,
    /// When Argo CD first reported it (OutOfSync or Degraded seen).
    #[serde(default)]
    pub detected_at: Option<DateTime<Utc>>,
    /// When its first notification was delivered.
    #[serde(default)]
    pub notified_at: Option<DateTime<Utc>>,
    /// Its notifications are held for the live reads of its resources (the first
    /// moments, at most [`OPENING`]): nothing was sent yet, so a rise in severity
    /// meanwhile is how it opens, not an escalation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// The operation that deployed what was running when it opened (the cause of a
    /// degradation after a deploy), and the one that ended it (see `resolution`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<OpRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<OpRef>,
    /// The approved break-glass exception it happened under (its changes are recorded
    /// against the ticket), when there was one in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub break_glass: Option<super::break_glass::Reference>,
}

/// How long a new episode may be held for its live reads (the pipeline's wait; a read
/// gives up after 15 s).
pub const OPENING: chrono::Duration = chrono::Duration::seconds(20);

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolution {
    /// Synced and not Degraded again, with no sync operation since it opened (the
    /// drift went away by itself, or by a hand that put the live object back).
    Synced,
    /// Argo CD's automated sync re-applied the revision that was deployed.
    #[serde(rename = "self-heal")]
    SelfHeal,
    /// A newer revision was synced (a fix or a revert in Git).
    Git,
    /// A sync to an older revision (`argocd app rollback`, or back to an earlier commit).
    Rollback,
    /// A person synced (`initiatedBy.username`) the revision that was deployed.
    #[serde(rename = "manual-sync")]
    ManualSync,
    /// The Application was deleted.
    Deleted,
    /// Seen only in the audit input: every request was refused (a change the
    /// Application never showed is `self-heal`: Argo CD re-applied Git first).
    Refused,
}

impl Resolution {
    pub const ALL: [Resolution; 7] = [
        Resolution::Synced,
        Resolution::Deleted,
        Resolution::SelfHeal,
        Resolution::Git,
        Resolution::Rollback,
        Resolution::ManualSync,
        Resolution::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Synced => "synced",
            Resolution::Deleted => "deleted",
            Resolution::SelfHeal => "self-heal",
            Resolution::Git => "git",
            Resolution::Rollback => "rollback",
            Resolution::ManualSync => "manual-sync",
            Resolution::Refused => "refused",
        }
    }
}

/// What an observation did to the episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    Opened,
    Escalated,
    Updated,
    Resolved,
    /// An episode of the audit input alone (a change self-heal erased, a refused
    /// attempt), recorded resolved.
    Attempted,
}

impl Event {
    pub const ALL: [Event; 5] = [Event::Opened, Event::Escalated, Event::Updated, Event::Resolved, Event::Attempted];

    pub fn as_str(self) -> &'static str {
        match self {
            Event::Opened => "opened",
            Event::Escalated => "escalated",
            Event::Updated => "updated",
            Event::Resolved => "resolved",
            Event::Attempted => "attempted",
        }
    }
}

/// The result of one observation: the episode to show (open, or the last resolved
/// one) and, when it changed, what happened (the caller stores it).
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub episode: Option<Episode>,
    pub event: Option<Event>,
}

/// Whether the operation finished after the episode opened (it may have ended it).
fn since_opened(ep: &Episode, op: &super::operation::Operation) -> bool {
    op.phase == "Succeeded" && op.finished_at.is_some_and(|t| t >= ep.opened_at)
}

/// How an episode that is over ended, from Argo CD's last operation: a rollback, a
/// newer revision (Git), the deployed one again by automated sync (self-heal) or by a
/// person (manual sync); no operation since it opened: `synced`.
fn how_resolved(ep: &Episode, drift: &Drift) -> Resolution {
    let Some(op) = drift.operation.as_ref().filter(|op| since_opened(ep, op)) else { return Resolution::Synced };
    if op.rollback {
        Resolution::Rollback
    } else if !ep.deployed_revision.is_empty() && op.revision != ep.deployed_revision {
        Resolution::Git
    } else if op.automated {
        Resolution::SelfHeal
    } else {
        Resolution::ManualSync
    }
}

/// Is `a` more severe than `b`? (`Severity` orders critical first.)
fn more_severe(a: Severity, b: Severity) -> bool {
    a < b
}

/// One observation of `app` (with its computed `drift`) at `now`, given the last
/// episode stored for it.
pub fn observe(prev: Option<Episode>, app: &App, drift: &Drift, now: DateTime<Utc>) -> Observation {
    let (sync, health) = (app.sync_status(), app.health_status());
    let deleted = app.object.at("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null());
    let drifting = !deleted && (sync == "OutOfSync" || health == "Degraded");
    // Attempts of the window the last episode does not have (usually none).
    let known = |a: &Attempt| prev.as_ref().is_some_and(|p| p.attempts.iter().any(|o| o.id == a.id));
    let fresh: Vec<&Attempt> = drift.attempts.iter().filter(|a| !known(a)).collect();
    match prev {
        Some(mut ep) if ep.is_open() => {
            if !drifting {
                merge_attempts(&mut ep, &drift.attempts, now);
                ep.resolved_at = Some(now);
                ep.resolution = Some(if deleted { Resolution::Deleted } else { how_resolved(&ep, drift) });
                if let Some(op) = drift.operation.as_ref().filter(|op| since_opened(&ep, op)) {
                    ep.fix = Some(OpRef::of(op));
                }
                if ep.health == "Degraded" && health != "Degraded" {
                    ep.health_recovered_at = Some(now);
                }
                ep.health = health.to_string();
                return Observation { episode: Some(ep), event: Some(Event::Resolved) };
            }
            let before = ep.clone();
            let escalated = merge(&mut ep, sync, health, drift, now);
            let event = if escalated {
                Some(Event::Escalated)
            } else if ep != before {
                Some(Event::Updated)
            } else {
                None
            };
            Observation { episode: Some(ep), event }
        }
        _ if drifting => {
            let mut ep = new_episode(app, drift, now);
            // Its severity starts at the drift's, so this merge cannot escalate it.
            merge(&mut ep, sync, health, drift, now);
            Observation { episode: Some(ep), event: Some(Event::Opened) }
        }
        // More attempts while the Application still shows nothing: the last attempt-only
        // episode takes them while it is recent.
        Some(mut ep) if !deleted && !fresh.is_empty() && ep.attempts_only() && now - ep.opened_at < ATTEMPT_EPISODE_SPAN => {
            if fresh.iter().any(|a| a.security) {
                ep.severity = Severity::Critical;
            }
            if fresh.iter().any(|a| a.decision == Decision::Allowed) {
                ep.resolution = Some(Resolution::SelfHeal);
            }
            ep.resolved_at = Some(now);
            merge_attempts(&mut ep, fresh.iter().copied(), now);
            Observation { episode: Some(ep), event: Some(Event::Attempted) }
        }
        // Attempts no episode has yet, while the Application shows nothing.
        _ if !deleted && !fresh.is_empty() => {
            Observation { episode: Some(attempt_episode(app, drift, &fresh, health, now)), event: Some(Event::Attempted) }
        }
        prev => Observation { episode: prev, event: None },
    }
}

/// A new episode of `app`, open at `now`, nothing merged yet.
fn new_episode(app: &App, drift: &Drift, now: DateTime<Utc>) -> Episode {
    let dest = |k: &str| app.object.at(&format!("/spec/destination/{k}")).and_then(Value::as_str).unwrap_or_default().to_string();
    let cluster = match app.engine() {
        crate::unit::Engine::ArgoCd => Some(dest("name")).filter(|s| !s.is_empty()).unwrap_or_else(|| dest("server")),
        _ => app.unit.destination.cluster.clone(),
    };
    Episode {
        id: format!("{}@{}", app.qualified_name(), now.timestamp_millis()),
        app_key: app.state_key(),
        namespace: app.namespace.clone(),
        name: app.name.clone(),
        engine: app.not_argocd(crate::unit::Engine::as_str),
        unit_kind: app.not_argocd(crate::unit::Engine::kind),
        project: app.project.clone(),
        cluster,
        opened_at: now,
        resolved_at: None,
        escalated_at: None,
        escalations: 0,
        resolution: None,
        severity: drift.severity.unwrap_or(Severity::Info),
        direction: Direction::None,
        revision: drift.revision.clone(),
        deployed_revision: drift.deployed_revision.clone(),
        out_of_sync: false,
        degraded: false,
        health: String::new(),
        health_recovered_at: None,
        classes: BTreeSet::new(),
        resources: Vec::new(),
        attribution: Vec::new(),
        notifications: Vec::new(),
        attempts: Vec::new(),
        changed_at: None,
        detected_at: None,
        notified_at: None,
        held: false,
        cause: drift.operation.as_ref().filter(|op| op.phase == "Succeeded").map(OpRef::of),
        fix: None,
        break_glass: drift.break_glass.as_ref().filter(|b| b.effective).map(super::break_glass::BreakGlass::reference),
    }
}

/// The episode of attempts the Application never showed (it stayed Synced): opened and
/// resolved at `now` — by self-heal if a request was allowed, else
/// refused — with the attempts' classes, resources and people.
fn attempt_episode(app: &App, drift: &Drift, fresh: &[&Attempt], health: &str, now: DateTime<Utc>) -> Episode {
    let mut ep = new_episode(app, drift, now);
    // Opened (and keyed in the history) at the pass's instant, unique per Application
    // as for any episode; when the first request was made is its `changedAt`.
    ep.direction = Direction::Live;
    ep.health = health.to_string();
    ep.severity = if fresh.iter().any(|a| a.security) { Severity::Critical } else { Severity::Warning };
    ep.resolution = Some(if fresh.iter().any(|a| a.decision == Decision::Allowed) { Resolution::SelfHeal } else { Resolution::Refused });
    ep.resolved_at = Some(now);
    merge_attempts(&mut ep, fresh.iter().copied(), now);
    ep
}

/// Folds attempts into an episode: new ones first (bounded), counts updated; their
/// classes and resources join the episode's, allowed ones its attribution; the time of
/// the change follows.
fn merge_attempts<'a>(ep: &mut Episode, attempts: impl IntoIterator<Item = &'a Attempt>, now: DateTime<Utc>) {
    let attempts: Vec<&Attempt> = attempts.into_iter().collect();
    for a in attempts.into_iter().rev() {
        // Kept without the arrival instant (not stored), so an unchanged attempt leaves
        // the episode unchanged.
        let kept = Attempt { received: None, ..a.clone() };
        match ep.attempts.iter_mut().find(|o| o.id == a.id) {
            Some(o) => *o = kept,
            None => ep.attempts.insert(0, kept),
        }
        ep.classes.insert(a.class.clone());
        let known = ep.resources.iter_mut().find(|r| a.is_on(&r.object));
        if let Some(r) = known {
            // A security write on a resource the episode already has (an earlier
            // harmless write, another person's refusal) makes it a security resource:
            // the routes by class see what this write was, not what the first one was.
            if a.security && !SECURITY_CLASSES.contains(&r.class.as_str()) {
                r.class = a.class.clone();
            }
        } else if ep.resources.len() < MAX_RESOURCES {
            ep.resources.push(DriftResource {
                object: a.object.clone(),
                version: String::new(),
                class: a.class.clone(),
                kind_class: a.class.clone(),
                ..DriftResource::default()
            });
        }
        // The same request (not merely the same audit ID, which the client chooses).
        let same_request = |c: &AttributedChange| {
            c.audit_id == a.audit_id
                && c.resource == a.resource
                && c.fields == a.fields
                && c.actor.as_ref().is_some_and(|x| x.username == a.actor.username)
        };
        if a.decision == Decision::Allowed && !ep.attribution.iter().any(same_request) && ep.attribution.len() < MAX_ATTRIBUTION {
            ep.attribution.push(AttributedChange::from_attempt(a));
        }
    }
    ep.attempts.truncate(MAX_ATTEMPTS);
    AttributedChange::sort(&mut ep.attribution);
    ep.changed_at = changed_at(ep, now);
}

/// When the change behind an episode happened: the latest audited change (else
/// managed-fields write) not after Argo CD reported it; if all are after (clocks
/// apart), the earliest.
fn changed_at(ep: &Episode, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let audited: Vec<DateTime<Utc>> = ep.attempts.iter().filter(|a| a.decision == Decision::Allowed).map(|a| a.time).collect();
    let times = if audited.is_empty() {
        ep.attribution
            .iter()
            .filter_map(|c| DateTime::parse_from_rfc3339(&c.time).ok())
            .map(|t| t.with_timezone(&Utc))
            .filter(|t| *t >= ep.opened_at - chrono::Duration::days(1))
            .collect()
    } else {
        audited
    };
    let reference = ep.detected_at.unwrap_or(now);
    times.iter().filter(|t| **t <= reference).max().or_else(|| times.iter().min()).copied().or(ep.changed_at)
}

/// Folds one observation into an open episode; returns whether the severity rose.
fn merge(ep: &mut Episode, sync: &str, health: &str, drift: &Drift, now: DateTime<Utc>) -> bool {
    if let Some(b) = drift.break_glass.as_ref().filter(|b| b.effective) {
        ep.break_glass = Some(b.reference());
    }
    ep.out_of_sync |= sync == "OutOfSync";
    ep.degraded |= health == "Degraded";
    if ep.detected_at.is_none() && (sync == "OutOfSync" || health == "Degraded") {
        ep.detected_at = Some(now);
    }
    if ep.health == "Degraded" && health != "Degraded" {
        ep.health_recovered_at = Some(now);
    }
    ep.health = health.to_string();
    ep.direction = ep.direction.merge(drift.direction);
    ep.classes.extend(drift.classes.iter().cloned());
    for r in &drift.resources {
        match ep.resources.iter().position(|o| o.same_resource(r)) {
            // Keep the latest view (class may have been refined by attribution).
            Some(i) => ep.resources[i] = r.clone(),
            None if ep.resources.len() < MAX_RESOURCES => ep.resources.push(r.clone()),
            None => {}
        }
    }
    if !drift.attribution.is_empty() {
        for a in &drift.attribution {
            let same = |o: &AttributedChange| (&o.resource, &o.manager, &o.time) == (&a.resource, &a.manager, &a.time);
            if !ep.attribution.iter().any(same) && ep.attribution.len() < MAX_ATTRIBUTION {
                ep.attribution.push(a.clone());
            }
        }
        AttributedChange::sort(&mut ep.attribution);
    }
    // Attempts in the window that belong here: on a resource of this episode, or since
    // it opened (an older attempt on another resource was its own story).
    let belong: Vec<&Attempt> = drift
        .attempts
        .iter()
        .filter(|a| a.received.unwrap_or(a.last_at) >= ep.opened_at || ep.resources.iter().any(|r| a.is_on(&r.object)))
        .collect();
    // A security attempt makes the episode critical even where the drift (of other
    // resources) is not.
    let attempted = belong.iter().any(|a| a.security).then_some(Severity::Critical);
    merge_attempts(ep, belong, now);
    // `Severity` orders critical first: the least is the most severe.
    match [drift.severity, attempted].into_iter().flatten().min() {
        Some(s) if more_severe(s, ep.severity) => {
            ep.severity = s;
            // Nobody was told yet: the episode opens at this severity.
            if ep.held && ep.opened_at.checked_add_signed(OPENING).is_some_and(|end| now < end) {
                return false;
            }
            ep.escalated_at = Some(now);
            ep.escalations += 1;
            true
        }
        _ => false,
    }
}

impl Episode {
    /// Seconds from opening to resolution (or to `now` while open).
    pub fn duration_secs(&self, now: DateTime<Utc>) -> i64 {
        (self.resolved_at.unwrap_or(now) - self.opened_at).num_seconds().max(0)
    }

    /// An episode of the audit input alone: attempts on an Application that never
    /// showed drift (see [`observe`]).
    pub fn attempts_only(&self) -> bool {
        !self.is_open()
            && !self.out_of_sync
            && !self.degraded
            && !self.attempts.is_empty()
            && matches!(self.resolution, Some(Resolution::SelfHeal | Resolution::Refused))
    }

    pub fn is_open(&self) -> bool {
        self.resolved_at.is_none()
    }

    /// What triggers and templates see as `episode`: the stored fields (without the
    /// notifications) plus `open`, `state` (`open`/`resolved`), `durationSeconds`,
    /// `duration` (human) and `resourceCount`.
    pub fn view(&self, now: DateTime<Utc>) -> Value {
        let mut v = self.record(now);
        if let Some(m) = v.as_object_mut() {
            m.remove("notifications");
        }
        v
    }

    /// The episode as `driftwatch history -o json` and `/history` give it: the view
    /// with the notifications delivered for it.
    pub fn record(&self, now: DateTime<Utc>) -> Value {
        // Serializing plain data with string keys cannot fail.
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        let secs = self.duration_secs(now);
        if let Some(m) = v.as_object_mut() {
            m.remove("appKey");
            m.insert("open".into(), json!(self.is_open()));
            m.insert("state".into(), json!(if self.is_open() { "open" } else { "resolved" }));
            m.insert("durationSeconds".into(), json!(secs));
            m.insert("duration".into(), json!(crate::duration::human_duration(secs)));
            m.insert("resourceCount".into(), json!(self.resources.len()));
            if let Some(s) = self.detection_secs() {
                m.insert("detectionSeconds".into(), json!(s));
            }
            if let Some(s) = self.resolution_secs() {
                m.insert("resolutionSeconds".into(), json!(s));
            }
        }
        v
    }

    /// Seconds from the change to Argo CD reporting it, when both are known.
    pub fn detection_secs(&self) -> Option<i64> {
        Some((self.detected_at? - self.changed_at?).num_seconds().max(0))
    }

    /// Seconds from Argo CD reporting it (else from opening) to its resolution, once
    /// resolved.
    pub fn resolution_secs(&self) -> Option<i64> {
        if !self.out_of_sync && !self.degraded {
            // Seen only in the audit input: Argo CD never reported it.
            return None;
        }
        Some((self.resolved_at? - self.detected_at.unwrap_or(self.opened_at)).num_seconds().max(0))
    }

    /// Remembers a delivered notification (bounded: the oldest are dropped), in order
    /// of delivery time; deliveries settled at the same instant (services deliver in
    /// parallel) in order of trigger, service and recipient, so the history reads the
    /// same whichever service finished first.
    pub fn note_sent(&mut self, sent: Sent) {
        if sent.failed.is_none() && self.notified_at.is_none_or(|t| sent.at < t) {
            self.notified_at = Some(sent.at);
        }
        if self.notifications.len() >= MAX_NOTIFICATIONS {
            self.notifications.remove(0);
        }
        fn order(n: &Sent) -> (DateTime<Utc>, &str, &str, &str) {
            (n.at, &n.trigger, &n.service, &n.recipient)
        }
        let at = self.notifications.iter().rposition(|n| order(n) <= order(&sent)).map_or(0, |i| i + 1);
        self.notifications.insert(at, sent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(sync: &str, health: &str) -> App {
        App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "argocd", "uid": "u1"},
            "spec": {"project": "shop", "destination": {"server": "https://kubernetes.default.svc"}},
            "status": {"sync": {"status": sync}, "health": {"status": health}}}))
        .unwrap()
    }

    fn at(min: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-02T03:00:00Z").unwrap().with_timezone(&Utc) + chrono::Duration::minutes(min)
    }

    /// A drift as triggers see it, from its JSON.
    fn typed(v: Value) -> Drift {
        serde_json::from_value(v).unwrap()
    }

    fn drift(severity: &str, class: &str, direction: &str) -> Drift {
        typed(json!({"severity": severity, "direction": direction, "classes": [class], "revision": "abc",
               "resources": [{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web", "class": class}],
               "attribution": [{"resource": "Deployment shop/web", "manager": "kubectl-edit", "time": "t"}]}))
    }

    /// How an episode ended, from the operation after it opened: the same revision by
    /// automated sync (self-heal) or by a person (manual sync), a newer one (git);
    /// none at all: synced.
    #[test]
    fn the_resolution_says_how_from_the_operation_that_ended_it() {
        let mut ep = new_episode(&app("OutOfSync", "Healthy"), &drift("warning", "workload", "live"), at(0));
        ep.deployed_revision = "abc".into();
        let ended_by = |revision: &str, automated: bool, finished: i64| {
            let d = Drift {
                operation: Some(crate::drift::operation::Operation {
                    phase: "Succeeded".into(),
                    revision: revision.into(),
                    username: if automated { String::new() } else { "bob".into() },
                    automated,
                    finished_at: Some(at(finished)),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let o = observe(Some(ep.clone()), &app("Synced", "Healthy"), &d, at(10)).episode.unwrap();
            (o.resolution, o.fix.map(|f| f.by))
        };
        assert_eq!(ended_by("abc", true, 5), (Some(Resolution::SelfHeal), Some("automated sync".into())));
        assert_eq!(ended_by("abc", false, 5), (Some(Resolution::ManualSync), Some("bob".into())));
        assert_eq!(ended_by("def", true, 5), (Some(Resolution::Git), Some("automated sync".into())));
        assert_eq!(ended_by("abc", true, -5), (Some(Resolution::Synced), None), "an operation from before it opened did not end it");
        assert_eq!(Resolution::ManualSync.as_str(), "manual-sync");
        assert_eq!(serde_json::to_value(Resolution::ManualSync).unwrap(), "manual-sync");
    }

    /// Review M2: a loop of refused requests on a Synced Application makes one
    /// attempt-only episode per span, which takes the later ones (security raises it,
    /// an allowed one makes it self-heal); past the span, or after a drift episode, a
    /// new one opens.
    #[test]
    fn attempts_on_a_synced_application_share_one_episode_per_span() {
        use crate::drift::audit::{Actor, Decision};
        let attempt = |id: &str, who: &str, decision: Decision, security: bool| Attempt {
            id: id.into(),
            object: crate::model::ResourceRef {
                kind: "Deployment".into(),
                namespace: "shop".into(),
                name: "web".into(),
                ..Default::default()
            },
            resource: "Deployment shop/web".into(),
            class: "workload".into(),
            decision,
            security,
            actor: Actor { username: who.into(), ..Actor::default() },
            ..Attempt::default()
        };
        let with = |attempts: Vec<Attempt>| Drift { attempts, ..Drift::default() };
        let synced = app("Synced", "Healthy");
        let first = observe(None, &synced, &with(vec![attempt("a1", "mallory", Decision::Denied, false)]), at(0));
        assert_eq!(first.event, Some(Event::Attempted));
        let ep = first.episode.unwrap();
        assert_eq!((ep.resolution, ep.severity), (Some(Resolution::Refused), Severity::Warning));
        let mut last = ep.clone();
        for (i, min) in [5, 20, 59].into_iter().enumerate() {
            let more =
                vec![attempt(&format!("b{i}"), "mallory", Decision::Denied, i == 2), attempt("a1", "mallory", Decision::Denied, false)];
            let o = observe(Some(last.clone()), &synced, &with(more), at(min));
            assert_eq!(o.event, Some(Event::Attempted));
            last = o.episode.unwrap();
            assert_eq!(last.id, ep.id, "the same episode takes them");
        }
        assert_eq!(last.attempts.len(), 4);
        assert_eq!((last.severity, last.resolved_at), (Severity::Critical, Some(at(59))), "a security attempt raised it");
        // The workload resource mallory's refusals brought in is now a security one: the
        // routes by class see the security write (review N4).
        assert_eq!(last.resources.len(), 1);
        assert_eq!(last.resources[0].class, "workload", "the security attempt was classified workload here");
        let mut privileged = attempt("p1", "alice", Decision::Allowed, true);
        privileged.class = "security-context".into();
        let o = observe(Some(last.clone()), &synced, &with(vec![privileged]), at(59));
        assert_eq!(o.episode.as_ref().unwrap().resources[0].class, "security-context");
        let o = observe(Some(last.clone()), &synced, &with(vec![attempt("c1", "alice", Decision::Allowed, false)]), at(59));
        assert_eq!(o.episode.as_ref().unwrap().resolution, Some(Resolution::SelfHeal));
        // Past the span: a new one.
        let o = observe(Some(last.clone()), &synced, &with(vec![attempt("d1", "mallory", Decision::Denied, false)]), at(61));
        assert_ne!(o.episode.unwrap().id, ep.id);
        // After a drift episode (the latest is not attempt-only): a new one.
        let drifted = observe(None, &app("OutOfSync", "Healthy"), &drift("warning", "workload", "live"), at(10)).episode.unwrap();
        let healed = observe(Some(drifted), &synced, &Drift::default(), at(11)).episode.unwrap();
        assert!(!healed.attempts_only());
        let o = observe(Some(healed.clone()), &synced, &with(vec![attempt("e1", "mallory", Decision::Denied, false)]), at(12));
        assert_ne!(o.episode.unwrap().id, healed.id);
    }

    #[test]
    fn opens_escalates_and_resolves_with_a_duration() {
        let o = observe(None, &app("OutOfSync", "Healthy"), &drift("warning", "workload", "live"), at(0));
        assert_eq!(o.event, Some(Event::Opened));
        let ep = o.episode.unwrap();
        assert_eq!(ep.id, format!("argocd/web@{}", at(0).timestamp_millis()));
        assert_eq!(
            (ep.severity, ep.direction.as_str(), ep.cluster.as_str()),
            (Severity::Warning, "live", "https://kubernetes.default.svc")
        );

        // Same drift again: nothing to store.
        let o = observe(Some(ep.clone()), &app("OutOfSync", "Healthy"), &drift("warning", "workload", "live"), at(1));
        assert_eq!(o.event, None);

        // Attribution found a security field: escalated.
        let o = observe(Some(ep), &app("OutOfSync", "Healthy"), &drift("critical", "security-context", "live"), at(3));
        assert_eq!(o.event, Some(Event::Escalated));
        let ep = o.episode.unwrap();
        assert_eq!(ep.severity, Severity::Critical);
        assert_eq!(ep.escalated_at, Some(at(3)));
        assert_eq!(ep.classes.iter().collect::<Vec<_>>(), ["security-context", "workload"]);
        assert_eq!(ep.resources.len(), 1, "the same resource is kept once, with its latest class");
        assert_eq!(ep.resources[0].class, "security-context");
        assert_eq!(ep.attribution.len(), 1);

        let o = observe(Some(ep), &app("Synced", "Healthy"), &typed(json!({"severity": "none", "direction": "none"})), at(14));
        assert_eq!(o.event, Some(Event::Resolved));
        let ep = o.episode.unwrap();
        assert_eq!(ep.resolution, Some(Resolution::Synced));
        let v = ep.view(at(20));
        assert_eq!(v["durationSeconds"], 14 * 60);
        assert_eq!(v["duration"], "14 min");
        assert_eq!(v["open"], false);
        assert_eq!(v["severity"], "critical");

        // Still synced: the resolved episode stays the one shown, unchanged.
        let o = observe(Some(ep.clone()), &app("Synced", "Healthy"), &typed(json!({})), at(30));
        assert_eq!((o.event, o.episode), (None, Some(ep.clone())));
        // Drift again: a new episode with a new id.
        let o = observe(Some(ep.clone()), &app("OutOfSync", "Healthy"), &drift("info", "config", "git"), at(40));
        let next = o.episode.unwrap();
        assert_ne!(next.id, ep.id);
        assert_eq!((next.severity, next.escalations), (Severity::Info, 0));
    }

    #[test]
    fn degraded_health_opens_and_recovery_is_noted() {
        let o = observe(None, &app("Synced", "Degraded"), &typed(json!({"severity": "warning", "direction": "none"})), at(0));
        let ep = o.episode.unwrap();
        assert!(ep.degraded && !ep.out_of_sync);
        let o = observe(Some(ep), &app("OutOfSync", "Healthy"), &drift("warning", "workload", "live"), at(2));
        let ep = o.episode.unwrap();
        assert_eq!(ep.health_recovered_at, Some(at(2)));
        assert!(ep.is_open());
        let mut deleted = app("OutOfSync", "Healthy");
        deleted.object["metadata"]["deletionTimestamp"] = json!("2026-03-02T04:00:00Z");
        let o = observe(Some(ep), &deleted, &typed(json!({})), at(5));
        assert_eq!(o.episode.unwrap().resolution, Some(Resolution::Deleted));
    }

    #[test]
    fn whoever_changed_a_security_field_comes_first() {
        let d = |entries: Value| typed(json!({"severity": "warning", "direction": "live", "attribution": entries}));
        let o = observe(
            None,
            &app("OutOfSync", "Healthy"),
            &d(json!([{"resource": "ConfigMap a/c", "manager": "kubectl-patch", "time": "2026-03-02T03:13:00Z", "securityFields": []}])),
            at(0),
        );
        let late = d(
            json!([{"resource": "Deployment a/w", "manager": "kubectl-edit", "time": "2026-03-02T03:12:00Z", "securityFields": ["spec.x.privileged"]}]),
        );
        let ep = observe(o.episode, &app("OutOfSync", "Healthy"), &late, at(1)).episode.unwrap();
        let managers: Vec<&str> = ep.attribution.iter().map(|a| a.manager.as_str()).collect();
        assert_eq!(managers, ["kubectl-edit", "kubectl-patch"], "read second, but the security change leads");
    }

    #[test]
    fn an_episode_stored_before_the_typed_records_still_reads() {
        // As the state store held it when resources, attribution, direction,
        // resolution and actions were untyped JSON and strings.
        let stored = json!({"id": "argocd/web@1", "appKey": "argocd/web@u1", "namespace": "argocd", "name": "web",
            "project": "shop", "cluster": "in-cluster", "openedAt": "2026-03-02T03:00:00Z", "resolvedAt": "2026-03-02T03:14:00Z",
            "resolution": "deleted", "severity": "critical", "direction": "live", "revision": "a", "outOfSync": true,
            "degraded": false, "classes": ["rbac"],
            "resources": [{"group": "rbac.authorization.k8s.io", "kind": "Role", "namespace": "shop", "name": "r", "class": "rbac"}],
            "attribution": [{"resource": "Role shop/r", "manager": "kubectl-edit", "time": "t", "securityFields": ["rules"]}],
            "notifications": [{"trigger": "on-rbac", "service": "pd", "recipient": "", "action": "resolve", "at": "2026-03-02T03:14:00Z"}]});
        let ep: Episode = serde_json::from_value(stored).unwrap();
        assert_eq!((ep.direction, ep.resolution), (Direction::Live, Some(Resolution::Deleted)));
        assert_eq!((ep.resources[0].object.kind.as_str(), ep.resources[0].kind_class.as_str()), ("Role", ""));
        assert_eq!(ep.attribution[0].security_fields, ["rules"]);
        assert_eq!(ep.notifications[0].action, Action::Resolve);
        assert_eq!(ep.record(at(20))["resources"][0]["attribution"], Value::Null);
    }

    /// Services settle in parallel: notes of one instant read the same whichever
    /// settled first, and a later note still goes last.
    #[test]
    fn notes_are_ordered_by_time_then_trigger_and_destination() {
        let sent = |trigger: &str, service: &str, min| Sent {
            trigger: trigger.into(),
            service: service.into(),
            recipient: String::new(),
            action: Action::Fire,
            at: at(min),
            failed: None,
        };
        let ep = observe(None, &app("OutOfSync", "Healthy"), &drift("warning", "workload", "live"), at(0)).episode.unwrap();
        let (mut a, mut b) = (ep.clone(), ep);
        for n in [sent("on-x", "slack", 1), sent("on-x", "email", 1), sent("on-a", "siem", 1), sent("on-a", "siem", 0)] {
            a.note_sent(n);
        }
        for n in [sent("on-a", "siem", 1), sent("on-a", "siem", 0), sent("on-x", "email", 1), sent("on-x", "slack", 1)] {
            b.note_sent(n);
        }
        assert_eq!(a.notifications, b.notifications);
        let order: Vec<(&str, &str)> = a.notifications.iter().map(|n| (n.trigger.as_str(), n.service.as_str())).collect();
        assert_eq!(order, [("on-a", "siem"), ("on-a", "siem"), ("on-x", "email"), ("on-x", "slack")]);
        assert_eq!(a.notifications[0].at, at(0));
    }
}
