//! Who, from the API server's audit log: a mutating request on an object an
//! Application manages, made by an identity other than Argo CD's — allowed (a change)
//! or refused (an attempt) — as a typed [`Attempt`], and the per-Application window of
//! recent attempts ([`AttemptIndex`]) the pipeline reads. Pure; the listener and the
//! file follower that produce attempts are in `src/audit/`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::ResourceRef;

mod fields;

pub use fields::{MAX_WALK_NODES, NOT_ALL_READ, json_patch_fields, set_fields};

/// At most this many attempts are kept per Application in the window. Past it the
/// oldest attempt that is not a security one goes; a security attempt goes only for a
/// newer security attempt, the oldest first (see [`AttemptIndex::record`]).
pub const MAX_ATTEMPTS_PER_APP: usize = 16;
/// At most this many Applications have attempts in the window at once; past it a new
/// Application's attempt is refused (counted by the caller).
pub const MAX_APPS_WITH_ATTEMPTS: usize = 10_000;
/// At most this many fields (with their values) are kept of what one request set.
pub const MAX_SET_FIELDS: usize = 32;
/// At most this many characters of one value are kept.
pub const MAX_VALUE_CHARS: usize = 120;
/// At most this many characters of a refusal's reason are kept.
pub const MAX_REASON_CHARS: usize = 300;
/// At most this many groups and source IPs of an identity are kept.
pub const MAX_GROUPS: usize = 16;
/// At most this many new refused attempts of one identity (on any resource, any
/// Application) are taken in the window; past it they are counted, not recorded: a
/// request RBAC refuses needs no right at all, so one identity looping over managed
/// objects must not fill the history or the destinations.
pub const MAX_REFUSED_PER_ACTOR: usize = 32;

/// An attempt's `body` when the audit listener left its request object out for size:
/// what it set is not known, so it counts as a security write (`drift::classify`).
pub const OVER_LIMIT: &str = "over-limit";

/// What shows in place of a masked value.
pub use super::mask::MASKED;

/// How far from now an event may be dated: older is a replay, later a forgery (a
/// write dated to come first, an attempt dated to absorb the real ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeBounds {
    pub max_age: chrono::Duration,
    pub max_ahead: chrono::Duration,
}

impl TimeBounds {
    /// Whether `t` lies within the bounds around `now` (overflow counts as outside).
    pub fn admit(&self, t: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        let (Some(from), Some(to)) = (now.checked_sub_signed(self.max_age), now.checked_add_signed(self.max_ahead)) else {
            return false;
        };
        from <= t && t <= to
    }
}

/// The identity behind a request, as the API server authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Actor {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// Set when the user acted as someone else (`kubectl --as`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<Impersonated>,
    pub source_ips: Vec<String>,
    pub user_agent: String,
}

/// The user an authenticated user impersonated.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Impersonated {
    pub username: String,
    pub groups: Vec<String>,
}

impl Actor {
    /// `alice` or `alice as bob`.
    pub fn display(&self) -> String {
        match &self.impersonated_user {
            Some(i) => format!("{} as {}", self.username, i.username),
            None => self.username.clone(),
        }
    }
}

/// Whether the API server let the request through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    #[default]
    Allowed,
    /// `responseStatus.code` >= 400: RBAC, an admission policy, a conflict.
    Denied,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
        }
    }
}

/// One field a request set, with its value (masked where it looks like a credential).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SetField {
    pub path: String,
    pub value: String,
}

