//! The audit input's identity of a write: a harmless write first, a reused
//! `Audit-ID`, another person's refusal earlier — each security-class write still
//! pages on its own.

/// Rows on a real API server with its audit webhook posting to the daemon.
pub(crate) mod on_a_real_api_server {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use kube::api::Patch;
    use serde_json::{Value, json};

    use crate::common::AppBuilder;
    use crate::common::audited::{application, argocd_controller, grant, hook, put_app, start_audited};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, MALLORY, Who, apply_as, block_on, patch_as};
    use crate::common::daemon::{Daemon, bodies, wait_for};

    /// PagerDuty at `pd` paged by the security classes' route (`on-security-drift`, as
    /// the shipped configuration routes it), and a Slack channel at `chat` told of every
    /// attempt (`on-drift-attempt`).
    pub(crate) fn routes(pd: u16, chat: u16) -> String {
        format!(
            r#"services:
  oncall:
    type: pagerduty
    apiUrl: http://127.0.0.1:{pd}
    routingKeys: {{platform: R0UTINGKEY}}
    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}
  chat:
    type: slack
    webhookUrl: http://127.0.0.1:{chat}
    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}
routes:
  - name: security-page
    match: {{class: [rbac, network-policy, security-context, admission, application]}}
    triggers: [on-security-drift]
    recipients: [oncall:platform]
    continue: true
  - name: attempts
    triggers: [on-drift-attempt]
    recipients: [chat]
