//! Resource classes: what kind of thing drifted. Every OutOfSync entry of an
//! Application's `status.resources[]` gets a class from its group and kind (RBAC,
//! network policy, admission, secret, CRD, workload, config, other); the mapping can be
//! extended in the configuration (`resourceClasses`). Triggers and templates see the
//! result as `drift` (`drift.classes`, `drift.resources`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::drift::attribution::{LiveIndex, resource_key};

/// The default (group, kind, API resource, class) table. `""` is the core group; the
/// resource name is what RBAC rules grant (`tests/rbac.rs` checks that the shipped
/// attribution rules cover every kind here but [`NOT_READ_BY_DEFAULT`]).
pub const KNOWN_KINDS: &[(&str, &str, &str, &str)] = &[
    ("rbac.authorization.k8s.io", "Role", "roles", "rbac"),
    ("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", "rbac"),
    ("rbac.authorization.k8s.io", "RoleBinding", "rolebindings", "rbac"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding", "clusterrolebindings", "rbac"),
    ("", "ServiceAccount", "serviceaccounts", "rbac"),
    ("networking.k8s.io", "NetworkPolicy", "networkpolicies", "network-policy"),
    ("cilium.io", "CiliumNetworkPolicy", "ciliumnetworkpolicies", "network-policy"),
    ("cilium.io", "CiliumClusterwideNetworkPolicy", "ciliumclusterwidenetworkpolicies", "network-policy"),
    ("crd.projectcalico.org", "NetworkPolicy", "networkpolicies", "network-policy"),
    ("crd.projectcalico.org", "GlobalNetworkPolicy", "globalnetworkpolicies", "network-policy"),
    ("projectcalico.org", "NetworkPolicy", "networkpolicies", "network-policy"),
    ("projectcalico.org", "GlobalNetworkPolicy", "globalnetworkpolicies", "network-policy"),
    ("security.istio.io", "AuthorizationPolicy", "authorizationpolicies", "network-policy"),
    ("security.istio.io", "PeerAuthentication", "peerauthentications", "network-policy"),
    ("policy.linkerd.io", "AuthorizationPolicy", "authorizationpolicies", "network-policy"),
    ("policy.linkerd.io", "Server", "servers", "network-policy"),
    ("policy.linkerd.io", "ServerAuthorization", "serverauthorizations", "network-policy"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "admission"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "admission"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", "admission"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", "admission"),
    ("", "Secret", "secrets", "secret"),
    ("apiextensions.k8s.io", "CustomResourceDefinition", "customresourcedefinitions", "crd"),
    ("apps", "Deployment", "deployments", "workload"),
    ("apps", "StatefulSet", "statefulsets", "workload"),
    ("apps", "DaemonSet", "daemonsets", "workload"),
    ("apps", "ReplicaSet", "replicasets", "workload"),
    ("batch", "Job", "jobs", "workload"),
    ("batch", "CronJob", "cronjobs", "workload"),
    ("", "Pod", "pods", "workload"),
    ("", "ReplicationController", "replicationcontrollers", "workload"),
    ("", "ConfigMap", "configmaps", "config"),
];

/// Kinds whose live objects are not read unless the configuration opts in
/// (`attribution.readSecrets`): RBAC cannot limit a `get` to metadata, so granting it
/// on Secrets would let anyone holding driftwatch's token read every Secret's data.
pub const NOT_READ_BY_DEFAULT: &[(&str, &str)] = &[("", "Secret")];

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
        ClassMap { by_kind: KNOWN_KINDS.iter().map(|(g, k, _, c)| ((g.to_string(), k.to_string()), c.to_string())).collect() }
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

    /// What drifted in an Application, from its status and the attribution read from
    /// the live objects (`live`, possibly empty):
    ///
    /// - `resources`: every OutOfSync resource `{group, version, kind, namespace, name,
    ///   class, kindClass, attribution}`; a resource whose kind class is not rbac,
    ///   network-policy or admission becomes `security-context` when a field manager
    ///   other than Argo CD's owns one of its security fields;
    /// - `classes`, `count`;
    /// - `direction`: `git` (the compared revision differs from the deployed one, or
    ///   nothing was deployed yet), `live` (same revision, resources went OutOfSync),
    ///   `unknown` (no revision to compare) or `none` (not OutOfSync); with `revision`
    ///   and `deployedRevision`;
    /// - `attribution`: the managers behind the drift, flattened over resources
    ///   `{resource, kind, namespace, name, manager, operation, time, fields,
    ///   securityFields}`, those that changed a security field first, then latest first;
    /// - `security`: a security field changed by someone other than Argo CD, or a
    ///   security class drifted other than by a Git change;
    /// - `severity`: `critical` (security), `warning` (live/unknown drift or Degraded),
    ///   `info` (a Git change), `none`.
    pub fn drift(&self, app: &Value, live: &LiveIndex) -> Value {
        let mut classes = BTreeSet::new();
        let mut resources = Vec::new();
        let mut attribution = Vec::new();
        let mut attributed_security = false;
        if let Some(list) = app.pointer("/status/resources").and_then(Value::as_array) {
            for r in list {
                if r.get("status").and_then(Value::as_str) != Some("OutOfSync") {
                    continue;
                }
                let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                let kind_class = self.class_of(s("group"), s("kind"));
                let attr = live.get(&resource_key(s("group"), s("kind"), s("namespace"), s("name")));
                let mut class = kind_class;
                if attr.is_some_and(|a| a.security) {
                    attributed_security = true;
                    if !matches!(kind_class, "rbac" | "network-policy" | "admission") {
                        class = "security-context";
                    }
                }
                classes.insert(class.to_string());
                let resource = format!("{} {}/{}", s("kind"), s("namespace"), s("name"));
                for m in attr.map(|a| a.managers.as_slice()).unwrap_or_default() {
                    if attribution.len() < MAX_ATTRIBUTION_ENTRIES {
                        attribution.push(json!({"resource": resource, "kind": s("kind"), "namespace": s("namespace"), "name": s("name"),
                            "manager": m.manager, "operation": m.operation, "time": m.time, "fields": m.fields,
                            "securityFields": m.security_fields}));
                    }
                }
                resources.push(json!({"group": s("group"), "version": s("version"), "kind": s("kind"), "namespace": s("namespace"),
                    "name": s("name"), "class": class, "kindClass": kind_class,
                    "attribution": attr.map(|a| serde_json::to_value(a).unwrap_or(Value::Null)).unwrap_or(Value::Null)}));
            }
        }
        // Most relevant first: whoever changed a security field, then the latest.
        let security = |a: &Value| a["securityFields"].as_array().is_some_and(|f| !f.is_empty());
        attribution.sort_by(|a, b| security(b).cmp(&security(a)).then_with(|| b["time"].as_str().cmp(&a["time"].as_str())));
        let (direction, revision, deployed) = direction(app);
        let degraded = app.pointer("/status/health/status").and_then(Value::as_str) == Some("Degraded");
        let security = attributed_security || (direction != "git" && classes.iter().any(|c| SECURITY_CLASSES.contains(&c.as_str())));
        let severity = if security {
            "critical"
        } else if matches!(direction, "live" | "unknown") || degraded {
            "warning"
        } else if direction == "git" {
            "info"
        } else {
            "none"
        };
        json!({"classes": classes.into_iter().collect::<Vec<_>>(), "count": resources.len(), "resources": resources,
               "direction": direction, "revision": revision, "deployedRevision": deployed,
               "attribution": attribution, "security": security, "severity": severity, "degraded": degraded})
    }
}

