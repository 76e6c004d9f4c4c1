//! What an Application may make driftwatch read: the rule of its AppProject.
//!
//! Argo CD's Application CRD has no status subresource, so whoever may patch an
//! Application can write `status.resources`, the list driftwatch reads live objects
//! from. That list is therefore not trusted: a resource in it is read (and its values
//! diffed, its writers indexed for the audit input) only when the Application's
//! AppProject permits that group/kind, in that namespace, on the Application's
//! destination cluster — the rule Argo CD itself applies to what an Application may
//! deploy (`IsResourcePermitted`): `destinations` (server or name, and namespace, with
//! `!` deny patterns), `namespaceResourceWhitelist`/`Blacklist` for namespaced kinds
//! (no whitelist: every kind), `clusterResourceWhitelist`/`Blacklist` for cluster-scoped
//! ones (no whitelist: none). An Application whose AppProject has not been seen may read
//! nothing. Globs are Argo CD's: `*`, `?`, `[a-z]`, `[!x]` and `{a,b}`.
//!
//! `spec.project` and `spec.destination` are written by whoever may patch the
//! Application, so before any resource is judged the Application itself must pass what
//! Argo CD's admission checks (an Application Argo CD refuses deploys nothing, so it
//! may reach nothing here): an Application outside Argo CD's own namespace
//! (`attribution.argocdNamespace`) only under a project whose `sourceNamespaces` lists
//! its namespace (`IsAppNamespacePermitted`), the project itself in Argo CD's namespace
//! (the only place Argo CD reads projects from), and a destination with one of `name`
//! or `server`, never both (`ValidateDestination`). Whether a kind is namespaced is the
//! API server's answer (discovery, `cluster::live`), never the namespace the status
//! claims for it.

use serde_json::Value;

/// The server of a configured cluster whose URL is known only at run time (from Argo
/// CD's cluster Secret): only a destination `server: '*'` matches it.
pub const UNKNOWN_SERVER: &str = "(server from Argo CD's cluster Secret)";

/// A group/kind pattern of a white- or blacklist.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct GroupKind {
    group: String,
    kind: String,
}

/// One of a project's `destinations`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Destination {
    server: String,
    name: String,
    namespace: String,
}

/// An AppProject's rule for resources.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProjectPolicy {
    /// Where the AppProject is: Argo CD reads projects from its own namespace only.
    namespace: String,
    /// `sourceNamespaces`: the namespaces (globs, or `/regex/`) whose Applications may
    /// use the project besides Argo CD's own.
    source_namespaces: Vec<String>,
    destinations: Vec<Destination>,
    cluster_whitelist: Vec<GroupKind>,
    cluster_blacklist: Vec<GroupKind>,
    /// `None`: absent, so every namespaced kind.
    namespace_whitelist: Option<Vec<GroupKind>>,
    namespace_blacklist: Vec<GroupKind>,
}

/// The most entries of each list taken from a project (they are matched per resource).
const MAX_ENTRIES: usize = 1_000;

