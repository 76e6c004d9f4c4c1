//! The RBAC objects the project ships, read as the API server would: Roles and
//! ClusterRoles with their rules, aggregated ClusterRoles filled from the ClusterRoles
//! their selectors match, and what the `driftwatch` service account is bound to. Two
//! installs: the plain manifests under `deploy/` (which the fake API server enforces)
//! and the Helm chart as `helm template` renders it (`tests/helm/*.yaml`, kept in step
//! with the chart by `scripts/validate-deploy.sh`). `tests/rbac.rs` checks both.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The service account the shipped bindings name.
pub const SERVICE_ACCOUNT: (&str, &str) = ("argocd", "driftwatch");
/// The annotation that marks the one shipped object allowed to grant Secret reads.
pub const OPT_IN_ANNOTATION: &str = "driftwatch.io/opt-in";

/// One policy rule (`apiGroups`, `resources`, `verbs`), and the namespace it is limited
/// to when it comes from a Role.
#[derive(Debug, Clone)]
pub struct Rule {
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    pub namespace: Option<String>,
}

impl Rule {
    fn has(list: &[String], v: &str) -> bool {
        list.iter().any(|x| x == "*" || x == v)
    }

    /// Whether this rule lets `verb` on `resource` in `group` (in `namespace`, when
    /// the request is namespaced).
    pub fn allows(&self, group: &str, resource: &str, verb: &str, namespace: Option<&str>) -> bool {
        let ns_ok = match (&self.namespace, namespace) {
            (None, _) => true,
            (Some(n), Some(req)) => n == req,
            (Some(_), None) => false,
        };
        ns_ok && Rule::has(&self.groups, group) && Rule::has(&self.resources, resource) && Rule::has(&self.verbs, verb)
    }
}

/// A Role or ClusterRole as shipped.
#[derive(Debug, Clone)]
pub struct Role {
    pub file: PathBuf,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
    pub labels: serde_json::Map<String, Value>,
    /// Carries the opt-in annotation.
    pub opt_in: bool,
    pub rules: Vec<Rule>,
    /// `aggregationRule.clusterRoleSelectors[].matchLabels`.
    pub aggregates: Vec<serde_json::Map<String, Value>>,
}

/// A RoleBinding or ClusterRoleBinding as shipped.
#[derive(Debug, Clone)]
pub struct Binding {
    pub kind: String,
    pub namespace: Option<String>,
    pub role_kind: String,
    pub role_name: String,
    pub subjects: Vec<(String, String, String)>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect()).unwrap_or_default()
}

/// Which install's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Install {
    /// `deploy/` without the chart sources (`kubectl apply -k`, `attribution-secrets.yaml`).
    Manifests,
    /// The chart rendered with the values named (`tests/helm/<name>.yaml`).
    Chart(&'static str),
}

/// The chart renders the tests check: `default` (the chart's values) and `ha` (two
/// replicas, metrics objects, an existing Secret, the Secret opt-in).
pub const CHART_RENDERS: &[&str] = &["default", "ha"];

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        // The chart's sources are templates, not objects: checked as rendered.
        if p.ends_with("deploy/helm") {
            continue;
        }
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}

/// Every Kubernetes object of an install, with its file.
pub fn objects(install: Install) -> Vec<(PathBuf, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    match install {
        Install::Manifests => yaml_files(&root.join("deploy"), &mut files),
        Install::Chart(name) => files.push(root.join(format!("tests/helm/{name}.yaml"))),
    }
    assert!(!files.is_empty(), "no manifests for {install:?}");
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        out.extend(docs.into_iter().filter(|d| d.get("kind").is_some()).map(|d| (f.clone(), d)));
    }
    out
}

/// Every object under `deploy/` (the plain manifests).
pub fn shipped_objects() -> Vec<(PathBuf, Value)> {
    objects(Install::Manifests)
}

/// Every Role and ClusterRole of the plain manifests.
pub fn shipped_roles() -> Vec<Role> {
    roles(Install::Manifests)
}