/// Classes whose drift is a security matter (escalated by the default policy).
pub const SECURITY_CLASSES: &[&str] = &["rbac", "network-policy", "security-context", "admission"];

/// At most this many attribution entries per drift.
pub const MAX_ATTRIBUTION_ENTRIES: usize = 32;

/// `(direction, revision, deployed revision)` of an Application. The deployed revision
/// is the newest of `status.history` (successful syncs), else the revision of a
/// succeeded operation; multi-source Applications compare their revision lists.
pub fn direction(app: &Value) -> (&'static str, String, String) {
    let revs = |v: Option<&Value>| -> String {
        match v {
            Some(o) => match (o.get("revision").and_then(Value::as_str), o.get("revisions").and_then(Value::as_array)) {
                (Some(r), _) if !r.is_empty() => r.to_string(),
                (_, Some(list)) => list.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
                _ => String::new(),
            },
            None => String::new(),
        }
    };
    let revision = revs(app.pointer("/status/sync"));
    let mut deployed = revs(app.pointer("/status/history").and_then(Value::as_array).and_then(|h| h.last()));
    if deployed.is_empty() && app.pointer("/status/operationState/phase").and_then(Value::as_str) == Some("Succeeded") {
        deployed = revs(app.pointer("/status/operationState/syncResult"));
    }
    if app.pointer("/status/sync/status").and_then(Value::as_str) != Some("OutOfSync") {
        return ("none", revision, deployed);
    }
    let dir = if revision.is_empty() {
        "unknown"
    } else if deployed.is_empty() || revision != deployed {
        // Nothing deployed yet (a new Application) is Git's content waiting, too.
        "git"
    } else {
        "live"
    };
    (dir, revision, deployed)
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
        let d = m.drift(&app, &LiveIndex::new());
        assert_eq!(d["classes"], json!(["network-policy", "other", "rbac", "workload"]));
        assert_eq!(d["count"], 4);
        assert_eq!(
            d["resources"][0],
            json!({"group": "rbac.authorization.k8s.io", "version": "", "kind": "Role", "namespace": "a", "name": "r",
                   "class": "rbac", "kindClass": "rbac", "attribution": null})
        );
        // No sync status: no direction; a security class without a Git change is critical.
        assert_eq!(
            (d["direction"].as_str(), d["severity"].as_str(), d["security"].as_bool()),
            (Some("none"), Some("critical"), Some(true))
        );
        let empty = m.drift(&json!({}), &LiveIndex::new());
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
        let git = m.drift(&app("new", "cur", role.clone()), &LiveIndex::new());
        assert_eq!(
            (git["direction"].as_str(), git["revision"].as_str(), git["deployedRevision"].as_str()),
            (Some("git"), Some("new"), Some("cur"))
        );
        assert_eq!((git["security"].as_bool(), git["severity"].as_str()), (Some(false), Some("info")), "a reviewed Git change is quiet");
        let live = m.drift(&app("cur", "cur", role), &LiveIndex::new());
        assert_eq!((live["direction"].as_str(), live["severity"].as_str()), (Some("live"), Some("critical")));
        let cm = json!([{"kind": "ConfigMap", "namespace": "a", "name": "c", "status": "OutOfSync"}]);
        assert_eq!(m.drift(&app("cur", "cur", cm.clone()), &LiveIndex::new())["severity"], "warning");
        assert_eq!(m.drift(&app("cur", "", cm.clone()), &LiveIndex::new())["direction"], "git", "never deployed: Git's content waits");
        assert_eq!(m.drift(&app("", "cur", cm), &LiveIndex::new())["direction"], "unknown", "no revision to compare");
        let multi = json!({"status": {"sync": {"status": "OutOfSync", "revisions": ["a", "b"]}, "history": [{"revisions": ["a", "b"]}]}});
        assert_eq!(direction(&multi).0, "live");
        let op = json!({"status": {"sync": {"status": "OutOfSync", "revision": "x"},
                                   "operationState": {"phase": "Succeeded", "syncResult": {"revision": "y"}}}});
        assert_eq!(direction(&op).0, "git");
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
        let d = m.drift(&app("new", "cur", res), &live);
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
    fn a_resource_not_read_is_reported_with_why() {
        use crate::drift::attribution::{Attribution, NotReadReason};
        let mut live = LiveIndex::new();
        live.insert(resource_key("", "Secret", "shop", "db"), Attribution::not_read(NotReadReason::SecretsOff, "off".into()));
        let res = json!([{"version": "v1", "kind": "Secret", "namespace": "shop", "name": "db", "status": "OutOfSync"}]);
        let d = ClassMap::default().drift(&app("cur", "cur", res), &live);
        assert_eq!(d["classes"], json!(["secret"]), "still classified and reported");
        assert_eq!(d["resources"][0]["attribution"]["notRead"], json!({"reason": "secrets-off", "message": "off"}));
        assert_eq!(d["attribution"], json!([]), "nobody to name");
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