impl ProjectPolicy {
    /// From an AppProject object; entries of the wrong shape are skipped (they permit
    /// nothing), so a malformed project permits less, never more.
    pub fn of(project: &Value) -> ProjectPolicy {
        let spec = project.get("spec");
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let list = |k: &str| -> Option<Vec<GroupKind>> {
            spec.and_then(|sp| sp.get(k)).and_then(Value::as_array).map(|items| {
                items
                    .iter()
                    .filter(|i| i.is_object())
                    .take(MAX_ENTRIES)
                    .map(|i| GroupKind { group: s(i, "group"), kind: s(i, "kind") })
                    .collect()
            })
        };
        let destinations = spec
            .and_then(|sp| sp.get("destinations"))
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter(|i| i.is_object())
                    .take(MAX_ENTRIES)
                    .map(|i| Destination { server: s(i, "server"), name: s(i, "name"), namespace: s(i, "namespace") })
                    .collect()
            })
            .unwrap_or_default();
        let source_namespaces = spec
            .and_then(|sp| sp.get("sourceNamespaces"))
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).take(MAX_ENTRIES).map(str::to_string).collect())
            .unwrap_or_default();
        ProjectPolicy {
            namespace: project.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string(),
            source_namespaces,
            destinations,
            cluster_whitelist: list("clusterResourceWhitelist").unwrap_or_default(),
            cluster_blacklist: list("clusterResourceBlacklist").unwrap_or_default(),
            namespace_whitelist: list("namespaceResourceWhitelist"),
            namespace_blacklist: list("namespaceResourceBlacklist").unwrap_or_default(),
        }
    }

    /// Argo CD's `IsAppNamespacePermitted`: an Application in Argo CD's namespace may
    /// use any project; one elsewhere only a project whose `sourceNamespaces` matches
    /// its namespace (a glob, or a regular expression between slashes, found anywhere
    /// in the name as Argo CD's `regexp2` does).
    fn app_namespace_permitted(&self, app_namespace: &str, control_plane: &str) -> bool {
        app_namespace == control_plane || self.source_namespaces.iter().any(|p| source_namespace_matches(p, app_namespace))
    }

    fn kind_permitted(&self, group: &str, kind: &str, namespaced: bool) -> bool {
        let listed = |l: &[GroupKind]| l.iter().any(|p| glob(&p.kind, kind) && glob(&p.group, group));
        if namespaced {
            let white = self.namespace_whitelist.as_deref().is_none_or(|l| !l.is_empty() && listed(l));
            white && !listed(&self.namespace_blacklist)
        } else {
            listed(&self.cluster_whitelist) && !listed(&self.cluster_blacklist)
        }
    }

    /// Whether a destination (server or name, and namespace) is one of the project's,
    /// and none of its deny patterns excludes it.
    fn destination_permitted(&self, server: &str, name: &str, namespace: &str) -> bool {
        let mut any = false;
        for d in &self.destinations {
            let name_ok = !name.is_empty() && glob_or_deny(&d.name, name);
            let server_ok = !server.is_empty() && glob_or_deny(&d.server, server);
            let ns_ok = glob_or_deny(&d.namespace, namespace);
            if (server_ok || name_ok) && ns_ok {
                any = true;
            } else if (!name_ok && deny(&d.name)) || (!server_ok && deny(&d.server)) || (!ns_ok && deny(&d.namespace)) {
                return false;
            }
        }
        any
    }
}

/// Where an Application deploys, and its project's rule (if the project was seen).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    project: String,
    policy: Option<ProjectPolicy>,
    server: String,
    name: String,
    /// `spec.destination.namespace`: with the server, what the project's destinations
    /// must permit before a cluster-scoped resource is read.
    dest_namespace: String,
    /// Why Argo CD would refuse the Application itself, so that nothing of it is read.
    refused: Option<String>,
}

impl Scope {
    /// The scope of the Application `app` under `policy`, the rule of the AppProject its
    /// `spec.project` names (`None`: the project has not been seen, and nothing is
    /// read), with `control_plane` the namespace Argo CD runs in.
    pub fn of(app: &Value, policy: Option<&ProjectPolicy>, control_plane: &str) -> Scope {
        let d = |k: &str| app.pointer(&format!("/spec/destination/{k}")).and_then(Value::as_str).unwrap_or_default().to_string();
        let project = app.pointer("/spec/project").and_then(Value::as_str).filter(|p| !p.is_empty()).unwrap_or("default").to_string();
        let (server, name) = (d("server"), d("name"));
        let app_namespace = app.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
        let refused = admission(&project, policy, app_namespace, (&server, &name), control_plane);
        Scope { project, policy: policy.cloned(), server, name, dest_namespace: d("namespace"), refused }
    }

