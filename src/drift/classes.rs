//! Resource classes: what kind of thing drifted. Every OutOfSync entry of an
//! Application's `status.resources[]` gets a class from its group and kind (RBAC,
//! network policy, admission, secret, CRD, workload, config, other); the mapping can be
//! extended in the configuration (`resourceClasses`). Triggers and templates see the
//! result as `drift` (`drift.classes`, `drift.resources`).

use std::collections::BTreeMap;

use serde::Deserialize;

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

/// Class names the configuration may use. `application` is a person's write to an
/// Application itself that weakens what Argo CD enforces (decided from the fields it
/// set, like `security-context`: [`crate::drift::classify`]).
pub const CLASSES: &[&str] =
    &["rbac", "network-policy", "admission", "secret", "crd", "workload", "config", "security-context", "application", "other"];

/// Field managers Argo CD writes with; their fields are the desired state.
pub const ARGOCD_MANAGERS: &[&str] = &["argocd-controller", "argocd-application-controller"];

/// Field names that make a change a security change wherever they appear in a
/// workload's pod template (containers, init containers, the pod itself).
const SECURITY_FIELDS: &[&str] = &[
    "securityContext",
    "privileged",
    "capabilities",
    "allowPrivilegeEscalation",
    "runAsUser",
    "runAsNonRoot",
    "runAsGroup",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostPath",
    "procMount",
    "seccompProfile",
    // Which identity the pod runs as, and whether its token is mounted.
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    // A port on the node (Pod Security's baseline), and the runtime the pod runs in.
    "hostPort",
    "runtimeClassName",
];

/// The pod-template annotation that sets a container's AppArmor profile (before the
/// `appArmorProfile` field).
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Annotations on a managed object that make its engine leave it alone: Flux stops
/// applying it (`kustomize.toolkit.fluxcd.io/reconcile: disabled`, `ssa: Ignore` or
/// `IfNotPresent`), helm-controller stops looking for its drift, Argo CD stops
/// comparing or pruning it. Writing one is writing oneself a silent drift.
const ENGINE_OPT_OUT: &[&str] = &[
    "metadata.annotations.kustomize.toolkit.fluxcd.io/reconcile",
    "metadata.annotations.kustomize.toolkit.fluxcd.io/ssa",
    "metadata.annotations.helm.toolkit.fluxcd.io/driftDetection",
    "metadata.annotations.kustomize.toolkit.fluxcd.io/prune",
    "metadata.annotations.helm.sh/resource-policy",
    "metadata.annotations.argocd.argoproj.io/compare-options",
    "metadata.annotations.argocd.argoproj.io/sync-options",
];

/// Whether a field path is a security field for a resource of `class`.
pub fn is_security_field(class: &str, path: &str) -> bool {
    if ENGINE_OPT_OUT.iter().any(|f| path == *f || f.strip_prefix(path).is_some_and(|rest| rest.starts_with('.'))) {
        return true;
    }
    let top = path.split(['.', '[']).next().unwrap_or_default();
    match class {
        "rbac" => matches!(top, "rules" | "subjects" | "roleRef" | "aggregationRule" | "automountServiceAccountToken"),
        "network-policy" => top == "spec",
        "admission" => matches!(top, "webhooks" | "spec"),
        _ => path_segments(path).any(|seg| SECURITY_FIELDS.contains(&seg)) || path.contains(APPARMOR_ANNOTATION),
    }
}

/// Whether a field path may be a security field of some class decided by its fields
/// (a workload's pod settings, an Application's own fields): what the audit input
/// keeps of a write past the fields it shows, so that padding cannot push a security
/// field out of sight.
pub fn may_be_security_field(path: &str) -> bool {
    is_security_field("workload", path) || crate::drift::app_security_field(path)
}

/// Whether a resource of `class` keeps its security fields as values inside the object
/// (a pod template's `securityContext`, `hostPath`...), which only a trusted desired
/// state may call Git's (`drift::diff`). The kinds whose whole drift is a security
/// matter (`rbac`, `network-policy`, `admission`) are judged by their class; a
/// ConfigMap's keys, a CRD's schema and a Secret's data are not pod settings.
pub fn holds_security_values(class: &str) -> bool {
    matches!(class, "workload" | "other" | "security-context")
}

