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
mod join;
pub mod mask;
pub mod operation;
pub mod story;
pub mod unit;

pub(crate) use join::{app_security_field, classify};

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::Pointer;
use crate::model::{ResourceRef, Severity};

use self::attribution::{Attribution, LiveIndex, is_security_field, live_key};
use self::audit::{Actor, Attempt};
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
    /// Which object: group, kind, namespace, name.
    #[serde(flatten)]
    pub object: ResourceRef,
    pub version: String,
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
        self.object == other.object
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
            kind: a.object.kind.clone(),
            namespace: a.object.namespace.clone(),
            name: a.object.name.clone(),
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

    /// What drifted in a deployment unit of any engine: an Argo CD Application by its
    /// status ([`Drift::of`]), a Flux or Fleet unit by what its engine reported
    /// ([`Drift::of_unit`]; credentials in recorded patches masked by `mask`).
    pub fn of_app(
        app: &crate::model::App,
        classes: &ClassMap,
        live: &LiveIndex,
        cluster: &str,
        scope: &crate::project::Scope,
        mask: &mask::Masker,
    ) -> Drift {
        match app.engine() {
            crate::unit::Engine::ArgoCd => Drift::of(&app.object, classes, live, cluster, scope),
            _ => Drift::of_unit(&app.unit, classes, cluster, mask),
        }
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
        let out_of_sync = app.at("/status/resources").and_then(Value::as_array).into_iter().flatten();
        for r in out_of_sync.filter(|r| r.get("status").and_then(Value::as_str) == Some("OutOfSync")) {
            let (resource, security) = drifted_resource(app, r, classes, live, cluster, scope, &mut attribution);
            attributed_security |= security;
            class_set.insert(resource.class.clone());
            resources.push(resource);
        }
        AttributedChange::sort(&mut attribution);
        let (direction, revision, deployed_revision) = direction(app);
        let degraded = app.at("/status/health/status").and_then(Value::as_str) == Some("Degraded");
        let security =
            attributed_security || (direction != Direction::Git && class_set.iter().any(|c| SECURITY_CLASSES.contains(&c.as_str())));
        let severity = severity(security, direction, degraded);
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

/// One OutOfSync entry of `status.resources` as a drifted resource: its class (a
/// workload whose live read shows a security value becomes `security-context`), what
/// the live read found (attribution, diff), or why it was not read; its field managers
/// go to `entries` (bounded). Also whether the live read found a security value.
fn drifted_resource(
    app: &Value,
    r: &Value,
    classes: &ClassMap,
    live: &LiveIndex,
    cluster: &str,
    scope: &crate::project::Scope,
    entries: &mut Vec<AttributedChange>,
) -> (DriftResource, bool) {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
    let object = ResourceRef { group: s("group").into(), kind: s("kind").into(), namespace: s("namespace").into(), name: s("name").into() };
    let kind_class = classes.class_of(s("group"), s("kind"));
    let outside = scope
        .permits(s("group"), s("kind"), s("namespace"))
        .err()
        .map(|why| Attribution::not_read(attribution::NotReadReason::OutsideProject, why.0));
    let attr = match &outside {
        Some(refused) => Some(refused),
        None => live.get(&live_key(cluster, &object)),
    };
    let mut class = kind_class;
    let security = attr.is_some_and(|a| a.security);
    if security && !matches!(kind_class, "rbac" | "network-policy" | "admission") {
        class = "security-context";
    }
    let resource = format!("{} {}/{}", s("kind"), s("namespace"), s("name"));
    for m in attr.map(|a| a.managers.as_slice()).unwrap_or_default() {
        if entries.len() < MAX_ATTRIBUTION_ENTRIES {
            entries.push(AttributedChange {
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
    let resource = DriftResource {
        object,
        version: s("version").into(),
        class: class.into(),
        kind_class: kind_class.into(),
        attribution,
        desired_source: if diffed { diff.source.as_str().to_string() } else { String::new() },
        changes: diff.changes,
        changes_more: diff.more,
        diff_note: diff.note,
        cluster: if cluster.starts_with('?') { String::new() } else { cluster.to_string() },
        ui_path: ui_path(app, s("group"), s("kind"), s("namespace"), s("name")),
    };
    (resource, security)
}

/// A drift's severity: critical when it touches security, a warning for live drift,
/// an unknown direction or a degraded Application, info for Git's content waiting.
fn severity(security: bool, direction: Direction, degraded: bool) -> Option<Severity> {
    if security {
        Some(Severity::Critical)
    } else if matches!(direction, Direction::Live | Direction::Unknown) || degraded {
        Some(Severity::Warning)
    } else if direction == Direction::Git {
        Some(Severity::Info)
    } else {
        None
    }
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
    use crate::drift::audit::Decision;
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

    /// An allowed write of a security field, seen by the audit input, makes the drift a
    /// security drift at once: the resource `security-context`, the drift critical,
    /// before any live read has shown the field (self-heal may erase it first).
    #[test]
    fn an_allowed_security_write_makes_the_drift_critical_before_any_live_read() {
        let classes = ClassMap::default();
        let web = ResourceRef { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() };
        let a = app(
            "r2",
            "r2",
            json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web", "status": "OutOfSync"}]),
        );
        let drift = Drift::of(&a, &classes, &LiveIndex::new(), "", &crate::project::Scope::unrestricted());
        assert!(!drift.security);
        assert_eq!(drift.severity, Some(Severity::Warning));
        let write = |fields: &[&str]| Attempt {
            id: "w".into(),
            object: web.clone(),
            decision: Decision::Allowed,
            fields: fields.iter().map(|f| f.to_string()).collect(),
            actor: Actor { username: "mallory".into(), ..Actor::default() },
            ..Attempt::default()
        };
        let harmless = drift.clone().with_attempts(&[write(&["metadata.labels.team"])], &classes);
        assert!(!harmless.security, "a label is no security write");
        let escalated = drift.with_attempts(&[write(&["spec.template.spec.containers[app].securityContext.privileged"])], &classes);
        assert!(escalated.security);
        assert_eq!(escalated.severity, Some(Severity::Critical));
        assert_eq!(escalated.resources[0].class, "security-context");
        assert!(escalated.classes.iter().any(|c| c == "security-context"));
        // A write to another object (same name, another namespace) changes nothing here.
        let elsewhere = Attempt {
            object: ResourceRef { namespace: "other".into(), ..web.clone() },
            ..write(&["spec.template.spec.containers[app].securityContext.privileged"])
        };
        let a = app(
            "r2",
            "r2",
            json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web", "status": "OutOfSync"}]),
        );
        let untouched =
            Drift::of(&a, &classes, &LiveIndex::new(), "", &crate::project::Scope::unrestricted()).with_attempts(&[elsewhere], &classes);
        assert_eq!(untouched.resources[0].class, "workload");
        // The live index is keyed by cluster, then the object: a spoke's object is not the local one.
        assert_eq!(crate::drift::attribution::live_key("spoke-1", &web), "spoke-1@apps/Deployment/shop/web");
        assert_eq!(crate::drift::attribution::live_key("", &web), resource_key(&web));
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
        live.insert(
            resource_key(&ResourceRef { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() }),
            crate::drift::attribution::attribute(&object, "workload", &[]),
        );
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
        live.insert(
            crate::drift::attribution::live_key(
                "spoke-1",
                &ResourceRef { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() },
            ),
            a,
        );
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
        live.insert(
            resource_key(&ResourceRef { group: "apps".into(), kind: "Deployment".into(), namespace: "shop".into(), name: "web".into() }),
            a,
        );
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
        live.insert(
            resource_key(&ResourceRef { group: "".into(), kind: "Secret".into(), namespace: "shop".into(), name: "db".into() }),
            Attribution::not_read(NotReadReason::SecretsOff, "off".into()),
        );
        let res = json!([{"version": "v1", "kind": "Secret", "namespace": "shop", "name": "db", "status": "OutOfSync"}]);
        let d = view(&ClassMap::default(), &app("cur", "cur", res), &live);
        assert_eq!(d["classes"], json!(["secret"]), "still classified and reported");
        assert_eq!(d["resources"][0]["attribution"]["notRead"], json!({"reason": "secrets-off", "message": "off"}));
        assert_eq!(d["attribution"], json!([]), "nobody to name");
    }
}