    /// Whether Argo CD would admit the Application at all (else why not): when it would
    /// not, nothing of it is read or indexed.
    pub fn admitted(&self) -> Result<(), Refused> {
        match (&self.refused, &self.policy) {
            (Some(why), _) => Err(Refused(why.clone())),
            (None, None) => Err(Refused(format!("AppProject {} has not been seen: nothing of its Applications is read", self.project))),
            (None, Some(_)) => Ok(()),
        }
    }

    /// The destination's other half filled in where it is known (a configured cluster's
    /// server for its name, and the reverse): Argo CD resolves `destination.name` to a
    /// server before it applies the project's destinations.
    pub fn resolved(mut self, server: &str, name: &str) -> Scope {
        if self.server.is_empty() {
            self.server = server.to_string();
        }
        if self.name.is_empty() {
            self.name = name.to_string();
        }
        self
    }

    /// A scope that permits everything: replayed snapshots and tests, which read no
    /// cluster on anybody's behalf.
    pub fn unrestricted() -> Scope {
        let all = GroupKind { group: "*".into(), kind: "*".into() };
        let policy = ProjectPolicy {
            destinations: vec![Destination { server: "*".into(), name: "*".into(), namespace: "*".into() }],
            cluster_whitelist: vec![all],
            ..ProjectPolicy::default()
        };
        Scope::on_any_cluster(policy, "*")
    }

    /// A scope of `policy` on any cluster (no project, nothing refused).
    fn on_any_cluster(policy: ProjectPolicy, dest_namespace: &str) -> Scope {
        Scope {
            project: String::new(),
            policy: Some(policy),
            server: "*".into(),
            name: "*".into(),
            dest_namespace: dest_namespace.to_string(),
            refused: None,
        }
    }

    /// A scope that permits namespaced objects in `namespaces` only (no cluster-scoped
    /// ones): a tenant's Flux unit, whose inventory may name objects its controller
    /// applied anywhere.
    pub fn namespaces(namespaces: &[&str]) -> Scope {
        let policy = ProjectPolicy {
            destinations: namespaces
                .iter()
                .filter(|n| !n.is_empty())
                .map(|n| Destination { server: "*".into(), name: "*".into(), namespace: (*n).to_string() })
                .collect(),
            ..ProjectPolicy::default()
        };
        Scope::on_any_cluster(policy, namespaces.first().copied().unwrap_or_default())
    }

    /// A scope that admits nothing, saying `why` (a Flux or Fleet unit deploying to a
    /// cluster whose audit input this is not: only its own object is indexed).
    pub fn refusing(why: &str) -> Scope {
        Scope {
            project: String::new(),
            policy: None,
            server: String::new(),
            name: String::new(),
            dest_namespace: String::new(),
            refused: Some(why.to_string()),
        }
    }

    /// Whether the resource may be read for this Application, or why not (for the
    /// resource's `notRead` message). `namespace` is the one `status.resources` claims:
    /// empty is judged as cluster-scoped, anything else as namespaced; the read itself
    /// refuses a resource whose kind discovery serves with the other scope
    /// ([`scope_mismatch`]), so a claim cannot move a kind from one rule to the other.
    pub fn permits(&self, group: &str, kind: &str, namespace: &str) -> Result<(), Refused> {
        // Refuses an unseen project too, so the policy is there below.
        self.admitted()?;
        let Some(p) = &self.policy else { return self.admitted() };
        let gk = group_kind(group, kind);
        if !p.kind_permitted(group, kind, !namespace.is_empty()) {
            let scope = if namespace.is_empty() { "cluster-scoped " } else { "" };
            return Err(Refused(format!("AppProject {} does not permit {scope}{gk}: not read", self.project)));
        }
        if !namespace.is_empty() && !p.destination_permitted(&self.server, &self.name, namespace) {
            return Err(Refused(format!(
                "AppProject {} does not permit namespace {namespace} on this destination: not read",
                self.project
            )));
        }
        // A cluster-scoped object has no namespace to match the destinations with: the
        // Application's own destination must be one of the project's (Argo CD refuses
        // the Application otherwise), or a whitelisted kind could be read on any cluster.
        if namespace.is_empty() && !p.destination_permitted(&self.server, &self.name, &self.dest_namespace) {
            return Err(Refused(format!("AppProject {} does not permit the Application's destination: {gk} not read", self.project)));
        }
        Ok(())
    }
}

