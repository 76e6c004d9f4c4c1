//! Security values a live object holds, and the one rule for calling them Git's: a
//! trusted desired state says so. Argo CD's API (`argocd:`) is trusted; the object's
//! own `last-applied-configuration` annotation and the names in its `managedFields`
//! are not, since the person who writes the object writes them too
//! (`--field-manager=argocd-controller`, a rewritten or deleted annotation, a stripped
//! `managedFields`). Without a trusted desired state a value that grants something
//! counts as Git's only when driftwatch itself read the same value at the same place
//! while Argo CD reported the resource Synced ([`InSync`]); anything else is a
//! security drift with its Git value `(not known)`.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{MAX_DEPTH, MAX_VISITED, Step, named};
use crate::drift::classes::{grants, holds_security_values, is_security_field};

/// At most this many security values are recorded per object read in sync; past it
/// the rest are not recorded, and so not taken as Git's.
pub const MAX_RECORDED: usize = 32;
/// At most this many security leaves are collected per object.
const MAX_LEAVES: usize = 10_000;

/// One security field of an object: its path as the diff shows it, where it is, and
/// its value (a scalar or a list of scalars).
pub(super) struct Leaf<'v> {
    pub path: String,
    pub at: Vec<Step>,
    pub value: &'v Value,
}

/// The security fields of `obj` for a resource of `kind_class`, named as the diff
/// names paths (list items by `name`, else by index; a list of scalars is one value).
/// The object's own `metadata` and `status` are not pod settings and are left out (a
/// pod template's `metadata`, with the AppArmor annotation, is walked). Bounded by a budget of its own
/// ([`MAX_VISITED`] nodes, whatever the rest of the diff spent: padding elsewhere in
/// the object cannot use it up) and [`MAX_LEAVES`]; `cut` says whether the walk ended
/// before the object did, so that what it did not see is taken as a security value.
pub(super) fn leaves<'v>(obj: &'v Value, kind_class: &str) -> Leaves<'v> {
    let mut out = Vec::new();
    let mut visited = 0;
    if let Some(m) = obj.as_object() {
        for (k, v) in m.iter().filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")) {
            let mut path = k.clone();
            let mut at = vec![Step::Key(k.clone())];
            walk(v, kind_class, &mut path, &mut at, 1, &mut out, &mut visited);
        }
    }
    Leaves { cut: visited >= MAX_VISITED || out.len() >= MAX_LEAVES, leaves: out }
}

/// The security fields of an object, and whether the walk was cut short.
pub(super) struct Leaves<'v> {
    pub leaves: Vec<Leaf<'v>>,
    pub cut: bool,
}

fn walk<'v>(
    node: &'v Value,
    kind_class: &str,
    path: &mut String,
    at: &mut Vec<Step>,
    depth: usize,
    out: &mut Vec<Leaf<'v>>,
    visited: &mut usize,
) {
    if *visited >= MAX_VISITED || out.len() >= MAX_LEAVES {
        return;
    }
    *visited += 1;
    let mark = path.len();
    match node {
        Value::Object(m) if !m.is_empty() && depth < MAX_DEPTH => {
            for (k, v) in m {
                path.push('.');
                path.push_str(k);
                at.push(Step::Key(k.clone()));
                walk(v, kind_class, path, at, depth + 1, out, visited);
                at.pop();
                path.truncate(mark);
            }
        }
        Value::Array(items) if !items.is_empty() && depth < MAX_DEPTH && items.iter().any(|i| i.is_object() || i.is_array()) => {
            let names = named(items);
            for (i, item) in items.iter().enumerate() {
                match names.as_ref().and_then(|n| n.get(i)) {
                    Some(name) => {
                        path.push('[');
                        path.push_str(name);
                        path.push(']');
                    }
                    None => path.push_str(&format!("[{i}]")),
                }
                at.push(Step::Index(i));
                walk(item, kind_class, path, at, depth + 1, out, visited);
                at.pop();
                path.truncate(mark);
            }
        }
        _ => {
            if is_security_field(kind_class, path) {
                out.push(Leaf { path: path.clone(), at: at.clone(), value: node });
            }
        }
    }
}

/// The security values that grant something, as driftwatch read them from an object
/// Argo CD reported Synced: digests of (path, value), so a recorded object costs a few
/// hundred bytes whatever its values hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InSync {
    digests: Vec<[u8; 16]>,
}

