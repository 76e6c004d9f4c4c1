//! Which Application manages an object an audit event names: every resource in an
//! Application's `status.resources` (and the Application itself) by API group,
//! resource (plural, as audit events name it), namespace and name; and Argo CD's
//! tracking label value, for objects created before they are listed. Kept by the
//! evaluation thread as Applications change, read by the ingest.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::model::App;

/// One Application an object belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub app_key: Arc<str>,
    /// The object's kind (audit events name only the resource).
    pub kind: Arc<str>,
    /// The object is the Application itself.
    pub app_spec: bool,
    /// The engine of the unit that manages it: whose controller's writes of it are
    /// desired state.
    pub engine: crate::unit::Engine,
    /// The object is one the unit reads (a Flux source, a values ConfigMap, a Fleet
    /// Bundle), not the unit itself: a write is of the unit's class `application`, but
    /// its status is its own controller's.
    pub input: bool,
}

/// The managed objects of every Application.
#[derive(Debug, Default)]
pub struct ManagedIndex {
    by_ref: HashMap<String, Vec<Target>>,
    /// Per Application: the keys it put in `by_ref`, its tracking values and its
    /// destination namespace.
    by_app: HashMap<Arc<str>, (Vec<String>, Vec<String>, String)>,
    /// Tracking value (`name`, `namespace_name`) -> Applications with their
    /// destination namespace.
    by_tracking: HashMap<String, Vec<(Arc<str>, String)>>,
    /// A collection (`group/resource/namespace`) -> the Applications that list an
    /// object of it, with its kind: what a `deletecollection` (no name) removes. Keyed
    /// by Application, so that keeping it costs the same however many Applications
    /// share a namespace.
    by_collection: HashMap<String, HashMap<Arc<str>, Target>>,
}

/// The collection an object key belongs to (its key without the name).
fn collection_of(key: &str) -> &str {
    key.rsplit_once('/').map_or(key, |(c, _)| c)
}

/// The resource (plural, lowercase) of a kind, as the API server names it.
pub fn plural(kind: &str) -> String {
    let k = kind.to_ascii_lowercase();
    if k == "endpoints" {
        return k;
    }
    if k.ends_with('s') || k.ends_with('x') || k.ends_with("ch") || k.ends_with("sh") {
        format!("{k}es")
    } else if let Some(stem) = k.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{k}s")
    }
}

fn ref_key(group: &str, resource: &str, namespace: &str, name: &str) -> String {
    format!("{group}/{resource}/{namespace}/{name}")
}

/// A key in the cluster `cluster` (a spoke's label; empty: the cluster driftwatch runs
/// in): every key starts with its cluster and U+0001, which no label holds (refused at
/// load), so a group, name or tracking value holding U+0001 (a tenant writes those)
/// cannot make one cluster's key another's.
fn in_cluster(cluster: &str, key: String) -> String {
    format!("{cluster}\u{1}{key}")
}

impl ManagedIndex {
    /// Records (or replaces) what `app` manages: the objects its unit lists
    /// (`unit.managed`: an Application's `status.resources`, a Flux unit's
    /// `status.inventory`, a Fleet bundle's `status.resources`), those `scope` permits
    /// — an Application's AppProject, since anyone who may patch the Application may
    /// write that list; an object outside it is not the Application's. A Flux or Fleet
    /// unit's list is written through the status subresource, by its controller.
    pub fn update(&mut self, app: &App, scope: &crate::project::Scope) {
        self.update_with(app, scope, scope);
    }

    /// [`Self::update`], with what the unit reads bounded by `inputs` rather than by
    /// `scope`: a unit deploying to another cluster manages nothing here, but what it
    /// reads (its source, its values, its kubeconfig; a Fleet bundle's Bundle and
    /// GitRepo) is here all the same.
    pub fn update_with(&mut self, app: &App, scope: &crate::project::Scope, inputs: &crate::project::Scope) {
        self.update_in(app, "", scope, inputs);
    }