/// Every Role and ClusterRole of an install.
pub fn roles(install: Install) -> Vec<Role> {
    objects(install)
        .into_iter()
        .filter(|(_, o)| matches!(o["kind"].as_str(), Some("Role" | "ClusterRole")))
        .map(|(file, o)| {
            let namespace = o.pointer("/metadata/namespace").and_then(Value::as_str).map(String::from);
            let rule_ns = if o["kind"] == "Role" { namespace.clone() } else { None };
            Role {
                file,
                kind: o["kind"].as_str().unwrap().to_string(),
                name: o.pointer("/metadata/name").and_then(Value::as_str).unwrap().to_string(),
                namespace,
                labels: o.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default(),
                opt_in: o.pointer("/metadata/annotations").and_then(|a| a.get(OPT_IN_ANNOTATION)).is_some(),
                rules: o["rules"]
                    .as_array()
                    .map(|rules| {
                        rules
                            .iter()
                            .map(|r| Rule {
                                groups: strings(&r["apiGroups"]),
                                resources: strings(&r["resources"]),
                                verbs: strings(&r["verbs"]),
                                namespace: rule_ns.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                aggregates: o
                    .pointer("/aggregationRule/clusterRoleSelectors")
                    .and_then(Value::as_array)
                    .map(|s| s.iter().filter_map(|sel| sel["matchLabels"].as_object().cloned()).collect())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// Every RoleBinding and ClusterRoleBinding of an install.
pub fn bindings(install: Install) -> Vec<Binding> {
    objects(install)
        .into_iter()
        .filter(|(_, o)| matches!(o["kind"].as_str(), Some("RoleBinding" | "ClusterRoleBinding")))
        .map(|(_, o)| Binding {
            kind: o["kind"].as_str().unwrap().to_string(),
            namespace: o.pointer("/metadata/namespace").and_then(Value::as_str).map(String::from),
            role_kind: o.pointer("/roleRef/kind").and_then(Value::as_str).unwrap().to_string(),
            role_name: o.pointer("/roleRef/name").and_then(Value::as_str).unwrap().to_string(),
            subjects: o["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let f = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                    (f("kind"), f("namespace"), f("name"))
                })
                .collect(),
        })
        .collect()
}

/// The rules of a role, with an aggregated ClusterRole's filled in from the shipped
/// ClusterRoles its selectors match (opt-in ones only when `with_opt_in`).
pub fn effective_rules(role: &Role, roles: &[Role], with_opt_in: bool) -> Vec<Rule> {
    if role.aggregates.is_empty() {
        return role.rules.clone();
    }
    roles
        .iter()
        .filter(|r| r.kind == "ClusterRole" && (with_opt_in || !r.opt_in))
        .filter(|r| role.aggregates.iter().any(|sel| sel.iter().all(|(k, v)| r.labels.get(k) == Some(v))))
        .flat_map(|r| r.rules.clone())
        .collect()
}

/// Every rule the `driftwatch` service account holds once the shipped manifests are
/// applied (and the opt-in too when `with_opt_in`).
pub fn service_account_rules(with_opt_in: bool) -> Vec<Rule> {
    rules_of(Install::Manifests, with_opt_in)
}

/// Every rule the `driftwatch` service account holds once an install is applied.
pub fn rules_of(install: Install, with_opt_in: bool) -> Vec<Rule> {
    let roles = roles(install);
    let mut out = Vec::new();
    for b in bindings(install) {
        let bound = b.subjects.iter().any(|(k, ns, n)| k == "ServiceAccount" && (ns.as_str(), n.as_str()) == SERVICE_ACCOUNT);
        if !bound {
            continue;
        }
        let role = roles.iter().find(|r| r.kind == b.role_kind && r.name == b.role_name);
        let role = role.unwrap_or_else(|| panic!("{} binds {} {}, which is not shipped", b.kind, b.role_kind, b.role_name));
        // An opt-in role bound directly counts only with the opt-ins.
        if role.opt_in && !with_opt_in {
            continue;
        }
        let mut rules = effective_rules(role, &roles, with_opt_in);
        if b.kind == "RoleBinding" {
            for r in &mut rules {
                r.namespace = b.namespace.clone();
            }
        }
        out.extend(rules);
    }
    out
}

/// What the shipped role for people who run `driftwatch break-glass` grants
/// (`deploy/kubernetes/break-glass-operators.yaml`).
pub fn break_glass_operator_rules() -> Vec<Rule> {
    roles(Install::Manifests).into_iter().find(|r| r.name == "driftwatch-break-glass").map(|r| r.rules).unwrap_or_default()
}
