//! Attribution: who changed a drifted resource, read from the live object's
//! `metadata.managedFields`. Pure functions over JSON; the daemon fetches the objects
//! (`cluster/live.rs`) and the pipeline only looks the results up.
//!
//! Every entry of `managedFields` names a field manager (`kubectl-edit`,
//! `kubectl-patch`, `helm`, a controller...), its operation (`Update`/`Apply`), the time
//! of its last write and, in `fieldsV1`, the set of fields it owns. The managers other
//! than Argo CD's are the ones that drifted the object; owning a security field makes
//! the drift a security drift.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::classes::{ARGOCD_MANAGERS, is_security_field};

use crate::json::Pointer;
use crate::model::ResourceRef;

/// At most this many field paths are kept per manager (a manager that owns a whole
/// object would otherwise list hundreds).
pub const MAX_FIELDS_PER_MANAGER: usize = 32;
/// At most this many managers are kept per object.
pub const MAX_MANAGERS: usize = 8;

/// Attribution of live objects by [`resource_key`], as the daemon last read them.
pub type LiveIndex = std::collections::HashMap<String, Attribution>;

/// The identity of a resource: `group/kind/namespace/name`.
pub fn resource_key(r: &ResourceRef) -> String {
    format!("{}/{}/{}/{}", r.group, r.kind, r.namespace, r.name)
}

/// The identity of a resource in a [`LiveIndex`]: [`resource_key`] in the cluster
/// driftwatch runs in (`cluster` empty), else prefixed by the spoke cluster
/// (`spoke-1@apps/Deployment/shop/web`), so two clusters' same-named objects differ.
pub fn live_key(cluster: &str, r: &ResourceRef) -> String {
    match cluster.is_empty() {
        true => resource_key(r),
        false => format!("{cluster}@{}", resource_key(r)),
    }
}

/// One field manager of a live object, other than Argo CD's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manager {
    pub manager: String,
    /// `Update` (kubectl edit/patch/replace, controllers) or `Apply` (server-side apply).
    pub operation: String,
    /// RFC 3339 time of the manager's last write, as the API server recorded it.
    pub time: String,
    /// The fields it owns, as paths (`spec.template.spec.containers[app].securityContext.privileged`).
    pub fields: Vec<String>,
    /// The subset of `fields` that are security fields for this kind of object.
    #[serde(rename = "securityFields")]
    pub security_fields: Vec<String>,
    /// Whether the field list was cut at [`MAX_FIELDS_PER_MANAGER`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// What the managed fields of one live object say.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Attribution {
    /// Managers other than Argo CD's (and the configured ones), latest write first.
    pub managers: Vec<Manager>,
    /// Whether any of them owns a security field.
    pub security: bool,
    /// Set when the live object was deliberately not read, or the API server refused
    /// the read: the drift is still classified and reported, only who made it is
    /// unknown (and this says why).
    #[serde(default, rename = "notRead", skip_serializing_if = "Option::is_none")]
    pub not_read: Option<NotRead>,
    /// The summarized diff of the live object against the desired one (moved into the
    /// drifted resource's `changes` by `Drift::of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<super::diff::ResourceDiff>,
}

/// Why a drifted resource's live object was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotReadReason {
    /// The API server answered 403: driftwatch's RBAC does not grant `get` on it.
    Forbidden,
    /// A Secret, and `attribution.readSecrets` is off (the default).
    SecretsOff,
    /// The cluster did not answer (a spoke that is unreachable, a client that could
    /// not be built): tried again after the TTL.
    Unreachable,
    /// The API server answered with an error (a kind it does not serve, a credential
    /// it refuses with 401, a 500): tried again after the TTL.
    Error,
    /// The Application's AppProject does not permit the resource (its group/kind, its
    /// namespace on that destination), or the project has not been seen: never asked
    /// for (`drift::scope`).
    OutsideProject,
}

/// A resource whose attribution is unknown, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotRead {
    pub reason: NotReadReason,
    /// For humans: what was refused and what would allow it.
    pub message: String,
}

impl Attribution {
    /// The attribution of a resource that was not read.
    pub fn not_read(reason: NotReadReason, message: String) -> Attribution {
        Attribution { managers: Vec::new(), security: false, not_read: Some(NotRead { reason, message }), diff: None }
    }
}

