//! The summarized diff of one drifted resource: for each changed field its path, the
//! desired (Git) value and the live value, and the field manager that wrote it. Pure:
//! the daemon reads the live object (`cluster/live.rs`) and computes this off the
//! evaluation path; the pipeline only copies the result into `drift.resources[]`.
//!
//! The desired object comes from Argo CD's API (`argocd:` configured: the
//! Application's managed resource, its `targetState`), else from the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation Argo CD's default
//! client-side apply writes, else it is not known (server-side apply without the API)
//! and the changed fields are listed with their live values and `(not known)` — never
//! guessed.
//!
//! Three walks make the list: the desired object's leaves, each compared with the live
//! value at the same place (list items matched by `name`); the live object's security
//! values (`diff/security.rs`), each Git's only when a trusted desired state (Argo CD's
//! API) has it, or, without one, when driftwatch read the same value while Argo CD
//! reported the resource Synced — never because the object's own last-applied
//! annotation or a manager name says so; and the fields a manager other than Argo CD's
//! owns in `managedFields` that the desired object does not have (`privileged: (not
//! set) -> true`) — fields the API server defaults are owned by no such manager, so
//! they are not noise. `spec.ignoreDifferences` is applied to both
//! objects first (`drift::ignore`), so an ignored field is neither shown nor counted.
//! Values are masked by name and by shape on both sides (`drift::mask`: a credential's
//! field, env var or data key, a DSN's password, a `--token=` flag, a PEM key, an object
//! holding any of them summarised), a Secret's data is only ever `(changed)`, and everything is bounded: fields shown per resource
//! (the rest counted in `more`), characters per value, nodes visited, depth.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::classes::{ARGOCD_MANAGERS, holds_security_values, is_security_field};
use super::ignore::{ForResource, Step, remove_all};
use super::mask::Masker;
use crate::json::Pointer;

mod paths;
mod security;
mod walk;
use walk::{Walk, named, numbers_equal};

pub use paths::key_label;
use paths::{Seg, display, locate, owned_paths};
pub use security::{InSync, MAX_RECORDED};

/// The annotation client-side apply keeps the applied object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Fields shown per resource when the configuration does not say.
pub const DEFAULT_MAX_FIELDS: usize = 20;
/// Characters shown per value when the configuration does not say.
pub const DEFAULT_MAX_VALUE_CHARS: usize = 120;
/// At most this many nodes of the two objects are visited; past it the rest is not
/// compared (and the note says so).
pub const MAX_VISITED: usize = 200_000;
/// Changes kept for sorting (security fields first) before the cut; more are counted.
const MAX_COLLECTED: usize = 10_000;
/// Owned field paths taken from `managedFields`.
const MAX_OWNED: usize = 10_000;
const MAX_DEPTH: usize = 64;
/// The place of a desired list item the live object does not have (no key is this).
const MISSING: &str = "\u{0}missing";

/// What a value shows when the field is absent, unknown, masked or a Secret's.
pub const NOT_SET: &str = "(not set)";
pub const NOT_KNOWN: &str = "(not known)";
pub const MASKED: &str = super::mask::MASKED;
pub const HIDDEN: &str = "(hidden)";
pub const CHANGED: &str = "(changed)";
/// The change shown when an object's security values were not all read (it is over
/// the walk's bound): a security drift, its values not known.
pub const SECURITY_NOT_ALL_READ: &str = "(security fields: object too large to read them all)";

/// Where the desired values came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DesiredSource {
    /// Argo CD's API: the managed resource's target state.
    Argocd,
    /// The `kubectl.kubernetes.io/last-applied-configuration` annotation.
    LastApplied,
    /// Neither: server-side apply without the API.
    #[default]
    NotKnown,
}

impl DesiredSource {
    pub fn as_str(self) -> &'static str {
        match self {
            DesiredSource::Argocd => "argocd",
            DesiredSource::LastApplied => "last-applied",
            DesiredSource::NotKnown => "not-known",
        }
    }

    /// Whether the writer of the object cannot have chosen it: Argo CD's API is
    /// trusted; the object's own last-applied annotation is written by whoever writes
    /// the object.
    pub fn trusted(self) -> bool {
        self == DesiredSource::Argocd
    }
}

