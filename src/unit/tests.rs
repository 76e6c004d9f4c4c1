use serde_json::json;

use super::flux::inventory_id;
use super::*;

fn r(group: &str, kind: &str, namespace: &str, name: &str) -> ResourceRef {
    ResourceRef { group: group.into(), kind: kind.into(), namespace: namespace.into(), name: name.into() }
}

/// A Kustomization as kustomize-controller v1 leaves it after a failed apply of a new
/// revision (fields as in its CRD, `config/crd/bases`).
fn kustomization() -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system", "uid": "k-1", "generation": 3},
        "spec": {
            "interval": "10m", "path": "./apps", "prune": true, "serviceAccountName": "apps-deployer",
            "targetNamespace": "shop", "sourceRef": {"kind": "GitRepository", "name": "fleet-infra"},
            "kubeConfig": {"secretRef": {"name": "prod-eu-kubeconfig"}}
        },
        "status": {
            "observedGeneration": 3,
            "lastAppliedRevision": "main@sha1:1111111111111111111111111111111111111111",
            "lastAttemptedRevision": "main@sha1:2222222222222222222222222222222222222222",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ReconciliationFailed",
                 "message": "Deployment/shop/web dry-run failed: spec.replicas: Invalid value: -1",
                 "lastTransitionTime": "2026-12-07T10:00:00Z", "observedGeneration": 3},
                {"type": "Reconciling", "status": "False", "reason": "ProgressingWithRetry", "message": "retrying"}
            ],
            "inventory": {"entries": [
                {"id": "shop_web_apps_Deployment", "v": "v1"},
                {"id": "_shop-reader_rbac.authorization.k8s.io_ClusterRole", "v": "v1"},
                {"id": "shop_system__leader-locking__web_rbac.authorization.k8s.io_Role", "v": "v1"},
                {"id": "shop_web-config__Secret", "v": "v1"},
                {"id": "not-an-entry", "v": "v1"}
            ]}
        }
    })
}

#[test]
fn a_kustomization_is_a_unit_with_its_revisions_failure_inventory_and_tenancy() {
    let u = Unit::read(&kustomization()).unwrap();
    assert_eq!(u.engine(), Engine::FluxKustomization);
    assert_eq!(qualified(u.engine, &u.namespace, &u.name), "Kustomization:flux-system/apps");
    assert_eq!((u.view()["engine"].as_str(), u.view()["kind"].as_str()), (Some("flux"), Some("Kustomization")));
    assert_eq!(u.revision.desired, "main@sha1:2222222222222222222222222222222222222222");
    assert_eq!(u.revision.commit, "1111111111111111111111111111111111111111");
    assert_eq!(u.revision.source, "GitRepository/flux-system/fleet-infra");
    assert!(u.reconcile.failed && !u.reconcile.stalled);
    assert_eq!(u.reconcile.reason, "ReconciliationFailed");
    assert!(u.reconcile.message.contains("dry-run failed"));
    assert_eq!(u.sync, Some(Sync::Unknown), "a failed reconcile says nothing of the objects");
    assert_eq!(u.health, Some(Health::Degraded));
    assert_eq!(
        u.managed,
        vec![
            r("apps", "Deployment", "shop", "web"),
            r("rbac.authorization.k8s.io", "ClusterRole", "", "shop-reader"),
            // `__` as the `:` Flux wrote, and as two `_` of a name: both indexed.
            r("rbac.authorization.k8s.io", "Role", "shop", "system__leader-locking__web"),
            r("rbac.authorization.k8s.io", "Role", "shop", "system:leader-locking:web"),
            r("", "Secret", "shop", "web-config"),
        ]
    );
    assert_eq!(u.destination.cluster, "kubeconfig:flux-system/prod-eu-kubeconfig");
    assert_eq!(u.destination.namespace, "shop");
    assert_eq!(u.tenancy, Tenancy { boundary: "flux-system".into(), service_account: "apps-deployer".into() });
    assert!(!u.drift.drifted, "kustomize-controller reports no drift: the audit input is the witness");
}

