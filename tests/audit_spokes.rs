//! Every cluster's audit feed, on a real etcd with two kube-apiservers: the hub, where
//! the Applications are, and a spoke they deploy to. Each API server posts its own audit
//! batches to driftwatch's one listener, the spoke with a token of its own
//! (`clusters[].auditToken`): a person's privileged edit in the spoke, taken back at
//! once by Argo CD's cluster account there, is paged naming the person and the spoke.

mod common;

mod on_a_real_api_server {
    use std::time::Duration;

    use kube::api::Patch;
    use serde_json::{Value, json};

    use crate::common::AppBuilder;
    use crate::common::audited::{AUDIT_LISTENER, AUDIT_TOKEN, application, audit_addr, audit_flags, controller, grant, put_app};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, apply_as, block_on, patch_as};
    use crate::common::daemon::{Daemon, wait_for};
    use crate::common::receiver::{Mode, Scripted};

    const SPOKE_TOKEN: &str = "spoke-audit-token-9876543210";

    #[test]
    fn a_spokes_api_server_posts_its_own_batches_and_its_person_is_paged_with_the_spoke() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let hook = Scripted::start(Mode::Up);
        let hub = cpl.start_api_server("feeds-hub", &[]);
        let spoke = cpl.start_api_server("feeds-spoke", &[]);
        hub.kubeconfig(&d.join("kubeconfig"), ADMIN);
        spoke.kubeconfig(&d.join("spoke.kubeconfig"), ADMIN);
        let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "edge"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web:1.0"}]}}}});
        let argocd_manager = block_on(async {
            spoke.namespaces(&["edge"]).await;
            let admin = spoke.client(ADMIN).await;
            let manager = controller(&spoke, &admin, "kube-system", "argocd-manager").await;
            grant(&admin, "edge", "alice", "apps", &["deployments"], &["get", "patch"]).await;
            apply_as(&manager, "argocd-controller", web.clone()).await;
            hub.namespaces(&["argocd"]).await;
            let hub_admin = hub.client(ADMIN).await;
            let res =
                json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "edge", "name": "web", "status": "Synced"});
            let mut app = application(AppBuilder::new("edge-web").synced().healthy().field("/status/resources", json!([res])));
            app["spec"]["destination"] = json!({"server": spoke.url(), "namespace": "edge"});
            put_app(&hub_admin, app).await;
            manager
        });
        let alert = crate::common::ATTEMPT_ALERT.replace("PORT", &hook.port.to_string()).replace(
            r#""app": {{json app.metadata.name}}"#,
            r#""app": {{json app.metadata.name}}, "cluster": {{json drift.attempts.[0].cluster}}"#,
        );
        let ca = crate::common::tls::serving_tls(d);
        std::fs::create_dir(d.join("secrets")).unwrap();
        std::fs::write(d.join("secrets/audit-token"), AUDIT_TOKEN).unwrap();
        std::fs::write(d.join("secrets/spoke-audit-token"), SPOKE_TOKEN).unwrap();
        let clusters = format!(
            "clusters:\n  - name: edge-1\n    server: {}\n    kubeconfig: spoke.kubeconfig\n    auditToken: $spoke-audit-token\n",
            spoke.url()
        );
        std::fs::write(d.join("driftwatch.yaml"), format!("{alert}{clusters}{AUDIT_LISTENER}")).unwrap();
        let daemon = Daemon::start_with(d, &["-n", "argocd"]);
        let addr = audit_addr(&daemon);
        hub.restart(&audit_flags(d, &addr, &ca));
        // The spoke's webhook kubeconfig carries its own token.
        let feed = d.join("spoke-feed");
        std::fs::create_dir(&feed).unwrap();
        let flags = audit_flags(&feed, &addr, &ca);
        let kubeconfig = feed.join("audit-webhook.yaml");
        let text = std::fs::read_to_string(&kubeconfig).unwrap().replace(AUDIT_TOKEN, SPOKE_TOKEN);
        std::fs::write(&kubeconfig, text).unwrap();
        spoke.restart(&flags);
        let fed = |cluster: &str| {
            daemon.metric(&format!("driftwatch_audit_last_batch_timestamp_seconds{{cluster=\"{cluster}\"}}")).is_some_and(|t| t > 0.0)
        };
        wait_for("both feeds posting", Duration::from_secs(60), || fed("in-cluster") && fed("edge-1"));

        let privileged =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}});
        let heal = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": null}]}}}});
        block_on(async {
            let alice = spoke.client(ALICE).await;
            patch_as(&alice, "kubectl-patch", &web, Patch::Strategic(privileged)).await.unwrap();
            patch_as(&argocd_manager, "argocd-controller", &web, Patch::Strategic(heal)).await.unwrap();
        });
        let records = || hook.delivered().iter().filter_map(|b| serde_json::from_str::<Value>(b).ok()).collect::<Vec<Value>>();
        wait_for("alice paged with the spoke", Duration::from_secs(60), || records().iter().any(|r| r["who"] == "alice"));
        let alice: Vec<Value> = records().into_iter().filter(|r| r["who"] == "alice").collect();
        assert_eq!(alice.len(), 1, "{alice:?}");
        let a = &alice[0];
        assert_eq!(
            (a["app"].as_str(), a["cluster"].as_str(), a["class"].as_str()),
            (Some("edge-web"), Some("edge-1"), Some("security-context")),
            "{a}"
        );
        assert_eq!(a["set"][0]["path"], "spec.template.spec.containers[web].securityContext.privileged", "{a}");
        assert!(
            records().iter().all(|r| r["who"] != "system:serviceaccount:kube-system:argocd-manager"),
            "Argo CD's cluster account is the desired state there"
        );
        let log = daemon.log.clone();
        assert!(daemon.stop().success(), "{}", std::fs::read_to_string(log).unwrap_or_default());
        hub.stop();
        spoke.stop();
    }
}