/// One changed field (`drift.resources[].changes[]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FieldChange {
    /// `spec.template.spec.containers[app].securityContext.privileged`
    pub path: String,
    /// The Git value, or `(not set)`, `(not known)`, `(masked)`, `(hidden)`.
    pub desired: String,
    /// The live value, or `(not set)`, `(masked)`, `(changed)`.
    pub live: String,
    /// The field manager that owns the live value (other than Argo CD's), when one does.
    pub manager: String,
    /// The person behind that write, from the audit input, when known.
    pub user: String,
    /// RFC 3339: the manager's last write.
    pub time: String,
    /// A security field for this kind of resource.
    pub security: bool,
}

/// The summarized diff of one resource.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceDiff {
    pub source: DesiredSource,
    /// Security fields first, at most the configured number.
    pub changes: Vec<FieldChange>,
    /// Changed fields not shown.
    pub more: usize,
    /// Why part of the diff is missing (a last-applied annotation that is not JSON, an
    /// ignoreDifferences expression outside the subset, an object too large).
    pub note: String,
    /// Fields other managers own that `ignoreDifferences` ignores (the attribution
    /// leaves them out too); not kept.
    #[serde(skip)]
    pub ignored: Vec<String>,
    /// A security value that grants something is set live and no trusted desired state
    /// gives it (Git lacks it, or Git is not known and driftwatch did not read it in
    /// sync): a security drift, whoever owns the field. Counted before the cut.
    #[serde(skip)]
    pub security: bool,
}

/// Bounds of one diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_fields: usize,
    pub max_value_chars: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_fields: DEFAULT_MAX_FIELDS, max_value_chars: DEFAULT_MAX_VALUE_CHARS }
    }
}

/// Everything one diff needs.
pub struct Input<'a> {
    /// The live object as read (with `managedFields`).
    pub live: &'a Value,
    /// The desired object and where it came from (`None`: not known).
    pub desired: Option<(Value, DesiredSource)>,
    /// The resource's class by kind (what makes a field a security field).
    pub kind_class: &'a str,
    /// A Secret: its data is shown only as changed.
    pub secret: bool,
    /// The Application's `ignoreDifferences` for this resource.
    pub ignore: &'a ForResource,
    /// Field managers whose writes are desired state besides Argo CD's
    /// (`attribution.ignoreManagers`).
    pub ignore_managers: &'a [String],
    pub limits: Limits,
    /// How credentials are recognised (the built-in rules and `diff.mask`).
    pub mask: &'a Masker,
    /// Notes so far (the desired source's trouble, ignore rules that were refused).
    pub notes: Vec<String>,
    /// The security values driftwatch read from the object while Argo CD reported it
    /// Synced, when it did: without a trusted desired state, the only ones taken as Git's.
    pub in_sync: Option<&'a InSync>,
}

/// The desired object in the live object's last-applied annotation: `Ok(None)` when
/// there is none, `Err` (for the note) when it is not a JSON object.
pub fn desired_from_last_applied(live: &Value) -> Result<Option<Value>, NotAnObject> {
    desired_from_last_applied_text(live).map_err(NotAnObject)
}

/// [`desired_from_last_applied`], its refusal as text.
fn desired_from_last_applied_text(live: &Value) -> Result<Option<Value>, String> {
    let Some(raw) = live.at("/metadata/annotations").and_then(|a| a.get(LAST_APPLIED)).and_then(Value::as_str) else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(_) => Err(format!("the {LAST_APPLIED} annotation is not a JSON object")),
        Err(e) => Err(format!("the {LAST_APPLIED} annotation is not JSON ({e}); desired values are not known")),
    }
}

/// A field some manager other than Argo CD's owns.
struct Owned {
    segs: Vec<Seg>,
    manager: String,
    time: String,
}

/// A change before it is cut and rendered.
struct Raw<'a> {
    path: String,
    /// Where it is in the live object (for its owner).
    at: Vec<Step>,
    desired: Shown<'a>,
    live: Shown<'a>,
    security: bool,
}

#[derive(Clone, Copy)]
enum Shown<'a> {
    Value(&'a Value),
    NotSet,
    NotKnown,
}

/// Who owns what of the live object, from its `managedFields`: the fields of managers
/// other than Argo CD's, the security fields Argo CD's names own (kept to name the
/// owner of a value the security walk lists), and the fields of the managers the
/// Application ignores; with the nodes visited.
#[derive(Default)]
struct Owners {
    visited: usize,
    owned: Vec<Owned>,
    argocd_security: Vec<Owned>,
    ignored_by_manager: Vec<Vec<Seg>>,
}