impl InSync {
    /// What `obj` (a live object read while its resource was Synced) holds.
    pub fn of(obj: &Value, kind_class: &str) -> InSync {
        if !holds_security_values(kind_class) {
            return InSync::default();
        }
        let digests = leaves(obj, kind_class)
            .leaves
            .iter()
            .filter(|l| grants(&l.path, l.value))
            .take(MAX_RECORDED)
            .map(|l| digest(&l.path, l.value))
            .collect();
        InSync { digests }
    }

    /// Whether the value at `path` was recorded as it is now.
    pub fn holds(&self, path: &str, value: &Value) -> bool {
        let d = digest(path, value);
        self.digests.contains(&d)
    }

    /// How many values are recorded.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

/// SHA-256 of the path and the value's JSON, cut to 128 bits: a value the writer
/// chooses cannot be made to match a recorded one.
fn digest(path: &str, value: &Value) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(path.as_bytes());
    h.update([0u8]);
    h.update(value.to_string().as_bytes());
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::*;
    use crate::drift::ignore::ForResource;
    use crate::drift::mask::Masker;

    /// A Deployment with one container; `extra` is merged into the container.
    fn deployment(annotations: Value, managers: Value, container: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": "payments", "annotations": annotations, "managedFields": managers},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [container]}}}})
    }