/// A mutating request on a managed object by an identity other than Argo CD's: a
/// change (allowed) or an attempt (denied), as triggers, templates and the history see
/// it (`drift.attempts[]`, `episode.attempts[]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Attempt {
    /// Stable: the audit ID of the first request of this actor on this resource in the
    /// window (an `oncePer` value).
    pub id: String,
    /// The state-store key of the Application that manages the object.
    pub app_key: String,
    /// The object written: group, kind, namespace, name.
    #[serde(flatten)]
    pub object: ResourceRef,
    /// The spoke whose API server logged the request (its label in `clusters:`);
    /// empty: the cluster driftwatch runs in.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// `Kind namespace/name`.
    pub resource: String,
    /// Its class (by kind, `security-context` when the request set a security field),
    /// filled in by the pass from the configured class map.
    pub class: String,
    pub security: bool,
    /// A change to the Application's own spec (self-heal turned off, `targetRevision`
    /// moved).
    pub app_spec: bool,
    pub verb: String,
    /// The subresource written, if any (`scale`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    pub decision: Decision,
    pub code: u16,
    /// Why it was refused (the API server's message, the authorizer's reason).
    pub reason: String,
    /// The field manager the request named (`?fieldManager=`), if any.
    pub manager: String,
    /// The request named one of Argo CD's field managers although its identity is not
    /// one of `audit.argocdIdentities`: a change made to look like Argo CD's (itself a
    /// finding).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub argocd_manager: bool,
    pub audit_id: String,
    /// When the API server received the request.
    pub time: DateTime<Utc>,
    /// Requests coalesced into this one (same actor, resource and decision in the
    /// window), and the latest.
    pub count: u32,
    pub last_at: DateTime<Utc>,
    pub actor: Actor,
    /// What the request set, where the policy level sent the request body.
    pub set: Vec<SetField>,
    /// The field paths it set, and those of them that are security fields.
    pub fields: Vec<String>,
    pub security_fields: Vec<String>,
    /// Why `set` is empty when it is: `not-sent` (the policy level did not include
    /// the request), `dropped` (a Secret's or a token's body, never kept).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub body: String,
    /// Whether `set`/`fields` were cut at [`MAX_SET_FIELDS`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// When driftwatch last received it (the window runs from there, so a batch the API
    /// server delivered late still counts); not stored.
    #[serde(skip)]
    pub received: Option<DateTime<Utc>>,
}

impl Attempt {
    /// Whether `other` may be coalesced into this one within the window: the same
    /// actor on the same resource with the same decision, setting fields of the same
    /// classes (the same security fields); a security write only when it set exactly
    /// the same values (a retry loop). Anything else is a write of its own, notified on
    /// its own: an earlier harmless write by the same person must not absorb a
    /// privileged one (review N4).
    fn same(&self, other: &Attempt) -> bool {
        self.decision == other.decision
            && self.actor.username == other.actor.username
            && self.actor.impersonated_user == other.actor.impersonated_user
            && (&self.object.group, &self.object.kind, &self.object.namespace, &self.object.name) == (&other.object.group, &other.object.kind, &other.object.namespace, &other.object.name)
            && (&self.class, self.security, &self.security_fields) == (&other.class, other.security, &other.security_fields)
            && self.app_spec == other.app_spec
            && self.cluster == other.cluster
            && (!self.security || (self.set == other.set && self.body == other.body))
            // Two writes left out for size look alike whatever they set.
            && self.body != OVER_LIMIT
    }

    /// Whether it was written to `object`.
    pub fn is_on(&self, object: &ResourceRef) -> bool {
        self.object == *object
    }
}

/// Recent attempts per Application (state key), newest first, within a window.
#[derive(Debug, Clone, Default)]
pub struct AttemptIndex {
    by_app: HashMap<String, Vec<Attempt>>,
    /// When each identity's new refused attempts were received (the window's, at most
    /// [`MAX_REFUSED_PER_ACTOR`] each).
    refused_by: HashMap<String, Vec<DateTime<Utc>>>,
}

/// What [`AttemptIndex::record`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// A new actor/resource/decision in the window.
    New,
    /// Folded into one already there (its count rose).
    Coalesced,
    /// [`MAX_APPS_WITH_ATTEMPTS`] Applications (or identities with refused attempts)
    /// already have attempts.
    Full,
    /// A new refused attempt of an identity that already had
    /// [`MAX_REFUSED_PER_ACTOR`] in the window.
    OverBudget,
    /// A new attempt that is not a security one, on an Application whose window holds
    /// [`MAX_ATTEMPTS_PER_APP`] security attempts: not kept (it would push one out).
    WindowFull,
}