fn owners(input: &Input<'_>) -> Owners {
    let mut o = Owners::default();
    if let Some(entries) = input.live.at("/metadata/managedFields").and_then(Value::as_array) {
        for e in entries {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            let manager = s("manager");
            if s("subresource") == "status" {
                continue;
            }
            let Some(f) = e.get("fieldsV1") else { continue };
            let mut paths = Vec::new();
            owned_paths(f, &mut Vec::new(), &mut paths, &mut o.visited);
            let argocd = ARGOCD_MANAGERS.contains(&manager.as_str());
            if input.ignore.managers.contains(&manager) {
                o.ignored_by_manager.extend(paths);
            } else if argocd {
                // A field manager's name is whatever the client sent. What Argo CD's names
                // own is desired state — including the fields the API server defaulted
                // when it created the object — except a security field with a value Git
                // does not have (`--field-manager=argocd-controller` setting
                // `privileged`): that is listed like anyone else's (below).
                // Kept to name the owner of a value the security walk below lists.
                {
                    let time = s("time");
                    for segs in paths.into_iter().filter(|p| is_security_field(input.kind_class, &display(p))) {
                        if o.argocd_security.len() < MAX_OWNED {
                            o.argocd_security.push(Owned { segs, manager: manager.clone(), time: time.clone() });
                        }
                    }
                }
            } else if !input.ignore_managers.contains(&manager) {
                let time = s("time");
                for segs in paths {
                    if o.owned.len() < MAX_OWNED {
                        o.owned.push(Owned { segs, manager: manager.clone(), time: time.clone() });
                    }
                }
            }
        }
    }
    o
}

/// The changes as shown, each with the newest owner of its place in the live object
/// (found once for all changes).
fn field_changes<'o>(raw: &[Raw<'_>], owners: impl Iterator<Item = &'o Owned>, live: &Value, input: &Input<'_>) -> Vec<FieldChange> {
    // Where each owned field is in the live object, found once for all changes.
    let placed: Vec<(Vec<Step>, &Owned)> =
        if raw.is_empty() { Vec::new() } else { owners.filter_map(|o| locate(live, &o.segs).map(|(at, _)| (at, o))).collect() };
    raw.iter()
        .map(|r| {
            let owner = placed
                .iter()
                .filter(|(at, _)| at.starts_with(&r.at) || r.at.starts_with(at))
                .map(|(_, o)| *o)
                .max_by(|a, b| a.time.cmp(&b.time));
            let (desired, live) = values(r, input.secret, input.limits.max_value_chars, input.mask);
            FieldChange {
                path: r.path.clone(),
                desired,
                live,
                manager: owner.map(|o| o.manager.clone()).unwrap_or_default(),
                user: String::new(),
                time: owner.map(|o| o.time.clone()).unwrap_or_default(),
                security: r.security,
            }
        })
        .collect()
}

