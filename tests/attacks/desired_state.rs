//! Desired state the writer controls: Argo CD's field manager names and the live
//! object's own last-applied annotation never make a security field Git's.
//!
//! Every row runs the shipped configuration's shape — no `argocd:` section, no audit
//! input — with the security route paging a PagerDuty service and live drift told in a
//! Slack channel, on a real kube-apiserver. Argo CD is played by the test: its
//! controller's writes under `argocd-controller`, and the Application's status (Synced,
//! then OutOfSync once the object moved, as its next compare reports it). alice may
//! `get` and `patch` Deployments in the shop's namespace, nothing else.

mod on_a_real_api_server {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use kube::api::{Patch, PostParams};
    use serde_json::{Value, json};

    use crate::common::audited::{application, grant, hook, put_app};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, apply_as, block_on, patch_as};
    use crate::common::daemon::{Daemon, bodies, records, wait_for};
    use crate::common::{AppBuilder, REV1};

    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
    const PRIVILEGED: &str = "spec.template.spec.containers[web].securityContext.privileged";

    /// PagerDuty for the security route, Slack for live drift; no `argocd:`, no audit.
    fn config(pd: u16, chat: u16) -> String {
        format!(
            "services:\n  oncall:\n    type: pagerduty\n    apiUrl: http://127.0.0.1:{pd}\n    routingKeys: {{platform: R0UTINGKEY}}\n    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}\n\
             \x20 chat:\n    type: slack\n    webhookUrl: http://127.0.0.1:{chat}\n    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}\n\
             routes:\n  - name: security-page\n    match: {{class: [rbac, network-policy, security-context, admission]}}\n    triggers: [on-security-drift]\n    recipients: [oncall:platform]\n    continue: true\n\
             \x20 - name: live-drift\n    triggers: [on-live-drift]\n    recipients: [chat:drift]\nattribution:\n  ttl: 1s\n"
        )
    }

    /// The Deployment as Git has it: one container, `extra` merged into it.
    fn deployment(ns: &str, extra: Value) -> Value {
        let mut container = json!({"name": "web", "image": "shop:1.0"});
        if let (Some(c), Some(e)) = (container.as_object_mut(), extra.as_object()) {
            c.extend(e.clone());
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}}}})
    }

    /// The Application `shop` in `apps`, its Deployment in `shop` reported `status`.
    fn app(apps: &str, shop: &str, status: &str) -> Value {
        let sync = if status == "Synced" { "Synced" } else { "OutOfSync" };
        application(
            AppBuilder::new("shop")
                .sync(sync, REV1)
                .healthy()
                .field("/metadata/namespace", json!(apps))
                .field("/spec/destination/namespace", json!(shop))
                .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                .field(
                    "/status/resources",
                    json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": shop, "name": "web", "status": status}]),
                ),
        )
    }

    /// What a row needs: its namespaces, the admin (Argo CD's controller's rights),
    /// alice's client, the receivers and the daemon's directory.
    struct Row {
        apps: String,
        shop: String,
        admin: kube::Client,
        alice: kube::Client,
        pages: Arc<Mutex<Vec<String>>>,
        chat: Arc<Mutex<Vec<String>>>,
        dir: tempfile::TempDir,
    }

    fn row(name: &str) -> Row {
        let api = &cp::shared().api;
        let (apps, shop) = (format!("{name}-apps"), format!("{name}-shop"));
        let ((pages, pd), (chat, chat_port)) = (hook(), hook());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("driftwatch.yaml"), config(pd, chat_port)).unwrap();
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let (admin, alice) = block_on(async {
            api.namespaces(&[&apps, &shop]).await;
            let admin = api.client(ADMIN).await;
            grant(&admin, &shop, "alice", "apps", &["deployments"], &["get", "patch"]).await;
            (admin, api.client(ALICE).await)
        });
        Row { apps, shop, admin, alice, pages, chat, dir }
    }

    impl Row {
        /// The Application Synced, then driftwatch started, and its in-sync reading of
        /// the Deployment recorded (before anyone moves it).
        fn start(&self) -> Daemon {
            block_on(put_app(&self.admin, app(&self.apps, &self.shop, "Synced")));
            let d = Daemon::start_with(self.dir.path(), &["-n", &self.apps, "--projects-namespace", "argocd"]);
            wait_for("the Deployment read in sync", Duration::from_secs(30), || {
                d.metric(r#"driftwatch_diffs_total{source="in-sync"}"#) >= Some(1.0)
            });
            d
        }

        /// Argo CD's next compare: the Deployment OutOfSync.
        fn argo_cd_compares(&self) {
            block_on(put_app(&self.admin, app(&self.apps, &self.shop, "OutOfSync")));
        }

        /// The page, once PagerDuty has one.
        fn page(&self) -> Value {
            wait_for("the security page", Duration::from_secs(30), || !bodies(&self.pages).is_empty());
            records(&self.pages).into_iter().next().unwrap()
        }
    }

    /// The page is critical, names `privileged` on the Deployment with its live value,
    /// and names the owner of the field, `argocd-controller`, as having changed it.
    fn assert_paged_privileged(page: &Value, desired: &str) {
        assert_eq!(page["payload"]["severity"], "critical", "{page}");
        let details = &page["payload"]["custom_details"];
        let change = details["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["changes"].as_array().cloned().unwrap_or_default())
            .find(|c| c["path"] == PRIVILEGED)
            .unwrap_or_else(|| panic!("the page names {PRIVILEGED}: {page}"));
        assert_eq!(
            (change["desired"].as_str(), change["live"].as_str(), change["security"].as_bool()),
            (Some(desired), Some("true"), Some(true)),
            "{change}"
        );
        let owner = details["attribution"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["securityFields"].as_array().is_some_and(|f| f.contains(&json!(PRIVILEGED))))
            .unwrap_or_else(|| panic!("the page names who changed {PRIVILEGED}: {page}"));
        assert_eq!(owner["manager"], "argocd-controller", "{owner}");
        assert!(page["payload"]["summary"].as_str().unwrap_or_default().contains("security-context"), "{page}");
    }

    /// Attack N3 (a): Argo CD synced the Deployment by server-side apply (no
    /// last-applied annotation); driftwatch read it in sync. alice then server-side
    /// applies the same Deployment with `securityContext.privileged: true` under
    /// `?fieldManager=argocd-controller&force=true` (what `kubectl apply --server-side
    /// --field-manager=argocd-controller --force-conflicts` sends); Argo CD's compare
    /// reports it OutOfSync. Expected: a PagerDuty page, critical, naming
    /// `…securityContext.privileged: (not known) → true` and argocd-controller.
    #[test]
    fn privileged_by_server_side_apply_under_argo_cds_manager_name_is_paged() {
        let r = row("ds-ssa");
        block_on(apply_as(&r.admin, "argocd-controller", deployment(&r.shop, json!({}))));
        let d = r.start();
        block_on(apply_as(&r.alice, "argocd-controller", deployment(&r.shop, json!({"securityContext": {"privileged": true}}))));
        r.argo_cd_compares();
        assert_paged_privileged(&r.page(), "(not known)");
        assert!(d.stop().success());
    }

    /// Argo CD's client-side apply as its controller does it: a create under
    /// `argocd-controller` carrying the last-applied annotation of Git's object.
    async fn client_side_applied(admin: &kube::Client, git: &Value) {
        let mut obj = git.clone();
        obj["metadata"]["annotations"] = json!({LAST_APPLIED: git.to_string()});
        let api = cp::api_of(admin, &obj).await;
        let pp = PostParams { field_manager: Some("argocd-controller".into()), ..Default::default() };
        api.create(&pp, &serde_json::from_value(obj).unwrap()).await.unwrap();
    }

    /// Attack N3 (b): Argo CD synced the Deployment by client-side apply (its
    /// last-applied annotation holds Git's object); driftwatch read it in sync. alice
    /// sends one strategic-merge patch under `?fieldManager=argocd-controller` that sets
    /// `privileged: true` on the container and rewrites the last-applied annotation to
    /// Git's object with `privileged: true` in it; Argo CD's compare reports it
    /// OutOfSync. Expected: paged, critical, naming `privileged: (not known) → true`
    /// (the annotation is alice's, not Git's) and argocd-controller.
    #[test]
    fn privileged_with_a_rewritten_last_applied_annotation_is_paged() {
        let r = row("ds-rewrite");
        let git = deployment(&r.shop, json!({}));
        block_on(client_side_applied(&r.admin, &git));
        let d = r.start();
        let forged = deployment(&r.shop, json!({"securityContext": {"privileged": true}}));
        block_on(async {
            let patch = json!({"metadata": {"annotations": {LAST_APPLIED: forged.to_string()}},
                "spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}});
            patch_as(&r.alice, "argocd-controller", &git, Patch::Strategic(patch)).await.unwrap();
        });
        r.argo_cd_compares();
        assert_paged_privileged(&r.page(), "(not known)");
        assert!(d.stop().success());
    }

    /// Attack N3 (b), the variant deleting the annotation: as above, but alice's one
    /// patch under `argocd-controller` sets `privileged: true` and removes the
    /// last-applied annotation (`null`), so no desired object is left at all. Expected:
    /// paged, critical, `privileged: (not known) → true`, argocd-controller named.
    #[test]
    fn privileged_with_the_last_applied_annotation_deleted_is_paged() {
        let r = row("ds-delete");
        let git = deployment(&r.shop, json!({}));
        block_on(client_side_applied(&r.admin, &git));
        let d = r.start();
        block_on(async {
            let patch = json!({"metadata": {"annotations": {LAST_APPLIED: null}},
                "spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}});
            patch_as(&r.alice, "argocd-controller", &git, Patch::Strategic(patch)).await.unwrap();
        });
        r.argo_cd_compares();
        assert_paged_privileged(&r.page(), "(not known)");
        assert!(d.stop().success());
    }

    /// The control: Git really sets `privileged: true` (a node agent), applied by Argo
    /// CD's controller server-side before driftwatch starts, and the Application is
    /// Synced, so driftwatch reads it in sync. Then alice scales it (`spec.replicas` 2 ->
    /// 5 under `kubectl-scale`) and Argo CD reports it OutOfSync. Expected: the live
    /// drift told in the chat with `spec.replicas: (not known) → 5`, the episode a
    /// warning, never a page: `privileged` is unchanged since it was read in sync, which
    /// the resource's note says, with the desired state not known.
    #[test]
    fn a_security_value_git_really_sets_is_not_paged_once_read_in_sync() {
        let r = row("ds-control");
        let git = deployment(&r.shop, json!({"securityContext": {"privileged": true}}));
        block_on(apply_as(&r.admin, "argocd-controller", git.clone()));
        let d = r.start();
        block_on(patch_as(&r.alice, "kubectl-scale", &git, Patch::Merge(json!({"spec": {"replicas": 5}})))).unwrap();
        r.argo_cd_compares();
        wait_for("the live drift in the chat", Duration::from_secs(30), || {
            bodies(&r.chat).iter().any(|b| b.contains("spec.replicas: (not known) → 5"))
        });
        let (_, body) = crate::common::receiver::get(&d.admin, &format!("/history?app={}%2Fshop", r.apps)).unwrap();
        let episodes: Vec<Value> = serde_json::from_str(&body).unwrap();
        let episode = episodes.first().unwrap_or_else(|| panic!("an episode: {body}"));
        assert_eq!(episode["severity"], "warning", "{episode}");
        let deploy = episode["resources"].as_array().into_iter().flatten().find(|r| r["kind"] == "Deployment").unwrap();
        assert_eq!(deploy["class"], "workload", "{deploy}");
        assert_eq!(deploy["desiredSource"], "not-known", "{deploy}");
        assert!(
            deploy["diffNote"].as_str().unwrap_or_default().contains("1 unchanged since driftwatch read the object in sync"),
            "{deploy}"
        );
        let chat = bodies(&r.chat).join("\n");
        assert!(!chat.contains("securityContext.privileged"), "{chat}");
        assert!(bodies(&r.pages).is_empty(), "{:?}", bodies(&r.pages));
        assert!(d.stop().success());
    }
}