"#
        )
    }

    pub(crate) const PRIVILEGED: &str =
        r#"{"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}}"#;

    fn deployment(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "payments"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": "payments:1.0"}]}}}})
    }

    /// The world of every row: namespaces, Argo CD's controller, alice and mallory allowed
    /// to patch Deployments and ConfigMaps in `payments` (mallory only ConfigMaps), the
    /// Deployment `api` and the ConfigMap `settings` deployed by Argo CD and listed in
    /// the Synced Application `payments-api`; the daemon started with the audit webhook.
    pub(crate) struct World {
        pub(crate) api: cp::ApiServer,
        pub(crate) daemon: Daemon,
        pub(crate) controller: kube::Client,
        pub(crate) pages: Arc<Mutex<Vec<String>>>,
        pub(crate) chat: Arc<Mutex<Vec<String>>>,
        _dir: tempfile::TempDir,
    }

    pub(crate) fn world(name: &str) -> World {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let (pages, pd) = hook();
        let (chat, chat_port) = hook();
        let api = cpl.start_api_server(name, &[]);
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let controller = block_on(async {
            api.namespaces(&["argocd", "payments"]).await;
            let admin = api.client(ADMIN).await;
            let controller = argocd_controller(&api, &admin).await;
            grant(&admin, "payments", "alice", "apps", &["deployments"], &["get", "patch"]).await;
            grant(&admin, "payments", "alice", "", &["configmaps"], &["get", "patch"]).await;
            grant(&admin, "payments", "mallory", "", &["configmaps"], &["get", "patch"]).await;
            apply_as(&controller, "argocd-controller", deployment("api")).await;
            apply_as(
                &controller,
                "argocd-controller",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "payments"}, "data": {"level": "info"}}),
            )
            .await;
            let res = |group: &str, kind: &str, name: &str| json!({"group": group, "version": "v1", "kind": kind, "namespace": "payments", "name": name, "status": "Synced"});
            put_app(
                &controller,
                application(
                    AppBuilder::new("payments-api")
                        .synced()
                        .healthy()
                        .field("/spec/destination/namespace", json!("payments"))
                        .field("/status/resources", json!([res("apps", "Deployment", "api"), res("", "ConfigMap", "settings")])),
                ),
            )
            .await;
            controller
        });
        let daemon = start_audited(dir.path(), &routes(pd, chat_port), &api, &["-n", "argocd"]);
        World { api, daemon, controller, pages, chat, _dir: dir }
    }

    impl World {
        /// A strategic-merge patch as `kubectl patch` sends it, as `who`, with the
        /// `Audit-ID` header the client chose (the API server keeps it as it is).
        pub(crate) fn patch(&self, who: Who, path: &str, body: &str, audit_id: Option<&str>) -> u16 {
            self.patch_with(who, path, "fieldManager=kubectl-patch", body, audit_id)
        }

        /// [`Self::patch`] with the query string `query`.
        pub(crate) fn patch_with(&self, who: Who, path: &str, query: &str, body: &str, audit_id: Option<&str>) -> u16 {
            block_on(async {
                let client = self.api.client(who).await;
                let mut req =
                    http::Request::patch(format!("{path}?{query}")).header("Content-Type", "application/strategic-merge-patch+json");
                if let Some(id) = audit_id {
                    req = req.header("Audit-ID", id);
                }
                match client.request_text(req.body(body.as_bytes().to_vec()).unwrap()).await {
                    Ok(_) => 200,
                    Err(kube::Error::Api(e)) => e.code,
                    Err(e) => panic!("{e}"),
                }
            })
        }

        /// Argo CD's self-heal: the controller takes the container's securityContext back
        /// to Git at once.
        pub(crate) fn heal(&self) {
            let heal = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": null}]}}}});
            block_on(patch_as(&self.controller, "argocd-controller", &deployment("api"), Patch::Strategic(heal))).unwrap();
        }

        /// The PagerDuty triggers received, as (summary, severity).
        pub(crate) fn pages(&self) -> Vec<(String, String)> {
            bodies(&self.pages)
                .iter()
                .filter_map(|b| serde_json::from_str::<Value>(b).ok())
                .filter(|v| v["event_action"] == "trigger")
                .map(|v| {
                    (
                        v["payload"]["summary"].as_str().unwrap_or_default().to_string(),
                        v["payload"]["severity"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        }

        pub(crate) fn wait_pages(&self, what: &str, n: usize) -> Vec<(String, String)> {
            wait_for(what, Duration::from_secs(30), || self.pages().len() >= n);
            self.pages()
        }

        pub(crate) fn stop(self) {
            assert!(self.daemon.stop().success());
            self.api.stop();
        }
    }

    pub(crate) const DEPLOY: &str = "/apis/apps/v1/namespaces/payments/deployments/api";
    const CONFIGMAP: &str = "/api/v1/namespaces/payments/configmaps/settings";

    /// alice labels the Deployment (`kubectl label`, allowed: a warning to chat), then
    /// within the audit window makes its container privileged; Argo CD re-applies Git
    /// at once, so the Application never leaves Synced. Expected: the privileged write
    /// is paged on its own, naming alice (review N4: it was coalesced into the label
    /// write, whose key was already "sent").
    #[test]
    fn a_harmless_write_first_does_not_silence_a_privileged_one() {
        let w = world("attack-harmless-first");
        assert_eq!(w.patch(ALICE, DEPLOY, r#"{"metadata": {"labels": {"x": "1"}}}"#, None), 200);
        wait_for("the label write told to chat", Duration::from_secs(30), || bodies(&w.chat).iter().any(|b| b.contains("alice")));
        assert!(w.pages().is_empty(), "a label is not paged: {:?}", w.pages());
        assert_eq!(w.patch(ALICE, DEPLOY, PRIVILEGED, None), 200);
        w.heal();
        let pages = w.wait_pages("the privileged write paged", 1);
        assert_eq!(pages.len(), 1, "{pages:?}");
        assert!(pages[0].0.contains("alice") && pages[0].0.contains("Deployment payments/api"), "{pages:?}");
        assert_eq!(pages[0].1, "critical", "{pages:?}");
        // A second privileged write of another field by the same person: its own page.
        let host_pid = r#"{"spec": {"template": {"spec": {"hostPID": true}}}}"#;
        assert_eq!(w.patch(ALICE, DEPLOY, host_pid, None), 200);
        block_on(patch_as(
            &w.controller,
            "argocd-controller",
            &deployment("api"),
            Patch::Strategic(json!({"spec": {"template": {"spec": {"hostPID": null}}}})),
        ))
        .unwrap();
        let pages = w.wait_pages("the second privileged write paged", 2);
        assert_eq!(pages.len(), 2, "{pages:?}");
        w.stop();
    }

    /// mallory's request is refused by RBAC (she may not patch Deployments), then alice
    /// makes the Deployment's container privileged and Argo CD heals it. Expected:
    /// alice's write is paged naming her (it joined the attempt-only episode mallory's
    /// refusal opened, whose resource kept the class of mallory's request, so the
    /// security route never matched).
    #[test]
    fn another_persons_refusal_earlier_does_not_silence_a_privileged_write() {
        let w = world("attack-refusal-first");
        assert_eq!(w.patch(MALLORY, DEPLOY, r#"{"spec": {"replicas": 9}}"#, None), 403);
        wait_for("mallory's refusal told to chat", Duration::from_secs(30), || bodies(&w.chat).iter().any(|b| b.contains("mallory")));
        assert_eq!(w.patch(ALICE, DEPLOY, PRIVILEGED, None), 200);
        w.heal();
        let pages = w.wait_pages("alice's privileged write paged", 1);
        assert!(pages.iter().any(|(s, sev)| s.contains("alice") && sev == "critical"), "{pages:?}");
        assert!(!pages.iter().any(|(s, _)| s.contains("mallory")), "a refused replicas patch is not a security write: {pages:?}");
        w.stop();
    }

    /// alice sends a harmless ConfigMap patch with `Audit-ID: X`, then the privileged
    /// Deployment patch with the same `X` (the API server keeps a client's Audit-ID as
    /// it is). Expected: the privileged write is paged (it was dropped as a replay of
    /// the first), and the replay counter did not count it.
    #[test]
    fn a_reused_audit_id_does_not_hide_the_second_write() {
        let w = world("attack-audit-id");
        let id = "0bad0bad-0000-4000-8000-000000000001";
        assert_eq!(w.patch(ALICE, CONFIGMAP, r#"{"data": {"level": "debug"}}"#, Some(id)), 200);
        wait_for("the ConfigMap write told to chat", Duration::from_secs(30), || {
            bodies(&w.chat).iter().any(|b| b.contains("alice") && b.contains("ConfigMap"))
        });
        assert_eq!(w.patch(ALICE, DEPLOY, PRIVILEGED, Some(id)), 200);
        w.heal();
        let pages = w.wait_pages("the privileged write under the reused ID paged", 1);
        assert!(pages.iter().any(|(s, _)| s.contains("alice") && s.contains("Deployment payments/api")), "{pages:?}");
        assert_eq!(w.daemon.metric(r#"driftwatch_audit_dropped_total{reason="replayed"}"#).unwrap_or(0.0), 0.0, "{}", w.daemon.metrics());
        // The same ID a third time, on the same Deployment, privileged again after the
        // heal: a write of its own, paged again.
        assert_eq!(w.patch(ALICE, DEPLOY, r#"{"spec": {"template": {"spec": {"hostNetwork": true}}}}"#, Some(id)), 200);
        let pages = w.wait_pages("the third write under the reused ID paged", 2);
        assert_eq!(pages.len(), 2, "{pages:?}");
        w.stop();
    }
}
