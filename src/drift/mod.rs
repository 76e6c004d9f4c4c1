//! Drift intelligence, pure: what drifted in an Application ([`Drift`]), what kind of
//! thing each resource is ([`classes`]), who changed it ([`attribution`], from
//! `managedFields`) and the drift episode it belongs to ([`episode`]).
//!
//! These are typed records; triggers and templates see them as `drift` and `episode`,
//! converted once per pass where rhai and handlebars begin (`trigger/`, `template/`).

pub mod attribution;
pub mod audit;
pub mod break_glass;
pub mod classes;
pub mod diff;
pub mod episode;
pub mod ignore;
pub mod mask;
pub mod operation;
pub mod story;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::Pointer;
use crate::model::Severity;

use self::attribution::{Attribution, LiveIndex, is_security_field, live_key};
use self::audit::{Actor, Attempt, Decision};
use self::classes::{ClassMap, MAX_ATTRIBUTION_ENTRIES, SECURITY_CLASSES};
use self::diff::FieldChange;

/// Where a drift comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The compared revision differs from the deployed one (or nothing was deployed
    /// yet): Git's content waiting to be synced.
    Git,
    /// Same revision, resources went OutOfSync: someone changed the cluster.
    Live,
    /// No revision to compare.
    Unknown,
    /// Not OutOfSync.
    #[default]
    None,
}

impl Direction {
    pub const ALL: [Direction; 4] = [Direction::Git, Direction::Live, Direction::Unknown, Direction::None];

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Git => "git",
            Direction::Live => "live",
            Direction::Unknown => "unknown",
            Direction::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Direction> {
        Direction::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The direction of an episode that saw `self` and then `other`: live drift
    /// outweighs a Git change, which outweighs not knowing.
    pub fn merge(self, other: Direction) -> Direction {
        [Direction::Live, Direction::Git, Direction::Unknown].into_iter().find(|d| self == *d || other == *d).unwrap_or(self)
    }
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One OutOfSync resource of an Application.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DriftResource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Its class: by kind, or `security-context` when a field manager other than Argo
    /// CD's owns one of its security fields (and its kind class is not rbac,
    /// network-policy or admission).
    pub class: String,
    /// Its class by kind alone (what decides which fields are security fields).
    pub kind_class: String,
    /// What its live object's `managedFields` say, when read.
    pub attribution: Option<Attribution>,
    /// The changed fields, Git value -> live value (`drift::diff`), security fields
    /// first, at most `diff.maxFields`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<FieldChange>,
    /// Changed fields not in `changes`.
    #[serde(skip_serializing_if = "is_zero")]
    pub changes_more: usize,
    /// Where the desired values came from: `argocd`, `last-applied`, `not-known`;
    /// empty when the resource was not diffed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub desired_source: String,
    /// Why part of the diff is missing.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub diff_note: String,
    /// The spoke cluster it lives in (empty: the cluster driftwatch runs in).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// Its node in Argo CD's UI, to append to `context.argocdUrl`:
    /// `/applications/<app namespace>/<app>?resource=&node=<group>%2F<kind>%2F<namespace>%2F<name>%2F0`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ui_path: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The path of a resource's node in Argo CD's UI (`node=group/kind/namespace/name/0`).
/// Kubernetes names need no escaping but the `/` between them; anything else is
/// escaped as a query value.
pub fn ui_path(app: &Value, group: &str, kind: &str, namespace: &str, name: &str) -> String {
    let meta = |k: &str| app.at(&format!("/metadata/{k}")).and_then(Value::as_str).unwrap_or_default();
    let mut out = String::with_capacity(64 + group.len() + kind.len() + namespace.len() + name.len());
    let escape = |out: &mut String, s: &str| {
        if s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')) {
            out.push_str(s);
        } else {
            out.extend(form_urlencoded::byte_serialize(s.as_bytes()));
        }
    };
    out.push_str("/applications/");
    escape(&mut out, meta("namespace"));
    out.push('/');
    escape(&mut out, meta("name"));
    out.push_str("?resource=&node=");
    for (i, part) in [group, kind, namespace, name].into_iter().enumerate() {
        if i > 0 {
            out.push_str("%2F");
        }
        escape(&mut out, part);
    }
    out.push_str("%2F0");
    out
}

impl DriftResource {
    /// Whether `other` is the same resource (class and attribution aside).
    pub fn same_resource(&self, other: &DriftResource) -> bool {
        (&self.group, &self.kind, &self.namespace, &self.name) == (&other.group, &other.kind, &other.namespace, &other.name)
    }
}

/// A field manager other than Argo CD's behind a drifted resource.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AttributedChange {
    /// `Kind namespace/name`.
    pub resource: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub manager: String,
    pub operation: String,
    /// RFC 3339, as the API server recorded the manager's last write.
    pub time: String,
    pub fields: Vec<String>,
    pub security_fields: Vec<String>,
    /// The person behind the write, from the audit input (`actor.username`, groups,
    /// source IPs, user agent), when an audited request matches it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<Actor>,
    /// The audit ID of that request.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub audit_id: String,
    /// Other people whose audited requests match the same write (the field manager's
    /// entry covers several requests): `actor` or any of these made it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
}