/// Whether the value at a security field `path` (a leaf: a scalar or a list of scalars)
/// grants something compared with the field not being set: `privileged: true`, a
/// capability added, a host namespace, a `hostPath`, user or group 0, an unmasked
/// `/proc`, an unconfined seccomp or AppArmor profile. Hardening values (`runAsNonRoot:
/// true`, `allowPrivilegeEscalation: false`, `capabilities.drop`,
/// `readOnlyRootFilesystem`, `seccompProfile: RuntimeDefault`, a non-zero user) grant
/// nothing; a field this list does not know grants whatever it holds, so a new field
/// fails closed.
pub fn grants(path: &str, value: &serde_json::Value) -> bool {
    use serde_json::Value;
    let unset = match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    };
    if unset {
        return false;
    }
    let segs: Vec<&str> = path_segments(path).collect();
    let leaf = segs.last().copied().unwrap_or_default();
    let parent = segs.len().checked_sub(2).and_then(|i| segs.get(i)).copied().unwrap_or_default();
    if segs.contains(&"hostPath") {
        return true;
    }
    if path.contains(APPARMOR_ANNOTATION) {
        // `unconfined` grants; the runtime's default and a profile on the node do not.
        return !value.as_str().is_some_and(|v| v == "runtime/default" || v.starts_with("localhost/"));
    }
    if parent == "capabilities" {
        return leaf != "drop";
    }
    match leaf {
        "privileged" | "hostNetwork" | "hostPID" | "hostIPC" | "allowPrivilegeEscalation" | "hostProcess" => value == &Value::Bool(true),
        "runAsUser" | "runAsGroup" => value.as_f64() == Some(0.0),
        // `runAsNonRoot: false` is what an unset field means.
        "runAsNonRoot" | "readOnlyRootFilesystem" => false,
        "fsGroup"
        | "fsGroupChangePolicy"
        | "supplementalGroups"
        | "supplementalGroupsPolicy"
        | "seLinuxChangePolicy"
        | "localhostProfile"
        | "runAsUserName"
        | "gmsaCredentialSpec"
        | "gmsaCredentialSpecName"
        // Which account and runtime: a change of them is a security change (a person's
        // write, a manager's field), but a value alone grants nothing known, so it does
        // not make every drifted workload a security drift when its Git value is not
        // known.
        | "serviceAccountName"
        | "serviceAccount"
        | "runtimeClassName" => false,
        "procMount" => value.as_str() != Some("Default"),
        "automountServiceAccountToken" => value == &Value::Bool(true),
        "type" if matches!(parent, "seccompProfile" | "appArmorProfile") => value.as_str() == Some("Unconfined"),
        _ => true,
    }
}

/// The field names of a path (`a.b[x].c` -> `a`, `b`, `c`).
fn path_segments(path: &str) -> impl Iterator<Item = &str> {
    path.split('.').map(|s| s.split('[').next().unwrap_or_default()).filter(|s| !s.is_empty())
}

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

/// A `resourceClasses` rule naming a class driftwatch does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resourceClasses[{rule}]: class {class:?} is not one of {}", CLASSES.join(", "))]
pub struct UnknownClass {
    pub rule: usize,
    pub class: String,
}

impl ClassMap {
    /// The defaults with the configuration's rules on top; an unknown class name is an
    /// error naming the rule.
    pub fn with_rules(rules: &[ClassRule]) -> Result<ClassMap, UnknownClass> {
        let mut m = ClassMap::default();
        for (i, r) in rules.iter().enumerate() {
            if !CLASSES.contains(&r.class.as_str()) {
                return Err(UnknownClass { rule: i, class: r.class.clone() });
            }
            m.by_kind.insert((r.group.clone(), r.kind.clone()), r.class.clone());
        }
        Ok(m)
    }

    pub fn class_of(&self, group: &str, kind: &str) -> &str {
        self.by_kind.get(&(group.to_string(), kind.to_string())).map_or("other", String::as_str)
    }
}

/// Classes whose drift is a security matter (escalated by the default policy).
pub const SECURITY_CLASSES: &[&str] = &["rbac", "network-policy", "security-context", "admission", "application"];

/// At most this many attribution entries per drift.
pub const MAX_ATTRIBUTION_ENTRIES: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_is_configurable() {
        let m = ClassMap::with_rules(&[ClassRule { group: "example.com".into(), kind: "Widget".into(), class: "crd".into() }]).unwrap();
        assert_eq!(m.class_of("example.com", "Widget"), "crd");
        assert_eq!(m.class_of("", "Secret"), "secret");
        assert!(
            ClassMap::with_rules(&[ClassRule { group: String::new(), kind: "X".into(), class: "loud".into() }]).unwrap_err().class
                == "loud"
        );
    }

    /// What a security value grants is judged against the field not being set: a
    /// hardening value is not a new permission, whoever wrote it.
    #[test]
    fn hardening_values_grant_nothing_and_unknown_fields_fail_closed() {
        use serde_json::json;
        let c = "spec.template.spec.containers[app].securityContext";
        for (field, value) in [
            ("privileged", json!(true)),
            ("allowPrivilegeEscalation", json!(true)),
            ("capabilities.add", json!(["NET_ADMIN"])),
            ("runAsUser", json!(0)),
            ("procMount", json!("Unmasked")),
            ("seccompProfile.type", json!("Unconfined")),
            ("seLinuxOptions.type", json!("spc_t")),
            ("windowsOptions.hostProcess", json!(true)),
        ] {
            assert!(grants(&format!("{c}.{field}"), &value), "{field}: {value}");
        }
        for (field, value) in [
            ("privileged", json!(false)),
            ("allowPrivilegeEscalation", json!(false)),
            ("capabilities.drop", json!(["ALL"])),
            ("capabilities.add", json!([])),
            ("runAsUser", json!(1000)),
            ("runAsNonRoot", json!(true)),
            ("readOnlyRootFilesystem", json!(true)),
            ("procMount", json!("Default")),
            ("seccompProfile.type", json!("RuntimeDefault")),
        ] {
            assert!(!grants(&format!("{c}.{field}"), &value), "{field}: {value}");
        }
        assert!(grants("spec.template.spec.hostNetwork", &json!(true)));
        assert!(grants("spec.template.spec.volumes[data].hostPath.path", &json!("/")));
        assert!(!grants("spec.template.spec.securityContext.fsGroup", &json!(2000)));
        assert!(holds_security_values("workload") && !holds_security_values("rbac") && !holds_security_values("crd"));
    }
}