#[test]
fn a_ready_kustomization_at_its_revision_is_synced_and_healthy_and_a_stalled_one_failed() {
    let mut k = kustomization();
    k["status"]["lastAttemptedRevision"] = k["status"]["lastAppliedRevision"].clone();
    k["status"]["conditions"] =
        json!([{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision"}]);
    let u = Unit::read(&k).unwrap();
    assert_eq!((u.sync, u.health, u.reconcile.failed), (Some(Sync::Synced), Some(Health::Healthy), false));

    // A new generation not yet observed is progressing, whatever the old Ready says.
    k["metadata"]["generation"] = json!(4);
    assert_eq!(Unit::read(&k).unwrap().health, Some(Health::Progressing));

    k["status"]["conditions"] = json!([
        {"type": "Ready", "status": "False", "reason": "ArtifactFailed", "message": "source not found"},
        {"type": "Stalled", "status": "True", "reason": "InvalidPath", "message": "path ./apps not found"}
    ]);
    let u = Unit::read(&k).unwrap();
    assert!(u.reconcile.failed && u.reconcile.stalled);
    assert_eq!((u.reconcile.reason.as_str(), u.reconcile.message.as_str()), ("InvalidPath", "path ./apps not found"));

    k["spec"]["suspend"] = json!(true);
    assert_eq!(Unit::read(&k).unwrap().health, Some(Health::Suspended));
}

/// A HelmRelease in drift-detection `warn` mode whose Deployment a person edited: the
/// `Drifted` condition's message as helm-controller's summary writes it.
fn helm_release() -> Value {
    json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": "team-a", "uid": "h-1", "generation": 1},
        "spec": {
            "interval": "5m", "serviceAccountName": "team-a", "driftDetection": {"mode": "warn"},
            "chart": {"spec": {"chart": "podinfo", "version": "6.x", "sourceRef": {"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"}}}
        },
        "status": {
            "observedGeneration": 1,
            "lastAttemptedRevision": "6.7.1",
            "history": [
                {"name": "podinfo", "namespace": "team-a", "version": 4, "status": "deployed", "chartName": "podinfo",
                 "chartVersion": "6.7.1", "appVersion": "6.7.1", "digest": "sha256:aa", "configDigest": "sha256:bb"},
                {"name": "podinfo", "namespace": "team-a", "version": 3, "status": "superseded", "chartName": "podinfo",
                 "chartVersion": "6.7.0", "appVersion": "6.7.0", "digest": "sha256:cc", "configDigest": "sha256:dd"}
            ],
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "UpgradeSucceeded", "message": "Helm upgrade succeeded"},
                {"type": "Drifted", "status": "True", "reason": "DriftDetected",
                 "message": "Cluster state of release team-a/podinfo.v4 has drifted from the desired state:\nDeployment/team-a/podinfo changed (0 additions, 1 changes, 0 removals)\nService/team-a/podinfo removed\nClusterRole/podinfo-reader changed (1 additions, 0 changes, 0 removals)\nConfigMap/team-a/extra excluded"}
            ],
            "inventory": {"entries": [
                {"id": "team-a_podinfo_apps_Deployment", "v": "v1"},
                {"id": "team-a_podinfo__Service", "v": "v1"},
                {"id": "_podinfo-reader_rbac.authorization.k8s.io_ClusterRole", "v": "v1"}
            ]}
        }
    })
}