impl AttributedChange {
    /// The write an allowed audited request made, for when no field manager shows it
    /// (the live read has not happened, or self-heal erased it): its field manager (else
    /// the client's name), the fields it set, the person.
    pub fn from_attempt(a: &Attempt) -> AttributedChange {
        AttributedChange {
            resource: a.resource.clone(),
            kind: a.kind.clone(),
            namespace: a.namespace.clone(),
            name: a.name.clone(),
            manager: if a.manager.is_empty() {
                a.actor.user_agent.split('/').next().unwrap_or_default().to_string()
            } else {
                a.manager.clone()
            },
            operation: a.verb.clone(),
            time: a.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            fields: a.fields.clone(),
            security_fields: a.security_fields.clone(),
            actor: Some(a.actor.clone()),
            audit_id: a.audit_id.clone(),
            also: Vec::new(),
        }
    }

    /// Most relevant first: whoever changed a security field, then the latest.
    pub fn sort(list: &mut [AttributedChange]) {
        list.sort_by(|a, b| (!b.security_fields.is_empty()).cmp(&!a.security_fields.is_empty()).then_with(|| b.time.cmp(&a.time)));
    }
}

/// What drifted in an Application at one observation (`drift` in triggers and
/// templates).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Drift {
    /// The classes of the OutOfSync resources, sorted.
    pub classes: Vec<String>,
    /// How many resources are OutOfSync.
    pub count: usize,
    pub resources: Vec<DriftResource>,
    pub direction: Direction,
    /// `status.sync.revision(s)`, and the newest deployed revision.
    pub revision: String,
    pub deployed_revision: String,
    /// The managers behind the drift, flattened over resources, most relevant first
    /// (at most [`MAX_ATTRIBUTION_ENTRIES`]).
    pub attribution: Vec<AttributedChange>,
    /// A security field changed by someone other than Argo CD, or a security class
    /// drifted other than by a Git change.
    pub security: bool,
    /// `critical` (security), `warning` (live/unknown drift or Degraded), `info` (a Git
    /// change); `none` (written so) when nothing drifted.
    #[serde(with = "severity_or_none")]
    pub severity: Option<Severity>,
    pub degraded: bool,
    /// Changes and refused attempts on its objects by identities other than Argo CD's,
    /// from the audit input, within the window, newest first (classified).
    pub attempts: Vec<Attempt>,
    /// Argo CD's last sync operation (`status.operationState`): revision, who, phase,
    /// and whether it was a rollback (`drift.operation.rollback`, `.from`, `.to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<operation::Operation>,
    /// The Application's break-glass exception as judged this pass (`drift.breakGlass`:
    /// state, ticket, who opened and approved it, `effective`, `overdue`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub break_glass: Option<break_glass::BreakGlass>,
    /// Live reads of drifted resources (who, the diff) are still on their way; the
    /// notifications of a new episode wait for them (at most `episode::OPENING`).
    pub awaiting_live: bool,
}

/// A severity written as `none` when there is none.
mod severity_or_none {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::model::Severity;

