//! Flux units steered by a person (review of the Flux and Fleet rules, 2026-12-07):
//! a Kustomization created to make kustomize-controller apply what the person wants, a
//! HelmRelease's post-renderer, an input a unit reads (its substitution ConfigMap) —
//! each a write whose effect only Flux's controller carries out, whose writes are
//! Flux's desired state. And a tenant's unit claiming another namespace's object.

mod on_a_real_api_server {
    use std::time::Duration;

    use kube::api::Patch;
    use serde_json::{Value, json};

    use crate::audit_identity::on_a_real_api_server::routes;
    use crate::common::audited::{controller, grant, hook, start_audited};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, BOB, MALLORY, apply_as, block_on, patch_as};
    use crate::common::daemon::{bodies, wait_for};

    const REV: &str = "main@sha1:1111111111111111111111111111111111111111";

    fn ready() -> Value {
        json!({"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "message": "Applied revision",
               "lastTransitionTime": "2026-12-07T10:00:00Z"})
    }

    /// Writes `status` through the status subresource of `unit`, as its controller does.
    async fn status_as(client: &kube::Client, unit: &Value, status: Value) {
        let api = cp::api_of(client, unit).await;
        let name = unit["metadata"]["name"].as_str().unwrap();
        api.patch_status(name, &Default::default(), &Patch::Merge(json!({"status": status}))).await.unwrap();
    }

    fn kustomization(ns: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "metadata": {"name": name, "namespace": ns}, "spec": spec})
    }

    /// The chat messages and pages that name `who`.
    fn naming(got: &std::sync::Arc<std::sync::Mutex<Vec<String>>>, who: &str) -> Vec<String> {
        bodies(got).into_iter().filter(|b| b.contains(&format!("by {who}"))).collect()
    }

    /// kustomize-controller (the platform's Flux, in `flux-system`) applies
    /// `flux-system/apps` with a substitution ConfigMap, and `shop/podinfo` is a
    /// HelmRelease. mallory may create Kustomizations in `team-a` (a tenant's right in
    /// many multi-tenant setups) and bob may patch HelmReleases in `shop` and ConfigMaps
    /// in `flux-system`. Each of their writes changes what Flux applies, and Flux's own
    /// writes that follow are desired state. Expected: each write paged on the security
    /// route (class `application`), naming its writer — (1) mallory's new Kustomization
    /// before the watch has indexed it (it was `Unmanaged`), (2) bob's post-renderer on
    /// the HelmRelease (it was class `other`: `spec.postRenderers` was not a security
    /// field), (3) bob's edit of the substitution ConfigMap (it was not indexed at all);
    /// a reconcile request (`flux reconcile`) is not paged.
    #[test]
    fn a_person_steering_flux_through_a_unit_or_what_it_reads_is_paged() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let ((pages, pd), (chat, chat_port)) = (hook(), hook());
        let api = cpl.start_api_server("attack-flux", &[]);
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let apps = kustomization(
            "flux-system",
            "apps",
            json!({"interval": "10m", "path": "./apps", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "flux-system"},
                   "postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "cluster-vars"}]}}),
        );
        let podinfo = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "metadata": {"name": "podinfo", "namespace": "shop"},
            "spec": {"interval": "5m", "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}}}});
        let vars = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-vars", "namespace": "flux-system"}, "data": {"REPLICAS": "2"}});
        block_on(async {
            api.namespaces(&["flux-system", "shop", "team-a"]).await;
            let admin = api.client(ADMIN).await;
            let kustomize = controller(&api, &admin, "flux-system", "kustomize-controller").await;
            let helm = controller(&api, &admin, "flux-system", "helm-controller").await;
            grant(&admin, "team-a", "mallory", "kustomize.toolkit.fluxcd.io", &["kustomizations"], &["get", "create"]).await;
            grant(&admin, "shop", "bob", "helm.toolkit.fluxcd.io", &["helmreleases"], &["get", "patch"]).await;
            grant(&admin, "flux-system", "bob", "", &["configmaps"], &["get", "patch"]).await;
            apply_as(&admin, "kubectl", vars.clone()).await;
            apply_as(&admin, "kubectl", apps.clone()).await;
            status_as(&kustomize, &apps, json!({"lastAppliedRevision": REV, "lastAttemptedRevision": REV, "conditions": [ready()]})).await;
            apply_as(&admin, "kubectl", podinfo.clone()).await;
            status_as(&helm, &podinfo, json!({"conditions": [ready()]})).await;
        });
        let d = start_audited(dir.path(), &routes(pd, chat_port), &api, &[]);
        block_on(async {
            let mallory = api.client(MALLORY).await;
            let evil = kustomization(
                "team-a",
                "x",
                json!({"interval": "1m", "path": "./", "prune": false, "sourceRef": {"kind": "GitRepository", "name": "evil", "namespace": "team-a"}}),
            );
            let created: kube::api::DynamicObject = serde_json::from_value(evil.clone()).unwrap();
            cp::api_of(&mallory, &evil).await.create(&Default::default(), &created).await.unwrap();
            let bob = api.client(BOB).await;
            patch_as(
                &bob,
                "kubectl-patch",
                &podinfo,
                Patch::Merge(json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "now"}}})),
            )
            .await
            .unwrap();
            patch_as(
                &bob,
                "kubectl-patch",
                &podinfo,
                Patch::Merge(json!({"spec": {"postRenderers": [{"kustomize": {"patches": [{"target": {"kind": "Deployment"},
                    "patch": "[{\"op\": \"add\", \"path\": \"/spec/template/spec/containers/0/securityContext\", \"value\": {\"privileged\": true}}]"}]}}]}})),
            )
            .await
            .unwrap();
            patch_as(&bob, "kubectl-patch", &vars, Patch::Merge(json!({"data": {"PRIVILEGED": "true"}}))).await.unwrap();
        });
        wait_for("mallory's Kustomization and bob's two writes paged", Duration::from_secs(30), || {
            naming(&pages, "mallory").len() + naming(&pages, "bob").len() >= 3
        });
        let paged = bodies(&pages);
        let mallory = naming(&pages, "mallory");
        assert!(mallory.iter().any(|p| p.contains("Kustomization team-a/x")), "{paged:?}");
        let bob = naming(&pages, "bob");
        assert!(bob.iter().any(|p| p.contains("HelmRelease shop/podinfo")), "the post-renderer: {paged:?}");
        assert!(
            bob.iter().any(|p| p.contains("ConfigMap flux-system/cluster-vars") && p.contains("Kustomization flux-system/apps")),
            "{paged:?}"
        );
        wait_for("the post-renderer told", Duration::from_secs(30), || {
            naming(&chat, "bob").iter().any(|t| t.contains("spec.postRenderers"))
        });
        let told = naming(&chat, "bob");
        assert!(
            !told.iter().any(|t| t.contains("requestedAt") && t.contains(":rotating_light:")),
            "a reconcile request is no security write: {told:?}"
        );
        assert_eq!(bob.len(), 2, "a page per security write, none for the reconcile request: {paged:?}");
        drop(d);
    }

    /// A tenant's Kustomization (`team-a/tenant`, kustomize-controller's inventory
    /// written from the tenant's Git) lists `kube-system/coredns`, which the platform
    /// owns. alice, a platform admin, edits coredns. Expected: nothing told on the
    /// tenant's unit (it was an attempt of `Kustomization team-a/tenant`, sent to the
    /// tenant's subscriptions with the admin's name and values); a write of the tenant's
    /// own Deployment, after it, is.
    #[test]
    fn a_tenants_unit_is_not_told_of_another_namespaces_writes() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let ((pages, pd), (chat, chat_port)) = (hook(), hook());
        let api = cpl.start_api_server("attack-tenant", &[]);
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let tenant = kustomization(
            "team-a",
            "tenant",
            json!({"interval": "10m", "path": "./", "prune": true,
            "sourceRef": {"kind": "GitRepository", "name": "tenant"}}),
        );
        let coredns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"}, "data": {"Corefile": ".:53"}});
        let own = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team-a"}, "data": {"level": "info"}});
        block_on(async {
            api.namespaces(&["flux-system", "team-a"]).await;
            let admin = api.client(ADMIN).await;
            let kustomize = controller(&api, &admin, "flux-system", "kustomize-controller").await;
            grant(&admin, "kube-system", "alice", "", &["configmaps"], &["get", "patch"]).await;
            grant(&admin, "team-a", "alice", "", &["configmaps"], &["get", "patch"]).await;
            apply_as(&kustomize, "kustomize-controller", coredns.clone()).await;
            apply_as(&kustomize, "kustomize-controller", own.clone()).await;
            apply_as(&admin, "kubectl", tenant.clone()).await;
            status_as(&kustomize, &tenant, json!({"lastAppliedRevision": REV, "lastAttemptedRevision": REV, "conditions": [ready()],
                "inventory": {"entries": [{"id": "kube-system_coredns__ConfigMap", "v": "v1"}, {"id": "team-a_settings__ConfigMap", "v": "v1"}]}}))
            .await;
        });
        let d = start_audited(dir.path(), &routes(pd, chat_port), &api, &[]);
        block_on(async {
            let alice = api.client(ALICE).await;
            patch_as(&alice, "kubectl-patch", &coredns, Patch::Merge(json!({"data": {"Corefile": ".:53 { forward . 203.0.113.9 }"}})))
                .await
                .unwrap();
            patch_as(&alice, "kubectl-patch", &own, Patch::Merge(json!({"data": {"level": "debug"}}))).await.unwrap();
        });
        wait_for("alice's write of the tenant's own ConfigMap told", Duration::from_secs(30), || {
            naming(&chat, "alice").iter().any(|b| b.contains("ConfigMap team-a/settings"))
        });
        let all: Vec<String> = bodies(&chat).into_iter().chain(bodies(&pages)).collect();
        assert!(!all.iter().any(|b| b.contains("coredns")), "kube-system's object is not the tenant's: {all:?}");
        drop(d);
    }
}