/// Reads the attribution of a live object (a full object or only its metadata).
/// `class` is the resource's class by kind (`rbac`, `network-policy`, ...), which
/// decides what counts as a security field; `ignore` are field managers to skip besides
/// Argo CD's.
pub fn attribute(object: &Value, class: &str, ignore: &[String]) -> Attribution {
    let mut managers = Vec::new();
    let Some(entries) = object.at("/metadata/managedFields").and_then(Value::as_array) else {
        return Attribution::default();
    };
    for e in entries {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let name = s("manager");
        if ARGOCD_MANAGERS.contains(&name.as_str()) || ignore.contains(&name) {
            continue;
        }
        // Status writers (controllers reporting) are not drift.
        if s("subresource") == "status" {
            continue;
        }
        let mut fields = Vec::new();
        let mut truncated = false;
        if let Some(f) = e.get("fieldsV1") {
            collect_paths(f, String::new(), &mut fields, &mut truncated);
        }
        fields.retain(|p| !is_bookkeeping(p));
        if fields.is_empty() {
            continue;
        }
        let security_fields: Vec<String> = fields.iter().filter(|p| is_security_field(class, p)).cloned().collect();
        managers.push(Manager { manager: name, operation: s("operation"), time: s("time"), fields, security_fields, truncated });
    }
    // Latest first; RFC 3339 times from the API server compare as strings.
    managers.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| a.manager.cmp(&b.manager)));
    managers.truncate(MAX_MANAGERS);
    let security = managers.iter().any(|m| !m.security_fields.is_empty());
    Attribution { managers, security, not_read: None, diff: None }
}

/// Names the owners of security values no trusted desired state gives (the diff's
/// `security`): a manager's name is whatever the client sent, so Argo CD's names are
/// listed here like anyone's, with the operation and time of their `managedFields`
/// entry. `changes` are the diff's listed fields; the list keeps managers that changed
/// a security field first when it is cut at [`MAX_MANAGERS`].
pub fn name_unverified(a: &mut Attribution, object: &Value, changes: &[super::diff::FieldChange]) {
    let entries = object.at("/metadata/managedFields").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for c in changes.iter().filter(|c| c.security && ARGOCD_MANAGERS.contains(&c.manager.as_str())) {
        if let Some(m) = a.managers.iter_mut().find(|m| m.manager == c.manager) {
            if !m.security_fields.contains(&c.path) && m.security_fields.len() < MAX_FIELDS_PER_MANAGER {
                m.fields.push(c.path.clone());
                m.security_fields.push(c.path.clone());
            }
            continue;
        }
        let s = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        // The manager's latest entry that is not a status writer's.
        let operation = entries
            .iter()
            .filter(|e| s(e, "manager") == c.manager && s(e, "subresource") != "status")
            .max_by_key(|e| s(e, "time"))
            .map(|e| s(e, "operation"))
            .unwrap_or_default();
        a.managers.push(Manager {
            manager: c.manager.clone(),
            operation,
            time: c.time.clone(),
            fields: vec![c.path.clone()],
            security_fields: vec![c.path.clone()],
            truncated: false,
        });
    }
    a.managers.sort_by(|x, y| x.security_fields.is_empty().cmp(&y.security_fields.is_empty()).then_with(|| y.time.cmp(&x.time)));
    a.managers.truncate(MAX_MANAGERS);
    a.security = true;
}

/// Fields every writer touches that say nothing about drift.
fn is_bookkeeping(path: &str) -> bool {
    path.starts_with("status")
        || path == "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration"
        || path == "metadata.annotations.deployment.kubernetes.io/revision"
}

/// Walks a FieldsV1 set and collects the paths of its leaves. `f:<name>` is a field,
/// `k:{...}` a list item by key, `v:<value>` a set member, `i:<n>` a list index and `.`
/// the node itself.
fn collect_paths(node: &Value, prefix: String, out: &mut Vec<String>, truncated: &mut bool) {
    let Some(map) = node.as_object() else { return };
    let children: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| k.as_str() != ".").collect();
    if children.is_empty() {
        if !prefix.is_empty() {
            if out.len() < MAX_FIELDS_PER_MANAGER {
                out.push(prefix);
            } else {
                *truncated = true;
            }
        }
        return;
    }
    for (k, v) in children {
        let path = match k.split_once(':') {
            Some(("f", name)) if prefix.is_empty() => name.to_string(),
            Some(("f", name)) => format!("{prefix}.{name}"),
            Some(("k", key)) => format!("{prefix}[{}]", list_key(key)),
            Some(("v", value)) => format!("{prefix}[{}]", value.trim_matches('"')),
            Some(("i", index)) => format!("{prefix}[{index}]"),
            _ => format!("{prefix}.{k}"),
        };
        collect_paths(v, path, out, truncated);
    }
}