    pub fn serialize<S: Serializer>(s: &Option<Severity>, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(s.map_or("none", Severity::as_str))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Severity>, D::Error> {
        Ok(Severity::parse(&String::deserialize(d)?))
    }
}

impl Drift {
    /// The drift as JSON, the shape triggers and templates see as `drift` (the
    /// conversion `trigger/` and `template/` make once per pass).
    pub fn view(&self) -> Value {
        // Plain data with string keys: serializing cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// What drifted in an Application, from its status, the class map and the
    /// attribution and diffs read from the live objects (`live`, possibly empty; keyed
    /// by `cluster`, the [`crate::config::clusters::Target::key`] of the Application).
    /// `scope`: what the Application's AppProject lets driftwatch read for it; a
    /// resource outside it is `notRead: outside-project`, whatever the live index holds.
    pub fn of(app: &Value, classes: &ClassMap, live: &LiveIndex, cluster: &str, scope: &crate::project::Scope) -> Drift {
        let mut class_set = BTreeSet::new();
        let mut resources = Vec::new();
        let mut attribution = Vec::new();
        let mut attributed_security = false;
        if let Some(list) = app.at("/status/resources").and_then(Value::as_array) {
            for r in list {
                if r.get("status").and_then(Value::as_str) != Some("OutOfSync") {
                    continue;
                }
                let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                let kind_class = classes.class_of(s("group"), s("kind"));
                let outside = scope
                    .permits(s("group"), s("kind"), s("namespace"))
                    .err()
                    .map(|why| Attribution::not_read(attribution::NotReadReason::OutsideProject, why.0));
                let attr = match &outside {
                    Some(refused) => Some(refused),
                    None => live.get(&live_key(cluster, s("group"), s("kind"), s("namespace"), s("name"))),
                };
                let mut class = kind_class;
                if attr.is_some_and(|a| a.security) {
                    attributed_security = true;
                    if !matches!(kind_class, "rbac" | "network-policy" | "admission") {
                        class = "security-context";
                    }
                }
                class_set.insert(class.to_string());
                let resource = format!("{} {}/{}", s("kind"), s("namespace"), s("name"));
                for m in attr.map(|a| a.managers.as_slice()).unwrap_or_default() {
                    if attribution.len() < MAX_ATTRIBUTION_ENTRIES {
                        attribution.push(AttributedChange {
                            resource: resource.clone(),
                            kind: s("kind").into(),
                            namespace: s("namespace").into(),
                            name: s("name").into(),
                            manager: m.manager.clone(),
                            operation: m.operation.clone(),
                            time: m.time.clone(),
                            fields: m.fields.clone(),
                            security_fields: m.security_fields.clone(),
                            actor: None,
                            audit_id: String::new(),
                            also: Vec::new(),
                        });
                    }
                }
                // The diff goes in the resource's own fields, not twice.
                let (attribution, diff) = match attr {
                    Some(a) => {
                        let mut a = a.clone();
                        let d = a.diff.take();
                        (Some(a), d)
                    }
                    None => (None, None),
                };
                let diff = diff.unwrap_or_default();
                let diffed = attribution.as_ref().is_some_and(|a| a.not_read.is_none()) && diff != Default::default();
                resources.push(DriftResource {
                    group: s("group").into(),
                    version: s("version").into(),
                    kind: s("kind").into(),
                    namespace: s("namespace").into(),
                    name: s("name").into(),
                    class: class.into(),
                    kind_class: kind_class.into(),
                    attribution,
                    desired_source: if diffed { diff.source.as_str().to_string() } else { String::new() },
                    changes: diff.changes,
                    changes_more: diff.more,
                    diff_note: diff.note,
                    cluster: if cluster.starts_with('?') { String::new() } else { cluster.to_string() },
                    ui_path: ui_path(app, s("group"), s("kind"), s("namespace"), s("name")),
                });
            }
        }
        AttributedChange::sort(&mut attribution);
        let (direction, revision, deployed_revision) = direction(app);
        let degraded = app.at("/status/health/status").and_then(Value::as_str) == Some("Degraded");
        let security =
            attributed_security || (direction != Direction::Git && class_set.iter().any(|c| SECURITY_CLASSES.contains(&c.as_str())));
        let severity = if security {
            Some(Severity::Critical)
        } else if matches!(direction, Direction::Live | Direction::Unknown) || degraded {
            Some(Severity::Warning)
        } else if direction == Direction::Git {
            Some(Severity::Info)
        } else {
            None
        };
        Drift {
            classes: class_set.into_iter().collect(),
            count: resources.len(),
            resources,
            direction,
            revision,
            deployed_revision,
            attribution,
            security,
            severity,
            degraded,
            attempts: Vec::new(),
            operation: operation::Operation::of(app),
            break_glass: None,
            awaiting_live: false,
        }
    }
}

impl Drift {
    /// Adds what the audit input saw of this Application (`attempts`, newest first):
    /// each attempt classified; a drifted resource's attribution gains the person
    /// behind the write (or an entry of its own when the live read has not shown the
    /// manager, or self-heal erased it); a security field set by an allowed request
    /// makes the drift a security drift at once, before any live read.
    pub fn with_attempts(mut self, attempts: &[Attempt], classes: &ClassMap) -> Drift {
        if attempts.is_empty() {
            return self;
        }
        let mut attributed_security = false;
        // Changes and attribution entries whose person this function named (and may
        // name another beside: "alice or mallory").
        let mut named: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut named_entries: BTreeSet<usize> = BTreeSet::new();
        for a in attempts {
            let mut a = a.clone();
            classify(&mut a, classes);
            let at = self.resources.iter().position(|r| a.is_on(&r.group, &r.kind, &r.namespace, &r.name));
            if a.decision == Decision::Allowed
                && let Some(ri) = at
            {
                let r = &mut self.resources[ri];
                if !a.security_fields.is_empty() {
                    attributed_security = true;
                    if !matches!(r.kind_class.as_str(), "rbac" | "network-policy" | "admission") {
                        r.class = "security-context".into();
                    }
                }
                // The person behind each changed field this request wrote: by the fields
                // it set, not by the field manager alone (two people's `kubectl edit`
                // share one manager); both named when both wrote it.
                let who = &a.actor.username;
                for (ci, c) in r.changes.iter_mut().enumerate() {
                    if !wrote(&a, std::slice::from_ref(&c.path), &c.manager) {
                        continue;
                    }
                    if c.user.is_empty() {
                        c.user = who.clone();
                        named.insert((ri, ci));
                    } else if named.contains(&(ri, ci))
                        && !c.user.split(" or ").any(|u| u == who)
                        && c.user.matches(" or ").count() < MAX_NAMED - 1
                    {
                        c.user = format!("{} or {who}", c.user);
                    }
                }
                let resource = format!("{} {}/{}", r.kind, r.namespace, r.name);
                let mut matched = false;
                for (i, c) in self.attribution.iter_mut().enumerate().filter(|(_, c)| c.resource == resource) {
                    if !wrote(&a, &c.fields, &c.manager) {
                        continue;
                    }
                    matched = true;
                    match &c.actor {
                        None => {
                            c.actor = Some(a.actor.clone());
                            c.audit_id = a.audit_id.clone();
                            named_entries.insert(i);
                        }
                        Some(first)
                            if named_entries.contains(&i)
                                && first.username != *who
                                && !c.also.contains(who)
                                && c.also.len() < MAX_NAMED - 1 =>
                        {
                            c.also.push(who.clone())
                        }
                        Some(_) => {}
                    }
                }
                if !matched && self.attribution.len() < MAX_ATTRIBUTION_ENTRIES {
                    self.attribution.push(AttributedChange::from_attempt(&a));
                }
            }
            self.attempts.push(a);
        }
        // A sync written directly by a person (not through Argo CD's API, whose server
        // identity is one of `audit.argocdIdentities`): that person started it, whatever
        // its `initiatedBy` says. The newest such write not after the operation began.
        if let Some(op) = self.operation.as_mut() {
            let wrote_operation = |a: &&Attempt| {
                a.app_spec && a.decision == Decision::Allowed && a.fields.iter().any(|f| f == "operation" || f.starts_with("operation."))
            };
            if let Some(a) = self.attempts.iter().filter(wrote_operation).find(|a| op.began_after(a.time)) {
                op.written_by(&a.actor.display());
            }
        }
        if attributed_security {
            self.classes = self.resources.iter().map(|r| r.class.clone()).collect::<BTreeSet<_>>().into_iter().collect();
            self.security = true;
            if self.severity.is_some() {
                self.severity = Some(Severity::Critical);
            }
        }
        AttributedChange::sort(&mut self.attribution);
        self
    }
}

/// At most this many people are named for one write ("alice or mallory or …").
const MAX_NAMED: usize = 4;

/// Whether the allowed request `a` wrote what a field manager's write shows (`paths`
/// under `manager`): a request whose body was read by the fields it set overlapping
/// those paths (and its field manager, when it named one, being that one); a request
/// whose body was not sent (or a write whose fields are not known) by the field
/// manager alone.
fn wrote(a: &Attempt, paths: &[String], manager: &str) -> bool {
    if a.fields.is_empty() || paths.is_empty() {
        // Without `?fieldManager=` the API server names the manager after the client
        // (the user agent up to its first `/`).
        let effective = if a.manager.is_empty() { a.actor.user_agent.split('/').next().unwrap_or_default() } else { &a.manager };
        return !effective.is_empty() && effective == manager;
    }
    (a.manager.is_empty() || a.manager == manager) && a.fields.iter().any(|f| paths.iter().any(|p| overlaps(f, p)))
}

/// Whether one field path is the other or holds it (`a.b` holds `a.b.c` and `a.b[x]`).
fn overlaps(a: &str, b: &str) -> bool {
    let holds = |outer: &str, inner: &str| {
        inner.strip_prefix(outer).is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
    };
    holds(a, b) || holds(b, a)
}

/// Whether `path` of an Application is one of [`APP_SECURITY_FIELDS`], or holds one
/// (a write of `metadata.annotations` whole, a removal of `spec`).
pub(crate) fn app_security_field(path: &str) -> bool {
    APP_SECURITY_FIELDS
        .iter()
        .any(|f| path.starts_with(f) || f.strip_prefix(path).is_some_and(|rest| rest.starts_with('.')) || f.trim_end_matches('/') == path)
}

/// Fields of an Application whose write by a person weakens what Argo CD enforces or
/// what driftwatch tells: self-heal and pruning, the project, where it deploys; what it
/// deploys (its sources: a repository, a revision, inline Helm values or Kustomize
/// patches written past Git's review), what Argo CD ignores of the live objects; a
/// sync operation written directly (any revision, past Argo CD's RBAC and Git's
/// review); its status (what driftwatch reads: the CRD has no status subresource);
/// where its notifications go; whether Argo CD reconciles it at all, its labels (what
/// routes select it by) and finalizers.
const APP_SECURITY_FIELDS: &[&str] = &[
    // Argo CD stops reconciling it (its status then stays as it was).
    "metadata.annotations.argocd.argoproj.io/skip-reconcile",
    // What routes and subscriptions select it by; what keeps its resources on delete.
    "metadata.labels",
    "metadata.finalizers",
    "spec.syncPolicy",
    "spec.project",
    "spec.destination",
    "spec.source",
    "spec.sources",
    "spec.sourceHydrator",
    "spec.ignoreDifferences",
    "operation",
    "status",
    "metadata.annotations.notifications.argoproj.io/",
    "metadata.annotations.driftwatch.io/",
];

/// An attempt's class and security, from the class map and the fields it set (done
/// when the audit input records it, so coalescing can compare classes, and again per
/// pass, with the configuration of the pass).
pub(crate) fn classify(a: &mut Attempt, classes: &ClassMap) {
    let kind_class = if a.app_spec { "application" } else { classes.class_of(&a.group, &a.kind) };
    a.security_fields = if a.app_spec {
        a.fields.iter().filter(|p| app_security_field(p)).cloned().collect()
    } else {
        a.fields.iter().filter(|p| is_security_field(kind_class, p)).cloned().collect()
    };
    if a.body == audit::OVER_LIMIT {
        // What it set was left out for size (an attacker can pad a write past the
        // bound): not known, so taken as a security write.
        a.security_fields = vec!["(request over audit.maxBodyBytes)".to_string()];
    } else if a.fields.iter().any(|f| f == audit::NOT_ALL_READ) {
        // Its body was not walked to the end: the same.
        a.security_fields.push(audit::NOT_ALL_READ.to_string());
    }
    // Deleting the Application (its resources stay, unwatched, with `--cascade=orphan`).
    if a.app_spec && matches!(a.verb.as_str(), "delete" | "deletecollection") && a.security_fields.is_empty() {
        a.security_fields.push("(the Application deleted)".to_string());
    }
    a.class = match (a.app_spec, a.security_fields.is_empty()) {
        // A write to the Application that weakens what Argo CD enforces is of the
        // `application` class (a security class, which the security routes list); one
        // that does not (a label, a link) is `other`.
        (true, false) => "application".to_string(),
        (true, true) => "other".to_string(),
        (false, false) if !matches!(kind_class, "rbac" | "network-policy" | "admission") => "security-context".to_string(),
        (false, _) => kind_class.to_string(),
    };
    a.security = SECURITY_CLASSES.contains(&a.class.as_str()) || !a.security_fields.is_empty();
}

/// `(direction, revision, deployed revision)` of an Application. The deployed revision
/// is the newest of `status.history` (successful syncs), else the revision of a
/// succeeded operation; multi-source Applications compare their revision lists.
pub fn direction(app: &Value) -> (Direction, String, String) {
    let revs = operation::revisions;
    let revision = revs(app.at("/status/sync"));
    let mut deployed = revs(app.at("/status/history").and_then(Value::as_array).and_then(|h| h.last()));
    if deployed.is_empty() && app.at("/status/operationState/phase").and_then(Value::as_str) == Some("Succeeded") {
        deployed = revs(app.at("/status/operationState/syncResult"));
    }
    if app.at("/status/sync/status").and_then(Value::as_str) != Some("OutOfSync") {
        return (Direction::None, revision, deployed);
    }
    let dir = if revision.is_empty() {
        Direction::Unknown
    } else if deployed.is_empty() || revision != deployed {
        // Nothing deployed yet (a new Application) is Git's content waiting, too.
        Direction::Git
    } else {
        Direction::Live
    };
    (dir, revision, deployed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::attribution::resource_key;
    use serde_json::json;

    /// What triggers and templates see of the drift of `app`.
    fn view(m: &ClassMap, app: &Value, live: &LiveIndex) -> Value {
        serde_json::to_value(Drift::of(app, m, live, "", &crate::project::Scope::unrestricted())).unwrap()
    }

    #[test]
    fn classes_of_drifted_resources() {
        let m = ClassMap::default();
        let app = json!({"status": {"resources": [
            {"group": "rbac.authorization.k8s.io", "kind": "Role", "namespace": "a", "name": "r", "status": "OutOfSync"},
            {"group": "apps", "kind": "Deployment", "namespace": "a", "name": "web", "status": "OutOfSync"},
            {"kind": "ConfigMap", "namespace": "a", "name": "cm", "status": "Synced"},
            {"group": "example.com", "kind": "Widget", "namespace": "a", "name": "w", "status": "OutOfSync"},
            {"group": "cilium.io", "kind": "CiliumNetworkPolicy", "namespace": "a", "name": "p", "status": "OutOfSync"}
        ]}});
        let d = view(&m, &app, &LiveIndex::new());
        assert_eq!(d["classes"], json!(["network-policy", "other", "rbac", "workload"]));
        assert_eq!(d["count"], 4);
        assert_eq!(
            d["resources"][0],
            json!({"group": "rbac.authorization.k8s.io", "version": "", "kind": "Role", "namespace": "a", "name": "r",
                   "class": "rbac", "kindClass": "rbac", "attribution": null,
                   "uiPath": "/applications//?resource=&node=rbac.authorization.k8s.io%2FRole%2Fa%2Fr%2F0"})
        );
        // No sync status: no direction; a security class without a Git change is critical.
        assert_eq!(
            (d["direction"].as_str(), d["severity"].as_str(), d["security"].as_bool()),
            (Some("none"), Some("critical"), Some(true))
        );
        let empty = view(&m, &json!({}), &LiveIndex::new());
        assert_eq!((empty["count"].as_u64(), empty["severity"].as_str()), (Some(0), Some("none")));
    }

    fn app(sync_rev: &str, deployed: &str, resources: Value) -> Value {
        json!({"status": {"sync": {"status": "OutOfSync", "revision": sync_rev},
                          "history": [{"revision": "old"}, {"revision": deployed}], "resources": resources}})
    }

    #[test]
    fn direction_tells_a_git_change_from_live_drift() {
        let m = ClassMap::default();
        let role = json!([{"group": "rbac.authorization.k8s.io", "kind": "Role", "namespace": "a", "name": "r", "status": "OutOfSync"}]);
        let git = view(&m, &app("new", "cur", role.clone()), &LiveIndex::new());
        assert_eq!(
            (git["direction"].as_str(), git["revision"].as_str(), git["deployedRevision"].as_str()),
            (Some("git"), Some("new"), Some("cur"))
        );
        assert_eq!((git["security"].as_bool(), git["severity"].as_str()), (Some(false), Some("info")), "a reviewed Git change is quiet");
        let live = view(&m, &app("cur", "cur", role), &LiveIndex::new());
        assert_eq!((live["direction"].as_str(), live["severity"].as_str()), (Some("live"), Some("critical")));
        let cm = json!([{"kind": "ConfigMap", "namespace": "a", "name": "c", "status": "OutOfSync"}]);
        assert_eq!(view(&m, &app("cur", "cur", cm.clone()), &LiveIndex::new())["severity"], "warning");
        assert_eq!(view(&m, &app("cur", "", cm.clone()), &LiveIndex::new())["direction"], "git", "never deployed: Git's content waits");
        assert_eq!(view(&m, &app("", "cur", cm), &LiveIndex::new())["direction"], "unknown", "no revision to compare");
        let multi = json!({"status": {"sync": {"status": "OutOfSync", "revisions": ["a", "b"]}, "history": [{"revisions": ["a", "b"]}]}});
        assert_eq!(direction(&multi).0, Direction::Live);
        let op = json!({"status": {"sync": {"status": "OutOfSync", "revision": "x"},
                                   "operationState": {"phase": "Succeeded", "syncResult": {"revision": "y"}}}});
        assert_eq!(direction(&op).0, Direction::Git);
    }

    #[test]
    fn attribution_makes_a_workload_drift_a_security_drift() {
        let m = ClassMap::default();
        let mut live = LiveIndex::new();
        let object = json!({"metadata": {"managedFields": [{"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-02T03:12:00Z",
            "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:securityContext": {"f:privileged": {}}}}}}}}}]}});
        live.insert(resource_key("apps", "Deployment", "shop", "web"), crate::drift::attribution::attribute(&object, "workload", &[]));
        let res = json!([{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web", "status": "OutOfSync"},
                         {"kind": "ConfigMap", "namespace": "shop", "name": "c", "status": "OutOfSync"}]);
        // Even alongside a Git change, a security field edited by hand is critical.
        let d = view(&m, &app("new", "cur", res), &live);
        assert_eq!(d["classes"], json!(["config", "security-context"]));
        assert_eq!(
            (d["resources"][0]["class"].as_str(), d["resources"][0]["kindClass"].as_str()),
            (Some("security-context"), Some("workload"))
        );
        assert_eq!((d["security"].as_bool(), d["severity"].as_str()), (Some(true), Some("critical")));
        assert_eq!(d["attribution"][0]["manager"], "kubectl-edit");
        assert_eq!(d["attribution"][0]["resource"], "Deployment shop/web");
        assert_eq!(d["attribution"][0]["securityFields"], json!(["spec.template.spec.containers[app].securityContext.privileged"]));
    }

    #[test]
    fn the_diff_becomes_the_resources_changes_in_its_cluster_with_the_person() {
        use crate::drift::diff::{DesiredSource, FieldChange, ResourceDiff};
        let mut a = crate::drift::attribution::Attribution::default();
        let change = FieldChange {
            path: "spec.replicas".into(),
            desired: "2".into(),
            live: "5".into(),
            manager: "kubectl-patch".into(),
            ..Default::default()
        };
        a.diff = Some(ResourceDiff { source: DesiredSource::LastApplied, changes: vec![change], more: 2, ..Default::default() });
        let mut live = LiveIndex::new();
        live.insert(crate::drift::attribution::live_key("spoke-1", "apps", "Deployment", "shop", "web"), a);
        let mut app = app(
            "cur",
            "cur",
            json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web", "status": "OutOfSync"}]),
        );
        app["metadata"] = json!({"name": "shop", "namespace": "argocd"});
        let m = ClassMap::default();
        assert_eq!(
            Drift::of(&app, &m, &live, "", &crate::project::Scope::unrestricted()).resources[0].changes,
            vec![],
            "another cluster's object is not this one"
        );
        let d = Drift::of(&app, &m, &live, "spoke-1", &crate::project::Scope::unrestricted());
        let r = &d.resources[0];
        assert_eq!((r.changes.len(), r.changes_more, r.desired_source.as_str(), r.cluster.as_str()), (1, 2, "last-applied", "spoke-1"));
        assert_eq!(r.attribution.as_ref().and_then(|a| a.diff.as_ref()), None, "kept once");
        assert_eq!(r.ui_path, "/applications/argocd/shop?resource=&node=apps%2FDeployment%2Fshop%2Fweb%2F0");
        let attempt: Attempt = serde_json::from_value(json!({
            "id": "x", "appKey": "argocd/shop", "group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web",
            "resource": "Deployment shop/web", "verb": "patch", "decision": "allowed", "manager": "kubectl-patch",
            "actor": {"username": "alice@example.com"}, "time": "2026-12-03T10:00:00Z", "firstAt": "2026-12-03T10:00:00Z",
            "lastAt": "2026-12-03T10:00:00Z"}))
        .unwrap();
        let d = d.with_attempts(&[attempt], &m);
        assert_eq!(d.resources[0].changes[0].user, "alice@example.com");
    }

    /// Review M3: mallory's `kubectl edit` makes the container privileged, alice's,
    /// six minutes later, scales it; both writes merge into one `kubectl-edit` entry of
    /// managedFields. The privileged field is mallory's, the replicas alice's, and the
    /// manager's entry names both; a field both set names both.
    #[test]
    fn the_person_is_matched_by_the_fields_each_request_set() {
        use crate::drift::diff::{FieldChange, ResourceDiff};
        let privileged = "spec.template.spec.containers[app].securityContext.privileged";
        let change = |path: &str, desired: &str, live: &str| FieldChange {
            path: path.into(),
            desired: desired.into(),
            live: live.into(),
            manager: "kubectl-edit".into(),
            ..Default::default()
        };
        let object = json!({"metadata": {"managedFields": [{"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-03T10:06:00Z",
            "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:securityContext": {"f:privileged": {}}}}}}}}}]}});
        let mut a = crate::drift::attribution::attribute(&object, "workload", &[]);
        a.diff = Some(ResourceDiff {
            changes: vec![change(privileged, "(not set)", "true"), change("spec.replicas", "2", "5")],
            ..Default::default()
        });
        let mut live = LiveIndex::new();
        live.insert(resource_key("apps", "Deployment", "shop", "web"), a);
        let app = app(
            "cur",
            "cur",
            json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web", "status": "OutOfSync"}]),
        );
        let m = ClassMap::default();
        let edit = |who: &str, min: u32, fields: &[&str]| -> Attempt {
            serde_json::from_value(json!({
                "id": who, "group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web",
                "resource": "Deployment shop/web", "verb": "patch", "decision": "allowed", "manager": "kubectl-edit",
                "actor": {"username": who}, "time": format!("2026-12-03T10:{min:02}:00Z"), "lastAt": format!("2026-12-03T10:{min:02}:00Z"),
                "fields": fields}))
            .unwrap()
        };
        // Newest first, as the window keeps them.
        let attempts = [edit("alice", 6, &["spec.replicas"]), edit("mallory", 0, &["spec.template.spec.containers[app].securityContext"])];
        let d = Drift::of(&app, &m, &live, "", &crate::project::Scope::unrestricted()).with_attempts(&attempts, &m);
        let user = |path: &str| d.resources[0].changes.iter().find(|c| c.path == path).map(|c| c.user.clone());
        assert_eq!(user(privileged).as_deref(), Some("mallory"), "not the newest writer with the same manager");
        assert_eq!(user("spec.replicas").as_deref(), Some("alice"));
        let entry = &d.attribution[0];
        assert_eq!((entry.actor.as_ref().map(|a| a.username.as_str()), entry.also.clone()), (Some("alice"), vec!["mallory".to_string()]));
        // Both set the privileged field: both are named.
        let both = [edit("alice", 6, &[privileged]), edit("mallory", 0, &[privileged])];
        let d = Drift::of(&app, &m, &live, "", &crate::project::Scope::unrestricted()).with_attempts(&both, &m);
        assert_eq!(d.resources[0].changes.iter().find(|c| c.path == privileged).map(|c| c.user.as_str()), Some("alice or mallory"));
    }

    #[test]
    fn a_resource_not_read_is_reported_with_why() {
        use crate::drift::attribution::{Attribution, NotReadReason};
        let mut live = LiveIndex::new();
        live.insert(resource_key("", "Secret", "shop", "db"), Attribution::not_read(NotReadReason::SecretsOff, "off".into()));
        let res = json!([{"version": "v1", "kind": "Secret", "namespace": "shop", "name": "db", "status": "OutOfSync"}]);
        let d = view(&ClassMap::default(), &app("cur", "cur", res), &live);
        assert_eq!(d["classes"], json!(["secret"]), "still classified and reported");
        assert_eq!(d["resources"][0]["attribution"]["notRead"], json!({"reason": "secrets-off", "message": "off"}));
        assert_eq!(d["attribution"], json!([]), "nobody to name");
    }
}