#[test]
fn a_helm_releases_drifted_condition_lists_what_drifted_with_the_chart_and_release() {
    let u = Unit::read(&helm_release()).unwrap();
    assert_eq!(u.engine(), Engine::FluxHelmRelease);
    let chart = u.revision.chart.clone().unwrap();
    assert_eq!((chart.name.as_str(), chart.version.as_str(), chart.release), ("podinfo", "6.7.1", 4));
    assert_eq!(u.revision.applied, "6.7.1");
    assert_eq!(u.revision.source, "HelmRepository/flux-system/podinfo");
    assert!(u.drift.drifted);
    assert_eq!(u.drift.reason, "DriftDetected");
    assert_eq!(u.sync, Some(Sync::OutOfSync));
    assert_eq!(u.health, Some(Health::Healthy));
    let listed: Vec<(ResourceRef, Change, &str)> =
        u.drift.modified.iter().map(|m| (m.object.clone(), m.change, m.summary.as_str())).collect();
    assert_eq!(
        listed,
        vec![
            (r("apps", "Deployment", "team-a", "podinfo"), Change::Modified, "0 additions, 1 changes, 0 removals"),
            (r("", "Service", "team-a", "podinfo"), Change::Missing, ""),
            (r("rbac.authorization.k8s.io", "ClusterRole", "", "podinfo-reader"), Change::Modified, "1 additions, 0 changes, 0 removals"),
        ]
    );
}

/// A BundleDeployment whose Deployment was edited and whose ConfigMap was deleted, as
/// Fleet's agent records it (fields as in `charts/fleet-crd`).
fn bundle_deployment() -> Value {
    json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
        "metadata": {
            "name": "apps-web", "namespace": "cluster-fleet-default-prod-eu-1a2b3c", "uid": "b-1",
            "labels": {
                "fleet.cattle.io/bundle-name": "apps-web", "fleet.cattle.io/bundle-namespace": "fleet-default",
                "fleet.cattle.io/cluster": "prod-eu", "fleet.cattle.io/cluster-namespace": "fleet-default",
                "fleet.cattle.io/commit": "3333333333333333333333333333333333333333", "fleet.cattle.io/repo-name": "apps",
                "fleet.cattle.io/managed": "true"
            }
        },
        "spec": {
            "deploymentID": "s-4d5e6f:9a8b7c", "stagedDeploymentID": "s-4d5e6f:9a8b7c",
            "options": {"defaultNamespace": "web", "serviceAccount": "fleet-web", "correctDrift": {"enabled": false}}
        },
        "status": {
            "appliedDeploymentID": "s-4d5e6f:9a8b7c", "ready": true, "nonModified": false,
            "display": {"deployed": "True", "monitored": "True", "state": "Modified"},
            "conditions": [
                {"type": "Installed", "status": "True"}, {"type": "Deployed", "status": "True"},
                {"type": "Ready", "status": "True"}, {"type": "Monitored", "status": "True"}
            ],
            "modifiedStatus": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "web", "name": "web",
                 "patch": "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"web\",\"securityContext\":{\"privileged\":null}}]}}}}"},
                {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "web", "name": "web-config", "missing": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "web", "name": "adopted", "missing": true, "exist": true},
                {"apiVersion": "v1", "kind": "Service", "namespace": "web", "name": "old", "delete": true}
            ],
            "incompleteState": true,
            "resources": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "web", "name": "web"},
                {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "web", "name": "web-config"}
            ]
        }
    })
}

#[test]
fn a_bundle_deployment_is_a_unit_with_its_modified_resources_patches_and_truncation() {
    let u = Unit::read(&bundle_deployment()).unwrap();
    assert_eq!(u.engine(), Engine::Fleet);
    assert_eq!(u.revision.desired, "s-4d5e6f:9a8b7c");
    assert_eq!(u.revision.commit, "3333333333333333333333333333333333333333");
    assert_eq!(u.revision.source, "GitRepo/fleet-default/apps");
    assert_eq!((u.sync, u.health), (Some(Sync::OutOfSync), Some(Health::Healthy)));
    assert!(u.drift.drifted && u.drift.incomplete);
    assert!(u.drift.message.contains("at most 10"), "{}", u.drift.message);
    let changes: Vec<(&str, Change)> = u.drift.modified.iter().map(|m| (m.object.name.as_str(), m.change)).collect();
    assert_eq!(
        changes,
        vec![("web", Change::Modified), ("web-config", Change::Missing), ("adopted", Change::NotOwned), ("old", Change::Extra)]
    );
    assert!(u.drift.modified[0].patch.contains("privileged"));
    assert_eq!(u.drift.modified[0].object, r("apps", "Deployment", "web", "web"));
    assert_eq!(u.managed.len(), 2);
    assert_eq!(u.destination, Destination { cluster: "fleet-default/prod-eu".into(), namespace: "web".into() });
    assert_eq!(u.tenancy, Tenancy { boundary: "fleet-default".into(), service_account: "fleet-web".into() });
}