/// Why nothing of an Application, or one of its resources, is read: the `notRead`
/// message, in Argo CD's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl From<Refused> for String {
    fn from(e: Refused) -> String {
        e.0
    }
}

/// Why Argo CD would refuse an Application before deploying anything (`None`: it would
/// not), from what the Application says of itself and its project's rule.
fn admission(
    project: &str,
    policy: Option<&ProjectPolicy>,
    app_namespace: &str,
    dest: (&str, &str),
    control_plane: &str,
) -> Option<String> {
    if !dest.0.is_empty() && !dest.1.is_empty() {
        return Some(format!(
            "the destination has both name ({}) and server ({}), which Argo CD refuses: nothing of the Application is read",
            dest.1, dest.0
        ));
    }
    let p = policy?;
    if p.namespace != control_plane {
        return Some(format!(
            "AppProject {project} is in namespace {:?}, not Argo CD's ({control_plane}), where Argo CD reads projects: nothing is read",
            p.namespace
        ));
    }
    if !p.app_namespace_permitted(app_namespace, control_plane) {
        return Some(format!(
            "AppProject {project} does not list namespace {app_namespace} in sourceNamespaces, so Argo CD refuses the Application: nothing of it is read"
        ));
    }
    None
}

fn group_kind(group: &str, kind: &str) -> String {
    if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") }
}

/// Why a resource is not read when `status.resources` claims it with a namespace (or
/// none) and discovery says its kind is the other scope (`namespaced`): Argo CD lists a
/// cluster-scoped object without a namespace and a namespaced one with its namespace,
/// so a mismatch is a hand-written status, and the project's rule was applied to the
/// wrong scope. `None`: claim and discovery agree.
pub fn scope_mismatch(group: &str, kind: &str, claimed_namespace: &str, namespaced: bool) -> Option<String> {
    let gk = group_kind(group, kind);
    match (namespaced, claimed_namespace.is_empty()) {
        (false, false) => Some(format!(
            "{gk} is cluster-scoped (the API server's discovery) but status.resources lists it under namespace {claimed_namespace}: \
             judged as cluster-scoped it needs the AppProject's clusterResourceWhitelist, and it is not read"
        )),
        (true, true) => {
            Some(format!("{gk} is namespaced (the API server's discovery) but status.resources gives it no namespace: not read"))
        }
        _ => None,
    }
}

/// The most characters of a `sourceNamespaces` regular expression compiled.
const MAX_REGEX_CHARS: usize = 1_000;

/// One `sourceNamespaces` entry against a namespace, as Argo CD's
/// `glob.MatchStringInList(.., glob.REGEXP)`: `/re/` is a regular expression matched
/// anywhere in the name (one that does not compile, or uses what Rust's `regex` lacks,
/// matches nothing), anything else a glob.
fn source_namespace_matches(pattern: &str, namespace: &str) -> bool {
    if let Some(re) = pattern.strip_prefix('/').and_then(|p| p.strip_suffix('/')) {
        if re.chars().count() > MAX_REGEX_CHARS {
            return false;
        }
        return regex::RegexBuilder::new(re).size_limit(1 << 20).build().is_ok_and(|r| r.is_match(namespace));
    }
    glob(pattern, namespace)
}

fn deny(pattern: &str) -> bool {
    pattern.starts_with('!')
}

/// Argo CD's `globMatch` with negation: `!p` matches what `p` does not.
fn glob_or_deny(pattern: &str, value: &str) -> bool {
    match pattern.strip_prefix('!') {
        Some(p) => !glob(p, value),
        None => glob(pattern, value),
    }
}