    /// [`Self::update_with`] for a unit deploying to the spoke `cluster` (whose API
    /// server posts its own audit batches): what it lists, and the objects carrying its
    /// tracking label, are that cluster's; the unit itself and what it reads are here.
    pub fn update_in(&mut self, app: &App, cluster: &str, scope: &crate::project::Scope, inputs: &crate::project::Scope) {
        let key: Arc<str> = Arc::from(app.state_key());
        let engine = app.engine();
        let (group, _, kind) = engine.gvk();
        let mut refs = vec![in_cluster("", ref_key(group, engine.resource(), &app.namespace, &app.name))];
        let mut targets = vec![Target { app_key: key.clone(), kind: Arc::from(kind), app_spec: true, engine, input: false }];
        // An Application Argo CD would refuse (`Scope::admitted`) manages nothing: only
        // its own spec is indexed, and no tracking label names it. Whether a listed kind
        // is namespaced needs no discovery here: the key holds the claimed namespace and
        // an audit event names a cluster-scoped object with none, so a cluster-scoped
        // kind claimed under a namespace (or a namespaced one claimed without) matches
        // no event; one claimed rightly is judged by the rule of its scope.
        let admitted = scope.admitted().is_ok();
        // What the unit reads first: an object it both lists and reads (the bootstrap
        // Kustomization's own GitRepository) is kept as read, a write of it the unit's.
        for r in app.unit.inputs.iter().filter(|r| inputs.permits(&r.group, &r.kind, &r.namespace).is_ok()) {
            refs.push(in_cluster("", ref_key(&r.group, &plural(&r.kind), &r.namespace, &r.name)));
            targets.push(Target { app_key: key.clone(), kind: Arc::from(r.kind.as_str()), app_spec: true, engine, input: true });
        }
        let listed = app.unit.managed.iter().filter(|_| admitted);
        for r in listed {
            if scope.permits(&r.group, &r.kind, &r.namespace).is_err() {
                continue;
            }
            refs.push(in_cluster(cluster, ref_key(&r.group, &plural(&r.kind), &r.namespace, &r.name)));
            targets.push(Target { app_key: key.clone(), kind: Arc::from(r.kind.as_str()), app_spec: false, engine, input: false });
        }
        // Argo CD's tracking label names an Application (`app.kubernetes.io/instance`).
        let tracking = match app.engine() {
            crate::unit::Engine::ArgoCd => {
                vec![in_cluster(cluster, app.name.clone()), in_cluster(cluster, format!("{}_{}", app.namespace, app.name))]
            }
            _ => Vec::new(),
        };
        let dest_ns = match admitted {
            true => app.object.pointer("/spec/destination/namespace").and_then(Value::as_str).unwrap_or_default().to_string(),
            // `tracked` never matches an empty namespace.
            false => String::new(),
        };
        // Unchanged only when the destination namespace is too (tracking labels match by it).
        if self.by_app.get(&key).is_some_and(|(r, _, ns)| *r == refs && *ns == dest_ns) {
            return;
        }
        self.remove(&key);
        for (r, t) in refs.iter().zip(targets) {
            // The Application itself too: `kubectl delete applications --all`.
            self.by_collection.entry(collection_of(r).to_string()).or_default().entry(t.app_key.clone()).or_insert_with(|| t.clone());
            let list = self.by_ref.entry(r.clone()).or_default();
            if !list.iter().any(|o| o.app_key == t.app_key) {
                list.push(t);
            }
        }
        for t in &tracking {
            self.by_tracking.entry(t.clone()).or_default().push((key.clone(), dest_ns.clone()));
        }
        self.by_app.insert(key, (refs, tracking, dest_ns));
    }