#[test]
fn a_bundle_deployment_that_failed_to_apply_says_why_and_one_not_yet_applied_is_out_of_sync() {
    let mut b = bundle_deployment();
    b["status"]["display"]["state"] = json!("ErrApplied");
    b["status"]["conditions"] = json!([{"type": "Deployed", "status": "False", "message": "chart requires kubeVersion >=1.30"}]);
    let u = Unit::read(&b).unwrap();
    assert!(u.reconcile.failed);
    assert_eq!((u.reconcile.reason.as_str(), u.reconcile.message.as_str()), ("ErrApplied", "chart requires kubeVersion >=1.30"));
    assert_eq!(u.health, Some(Health::Degraded));

    let mut b = bundle_deployment();
    b["status"]["nonModified"] = json!(true);
    b["status"]["modifiedStatus"] = json!([]);
    b["status"]["incompleteState"] = json!(false);
    assert_eq!(Unit::read(&b).unwrap().sync, Some(Sync::Synced));
    b["spec"]["deploymentID"] = json!("s-999:1");
    assert_eq!(Unit::read(&b).unwrap().sync, Some(Sync::OutOfSync));
}

#[test]
fn an_application_is_a_unit_in_argo_cds_words() {
    let app = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "guestbook", "namespace": "argocd", "uid": "a-1"},
        "spec": {"project": "payments", "source": {"repoURL": "https://git.example.com/gb.git"},
                 "destination": {"name": "in-cluster", "namespace": "gb"}},
        "status": {
            "sync": {"status": "OutOfSync", "revision": "abc"}, "health": {"status": "Degraded"},
            "history": [{"revision": "abb"}],
            "operationState": {"phase": "Failed", "message": "one or more objects failed to apply"},
            "resources": [{"group": "apps", "kind": "Deployment", "namespace": "gb", "name": "web", "status": "OutOfSync"}]
        }
    });
    let u = Unit::read(&app).unwrap();
    assert_eq!(u.engine(), Engine::ArgoCd);
    assert_eq!((u.revision.desired.as_str(), u.revision.applied.as_str()), ("abc", "abb"));
    assert_eq!((u.sync, u.health), (Some(Sync::OutOfSync), Some(Health::Degraded)));
    assert!(u.reconcile.failed && u.reconcile.message.contains("failed to apply"));
    assert_eq!(u.managed, vec![r("apps", "Deployment", "gb", "web")]);
    assert_eq!(u.destination.cluster, "", "in-cluster is the local cluster");
    assert_eq!(u.tenancy.boundary, "payments");
    assert_eq!(u.view()["engine"], "argocd");
}