/// A glob (`*`, `?`, `[a-z]`, `[!x]`, `{a,b}`) matched against the whole of `value`.
/// Hand-written: the glob crates in reach match paths (`*` stops at `/`, which Argo
/// CD's server URLs contain) and would add a dependency for forty lines.
pub fn glob(pattern: &str, value: &str) -> bool {
    let v: Vec<char> = value.chars().collect();
    alternatives(pattern, 0).iter().any(|p| simple(&p.chars().collect::<Vec<_>>(), &v))
}

/// `{a,b}` expanded (at most 64 alternatives, 4 levels).
fn alternatives(p: &str, depth: usize) -> Vec<String> {
    let Some(open) = p.find('{') else { return vec![p.to_string()] };
    let Some(close) = p[open..].find('}').map(|i| open + i) else { return vec![p.to_string()] };
    if depth >= 4 {
        return vec![p.to_string()];
    }
    let mut out = Vec::new();
    for alt in p[open + 1..close].split(',') {
        for x in alternatives(&format!("{}{alt}{}", &p[..open], &p[close + 1..]), depth + 1) {
            if out.len() < 64 {
                out.push(x);
            }
        }
    }
    out
}

/// `*`, `?` and classes; the last `*` is backtracked to (linear in practice).
fn simple(p: &[char], v: &[char]) -> bool {
    let (mut pi, mut vi) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, vi));
            pi += 1;
            continue;
        }
        if pi < p.len()
            && let Some((true, next)) = one(p, pi, v[vi])
        {
            pi = next;
            vi += 1;
            continue;
        }
        match star {
            Some((sp, sv)) => {
                star = Some((sp, sv + 1));
                pi = sp + 1;
                vi = sv + 1;
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Whether the pattern element at `pi` matches `c`, and where the next element starts.
fn one(p: &[char], pi: usize, c: char) -> Option<(bool, usize)> {
    match p[pi] {
        '?' => Some((true, pi + 1)),
        '[' => {
            let close = p[pi + 1..].iter().skip(1).position(|x| *x == ']').map(|i| pi + 2 + i)?;
            let mut class = &p[pi + 1..close];
            let negated = matches!(class.first(), Some('!' | '^'));
            if negated {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == '-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            Some((hit != negated, close + 1))
        }
        '\\' if pi + 1 < p.len() => Some((p[pi + 1] == c, pi + 2)),
        x => Some((x == c, pi + 1)),
    }
}

#[cfg(test)]
mod tests {
    /// Review M3: a tenant's Flux unit manages objects of its namespace and target
    /// namespace only: a ConfigMap of kube-system its controller applied, or a
    /// cluster-scoped object, is not its to be told of.
    #[test]
    fn a_tenants_flux_unit_is_bounded_to_its_namespaces() {
        let scope = Scope::namespaces(&["team-a", "shop"]);
        assert!(scope.permits("apps", "Deployment", "team-a").is_ok());
        assert!(scope.permits("", "ConfigMap", "shop").is_ok());
        assert!(scope.permits("", "ConfigMap", "kube-system").is_err());
        assert!(scope.permits("rbac.authorization.k8s.io", "ClusterRole", "").is_err());
        assert!(Scope::namespaces(&["team-a", ""]).permits("", "ConfigMap", "").is_err(), "an empty target namespace permits nothing");
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_as_argo_cds_do() {
        for (p, v, want) in [
            ("*", "anything/at all", true),
            ("team-*", "team-a", true),
            ("team-*", "kube-system", false),
            ("https://*.example.com", "https://prod.example.com", true),
            ("?eam-a", "team-a", true),
            ("team-[ab]", "team-b", true),
            ("team-[!ab]", "team-b", false),
            ("team-[a-c]", "team-c", true),
            ("{team-a,team-b}", "team-b", true),
            ("{team-a,team-b}", "team-c", false),
            ("rbac.authorization.k8s.io", "rbac.authorization.k8s.io", true),
            ("", "", true),
            ("", "x", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ] {
            assert_eq!(glob(p, v), want, "{p} ~ {v}");
        }
    }

    fn app(ns: &str, server: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": "argocd"}, "spec": {"project": "team-a", "destination": {"namespace": ns, "server": server, "name": name}}})
    }

    /// An AppProject in Argo CD's namespace with `spec`.
    fn policy(spec: Value) -> ProjectPolicy {
        ProjectPolicy::of(&json!({"metadata": {"name": "team-a", "namespace": "argocd"}, "spec": spec}))
    }

    #[test]
    fn a_project_permits_its_namespaces_kinds_and_destinations_only() {
        let project = policy(json!({
            "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "team-a"}, {"name": "spoke-*", "namespace": "team-a-*"}],
            "namespaceResourceBlacklist": [{"group": "", "kind": "Secret"}],
            "clusterResourceWhitelist": [{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}]}));
        let here = Scope::of(&app("team-a", "https://kubernetes.default.svc", ""), Some(&project), "argocd");
        assert_eq!(here.permits("apps", "Deployment", "team-a"), Ok(()));
        assert_eq!(here.permits("", "ConfigMap", "team-a"), Ok(()));
        assert!(here.permits("", "ConfigMap", "kube-system").unwrap_err().0.contains("namespace kube-system"));
        assert!(here.permits("", "ConfigMap", "team-b").is_err());
        assert!(here.permits("", "Secret", "team-a").unwrap_err().0.contains("does not permit Secret"));
        assert_eq!(here.permits("rbac.authorization.k8s.io", "ClusterRole", ""), Ok(()));
        assert!(here.permits("rbac.authorization.k8s.io", "ClusterRoleBinding", "").is_err());
        // A destination the project does not have: nothing there.
        let prod = Scope::of(&app("team-a", "", "spoke-prod"), Some(&project), "argocd");
        assert!(prod.permits("apps", "Deployment", "team-a").is_err());
        assert_eq!(prod.permits("apps", "Deployment", "team-a-web"), Ok(()));
        let other = Scope::of(&app("team-a", "https://other.example.com", ""), Some(&project), "argocd");
        assert!(other.permits("apps", "Deployment", "team-a").is_err());
        // An empty whitelist permits nothing; no project seen permits nothing.
        let none = policy(json!({"destinations": [{"server": "*", "namespace": "*"}], "namespaceResourceWhitelist": []}));
        assert!(Scope::of(&app("x", "https://k", ""), Some(&none), "argocd").permits("apps", "Deployment", "x").is_err());
        assert!(
            Scope::of(&app("x", "https://k", ""), None, "argocd")
                .permits("apps", "Deployment", "x")
                .unwrap_err()
                .0
                .contains("has not been seen")
        );
    }

    #[test]
    fn deny_patterns_exclude_what_a_wildcard_allowed() {
        let project = policy(json!({"destinations": [{"server": "*", "namespace": "*"}, {"server": "*", "namespace": "!kube-*"}]}));
        let s = Scope::of(&app("web", "https://kubernetes.default.svc", ""), Some(&project), "argocd");
        assert_eq!(s.permits("", "ConfigMap", "web"), Ok(()));
        assert!(s.permits("", "ConfigMap", "kube-system").is_err());
    }

    /// Review N1: `spec.project` and `spec.destination` are the Application's own
    /// writes, so Argo CD's admission comes first. An Application outside Argo CD's
    /// namespace uses only a project listing its namespace in `sourceNamespaces` (globs,
    /// `/regex/`); a project outside Argo CD's namespace is none; a destination with both
    /// name and server reaches nothing.
    #[test]
    fn argo_cds_admission_decides_before_any_resource() {
        let wide = json!({"destinations": [{"server": "*", "name": "*", "namespace": "*"}],
            "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]});
        let default = policy(wide.clone());
        let in_ns = |ns: &str, project: &ProjectPolicy| {
            let mut a = app("team-a", "https://kubernetes.default.svc", "");
            a["metadata"]["namespace"] = json!(ns);
            Scope::of(&a, Some(project), "argocd")
        };
        // In Argo CD's namespace: any project.
        assert_eq!(in_ns("argocd", &default).permits("", "ConfigMap", "kube-system"), Ok(()));
        // team-a rewrote spec.project to `default`, which lists no sourceNamespaces.
        let why = in_ns("team-a", &default).permits("", "ConfigMap", "kube-system").unwrap_err();
        assert!(why.0.contains("does not list namespace team-a in sourceNamespaces"), "{why}");
        assert_eq!(in_ns("team-a", &default).admitted(), Err(why));
        for (pattern, ns, want) in [
            ("team-a", "team-a", true),
            ("team-*", "team-a", true),
            ("team-*", "kube-system", false),
            ("/^team-[a-c]$/", "team-b", true),
            ("/^team-[a-c]$/", "team-d", false),
            ("/team/", "my-team-x", true),
            ("/(?=x)/", "x", false),
        ] {
            let mut spec = wide.clone();
            spec["sourceNamespaces"] = json!([pattern]);
            assert_eq!(in_ns(ns, &policy(spec)).permits("", "ConfigMap", ns).is_ok(), want, "{pattern} ~ {ns}");
        }
        // A project of the same name in a tenant's namespace is not Argo CD's.
        let mut spec = wide.clone();
        spec["sourceNamespaces"] = json!(["*"]);
        let shadow = ProjectPolicy::of(&json!({"metadata": {"name": "team-a", "namespace": "team-a"}, "spec": spec}));
        assert!(in_ns("team-a", &shadow).permits("", "ConfigMap", "team-a").unwrap_err().0.contains("not Argo CD's"));
        // Both name and server: Argo CD refuses the Application.
        let both = Scope::of(&app("team-a", "https://kubernetes.default.svc", "spoke-prod"), Some(&default), "argocd");
        assert!(both.permits("apps", "Deployment", "team-a").unwrap_err().0.contains("both name (spoke-prod) and server"));
        assert!(both.resolved("https://kubernetes.default.svc", "spoke-prod").admitted().is_err(), "resolving does not hide it");
    }

    /// Review N1 (c): a cluster-scoped kind is judged as cluster-scoped whatever
    /// namespace the status claims (the read refuses the mismatch), and only on a
    /// destination the project has.
    #[test]
    fn cluster_scoped_kinds_need_the_whitelist_and_a_permitted_destination() {
        let project = policy(json!({"destinations": [{"server": "https://kubernetes.default.svc", "namespace": "team-a"}],
            "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}]}));
        let here = Scope::of(&app("team-a", "https://kubernetes.default.svc", ""), Some(&project), "argocd");
        assert!(here.permits("rbac.authorization.k8s.io", "ClusterRole", "").is_err());
        assert_eq!(here.permits("", "Namespace", ""), Ok(()));
        let why = scope_mismatch("rbac.authorization.k8s.io", "ClusterRole", "team-a", false).unwrap();
        assert!(why.contains("ClusterRole.rbac.authorization.k8s.io is cluster-scoped"), "{why}");
        assert!(scope_mismatch("", "ConfigMap", "", true).unwrap().contains("no namespace"));
        assert_eq!(scope_mismatch("", "ConfigMap", "team-a", true), None);
        assert_eq!(scope_mismatch("", "Namespace", "", false), None);
        // Elsewhere: not one of the project's destinations.
        let mut far = app("kube-system", "https://kubernetes.default.svc", "");
        far["spec"]["destination"]["namespace"] = json!("kube-system");
        let far = Scope::of(&far, Some(&project), "argocd");
        assert!(far.permits("", "Namespace", "").unwrap_err().0.contains("destination"));
    }
}
