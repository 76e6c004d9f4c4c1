//! Break-glass exceptions: a closed one never comes back, and the two-person rule
//! holds for identities without a UID and for machine identities.

mod on_a_real_api_server {
    use std::path::Path;
    use std::process::Command;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use serde_json::{Value, json};

    use crate::common::audited::{
        AUDIT_LISTENER, AUDIT_TOKEN, application, argocd_controller, audit_addr, audit_flags, grant, hook, put_app,
    };
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, BOB, apply_as, block_on, patch_as};
    use crate::common::daemon::{Daemon, bodies, wait_for};
    use crate::common::{AppBuilder, REV1};
    use kube::api::Patch;

    const ANNOTATION: &str = "driftwatch.io/break-glass";
    /// The user agent of `driftwatch break-glass`: a client chooses its own, so an
    /// attacker's hand-made request sends this one too.
    const CLI_AGENT: &str = "driftwatch-break-glass/0.1.0";

    /// A person of this file's static token file: (name, token, UID, groups).
    type Person = (&'static str, &'static str, &'static str, &'static str);
    /// alice's second account, as a client certificate or default OIDC gives it: no
    /// UID, and in the approvers' group.
    const ALICE_ADMIN: Person = ("alice-admin", "alice-admin-token-4f1d2c", "", "sre,incident-commanders");
    /// A robot the authenticator puts in `system:serviceaccounts` (a webhook token
    /// authenticator mapping CI tokens, say), also in the approvers' group.
    const DEPLOY_BOT: Person = ("deploy-bot", "deploy-bot-token-7a9e31", "uid-deploy-bot", "system:serviceaccounts,incident-commanders");

    /// The API server's people: the shared ones (their tokens, so the helpers' clients
    /// work), bob among the approvers, and the two identities above.
    fn people() -> Vec<Person> {
        vec![
            (ADMIN.name, ADMIN.token, ADMIN.uid, ADMIN.groups),
            (ALICE.name, ALICE.token, ALICE.uid, "sre"),
            (BOB.name, BOB.token, BOB.uid, "sre,incident-commanders"),
            ALICE_ADMIN,
            DEPLOY_BOT,
        ]
    }

    /// One Application `shop` whose Role the exception is about, on an API server of
    /// its own with [`people`], Argo CD's controller, the audited daemon routing
    /// security drift to PagerDuty and break-glass drift to the incident channel, with
    /// `incident-commanders` as the approvers' group.
    struct Stage {
        dir: tempfile::TempDir,
        api: cp::ApiServer,
        d: Daemon,
        pages: Arc<Mutex<Vec<String>>>,
        incident: Arc<Mutex<Vec<String>>>,
        controller: kube::Client,
    }

    fn role() -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "shop", "namespace": "shop"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})
    }

    fn app(sync: &str) -> Value {
        application(
            AppBuilder::new("shop")
                .sync(sync, REV1)
                .healthy()
                .field("/spec/destination/namespace", json!("shop"))
                .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                .field(
                    "/status/resources",
                    json!([{"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "shop", "name": "shop", "status": sync}]),
                ),
        )
    }

    fn stage(name: &str) -> Stage {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let tokens: String = people().iter().map(|(n, t, uid, groups)| format!("{t},{n},{uid},\"{groups}\"\n")).collect();
        let token_file = dir.path().join("people.csv");
        std::fs::write(&token_file, tokens).unwrap();
        // The later flag wins: this API server knows this file's people.
        let people_flag = format!("--token-auth-file={}", token_file.display());
        let api = cpl.start_api_server(name, std::slice::from_ref(&people_flag));
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        for (n, t, _, _) in people() {
            api.kubeconfig_with_token(&dir.path().join(format!("{n}.kubeconfig")), n, t);
        }
        let controller = block_on(async {
            api.namespaces(&["argocd", "shop"]).await;
            let admin = api.client(ADMIN).await;
            let controller = argocd_controller(&api, &admin).await;
            for (who, _, _, _) in people().into_iter().skip(1) {
                grant(&admin, "argocd", who, "argoproj.io", &["applications"], &["get", "patch"]).await;
            }
            apply_as(&controller, "argocd-controller", role()).await;
            put_app(&controller, app("Synced")).await;
            controller
        });
        let (pages, pd) = hook();
        let (incident, incident_port) = hook();
        let config = crate::common::break_glass_routes(pd, incident_port).replace("groups: [sre]", "groups: [incident-commanders]");
        assert!(config.contains("incident-commanders"), "{config}");
        // The daemon restarts the API server with the audit flags: keep its people.
        let d = start_audited_with(dir.path(), &config, &api, &people_flag);
        Stage { dir, api, d, pages, incident, controller }
    }

    /// [`crate::common::audited::start_audited`], the API server restarted with `flag`
    /// besides the audit flags (a restart drops the flags it was started with).
    fn start_audited_with(dir: &Path, config: &str, api: &cp::ApiServer, flag: &str) -> Daemon {
        let ca = crate::common::tls::serving_tls(dir);
        std::fs::create_dir(dir.join("secrets")).unwrap();
        std::fs::write(dir.join("secrets/audit-token"), AUDIT_TOKEN).unwrap();
        std::fs::write(dir.join("driftwatch.yaml"), format!("{config}{AUDIT_LISTENER}")).unwrap();
        let d = Daemon::start_with(dir, &["-n", "argocd"]);
        let mut flags = audit_flags(dir, &audit_addr(&d), &ca);
        flags.push(flag.to_string());
        api.restart(&flags);
        d
    }

    impl Stage {
        /// `driftwatch break-glass ARGS` as `user`: (exit code, stdout and stderr).
        fn cli(&self, user: &str, args: &[&str]) -> (i32, String) {
            let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
                .arg("break-glass")
                .args(args)
                .arg("--kubeconfig")
                .arg(self.dir.path().join(format!("{user}.kubeconfig")))
                .output()
                .unwrap();
            (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned() + &*String::from_utf8_lossy(&o.stderr))
        }

        /// The annotation as the API server holds it now.
        fn annotation(&self) -> Option<String> {
            let shop = block_on(async { cp::get(&self.controller, &app("Synced")).await.unwrap() });
            shop["metadata"]["annotations"][ANNOTATION].as_str().map(str::to_string)
        }

        /// A merge patch of the annotation (`None`: removed) as `token`'s person, with
        /// the user agent `agent`, as any HTTP client can send it.
        fn write(&self, token: &str, agent: &str, value: Option<&str>) {
            let url = format!("{}/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/shop", self.api.url());
            let body = json!({"metadata": {"annotations": {ANNOTATION: value}}}).to_string();
            let status = block_on(async {
                let client = reqwest::Client::builder().tls_danger_accept_invalid_certs(true).build().unwrap();
                let sent = client
                    .patch(url)
                    .bearer_auth(token)
                    .header("user-agent", agent)
                    .header("content-type", "application/merge-patch+json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                sent.status().as_u16()
            });
            assert_eq!(status, 200, "the API server took the write");
        }

        /// The emergency change: the Role widened by hand, the Application OutOfSync
        /// (Argo CD's controller keeps the annotations people wrote).
        fn widen_the_role(&self) {
            block_on(async {
                let admin = self.api.client(ADMIN).await;
                let wide = Patch::Merge(json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}));
                patch_as(&admin, "kubectl-edit", &role(), wide).await.unwrap();
                let current = cp::get(&self.controller, &app("Synced")).await.unwrap();
                let mut drifted = app("OutOfSync");
                drifted["metadata"]["annotations"] = current["metadata"]["annotations"].clone();
                put_app(&self.controller, drifted).await;
            });
        }

        /// The RBAC drift paged, and nothing of shop on the break-glass route.
        fn paged(&self) {
            wait_for("shop's RBAC drift paged", Duration::from_secs(30), || {
                bodies(&self.pages).iter().any(|b| b.contains("Security drift in shop"))
            });
            assert!(
                !bodies(&self.incident).iter().any(|b| b.contains("shop")),
                "an exception held shop's page: {:?}",
                bodies(&self.incident)
            );
        }

        fn refused(&self, why: &str) {
            wait_for(&format!("an exception refused: {why}"), Duration::from_secs(30), || {
                self.d.log_lines("break-glass exception refused").iter().any(|l| l.contains(why))
            });
        }

        fn open(&self) {
            let open =
                ["open", "argocd/shop", "--ticket", "INC-1234", "--reason", "checkout down: widening the Role by hand", "--for", "10m"];
            let (code, out) = self.cli("alice", &open);
            assert_eq!(code, 0, "{out}");
            wait_for("the opening verified", Duration::from_secs(30), || {
                self.d.log_lines("state=pending").iter().any(|l| l.contains("verification=verified"))
            });
        }

        fn end(self) {
            assert!(self.d.stop().success());
            self.api.stop();
        }
    }

    /// Review N2 (H2(c) again). alice opens INC-1234 and bob approves it, both with
    /// `driftwatch break-glass` (verified from the audit log); alice closes it. alice
    /// then writes an unreadable value by hand (`kubectl`, refused), and after it the
    /// saved approved value, with the command's user agent (a merge patch of the
    /// annotation, her own token). Expected: the value back is refused ("a closed
    /// exception does not reopen"), and the Role widened after it is paged.
    #[test]
    fn a_closed_exception_put_back_after_an_unreadable_value_is_refused_and_paged() {
        let s = stage("bg-revive");
        s.open();
        let (code, out) = s.cli("bob", &["approve", "argocd/shop"]);
        assert_eq!(code, 0, "{out}");
        wait_for("the approval verified", Duration::from_secs(30), || {
            !s.d.log_lines("approved_by=bob verification=verified effective=true").is_empty()
        });
        let approved = s.annotation().expect("the approved value");
        let (code, out) = s.cli("alice", &["close", "argocd/shop"]);
        assert_eq!(code, 0, "{out}");
        wait_for("the exception closed", Duration::from_secs(30), || !s.d.log_lines("state=closed").is_empty());
        s.write(ALICE.token, "kubectl/v1.36.0", Some("x"));
        s.refused("not a break-glass exception");
        s.write(ALICE.token, CLI_AGENT, Some(&approved));
        s.refused("does not reopen");
        s.widen_the_role();
        s.paged();
        assert!(s.d.log_lines("effective=true").len() == 1, "in force once, before the close: {:?}", s.d.log_lines("effective=true"));
        s.end();
    }

    /// Review N11. alice opens INC-1234 with `driftwatch break-glass`; her second
    /// account `alice-admin` (no UID, as a client certificate has none; in the
    /// approvers' group `incident-commanders`) writes the approval with the command's
    /// user agent. Expected: refused as one person's two accounts; the Role widened
    /// after it is paged.
    #[test]
    fn the_openers_second_account_without_a_uid_is_no_second_person() {
        let s = stage("bg-second-account");
        s.open();
        let mut e: Value = serde_json::from_str(&s.annotation().expect("the opened value")).unwrap();
        e["approvedBy"] = json!(ALICE_ADMIN.0);
        e["approvedAt"] = json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        s.write(ALICE_ADMIN.1, CLI_AGENT, Some(&e.to_string()));
        s.refused("one person's two accounts");
        s.widen_the_role();
        s.paged();
        s.end();
    }

    /// Review N11. alice opens INC-1234; `deploy-bot`, an identity the API server puts
    /// in `system:serviceaccounts` (and in `incident-commanders`) but whose name is not
    /// `system:serviceaccount:…`, approves it with `driftwatch break-glass approve`.
    /// Expected: refused as a machine identity; the Role widened after it is paged.
    #[test]
    fn an_approver_in_the_service_accounts_group_is_no_person() {
        let s = stage("bg-robot");
        s.open();
        let (code, out) = s.cli(DEPLOY_BOT.0, &["approve", "argocd/shop"]);
        assert_eq!(code, 0, "the command itself sees only a name: {out}");
        s.refused("in the group system:serviceaccounts");
        s.widen_the_role();
        s.paged();
        s.end();
    }
}