/// `{"name":"app"}` -> `app`; `{"containerPort":80,"protocol":"TCP"}` -> `containerPort=80,protocol=TCP`.
fn list_key(key: &str) -> String {
    match serde_json::from_str::<serde_json::Map<String, Value>>(key) {
        Ok(m) => super::diff::key_label(&m),
        Err(_) => key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"metadata": {"name": "web", "managedFields": [
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-03-01T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "time": "2026-03-02T03:12:05Z",
             "fieldsV1": {"f:status": {"f:replicas": {}}}},
            {"manager": "kubectl-patch", "operation": "Update", "time": "2026-03-02T02:00:00Z",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-02T03:12:00Z",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                          "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                              "f:securityContext": {".": {}, "f:privileged": {}}}}}}}}}
        ]}})
    }

    #[test]
    fn managers_other_than_argo_cd_with_their_fields() {
        let a = attribute(&deployment(), "workload", &[]);
        assert!(a.security);
        let names: Vec<&str> = a.managers.iter().map(|m| m.manager.as_str()).collect();
        assert_eq!(names, ["kubectl-edit", "kubectl-patch"], "latest first; Argo CD and status writers left out");
        let edit = &a.managers[0];
        assert_eq!(edit.operation, "Update");
        assert_eq!(edit.time, "2026-03-02T03:12:00Z");
        assert_eq!(edit.fields, ["spec.template.spec.containers[app].securityContext.privileged"]);
        assert_eq!(edit.security_fields, edit.fields);
        assert_eq!(a.managers[1].fields, ["metadata.labels.team"]);
        assert!(a.managers[1].security_fields.is_empty());
    }

    #[test]
    fn configured_managers_are_ignored_and_fields_are_bounded() {
        let a = attribute(&deployment(), "workload", &["kubectl-edit".into()]);
        assert!(!a.security);
        assert_eq!(a.managers.len(), 1);
        let mut many = serde_json::Map::new();
        for i in 0..100 {
            many.insert(format!("f:k{i}"), json!({}));
        }
        let obj = json!({"metadata": {"managedFields": [{"manager": "m", "time": "t", "fieldsV1": {"f:data": many}}]}});
        let a = attribute(&obj, "config", &[]);
        assert_eq!(a.managers[0].fields.len(), MAX_FIELDS_PER_MANAGER);
        assert!(a.managers[0].truncated);
        assert_eq!(attribute(&json!({"metadata": {}}), "config", &[]), Attribution::default());
    }

    #[test]
    fn security_fields_depend_on_the_class() {
        assert!(is_security_field("rbac", "rules"));
        assert!(is_security_field("rbac", "subjects[k=v]"));
        assert!(!is_security_field("rbac", "metadata.labels.a"));
        assert!(is_security_field("network-policy", "spec.ingress"));
        assert!(is_security_field("workload", "spec.template.spec.hostNetwork"));
        assert!(is_security_field("workload", "spec.template.spec.volumes[data].hostPath.path"));
        assert!(is_security_field("workload", "spec.template.spec.containers[a].securityContext.capabilities.add"));
        assert!(!is_security_field("workload", "spec.template.spec.containers[a].image"));
        assert!(!is_security_field("config", "data.privileged-mode"), "a ConfigMap key is not a security field");
    }

    #[test]
    fn list_keys_sets_and_indexes_become_readable() {
        let obj = json!({"metadata": {"managedFields": [{"manager": "m", "time": "t", "fieldsV1": {
            "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {"f:targetPort": {}}},
                       "f:finalizers": {"v:\"x\"": {}}, "f:list": {"i:2": {}}}}}]}});
        let a = attribute(&obj, "other", &[]);
        assert_eq!(a.managers[0].fields, ["spec.ports[port=80,protocol=TCP].targetPort", "spec.finalizers[x]", "spec.list[2]"]);
    }
}