impl AttemptIndex {
    /// Records `a` (its `app_key` says for whom), coalescing it with the same actor's
    /// attempt on the same resource within `window`; attempts older than `window`
    /// before `now` are dropped first.
    ///
    /// A new attempt in a full window ([`MAX_ATTEMPTS_PER_APP`]) pushes out the oldest
    /// attempt that is not a security one; only when every attempt there is a security
    /// one does a new security attempt push out the oldest of them, and a new attempt
    /// that is not a security one is not kept ([`Recorded::WindowFull`]). So harmless
    /// writes — which anyone may make on their own objects — cannot push an earlier
    /// security write (their own, self-healed) out of the window and so out of
    /// attribution (review L-d).
    pub fn record(&mut self, mut a: Attempt, window: chrono::Duration, now: DateTime<Utc>) -> Recorded {
        a.received = Some(now);
        if !self.by_app.contains_key(&a.app_key) && self.by_app.len() >= MAX_APPS_WITH_ATTEMPTS {
            self.expire(window, now);
            if self.by_app.len() >= MAX_APPS_WITH_ATTEMPTS {
                return Recorded::Full;
            }
        }
        let list = self.by_app.entry(a.app_key.clone()).or_default();
        list.retain(|o| fresh(o, window, now));
        if let Some(o) = list.iter_mut().find(|o| o.same(&a) && a.time.signed_duration_since(o.time) <= window) {
            o.count = o.count.saturating_add(1);
            o.received = Some(now);
            if a.time >= o.last_at {
                o.last_at = a.time;
                if !a.set.is_empty() {
                    o.set = a.set;
                    o.fields = a.fields;
                    o.security_fields = a.security_fields;
                }
            }
            return Recorded::Coalesced;
        }
        // Checked before a refusal is taken from the budget: one not kept spends none.
        if !a.security && list.len() >= MAX_ATTEMPTS_PER_APP && list.iter().all(|o| o.security) {
            return Recorded::WindowFull;
        }
        if a.decision == Decision::Denied
            && let Err(refused) = self.take_refusal(&a.actor.display(), window, now)
        {
            if self.by_app.get(&a.app_key).is_some_and(Vec::is_empty) {
                self.by_app.remove(&a.app_key);
            }
            return refused;
        }
        let list = self.by_app.entry(a.app_key.clone()).or_default();
        while list.len() >= MAX_ATTEMPTS_PER_APP {
            // Newest first: the last that is not a security attempt is the oldest such;
            // none (all security, and so is `a`, checked above): the oldest of all.
            let oldest = list.iter().rposition(|o| !o.security).unwrap_or(list.len().saturating_sub(1));
            list.remove(oldest);
        }
        list.insert(0, a);
        Recorded::New
    }

    /// Takes one of `actor`'s refused attempts of the window, or says why not.
    fn take_refusal(&mut self, actor: &str, window: chrono::Duration, now: DateTime<Utc>) -> Result<(), Recorded> {
        if !self.refused_by.contains_key(actor) && self.refused_by.len() >= MAX_APPS_WITH_ATTEMPTS {
            self.refused_by.retain(|_, times| recent(times, window, now));
            if self.refused_by.len() >= MAX_APPS_WITH_ATTEMPTS {
                return Err(Recorded::Full);
            }
        }
        let times = self.refused_by.entry(actor.to_string()).or_default();
        if !recent(times, window, now) || times.len() < MAX_REFUSED_PER_ACTOR {
            times.push(now);
            return Ok(());
        }
        Err(Recorded::OverBudget)
    }

    /// The attempts of an Application in the window, newest first.
    pub fn of(&self, app_key: &str) -> &[Attempt] {
        self.by_app.get(app_key).map(Vec::as_slice).unwrap_or_default()
    }