    fn argocd_owns_privileged(operation: &str) -> Value {
        json!([{"manager": "argocd-controller", "operation": operation, "time": "2026-12-07T10:00:00Z", "fieldsV1": {
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                ".": {}, "f:image": {}, "f:securityContext": {".": {}, "f:privileged": {}}}}}}}}}])
    }

    fn diff(live: &Value, desired: Option<(Value, DesiredSource)>, in_sync: Option<&InSync>) -> ResourceDiff {
        let none = ForResource::default();
        compute(Input {
            live,
            desired,
            kind_class: "workload",
            secret: false,
            ignore: &none,
            ignore_managers: &[],
            limits: Limits::default(),
            mask: &Masker::default(),
            notes: Vec::new(),
            in_sync,
        })
    }

    fn last_applied(live: &Value) -> Option<(Value, DesiredSource)> {
        desired_from_last_applied(live).ok().flatten().map(|d| (d, DesiredSource::LastApplied))
    }

    fn privileged(d: &ResourceDiff) -> Option<(String, String, String)> {
        d.changes
            .iter()
            .find(|c| c.path == "spec.template.spec.containers[app].securityContext.privileged")
            .map(|c| (c.desired.clone(), c.live.clone(), c.manager.clone()))
    }

    /// Review N3 (b): the writer rewrites the last-applied annotation in the same patch
    /// to hold `privileged: true`, under Argo CD's manager name. The annotation is the
    /// writer's: the value is listed with its Git value not known, a security drift.
    #[test]
    fn a_rewritten_last_applied_annotation_does_not_make_a_security_value_gits() {
        let container = json!({"name": "app", "image": "api:1", "securityContext": {"privileged": true}});
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [container.clone()]}}}});
        let live = deployment(json!({LAST_APPLIED: applied.to_string()}), argocd_owns_privileged("Update"), container);
        let d = diff(&live, last_applied(&live), None);
        assert_eq!(privileged(&d), Some((NOT_KNOWN.into(), "true".into(), "argocd-controller".into())), "{d:?}");
        assert!(d.security && d.changes[0].security);
        assert!(d.note.contains("argocd:"), "{}", d.note);
    }

    /// Review N3 (a) and the variant deleting the annotation: a server-side apply under
    /// Argo CD's name leaves no annotation, and `managedFields` can be stripped: the
    /// value is listed whoever owns it, or with no owner at all.
    #[test]
    fn without_a_desired_state_a_security_value_is_listed_whoever_owns_it() {
        let container = json!({"name": "app", "image": "api:1", "securityContext": {"privileged": true}});
        let live = deployment(json!({}), argocd_owns_privileged("Apply"), container.clone());
        let d = diff(&live, None, None);
        assert_eq!(privileged(&d), Some((NOT_KNOWN.into(), "true".into(), "argocd-controller".into())), "{d:?}");
        assert!(d.security);
        let stripped = deployment(json!({}), json!([]), container);
        let d = diff(&stripped, None, None);
        assert_eq!(privileged(&d), Some((NOT_KNOWN.into(), "true".into(), String::new())), "{d:?}");
        assert!(d.security);
    }

    /// The fresh review's finding 3: an object padded past the walk's bound (managedFields
    /// emptied, 100,000 env items before the `securityContext`) used up the budget the
    /// security walk shared with the rest of the diff, and `privileged` went unseen. The
    /// security walk has a budget of its own, and when even that is cut the drift is a
    /// security one, saying so.
    #[test]
    fn padding_an_object_does_not_hide_its_security_values() {
        let env: Vec<Value> = (0..100_000).map(|i| json!({"name": format!("P{i:05}")})).collect();
        let container = json!({"name": "app", "image": "api:1", "env": env, "securityContext": {"privileged": true}});
        let live = deployment(json!({}), json!([{}]), container);
        let d = diff(&live, None, None);
        assert!(d.security, "{:?}", d.note);
        let env: Vec<Value> = (0..MAX_VISITED).map(|i| json!({"name": format!("P{i:06}")})).collect();
        let over = deployment(json!({}), json!([{}]), json!({"name": "app", "env": env, "securityContext": {"privileged": true}}));
        let d = diff(&over, None, None);
        assert!(d.security, "{:?}", d.note);
        assert!(d.changes.iter().any(|c| c.path == SECURITY_NOT_ALL_READ && c.security), "{:?}", d.changes.first());
    }

    /// Which account or runtime a pod uses is a security field (a person's write of it
    /// pages), but the value alone grants nothing known: a drifted workload whose Git
    /// value is not known is not a security drift for naming an account.
    #[test]
    fn an_account_name_alone_is_no_security_drift() {
        let mut live = deployment(json!({}), json!([]), json!({"name": "app", "image": "api:1"}));
        live["spec"]["template"]["spec"]["serviceAccountName"] = json!("api");
        live["spec"]["template"]["spec"]["runtimeClassName"] = json!("gvisor");
        let d = diff(&live, None, None);
        assert!(!d.security, "{:?}", d.changes);
        live["spec"]["template"]["spec"]["automountServiceAccountToken"] = json!(true);
        live["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 80}]);
        let d = diff(&live, None, None);
        assert!(d.security, "a mounted token set on purpose and a port on the node grant: {:?}", d.changes);
    }

    /// A value driftwatch read while Argo CD reported the resource Synced is Git's as it
    /// was read, and only as it was; a hardening value grants nothing and is no drift.
    #[test]
    fn values_read_in_sync_are_kept_and_hardening_is_not_drift() {
        let git =
            json!({"name": "app", "image": "api:1", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}, "runAsNonRoot": true}});
        let synced = deployment(json!({}), json!([]), git.clone());
        let recorded = InSync::of(&synced, "workload");
        assert_eq!(recorded.len(), 1, "only what grants something is recorded");
        let d = diff(&synced, None, Some(&recorded));
        assert!(!d.security && d.changes.is_empty(), "{d:?}");
        assert!(d.note.contains("1 unchanged since driftwatch read the object in sync"), "{}", d.note);
        let mut more = git;
        more["securityContext"]["capabilities"]["add"] = json!(["NET_ADMIN", "SYS_ADMIN"]);
        let d = diff(&deployment(json!({}), json!([]), more), None, Some(&recorded));
        let added = d.changes.iter().find(|c| c.path.ends_with("capabilities.add")).expect("a changed value is listed");
        assert_eq!(added.desired, NOT_KNOWN);
        assert!(added.live.contains("SYS_ADMIN"), "{}", added.live);
        assert!(d.security);
    }

    /// With Argo CD's API the desired state decides: what it has is Git's, what it
    /// lacks is listed as `(not set)` whoever owns it (or nobody).
    #[test]
    fn a_trusted_desired_state_decides() {
        let container = json!({"name": "app", "image": "api:1", "securityContext": {"privileged": true}});
        let live = deployment(json!({}), json!([]), container.clone());
        let target = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [container]}}}});
        let d = diff(&live, Some((target, DesiredSource::Argocd)), None);
        assert!(!d.security && d.changes.is_empty(), "{d:?}");
        let lacking = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "api:1"}]}}}});
        let d = diff(&live, Some((lacking, DesiredSource::Argocd)), None);
        assert_eq!(privileged(&d), Some((NOT_SET.into(), "true".into(), String::new())), "{d:?}");
        assert!(d.security);
    }
}
