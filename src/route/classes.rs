//! Resource classes: what kind of thing drifted. Every OutOfSync entry of an
//! Application's `status.resources[]` gets a class from its group and kind (RBAC,
//! network policy, admission, secret, CRD, workload, config, other); the mapping can be
//! extended in the configuration (`resourceClasses`). Triggers and templates see the
//! result as `drift` (`drift.classes`, `drift.resources`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Value, json};

/// The default (group, kind) -> class table. `""` is the core group.
const DEFAULTS: &[(&str, &str, &str)] = &[
    ("rbac.authorization.k8s.io", "Role", "rbac"),
    ("rbac.authorization.k8s.io", "ClusterRole", "rbac"),
    ("rbac.authorization.k8s.io", "RoleBinding", "rbac"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding", "rbac"),
    ("", "ServiceAccount", "rbac"),
    ("networking.k8s.io", "NetworkPolicy", "network-policy"),
    ("cilium.io", "CiliumNetworkPolicy", "network-policy"),
    ("cilium.io", "CiliumClusterwideNetworkPolicy", "network-policy"),
    ("crd.projectcalico.org", "NetworkPolicy", "network-policy"),
    ("crd.projectcalico.org", "GlobalNetworkPolicy", "network-policy"),
    ("projectcalico.org", "NetworkPolicy", "network-policy"),
    ("projectcalico.org", "GlobalNetworkPolicy", "network-policy"),
    ("security.istio.io", "AuthorizationPolicy", "network-policy"),
    ("security.istio.io", "PeerAuthentication", "network-policy"),
    ("policy.linkerd.io", "AuthorizationPolicy", "network-policy"),
    ("policy.linkerd.io", "Server", "network-policy"),
    ("policy.linkerd.io", "ServerAuthorization", "network-policy"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "admission"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "admission"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", "admission"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding", "admission"),
    ("", "Secret", "secret"),
    ("apiextensions.k8s.io", "CustomResourceDefinition", "crd"),
    ("apps", "Deployment", "workload"),
    ("apps", "StatefulSet", "workload"),
    ("apps", "DaemonSet", "workload"),
    ("apps", "ReplicaSet", "workload"),
    ("batch", "Job", "workload"),
    ("batch", "CronJob", "workload"),
    ("", "Pod", "workload"),
    ("", "ReplicationController", "workload"),
    ("", "ConfigMap", "config"),
];

/// Class names the configuration may use.
pub const CLASSES: &[&str] = &["rbac", "network-policy", "admission", "secret", "crd", "workload", "config", "security-context", "other"];

/// One entry of `resourceClasses` in the configuration.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClassRule {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    pub kind: String,
    /// One of [`CLASSES`].
    pub class: String,
}

/// The (group, kind) -> class mapping in force.
#[derive(Debug, Clone)]
pub struct ClassMap {
    by_kind: BTreeMap<(String, String), String>,
}

impl Default for ClassMap {
    fn default() -> Self {
        ClassMap { by_kind: DEFAULTS.iter().map(|(g, k, c)| ((g.to_string(), k.to_string()), c.to_string())).collect() }
    }
}

impl ClassMap {
    /// The defaults with the configuration's rules on top; an unknown class name is an
    /// error naming the rule.
    pub fn with_rules(rules: &[ClassRule]) -> Result<ClassMap, String> {
        let mut m = ClassMap::default();
        for (i, r) in rules.iter().enumerate() {
            if !CLASSES.contains(&r.class.as_str()) {
                return Err(format!("resourceClasses[{i}]: class {:?} is not one of {}", r.class, CLASSES.join(", ")));
            }
            m.by_kind.insert((r.group.clone(), r.kind.clone()), r.class.clone());
        }
        Ok(m)
    }

    pub fn class_of(&self, group: &str, kind: &str) -> &str {
        self.by_kind.get(&(group.to_string(), kind.to_string())).map_or("other", String::as_str)
    }

    /// What drifted in an Application: every OutOfSync resource with its class, and the
    /// set of classes. `{"classes": [...], "resources": [{group, kind, namespace, name,
    /// class}], "count": n}`.
    pub fn drift(&self, app: &Value) -> Value {
        let mut classes = BTreeSet::new();
        let mut resources = Vec::new();
        if let Some(list) = app.pointer("/status/resources").and_then(Value::as_array) {
            for r in list {
                if r.get("status").and_then(Value::as_str) != Some("OutOfSync") {
                    continue;
                }
                let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                let class = self.class_of(s("group"), s("kind"));
                classes.insert(class.to_string());
                resources
                    .push(json!({"group": s("group"), "kind": s("kind"), "namespace": s("namespace"), "name": s("name"), "class": class}));
            }
        }
        json!({"classes": classes.into_iter().collect::<Vec<_>>(), "count": resources.len(), "resources": resources})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let d = m.drift(&app);
        assert_eq!(d["classes"], json!(["network-policy", "other", "rbac", "workload"]));
        assert_eq!(d["count"], 4);
        assert_eq!(
            d["resources"][0],
            json!({"group": "rbac.authorization.k8s.io", "kind": "Role", "namespace": "a", "name": "r", "class": "rbac"})
        );
        assert_eq!(m.drift(&json!({})), json!({"classes": [], "count": 0, "resources": []}));
    }

    #[test]
    fn the_mapping_is_configurable() {
        let m = ClassMap::with_rules(&[ClassRule { group: "example.com".into(), kind: "Widget".into(), class: "crd".into() }]).unwrap();
        assert_eq!(m.class_of("example.com", "Widget"), "crd");
        assert_eq!(m.class_of("", "Secret"), "secret");
        assert!(
            ClassMap::with_rules(&[ClassRule { group: String::new(), kind: "X".into(), class: "loud".into() }])
                .unwrap_err()
                .contains("loud")
        );
    }
}