/// Computes the diff (bounded; never fails: what it cannot do goes in the note).
pub fn compute(mut input: Input<'_>) -> ResourceDiff {
    let mut live = normalize(input.live.clone());
    let (mut desired, source) = match input.desired.take() {
        Some((d, s)) => (Some(normalize(d)), s),
        None => (None, DesiredSource::NotKnown),
    };
    let Owners { visited, owned, argocd_security, ignored_by_manager } = owners(&input);
    // Ignored fields go from both objects before anything is compared.
    let mut notes = std::mem::take(&mut input.notes);
    let before = (!input.ignore.is_empty()).then(|| live.clone());
    for obj in std::iter::once(&mut live).chain(desired.as_mut()) {
        input.ignore.strip(obj, &mut notes);
        let steps: Vec<Vec<Step>> = ignored_by_manager.iter().filter_map(|p| locate(obj, p).map(|(at, _)| at)).collect();
        remove_all(obj, steps);
    }

    let ignored: Vec<String> = match &before {
        Some(b) => {
            owned.iter().filter(|o| locate(b, &o.segs).is_some() && locate(&live, &o.segs).is_none()).map(|o| display(&o.segs)).collect()
        }
        None => Vec::new(),
    };
    let mut w =
        Walk { raw: Vec::new(), seen: HashSet::new(), total: 0, visited, cut: false, security: false, kind_class: input.kind_class };
    if let Some(d) = &desired {
        w.desired(d, Some(&live), &mut String::new(), &mut Vec::new(), 0);
    }
    let holds = holds_security_values(input.kind_class);
    if holds {
        let kept = w.security_values(&live, desired.as_ref(), source.trusted(), input.in_sync);
        if !source.trusted() && (kept > 0 || w.security) {
            notes.push(format!(
                "security values are Git's only by Argo CD's API (argocd:), which is not used here: {kept} unchanged since driftwatch read \
                 the object in sync taken as Git's, any other shown with its Git value (not known)"
            ));
        }
    }
    let unset = |v: &Value| {
        v.is_null() || v == &Value::Bool(false) || v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty())
    };
    // Argo CD's names list a security field Git lacks only against a desired object;
    // without a trusted one the security walk has judged the values that grant
    // something, whoever owns them.
    let list_argocd = desired.is_some() && (source.trusted() || !holds);
    for (o, argocd) in owned.iter().map(|o| (o, false)).chain(argocd_security.iter().map(|o| (o, true))) {
        if argocd && !list_argocd {
            continue;
        }
        if w.visited >= MAX_VISITED {
            w.cut = true;
            break;
        }
        w.visited += 1;
        let path = display(&o.segs);
        if is_bookkeeping(&path) {
            continue;
        }
        if let Some(d) = &desired
            && locate(d, &o.segs).is_some()
        {
            continue;
        }
        if let Some((at, v)) = locate(&live, &o.segs) {
            // Under Argo CD's name, only a security value that grants something (a
            // defaulted `securityContext: {}` does not).
            if argocd && unset(v) {
                continue;
            }
            let desired = if desired.is_some() { Shown::NotSet } else { Shown::NotKnown };
            w.push(Raw { security: is_security_field(input.kind_class, &path), path, at, desired, live: Shown::Value(v) });
        }
    }
    if w.cut {
        notes.push(format!("the object has more than {MAX_VISITED} fields; the rest were not compared"));
    }
    let total = w.total;
    let mut raw = w.raw;
    raw.sort_by_key(|r| !r.security);
    raw.truncate(input.limits.max_fields);
    let changes = field_changes(&raw, owned.iter().chain(&argocd_security), &live, &input);
    notes.dedup();
    ResourceDiff { source, more: total.saturating_sub(changes.len()), changes, note: notes.join("; "), ignored, security: w.security }
}

/// What the two values show: masked by name and shape (`drift::mask`), a Secret's data
/// only as changed.
fn values(r: &Raw<'_>, secret: bool, max: usize, mask: &Masker) -> (String, String) {
    let is_set = |s: Shown<'_>| matches!(s, Shown::Value(_));
    let named = mask.path(&r.path);
    let show = |s: Shown<'_>| match s {
        Shown::NotSet => NOT_SET.to_string(),
        Shown::NotKnown => NOT_KNOWN.to_string(),
        Shown::Value(v) => mask.show(v, named, max),
    };
    if secret && (r.path.starts_with("data") || r.path.starts_with("stringData")) {
        let d = if is_set(r.desired) { HIDDEN.to_string() } else { show(r.desired) };
        let l = if is_set(r.live) { CHANGED.to_string() } else { show(r.live) };
        return (d, l);
    }
    (show(r.desired), show(r.live))
}

/// The object without what is not desired state: status, server-set metadata, the
/// last-applied annotation itself.
fn normalize(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.shift_remove("status");
        m.shift_remove("apiVersion");
        m.shift_remove("kind");
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            meta.retain(|k, _| k == "labels" || k == "annotations");
            if let Some(Value::Object(a)) = meta.get_mut("annotations") {
                a.shift_remove(LAST_APPLIED);
                a.shift_remove("deployment.kubernetes.io/revision");
                if a.is_empty() {
                    meta.shift_remove("annotations");
                }
            }
            if meta.is_empty() {
                m.shift_remove("metadata");
            }
        }
    }
    v
}

fn is_bookkeeping(path: &str) -> bool {
    path.starts_with("status")
        || (path.starts_with("metadata") && !path.starts_with("metadata.labels") && !path.starts_with("metadata.annotations"))
        || path == format!("metadata.annotations.{LAST_APPLIED}")
        || path == "metadata.annotations.deployment.kubernetes.io/revision"
}

/// Why the last-applied annotation gives no desired object (for the note).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAnObject(pub String);