    /// Forgets an Application (deleted).
    pub fn remove(&mut self, app_key: &str) {
        let Some((refs, tracking, _)) = self.by_app.remove(app_key) else { return };
        for r in refs {
            if let Some(apps) = self.by_collection.get_mut(collection_of(&r)) {
                apps.remove(app_key);
                if apps.is_empty() {
                    self.by_collection.remove(collection_of(&r));
                }
            }
            if let Some(list) = self.by_ref.get_mut(&r) {
                list.retain(|t| &*t.app_key != app_key);
                if list.is_empty() {
                    self.by_ref.remove(&r);
                }
            }
        }
        for t in tracking {
            if let Some(list) = self.by_tracking.get_mut(&t) {
                list.retain(|(k, _)| &**k != app_key);
                if list.is_empty() {
                    self.by_tracking.remove(&t);
                }
            }
        }
    }

    /// The Applications that list the object. The index names a kind by [`plural`]'s
    /// English rule; a CRD whose plural is its kind in lower case (Gatekeeper's
    /// constraints, OpenShift's `securitycontextconstraints`) is found by that rule
    /// applied to the resource the event names, so an irregular plural is not a way
    /// around the audit input.
    pub fn lookup(&self, group: &str, resource: &str, namespace: &str, name: &str) -> &[Target] {
        self.lookup_in("", group, resource, namespace, name)
    }

    /// [`Self::lookup`] of an object in the cluster `cluster` (empty: this one).
    pub fn lookup_in(&self, cluster: &str, group: &str, resource: &str, namespace: &str, name: &str) -> &[Target] {
        match self.by_ref.get(&in_cluster(cluster, ref_key(group, resource, namespace, name))) {
            Some(found) => found,
            None => self
                .by_ref
                .get(&in_cluster(cluster, ref_key(group, &plural(resource), namespace, name)))
                .map(Vec::as_slice)
                .unwrap_or_default(),
        }
    }

    /// The Applications that list an object of the collection `group/resource` in
    /// `namespace` (empty: cluster-scoped), which a `deletecollection` removes, with
    /// the plural rule applied as [`Self::lookup`] does.
    pub fn collection(&self, group: &str, resource: &str, namespace: &str) -> Vec<Target> {
        self.collection_in("", group, resource, namespace)
    }

    /// [`Self::collection`] in the cluster `cluster` (empty: this one).
    pub fn collection_in(&self, cluster: &str, group: &str, resource: &str, namespace: &str) -> Vec<Target> {
        let key = |resource: &str| in_cluster(cluster, format!("{group}/{resource}/{namespace}"));
        let apps = self.by_collection.get(&key(resource)).or_else(|| self.by_collection.get(&key(&plural(resource))));
        apps.map(|a| a.values().cloned().collect()).unwrap_or_default()
    }

    /// The Application an object carrying Argo CD's tracking value `value` belongs to,
    /// if its destination namespace is the object's: a label naming another tenant's
    /// Application on an object in one's own namespace is not that Application's.
    pub fn tracked(&self, value: &str, namespace: &str) -> Vec<Arc<str>> {
        self.tracked_in("", value, namespace)
    }