#[test]
fn what_is_not_a_unit_is_refused_with_why() {
    let e = Unit::read(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})).unwrap_err();
    assert_eq!(e.to_string(), "v1 ConfigMap is not a deployment unit of Argo CD, Flux or Fleet");
    let e = Unit::read(&json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1beta2", "kind": "Kustomization"})).unwrap_err();
    assert!(matches!(e, NotAUnit::UnknownKind { .. }), "an old API version is not read as the current one");
    let e = Unit::read(&json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment", "metadata": {}})).unwrap_err();
    assert_eq!(e, NotAUnit::NoName("BundleDeployment"));
}

#[test]
fn inventories_messages_and_drift_lists_are_bounded() {
    let mut k = kustomization();
    let entries: Vec<Value> = (0..MAX_MANAGED + 5).map(|i| json!({"id": format!("shop_cm-{i}__ConfigMap"), "v": "v1"})).collect();
    k["status"]["inventory"]["entries"] = Value::Array(entries);
    k["status"]["conditions"][0]["message"] = json!("x".repeat(MAX_MESSAGE_CHARS * 3));
    let u = Unit::read(&k).unwrap();
    assert_eq!((u.managed.len(), u.managed_more), (MAX_MANAGED, 5));
    assert!(u.reconcile.message.chars().count() <= MAX_MESSAGE_CHARS + 1);

    let mut b = bundle_deployment();
    b["status"]["incompleteState"] = json!(false);
    b["status"]["modifiedStatus"][0]["patch"] = json!("p".repeat(MAX_PATCH_CHARS * 2));
    let many: Vec<Value> = (0..MAX_MODIFIED + 1).map(|_| b["status"]["modifiedStatus"][0].clone()).collect();
    b["status"]["modifiedStatus"] = Value::Array(many);
    let u = Unit::read(&b).unwrap();
    assert_eq!(u.drift.modified.len(), MAX_MODIFIED);
    assert!(u.drift.incomplete, "cut here, and said");
    assert!(u.drift.modified[0].patch.chars().count() <= MAX_PATCH_CHARS + 1);
}

#[test]
fn inventory_ids_read_as_flux_writes_them() {
    assert_eq!(inventory_id("shop_web_apps_Deployment"), Some(r("apps", "Deployment", "shop", "web")));
    assert_eq!(inventory_id("_shop__Namespace"), Some(r("", "Namespace", "", "shop")));
    assert_eq!(
        inventory_id("_system__aggregate-to-edit_rbac.authorization.k8s.io_ClusterRole").map(|r| r.name),
        Some("system:aggregate-to-edit".into())
    );
    assert_eq!(inventory_id("ns_a_b_c_apps_Deployment").map(|r| r.name), Some("a_b_c".into()), "the name is what the ends leave");
    for bad in ["", "a", "a_b", "ns__apps_Deployment"] {
        assert_eq!(inventory_id(bad), None, "{bad}");
    }
}

#[test]
fn each_engine_reads_its_own_kind_back() {
    for (i, (engine, api_version, kind, resource)) in Engine::ALL.iter().enumerate() {
        assert_eq!(*engine as usize, i, "ALL is in declaration order");
        let (group, version, k) = engine.gvk();
        assert_eq!((format!("{group}/{version}").as_str(), k), (*api_version, *kind));
        assert_eq!(Engine::of(api_version, kind), Some(*engine));
        assert_eq!(Engine::of_kind(kind), Some(*engine));
        assert_eq!(Engine::of_resource(group, resource), Some(*engine));
        assert_eq!(*resource, format!("{}s", kind.to_lowercase()), "the resource audit events name");
    }
}

/// Review L1: an RBAC name may hold `_` (the namespace, group and kind cannot), and `__`
/// is indexed both as the `:` Flux wrote and as itself.
#[test]
fn inventory_names_with_underscores_are_read() {
    assert_eq!(
        inventory_id("team_my_role_rbac.authorization.k8s.io_Role"),
        Some(r("rbac.authorization.k8s.io", "Role", "team", "my_role"))
    );
    let mut k = kustomization();
    k["status"]["inventory"]["entries"] = json!([{"id": "_system__controller__x_rbac.authorization.k8s.io_ClusterRole", "v": "v1"}]);
    let u = Unit::read(&k).unwrap();
    let names: Vec<&str> = u.managed.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["system__controller__x", "system:controller:x"]);
}

/// Review M2: what rhai and templates see of a controller's text is masked (an error
/// may quote the value it failed on), and recorded patches are left out of the view.
#[test]
fn the_view_shown_masks_the_controllers_text() {
    let mut k = kustomization();
    k["status"]["conditions"][0]["message"] = json!("Secret/db dry-run failed: Invalid value: \"postgres://app:hunter2@db:5432/app\"");
    let u = Unit::read(&k).unwrap();
    let shown = u.view_masked(&|s| s.replace("hunter2", "(masked)"));
    assert!(!shown.to_string().contains("hunter2"), "{shown}");
    assert!(u.view().to_string().contains("hunter2"), "the unmasked view is the reader's own");
}