impl From<NotAnObject> for String {
    fn from(e: NotAnObject) -> String {
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::ignore::IgnoreRules;
    use serde_json::json;

    /// A Deployment applied client-side by Argo CD, then patched by someone else:
    /// replicas 2 -> 5, the container made privileged, an image bumped.
    fn live() -> Value {
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "app", "image": "shop:1.0", "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "MODE", "value": "a"}]}]}}}});
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}, "resourceVersion": "9",
                "annotations": {LAST_APPLIED: applied.to_string(), "deployment.kubernetes.io/revision": "3"},
                "managedFields": [
                    {"manager": "argocd-controller", "operation": "Update", "time": "2026-12-01T10:00:00Z", "fieldsV1": {
                        "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}}}}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "2026-12-03T10:00:00Z",
                     "fieldsV1": {"f:status": {"f:replicas": {}}}},
                    {"manager": "kubectl-patch", "operation": "Update", "time": "2026-12-03T09:00:00Z", "fieldsV1": {
                        "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                            "f:securityContext": {".": {}, "f:privileged": {}},
                            "f:env": {"k:{\"name\":\"DB_PASSWORD\"}": {"f:value": {}}, "k:{\"name\":\"MODE\"}": {"f:value": {}}}}}}}}}}
                ]},
            "spec": {"replicas": 5, "progressDeadlineSeconds": 600, "template": {"spec": {"containers": [
                {"name": "app", "image": "shop:1.0", "terminationMessagePath": "/dev/termination-log", "securityContext": {"privileged": true},
                 "env": [{"name": "DB_PASSWORD", "value": "letmein"}, {"name": "MODE", "value": "b"}]}]}}},
            "status": {"replicas": 5}})
    }

    fn run(live: &Value, ignore: &ForResource, limits: Limits) -> ResourceDiff {
        let desired = desired_from_last_applied(live).unwrap().map(|d| (d, DesiredSource::LastApplied));
        compute(Input {
            live,
            desired,
            kind_class: "workload",
            secret: false,
            ignore,
            ignore_managers: &[],
            limits,
            mask: &Masker::default(),
            notes: Vec::new(),
            in_sync: None,
        })
    }

    fn shown(d: &ResourceDiff) -> Vec<(String, String, String, String)> {
        d.changes.iter().map(|c| (c.path.clone(), c.desired.clone(), c.live.clone(), c.manager.clone())).collect()
    }

    #[test]
    fn git_value_to_live_value_with_the_manager_and_no_defaults() {
        let d = run(&live(), &ForResource::default(), Limits::default());
        assert_eq!(d.source, DesiredSource::LastApplied);
        let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string(), "kubectl-patch".to_string());
        assert_eq!(
            shown(&d),
            vec![
                s("spec.template.spec.containers[app].securityContext.privileged", NOT_SET, "true"),
                s("spec.replicas", "2", "5"),
                s("spec.template.spec.containers[app].env[DB_PASSWORD].value", MASKED, MASKED),
                s("spec.template.spec.containers[app].env[MODE].value", "a", "b"),
            ],
            "security first; defaults (progressDeadlineSeconds, terminationMessagePath) and status are not drift"
        );
        assert!(d.changes[0].security && !d.changes[1].security);
        assert_eq!(d.changes[1].time, "2026-12-03T09:00:00Z");
        assert_eq!(d.more, 0);
        // Git's value of a security field is never taken from the annotation, and the
        // note says so.
        assert!(d.security && d.note.contains("argocd:"), "{}", d.note);
        assert!(!serde_json::to_string(&d).unwrap().contains("hunter2"), "a credential never shows");
    }

    /// Review H6: `kubectl patch --field-manager=argocd-controller` making the container
    /// privileged. The manager's name is not Argo CD: Git has no securityContext, so the
    /// field is listed (and is a security field); with Git not known, Argo CD's fields
    /// are still taken as desired.
    #[test]
    fn a_field_owned_under_argo_cds_manager_name_that_git_lacks_is_listed() {
        let mut obj = live();
        let fields = obj["metadata"]["managedFields"].as_array_mut().unwrap();
        fields.retain(|m| m["manager"] != "kubectl-patch");
        fields.push(json!({"manager": "argocd-controller", "operation": "Update", "time": "2026-12-03T09:30:00Z", "fieldsV1": {
            "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {"f:securityContext": {".": {}, "f:privileged": {}}}}}}}}}));
        let d = run(&obj, &ForResource::default(), Limits::default());
        let privileged = d.changes.iter().find(|c| c.path.ends_with("securityContext.privileged")).expect("listed");
        assert_eq!(
            (privileged.desired.as_str(), privileged.live.as_str(), privileged.manager.as_str()),
            (NOT_SET, "true", "argocd-controller")
        );
        assert!(privileged.security && d.security);
        // Review N3: without the annotation (server-side apply, or deleted in the same
        // patch) nothing says what Git has, and the manager's name proves nothing.
        obj["metadata"]["annotations"] = json!({});
        let unknown = run(&obj, &ForResource::default(), Limits::default());
        let privileged = unknown.changes.iter().find(|c| c.path.ends_with("securityContext.privileged")).expect("listed");
        assert_eq!(
            (privileged.desired.as_str(), privileged.live.as_str(), privileged.manager.as_str()),
            (NOT_KNOWN, "true", "argocd-controller")
        );
        assert!(unknown.security);
        assert!(unknown.changes.iter().all(|c| c.manager != "argocd-controller" || c.security), "{:?}", shown(&unknown));
    }

    #[test]
    fn ignored_fields_are_neither_shown_nor_counted() {
        let rules = IgnoreRules::of(&json!({"spec": {"ignoreDifferences": [
            {"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]},
            {"group": "apps", "kind": "Deployment", "jqPathExpressions": [".spec.template.spec.containers[].env[] | select(.name == \"MODE\")"]}]}}));
        let d = run(&live(), &rules.for_resource("apps", "Deployment", "shop", "web"), Limits { max_fields: 1, max_value_chars: 10 });
        assert_eq!(
            d.changes.iter().map(|c| c.path.as_str()).collect::<Vec<_>>(),
            ["spec.template.spec.containers[app].securityContext.privileged"]
        );
        assert_eq!(d.more, 1, "the masked env var is the only other change");
        let by_manager = IgnoreRules::of(&json!({"spec": {"ignoreDifferences": [
            {"group": "apps", "kind": "Deployment", "managedFieldsManagers": ["kubectl-patch"]}]}}));
        let d = run(&live(), &by_manager.for_resource("apps", "Deployment", "shop", "web"), Limits::default());
        assert!(d.changes.is_empty(), "{:?}", shown(&d));
    }

    #[test]
    fn desired_not_known_is_said_never_guessed() {
        let mut obj = live();
        obj["metadata"]["annotations"] = json!({});
        let d = run(&obj, &ForResource::default(), Limits::default());
        assert_eq!(d.source, DesiredSource::NotKnown);
        assert_eq!(d.changes[0].desired, NOT_KNOWN);
        assert!(d.changes.iter().any(|c| c.path == "spec.replicas" && c.live == "5" && c.desired == NOT_KNOWN));
        obj["metadata"]["annotations"] = json!({LAST_APPLIED: "{not json"});
        assert!(desired_from_last_applied(&obj).unwrap_err().0.contains("not JSON"));
    }

    #[test]
    fn a_secret_shows_only_that_its_data_changed() {
        let obj = json!({"kind": "Secret", "metadata": {"annotations": {LAST_APPLIED: r#"{"data":{"password":"b2xk"},"type":"Opaque"}"#}},
                         "data": {"password": "bmV3", "extra": "eA=="}, "type": "Opaque"});
        let desired = desired_from_last_applied(&obj).unwrap().map(|d| (d, DesiredSource::LastApplied));
        let none = ForResource::default();
        let d = compute(Input {
            live: &obj,
            desired,
            kind_class: "secret",
            secret: true,
            ignore: &none,
            ignore_managers: &[],
            limits: Limits::default(),
            mask: &Masker::default(),
            notes: Vec::new(),
            in_sync: None,
        });
        assert_eq!(shown(&d), vec![("data.password".into(), HIDDEN.into(), CHANGED.into(), String::new())]);
        assert!(!serde_json::to_string(&d).unwrap().contains("b2xk"));
    }

    #[test]
    fn ten_thousand_changed_fields_are_bounded() {
        let n = 10_000;
        let desired: serde_json::Map<String, Value> = (0..n).map(|i| (format!("k{i}"), json!("a"))).collect();
        let data: serde_json::Map<String, Value> = (0..n).map(|i| (format!("k{i}"), json!("b".repeat(500)))).collect();
        let obj = json!({"metadata": {"annotations": {LAST_APPLIED: json!({"data": desired}).to_string()}}, "data": data});
        let d = run(&obj, &ForResource::default(), Limits::default());
        assert_eq!((d.changes.len(), d.more), (DEFAULT_MAX_FIELDS, n - DEFAULT_MAX_FIELDS));
        assert!(d.changes[0].live.chars().count() <= DEFAULT_MAX_VALUE_CHARS + 1);
    }
}