    /// [`Self::tracked`] for an object in the cluster `cluster` (empty: this one).
    pub fn tracked_in(&self, cluster: &str, value: &str, namespace: &str) -> Vec<Arc<str>> {
        self.by_tracking
            .get(&in_cluster(cluster, value.to_string()))
            .into_iter()
            .flatten()
            .filter(|(_, dest)| !namespace.is_empty() && dest == namespace)
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn apps(&self) -> usize {
        self.by_app.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A second review: `deletecollection` names no object, so it matched nothing; the
    /// Applications that list an object of the collection are found.
    #[test]
    fn a_collection_is_found_by_what_its_objects_are() {
        let mut idx = ManagedIndex::default();
        let a = app("a", json!([{"group": "networking.k8s.io", "kind": "NetworkPolicy", "namespace": "payments", "name": "allow-web"}]));
        idx.update(&a, &crate::project::Scope::unrestricted());
        assert_eq!(idx.collection("networking.k8s.io", "networkpolicies", "payments").len(), 1);
        assert_eq!(idx.collection("networking.k8s.io", "networkpolicies", "payments")[0].kind.as_ref(), "NetworkPolicy");
        assert!(idx.collection("networking.k8s.io", "networkpolicies", "other").is_empty());
        idx.remove(&a.state_key());
        assert!(idx.collection("networking.k8s.io", "networkpolicies", "payments").is_empty());
    }

    #[test]
    fn a_kind_whose_plural_is_its_own_name_is_found() {
        let mut idx = ManagedIndex::default();
        let app = app(
            "policies",
            json!([{"group": "constraints.gatekeeper.sh", "kind": "K8sPSPPrivilegedContainer", "name": "psp"},
                   {"group": "security.openshift.io", "kind": "SecurityContextConstraints", "name": "restricted"}]),
        );
        idx.update(&app, &crate::project::Scope::unrestricted());
        assert_eq!(idx.lookup("constraints.gatekeeper.sh", "k8spspprivilegedcontainer", "", "psp").len(), 1);
        assert_eq!(idx.lookup("security.openshift.io", "securitycontextconstraints", "", "restricted").len(), 1);
        assert!(idx.lookup("security.openshift.io", "securitycontextconstraints", "", "other").is_empty());
    }

    #[test]
    fn kinds_become_the_resources_audit_events_name() {
        for (kind, resource) in [
            ("Deployment", "deployments"),
            ("NetworkPolicy", "networkpolicies"),
            ("Ingress", "ingresses"),
            ("ClusterRole", "clusterroles"),
            ("Endpoints", "endpoints"),
            ("Gateway", "gateways"),
            ("ConfigMap", "configmaps"),
        ] {
            assert_eq!(plural(kind), resource);
        }
    }

    fn app(name: &str, resources: Value) -> App {
        App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "argocd", "uid": format!("u-{name}")},
            "spec": {"project": "default", "destination": {"namespace": "payments"}},
            "status": {"resources": resources}}))
        .unwrap()
    }

    #[test]
    fn listed_objects_and_the_application_itself_are_found_and_forgotten() {
        let mut idx = ManagedIndex::default();
        idx.update_all(&app("payments-api", json!([{"group": "apps", "kind": "Deployment", "namespace": "payments", "name": "api"}])));
        let hit = idx.lookup("apps", "deployments", "payments", "api");
        assert_eq!((&*hit[0].app_key, &*hit[0].kind, hit[0].app_spec), ("argocd/payments-api@u-payments-api", "Deployment", false));
        assert!(idx.lookup("argoproj.io", "applications", "argocd", "payments-api")[0].app_spec);
        assert!(idx.lookup("apps", "deployments", "other", "api").is_empty(), "same name, another namespace");
        assert_eq!(idx.tracked("payments-api", "payments").len(), 1);
        assert!(idx.tracked("payments-api", "tenant-b").is_empty(), "a label claiming it outside its namespace");
        // The resource list changes: the old entry goes.
        idx.update_all(&app("payments-api", json!([{"group": "", "kind": "Service", "namespace": "payments", "name": "api"}])));
        assert!(idx.lookup("apps", "deployments", "payments", "api").is_empty());
        assert_eq!(idx.lookup("", "services", "payments", "api").len(), 1);
        idx.remove("argocd/payments-api@u-payments-api");
        assert!(idx.lookup("", "services", "payments", "api").is_empty());
        assert_eq!(idx.apps(), 0);
        assert!(idx.tracked("payments-api", "payments").is_empty());
    }

    impl ManagedIndex {
        fn update_all(&mut self, app: &App) {
            self.update(app, &crate::project::Scope::unrestricted());
        }
    }

    /// A forged `status.resources` entry outside the AppProject is not indexed: another
    /// tenant's writes to it never land in this Application's window (review H1); a
    /// change of the destination namespace alone is applied (review L5).
    #[test]
    fn only_what_the_project_permits_is_indexed_and_a_new_namespace_is_applied() {
        let project = crate::project::ProjectPolicy::of(
            &json!({"metadata": {"namespace": "argocd"}, "spec": {"destinations": [{"server": "*", "namespace": "payments"}]}}),
        );
        let mut a = app(
            "payments-api",
            json!([
            {"group": "apps", "kind": "Deployment", "namespace": "payments", "name": "api"},
            {"group": "", "kind": "ConfigMap", "namespace": "kube-system", "name": "kubeadm-config"},
            {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "namespace": "", "name": "admin"}]),
        );
        a.object["spec"]["destination"]["server"] = "https://kubernetes.default.svc".into();
        let scope = crate::project::Scope::of(&a.object, Some(&project), "argocd");
        let mut idx = ManagedIndex::default();
        idx.update(&a, &scope);
        assert_eq!(idx.lookup("apps", "deployments", "payments", "api").len(), 1);
        assert!(idx.lookup("", "configmaps", "kube-system", "kubeadm-config").is_empty());
        assert!(idx.lookup("rbac.authorization.k8s.io", "clusterroles", "", "admin").is_empty());
        assert!(idx.lookup("argoproj.io", "applications", "argocd", "payments-api")[0].app_spec, "the Application itself is");
        // Unseen project: only the Application itself.
        idx.update(&a, &crate::project::Scope::of(&a.object, None, "argocd"));
        assert!(idx.lookup("apps", "deployments", "payments", "api").is_empty());
        // L5: the same resources, a new destination namespace.
        idx.update(&a, &scope);
        assert_eq!(idx.tracked("payments-api", "payments").len(), 1);
        a.object["spec"]["destination"]["namespace"] = "payments-v2".into();
        idx.update(&a, &scope);
        assert_eq!(idx.tracked("payments-api", "payments-v2").len(), 1);
        assert!(idx.tracked("payments-api", "payments").is_empty());
    }

    /// Review N1: team-a's Application rewrites its `spec.project` to `default` (every
    /// destination and kind, no `sourceNamespaces`): Argo CD refuses it, so nothing it
    /// lists is its, and no tracking label names it. A ClusterRole it lists under
    /// `namespace: team-a` under a project that permits its namespaces matches no audit
    /// event of the ClusterRole (those carry no namespace).
    #[test]
    fn an_application_argo_cd_refuses_manages_nothing() {
        let default = crate::project::ProjectPolicy::of(&json!({"metadata": {"namespace": "argocd"}, "spec": {
            "destinations": [{"server": "*", "namespace": "*"}], "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}}));
        let mut a = app(
            "mine",
            json!([{"group": "", "kind": "ConfigMap", "namespace": "kube-system", "name": "kubeadm-config"},
                   {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "namespace": "team-a", "name": "admin"}]),
        );
        a.namespace = "team-a".into();
        a.object["metadata"]["namespace"] = "team-a".into();
        a.object["spec"]["destination"] = json!({"server": "https://kubernetes.default.svc", "namespace": "kube-system"});
        let mut idx = ManagedIndex::default();
        idx.update(&a, &crate::project::Scope::of(&a.object, Some(&default), "argocd"));
        assert!(idx.lookup("", "configmaps", "kube-system", "kubeadm-config").is_empty());
        assert!(idx.tracked("mine", "kube-system").is_empty(), "no tracking label names it");
        assert!(idx.lookup("argoproj.io", "applications", "team-a", "mine")[0].app_spec, "its own spec still is");
        // Listed by the project: its own resources are; the ClusterRole matches no event.
        let listing =
            crate::project::ProjectPolicy::of(&json!({"metadata": {"namespace": "argocd"}, "spec": {"sourceNamespaces": ["team-*"],
            "destinations": [{"server": "*", "namespace": "*"}], "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}}));
        idx.update(&a, &crate::project::Scope::of(&a.object, Some(&listing), "argocd"));
        assert_eq!(idx.lookup("", "configmaps", "kube-system", "kubeadm-config").len(), 1);
        assert!(idx.lookup("rbac.authorization.k8s.io", "clusterroles", "", "admin").is_empty());
    }
}