    /// Drops attempts older than `window` (and Applications left without any).
    pub fn expire(&mut self, window: chrono::Duration, now: DateTime<Utc>) {
        self.by_app.retain(|_, list| {
            list.retain(|o| fresh(o, window, now));
            !list.is_empty()
        });
        self.refused_by.retain(|_, times| recent(times, window, now));
    }

    /// Forgets an Application (deleted).
    pub fn remove(&mut self, app_key: &str) {
        self.by_app.remove(app_key);
    }

    pub fn apps(&self) -> usize {
        self.by_app.len()
    }
}

/// Keeps the times within `window` before `now`; whether any are left.
fn recent(times: &mut Vec<DateTime<Utc>>, window: chrono::Duration, now: DateTime<Utc>) -> bool {
    times.retain(|t| t.checked_add_signed(window).is_some_and(|end| end >= now));
    !times.is_empty()
}

/// Whether `a` was received within `window` before `now`.
fn fresh(a: &Attempt, window: chrono::Duration, now: DateTime<Utc>) -> bool {
    a.received.unwrap_or(a.last_at).checked_add_signed(window).is_some_and(|end| end >= now)
}

pub use crate::text::clip;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::mask::Masker;
    use serde_json::json;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-03T10:00:00Z").unwrap().with_timezone(&Utc) + chrono::Duration::seconds(s)
    }

    fn attempt(user: &str, name: &str, decision: Decision, t: i64) -> Attempt {
        Attempt {
            id: format!("{user}-{name}-{t}"),
            app_key: "argocd/app@u".into(),
            object: ResourceRef { group: "apps".into(), kind: "Deployment".into(), namespace: "payments".into(), name: name.into() },
            decision,
            time: at(t),
            last_at: at(t),
            count: 1,
            actor: Actor { username: user.into(), ..Actor::default() },
            ..Attempt::default()
        }
    }

    #[test]
    fn the_same_actor_on_the_same_resource_is_one_attempt_per_window() {
        let mut idx = AttemptIndex::default();
        let w = chrono::Duration::minutes(10);
        assert_eq!(idx.record(attempt("alice", "api", Decision::Allowed, 0), w, at(0)), Recorded::New);
        assert_eq!(idx.record(attempt("alice", "api", Decision::Allowed, 60), w, at(60)), Recorded::Coalesced);
        assert_eq!(idx.record(attempt("alice", "api", Decision::Denied, 61), w, at(61)), Recorded::New, "a refusal is its own");
        assert_eq!(idx.record(attempt("mallory", "api", Decision::Denied, 62), w, at(62)), Recorded::New);
        assert_eq!(idx.record(attempt("alice", "web", Decision::Allowed, 63), w, at(63)), Recorded::New);
        let list = idx.of("argocd/app@u");
        assert_eq!(list.len(), 4);
        assert_eq!(list[0].actor.username, "alice");
        assert_eq!(list[0].object.name, "web", "newest first");
        let first = list.iter().find(|a| a.id == "alice-api-0").unwrap();
        assert_eq!((first.count, first.last_at), (2, at(60)));
        // Past the window the first is gone and alice on api is new again.
        assert_eq!(idx.record(attempt("alice", "api", Decision::Allowed, 60 + 601), w, at(60 + 601)), Recorded::New);
        assert!(idx.of("argocd/app@u").iter().all(|a| a.id != "alice-api-0"));
        idx.expire(w, at(10_000));
        assert_eq!(idx.apps(), 0);
    }

    /// Review N4: a harmless write first must not absorb a privileged one; a security
    /// write coalesces only with the very same write (a retry loop).
    #[test]
    fn only_writes_of_the_same_classes_coalesce_and_security_writes_only_when_identical() {
        let mut idx = AttemptIndex::default();
        let w = chrono::Duration::minutes(10);
        let privileged = |t: i64, value: &str| privileged_to("alice", "api", t, value);
        let label = Attempt { class: "workload".into(), ..attempt("alice", "api", Decision::Allowed, 0) };
        assert_eq!(idx.record(label, w, at(0)), Recorded::New);
        assert_eq!(idx.record(privileged(10, "true"), w, at(10)), Recorded::New, "a privileged write after a label");
        assert_eq!(idx.record(privileged(20, "true"), w, at(20)), Recorded::Coalesced, "the same write again");
        assert_eq!(idx.record(privileged(30, "false"), w, at(30)), Recorded::New, "another value is another write");
        let list = idx.of("argocd/app@u");
        assert_eq!(list.len(), 3);
        assert!(list[0].security && list[1].security && !list[2].security);
    }

    #[test]
    fn bounded_per_application_and_in_applications() {
        let mut idx = AttemptIndex::default();
        let w = chrono::Duration::minutes(10);
        for i in 0..40 {
            idx.record(attempt(&format!("u{i}"), "api", Decision::Denied, i), w, at(i));
        }
        assert_eq!(idx.of("argocd/app@u").len(), MAX_ATTEMPTS_PER_APP);
        for i in 0..MAX_APPS_WITH_ATTEMPTS {
            let mut a = attempt("x", "api", Decision::Allowed, 50);
            a.app_key = format!("ns/a{i}@u");
            idx.record(a, w, at(50));
        }
        let mut a = attempt("x", "api", Decision::Allowed, 50);
        a.app_key = "ns/late@u".into();
        assert_eq!(idx.record(a, w, at(50)), Recorded::Full);
    }

    /// A privileged write by `user` on `name` at `t` (a security attempt).
    fn privileged(user: &str, name: &str, t: i64) -> Attempt {
        privileged_to(user, name, t, "true")
    }

    /// A write of `privileged: <value>` by `user` on `name` at `t`.
    fn privileged_to(user: &str, name: &str, t: i64, value: &str) -> Attempt {
        let path = "spec.template.spec.containers[app].securityContext.privileged";
        Attempt {
            class: "security-context".into(),
            security: true,
            fields: vec![path.into()],
            security_fields: vec![path.into()],
            set: vec![SetField { path: path.into(), value: value.into() }],
            ..attempt(user, name, Decision::Allowed, t)
        }
    }

    /// Review L-d: 20 harmless writes (on as many objects, each a new attempt) after
    /// one privileged write by the same person leave the privileged one in the
    /// Application's window — and so in attribution — with the window still bounded;
    /// the oldest harmless ones went instead. Before: the 16th harmless write pushed
    /// the privileged one out ("the privileged write is still there" failed).
    #[test]
    fn harmless_writes_do_not_push_a_security_attempt_out_of_the_window() {
        let mut idx = AttemptIndex::default();
        let w = chrono::Duration::minutes(10);
        assert_eq!(idx.record(privileged("mallory", "api", 0), w, at(0)), Recorded::New);
        for i in 0..20 {
            let harmless = Attempt { class: "workload".into(), ..attempt("mallory", &format!("obj{i}"), Decision::Allowed, 1 + i) };
            assert_eq!(idx.record(harmless, w, at(1 + i)), Recorded::New);
        }
        let list = idx.of("argocd/app@u");
        assert_eq!(list.len(), MAX_ATTEMPTS_PER_APP, "the bound holds");
        assert!(list.iter().any(|a| a.security && a.id == "mallory-api-0"), "the privileged write is still there");
        let kept: Vec<&str> = list.iter().filter(|a| !a.security).map(|a| a.object.name.as_str()).collect();
        assert_eq!(kept.first(), Some(&"obj19"), "newest first");
        assert_eq!(kept.last(), Some(&"obj5"), "the oldest harmless ones went");
    }

    /// A security attempt goes only for a newer security attempt, the oldest first; a
    /// harmless one in a window of security attempts only is not kept (and a refused
    /// one spends none of its identity's budget). Before (run with the variant added):
    /// the harmless write was `New` and pushed out the oldest security attempt.
    #[test]
    fn security_attempts_are_pushed_out_only_by_newer_security_attempts() {
        let mut idx = AttemptIndex::default();
        let w = chrono::Duration::minutes(10);
        let n = i64::try_from(MAX_ATTEMPTS_PER_APP).unwrap();
        for i in 0..n {
            assert_eq!(idx.record(privileged("mallory", &format!("obj{i}"), i), w, at(i)), Recorded::New);
        }
        let harmless = Attempt { class: "workload".into(), ..attempt("mallory", "web", Decision::Allowed, n) };
        assert_eq!(idx.record(harmless, w, at(n)), Recorded::WindowFull);
        let refused = Attempt { class: "workload".into(), ..attempt("eve", "web", Decision::Denied, n) };
        assert_eq!(idx.record(refused, w, at(n)), Recorded::WindowFull);
        assert!(!idx.refused_by.contains_key("eve"), "no refusal taken from eve's budget");
        assert_eq!(idx.record(privileged("mallory", "newest", n + 1), w, at(n + 1)), Recorded::New);
        let list = idx.of("argocd/app@u");
        assert_eq!(list.len(), MAX_ATTEMPTS_PER_APP);
        assert!(list.iter().all(|a| a.security));
        assert!(list.iter().all(|a| a.object.name != "obj0"), "the oldest security attempt went for the newer one");
        assert_eq!(list[0].object.name, "newest");
    }

    /// Review M2: one identity's new refused attempts are taken up to the budget in
    /// the window, across resources and Applications; past it they are not recorded;
    /// another identity, an allowed change and the next window are not affected.
    #[test]
    fn refused_attempts_are_budgeted_per_identity() {
        let mut idx = AttemptIndex::default();
        let w = chrono::Duration::minutes(10);
        for i in 0..MAX_REFUSED_PER_ACTOR {
            let mut a = attempt("mallory", &format!("obj{i}"), Decision::Denied, 0);
            a.app_key = format!("ns/a{}@u", i % 3);
            assert_eq!(idx.record(a, w, at(0)), Recorded::New);
        }
        assert_eq!(idx.record(attempt("mallory", "one-more", Decision::Denied, 1), w, at(1)), Recorded::OverBudget);
        assert_eq!(idx.record(attempt("mallory", "obj0", Decision::Allowed, 1), w, at(1)), Recorded::New, "a change is not budgeted");
        assert_eq!(idx.record(attempt("eve", "one-more", Decision::Denied, 1), w, at(1)), Recorded::New);
        let mut late = attempt("mallory", "one-more", Decision::Denied, 0);
        late.app_key = "ns/late@u".into();
        assert_eq!(idx.record(late, w, at(2)), Recorded::OverBudget);
        assert!(idx.of("ns/late@u").is_empty());
        assert_eq!(idx.apps(), 4, "no empty entry is left for a refused one");
        assert_eq!(idx.record(attempt("mallory", "one-more", Decision::Denied, 700), w, at(700)), Recorded::New, "a new window");
    }

    #[test]
    fn request_bodies_become_paths_with_credentials_masked() {
        let body = json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
            "securityContext": {"privileged": true},
            "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "MODE", "value": "fast"}]}]}}},
            "metadata": {"managedFields": [{"manager": "x"}], "annotations": {"api-token": "abc"}},
            "data": {"password": "c2VjcmV0"}, "status": {"replicas": 3}});
        let (set, truncated) = set_fields(&body, &Masker::default());
        assert!(!truncated);
        let get = |p: &str| set.iter().find(|f| f.path == p).map(|f| f.value.as_str());
        assert_eq!(get("spec.template.spec.containers[app].securityContext.privileged"), Some("true"));
        assert_eq!(get("spec.template.spec.containers[app].env[DB_PASSWORD].value"), Some(MASKED));
        assert_eq!(get("spec.template.spec.containers[app].env[MODE].value"), Some("fast"));
        assert_eq!(get("metadata.annotations.api-token"), Some(MASKED));
        assert_eq!(get("data.password"), Some(MASKED));
        assert!(set.iter().all(|f| !f.path.starts_with("status") && !f.path.contains("managedFields")), "{set:?}");
        assert!(!format!("{set:?}").contains("hunter2"));
    }

    /// A merge patch's `null` removes the field: it is a change ("(removed)"), found
    /// by its path like any other (self-heal turned off, a securityContext dropped).
    #[test]
    fn a_merge_patch_null_is_a_removal() {
        let body = json!({"spec": {"syncPolicy": {"automated": {"selfHeal": null}},
            "template": {"spec": {"containers": [{"name": "app", "securityContext": null}]}}}});
        let (set, _) = set_fields(&body, &Masker::default());
        let got: Vec<(&str, &str)> = set.iter().map(|f| (f.path.as_str(), f.value.as_str())).collect();
        assert_eq!(
            got,
            [("spec.syncPolicy.automated.selfHeal", "(removed)"), ("spec.template.spec.containers[app].securityContext", "(removed)"),]
        );
    }

    #[test]
    fn bodies_are_bounded() {
        let mut m = serde_json::Map::new();
        for i in 0..500 {
            m.insert(format!("k{i}"), json!("x".repeat(1000)));
        }
        let (set, truncated) = set_fields(&json!({"data2": m}), &Masker::default());
        assert!(truncated);
        assert_eq!(set.len(), MAX_SET_FIELDS);
        assert!(set[0].value.chars().count() <= MAX_VALUE_CHARS + 1);
        let mut deep = json!("leaf");
        for _ in 0..200 {
            deep = json!({ "a": deep });
        }
        let (set, _) = set_fields(&deep, &Masker::default());
        assert_eq!(set.len(), 1, "cut at depth 32, not a stack overflow");
    }

    /// A JSON patch used to be read as a body: `[0].op`, `[0].path`, `[0].value` were
    /// taken for fields, so a privileged container set by JSON patch was no security
    /// change and its value went out unmasked.
    #[test]
    fn a_json_patch_is_read_by_its_paths() {
        let after = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true},
            "env": [{"name": "MODE", "value": "fast"}, {"name": "DB_PASSWORD", "value": "hunter2"}]}]}}}});
        let ops = json!([
            {"op": "test", "path": "/spec/replicas", "value": 2},
            {"op": "replace", "path": "/spec/template/spec/containers/0/securityContext/privileged", "value": true},
            {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "DB_PASSWORD", "value": "hunter2"}},
            {"op": "remove", "path": "/spec/syncPolicy/automated/selfHeal"},
            {"op": "add", "path": "/metadata/annotations/api-token", "value": "abc"},
            {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "x"},
            {"op": "replace", "path": "/status/sync/status", "value": "Synced"},
            {"op": "replace", "path": "/metadata/managedFields/0/manager", "value": "x"}]);
        let (set, truncated) = json_patch_fields(ops.as_array().unwrap(), Some(&after), &Masker::default());
        assert!(!truncated);
        let got: Vec<(&str, &str)> = set.iter().map(|f| (f.path.as_str(), f.value.as_str())).collect();
        assert_eq!(
            got,
            [
                ("spec.template.spec.containers[app].securityContext.privileged", "true"),
                ("spec.template.spec.containers[app].env[DB_PASSWORD].value", MASKED),
                ("spec.syncPolicy.automated.selfHeal", "(removed)"),
                ("metadata.annotations.api-token", MASKED),
                ("metadata.annotations.a/b", "x"),
            ]
        );
        // Without the object after the write, indexes stay indexes.
        let (set, _) = json_patch_fields(&ops.as_array().unwrap()[1..2], None, &Masker::default());
        assert_eq!(set[0].path, "spec.template.spec.containers[0].securityContext.privileged");
    }
}
