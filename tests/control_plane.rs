//! The main promises on a real control plane: etcd 3.6 and kube-apiserver v1.36 from
//! `KUBEBUILDER_ASSETS` (`tests/common/control_plane.rs`), the real `driftwatch` binary
//! watching it through the real kube client. Each test keeps to namespaces of its own
//! on the shared API server, or starts an API server of its own on the same etcd when
//! it restarts it, compacts under it or needs its audit flags.
//!
//! Without the binaries these tests fail (they never pass by returning early);
//! `scripts/test.sh` does not run them then, and says so.

mod common;

/// Every test of this binary, under one name `scripts/test.sh` can leave out.
mod on_a_real_api_server {
    use std::path::Path;
    use std::process::Command;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crate::common::audited::{application, argocd_controller, grant, hook, put_app, start_audited};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, BOB, MALLORY, apply_as, block_on, patch_as};
    use crate::common::daemon::{Daemon, bodies, has, records, wait_for};
    use crate::common::receiver::get;
    use crate::common::{AppBuilder, REV1, REV2};
    use kube::api::Patch;
    use serde_json::{Value, json};

    /// The `hook` service at `port`, the `on-drift` trigger sending the Application's
    /// name and revision, every Application subscribed.
    fn watch_config(port: u16) -> String {
        format!(
            "services:\n  hook:\n    type: webhook\n    url: http://127.0.0.1:{port}\n    retry: {{initialBackoff: 100ms, maxBackoff: 500ms}}\n\
             {}subscriptions:\n  - recipients: [hook]\n    triggers: [on-drift]\n",
            crate::common::DRIFT_TRIGGER
        )
    }

    /// Whether the receiver got the drift notification of the Application `name`.
    fn sent(got: &Arc<Mutex<Vec<String>>>, name: &str) -> bool {
        has(got, &format!(r#""app": "{name}""#))
    }

    fn drifted(ns: &str, name: &str, sync: &str, rev: &str) -> Value {
        application(AppBuilder::new(name).sync(sync, rev).healthy().field("/metadata/namespace", json!(ns)))
    }

    /// The requests of the audit log file that match `needle`, as `verb requestURI`.
    fn audited(log: &Path, needle: &str) -> Vec<String> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|e| format!("{} {}", e["verb"].as_str().unwrap_or_default(), e["requestURI"].as_str().unwrap_or_default()))
            .filter(|l| l.contains(needle))
            .collect()
    }

    /// One daemon watching all namespaces (one stream) and one watching `relist-a` and
    /// `relist-b` (a stream each), on an API server that is restarted twice: once with
    /// etcd untouched (a real API server's new watch cache may already refuse the old
    /// resourceVersion), once after etcd was compacted (the resume is refused with 410
    /// Gone and each stream lists again).
    /// The requests the daemons make are read from the API server's own audit log: lists
    /// in pages, watches from a resourceVersion with bookmarks. Nothing is sent twice,
    /// nothing is taken for deleted, and a change after each restart is sent once.
    #[test]
    fn watches_relist_after_restarts_and_410_without_resending_in_one_and_several_namespaces() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n    resources: [{group: argoproj.io}]\n  - level: None\n").unwrap();
        let audit_log = dir.path().join("audit.log");
        let flags = vec![format!("--audit-policy-file={}", policy.display()), format!("--audit-log-path={}", audit_log.display())];
        let api = cpl.start_api_server("relist", &flags);
        let admin = block_on(async {
            api.namespaces(&["argocd", "relist-a", "relist-b"]).await;
            api.client(ADMIN).await
        });
        block_on(async {
            for (ns, name) in [("relist-a", "one"), ("relist-b", "two")] {
                put_app(&admin, drifted(ns, name, "OutOfSync", REV1)).await;
            }
            put_app(&admin, drifted("relist-a", "three", "Synced", REV1)).await;
        });

        let mut runs = Vec::new();
        for (label, extra) in [("all", vec![]), ("each", vec!["-n", "relist-a", "-n", "relist-b"])] {
            let d_dir = dir.path().join(label);
            std::fs::create_dir(&d_dir).unwrap();
            let (got, port) = hook();
            std::fs::write(d_dir.join("driftwatch.yaml"), watch_config(port)).unwrap();
            api.kubeconfig(&d_dir.join("kubeconfig"), ADMIN);
            let d = Daemon::start_with(&d_dir, &extra);
            runs.push((label, d, got));
        }
        for (label, _, got) in &runs {
            wait_for(label, Duration::from_secs(30), || sent(got, "one") && sent(got, "two"));
        }
        let lists = |d: &Daemon| d.metric(r#"driftwatch_watch_events_total{type="application_list"}"#).unwrap_or(0.0);

        // The protocol as the API server saw it: paged lists, then watches from the list's
        // resourceVersion asking for bookmarks, per namespace for the second daemon. A
        // watch is audited when it starts, which may be after the notifications above
        // went out (and the API server writes its audit log in batches): waited for.
        wait_for("both namespaces' watches in the audit log", Duration::from_secs(30), || {
            let w = audited(&audit_log, "watch=true");
            ["relist-a", "relist-b"].iter().all(|ns| w.iter().any(|l| l.contains(&format!("/namespaces/{ns}/applications?"))))
        });
        let watches = audited(&audit_log, "watch=true");
        assert!(
            watches.iter().any(|w| w.starts_with("watch /apis/argoproj.io/v1alpha1/applications?")
                && w.contains("allowWatchBookmarks=true")
                && w.contains("resourceVersion=")),
            "{watches:#?}"
        );
        for ns in ["relist-a", "relist-b"] {
            assert!(
                watches.iter().any(|w| w.contains(&format!("/namespaces/{ns}/applications?")) && w.contains("allowWatchBookmarks=true")),
                "{watches:#?}"
            );
        }
        assert!(audited(&audit_log, "list /apis/argoproj.io/v1alpha1/").iter().any(|l| l.contains("limit=")), "lists are paged");

        // Restarted with etcd untouched. The new API server's watch cache starts at
        // etcd's current revision, which other clusters on this etcd have moved past
        // what the watches saw: a resume may be refused (410) and relist. Either way the
        // change made after the restart is sent once and nothing again.
        api.restart(&flags);
        block_on(put_app(&admin, drifted("relist-a", "three", "OutOfSync", REV1)));
        for (label, _, got) in &runs {
            wait_for(label, Duration::from_secs(60), || sent(got, "three"));
        }
        let before: Vec<f64> = runs.iter().map(|(_, d, _)| lists(d)).collect();

        // Stopped, etcd compacted past every revision the watches saw, started again: the
        // resume is refused with 410 Gone, and each stream lists again.
        api.stop();
        cpl.compact();
        api.restart(&flags);
        for ((label, d, _), n) in runs.iter().zip(&before) {
            let want = if *label == "all" { n + 1.0 } else { n + 2.0 };
            wait_for(label, Duration::from_secs(90), || lists(d) >= want);
        }
        block_on(put_app(&admin, drifted("relist-b", "two", "OutOfSync", REV2)));
        for (label, d, got) in &runs {
            wait_for(label, Duration::from_secs(30), || has(got, &format!(r#""rev": "{REV2}""#)));
            let all = bodies(got);
            assert_eq!(all.len(), 4, "{label}: one, two, three, two's new revision, each once: {all:#?}");
            assert_eq!(d.metric(r#"driftwatch_watch_events_total{type="application_delete"}"#), None, "{label}: a relist is not a delete");
        }
        for (_, d, _) in runs {
            assert!(d.stop().success());
        }
        api.stop();
    }

    /// The SIEM and the security page, every episode record to the SIEM, attribution fresh
    /// for a second.
    fn drift_config(port: u16) -> String {
        let routes = "  - name: siem\n    triggers: [on-drift-episode]\n    recipients: [siem]\nattribution:\n  ttl: 1s\n";
        format!("{}{routes}", crate::common::SIEM_AND_SECURITY_PAGE.replace("PORT", &port.to_string()))
    }

    fn find(got: &Arc<Mutex<Vec<String>>>, rule: &str, event: &str) -> Option<Value> {
        records(got).into_iter().find(|r| r["rule"]["name"] == rule && r["driftwatch"]["episode"]["event"] == event)
    }

    /// The attribution of the resource of `kind` in the history, once it is there.
    fn attribution_of(d: &Daemon, app: &str, kind: &str) -> Option<Value> {
        let (_, body) = get(&d.admin, &format!("/history?app={}", app.replace('/', "%2F")))?;
        let eps: Vec<Value> = serde_json::from_str(&body).ok()?;
        eps.iter()
            .flat_map(|e| e["attribution"].as_array().cloned().unwrap_or_default())
            .find(|a| a["resource"].as_str().is_some_and(|r| r.starts_with(&format!("{kind} "))))
    }

    /// The drifted resource of `kind` in the Application's newest episode.
    fn resource_of(d: &Daemon, app: &str, kind: &str) -> Option<Value> {
        let (_, body) = get(&d.admin, &format!("/history?app={}", app.replace('/', "%2F")))?;
        let eps: Vec<Value> = serde_json::from_str(&body).ok()?;
        eps.iter().flat_map(|e| e["resources"].as_array().cloned().unwrap_or_default()).find(|r| r["kind"] == kind)
    }

    /// The RBAC `deploy/kubernetes/rbac.yaml` ships, applied to the shared API server once.
    fn shipped_rbac_applied() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            block_on(async {
                let api = &cp::shared().api;
                api.namespaces(&["argocd"]).await;
                let admin = api.client(ADMIN).await;
                let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/rbac.yaml");
                let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(&root).unwrap()).unwrap();
                let docs: Vec<Value> = docs.into_iter().filter(|d| d.get("kind").is_some()).collect();
                for doc in &docs {
                    apply_as(&admin, "test-setup", doc.clone()).await;
                }
                // This control plane runs no controller manager: fill each aggregated
                // ClusterRole as its clusterrole-aggregation controller does, with the
                // rules of the ClusterRoles its selectors match.
                let roles: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ClusterRole").collect();
                for aggregated in roles.iter().filter(|r| r.get("aggregationRule").is_some()) {
                    let selectors = aggregated["aggregationRule"]["clusterRoleSelectors"].as_array().cloned().unwrap_or_default();
                    let matches = |r: &Value| {
                        selectors.iter().any(|sel| {
                            sel["matchLabels"].as_object().is_some_and(|want| want.iter().all(|(k, v)| r["metadata"]["labels"][k] == *v))
                        })
                    };
                    let rules: Vec<Value> =
                        roles.iter().filter(|r| matches(r)).flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default()).collect();
                    patch_as(&admin, "clusterrole-aggregation-controller", aggregated, Patch::Merge(json!({"rules": rules})))
                        .await
                        .unwrap();
                }
            })
        });
    }

    /// driftwatch run with the token of its ServiceAccount bound by the shipped RBAC, as in
    /// the cluster: it lists and watches, reads what it is allowed in full, never asks for
    /// a Secret (which that token cannot read), and reports a kind the RBAC does not grant
    /// as forbidden from the API server's 403, logged once.
    #[test]
    fn the_shipped_rbac_runs_the_daemon_refuses_secrets_and_a_forbidden_read_is_reported() {
        shipped_rbac_applied();
        let api = &cp::shared().api;
        let dir = tempfile::tempdir().unwrap();
        let (got, port) = hook();
        std::fs::write(dir.path().join("driftwatch.yaml"), drift_config(port)).unwrap();
        let (token, admin) = block_on(async {
            api.namespaces(&["rbac-apps", "rbac-shop"]).await;
            (api.service_account_token("argocd", "driftwatch").await, api.client(ADMIN).await)
        });
        api.kubeconfig_with_token(&dir.path().join("kubeconfig"), "driftwatch", &token);
        block_on(async {
            // A kind the shipped RBAC does not cover.
            let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                                       "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
            apply_as(&admin, "test-setup", crd).await;
            let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "rbac-shop"}, "spec": {"size": 1}});
            let mut served = false;
            for _ in 0..100 {
                if cp::try_apply_as(&admin, "argocd-controller", widget.clone()).await.is_ok() {
                    served = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            assert!(served, "the Widget CRD was not served");
            let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "rbac-shop"}, "stringData": {"password": "hunter2"}});
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "rbac-shop"}, "data": {"LOG_LEVEL": "info"}});
            apply_as(&admin, "argocd-controller", secret.clone()).await;
            apply_as(&admin, "argocd-controller", cm.clone()).await;
            patch_as(&admin, "kubectl-edit", &cm, Patch::Merge(json!({"data": {"LOG_LEVEL": "debug"}}))).await.unwrap();
            patch_as(&admin, "kubectl-edit", &secret, Patch::Merge(json!({"stringData": {"password": "hunter3"}}))).await.unwrap();
            patch_as(&admin, "kubectl-edit", &widget, Patch::Merge(json!({"spec": {"size": 2}}))).await.unwrap();
            let res = |group: &str, kind: &str, name: &str| json!({"group": group, "version": "v1", "kind": kind, "namespace": "rbac-shop", "name": name, "status": "OutOfSync"});
            put_app(
                &admin,
                application(AppBuilder::new("vault").out_of_sync().healthy().field("/metadata/namespace", json!("rbac-apps")).field(
                    "/status/resources",
                    json!([res("", "Secret", "db"), res("example.com", "Widget", "w"), res("", "ConfigMap", "cfg")]),
                )),
            )
            .await;
        });

        // The token the shipped RBAC binds cannot read a Secret: the API server says so.
        let sa = block_on(api.client_with_token(&token));
        let refused = block_on(async {
            let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(sa, "rbac-shop");
            secrets.get("db").await.err()
        });
        assert!(matches!(&refused, Some(kube::Error::Api(e)) if e.code == 403), "{refused:?}");

        let d = Daemon::start_with(dir.path(), &["-n", "rbac-apps", "--projects-namespace", "argocd"]);
        wait_for("the episode opening", Duration::from_secs(30), || find(&got, "on-drift-episode", "opened").is_some());
        wait_for("three attributions", Duration::from_secs(30), || {
            ["Secret", "Widget", "ConfigMap"]
                .iter()
                .all(|k| resource_of(&d, "rbac-apps/vault", k).is_some_and(|r| r.get("attribution").is_some()))
        });
        let secret = &resource_of(&d, "rbac-apps/vault", "Secret").unwrap()["attribution"];
        assert_eq!(secret["notRead"]["reason"], "secrets-off", "{secret}");
        let widget = &resource_of(&d, "rbac-apps/vault", "Widget").unwrap()["attribution"];
        assert_eq!(widget["notRead"]["reason"], "forbidden", "the API server's 403: {widget}");
        assert!(widget["notRead"]["message"].as_str().unwrap().contains(r#"resources: ["widgets"]"#), "{widget}");
        let cm = &resource_of(&d, "rbac-apps/vault", "ConfigMap").unwrap()["attribution"];
        assert_eq!(cm["managers"][0]["manager"], "kubectl-edit", "read with the shipped RBAC: {cm}");
        assert!(cm.get("notRead").is_none(), "{cm}");
        let forbidden = r#"driftwatch_live_reads_forbidden_total{resource="widgets.example.com"}"#;
        assert!(d.metric(forbidden) >= Some(1.0), "{}", d.metrics());
        assert_eq!(d.log_lines("attribution is not permitted").len(), 1, "logged once per kind");
        let history = get(&d.admin, "/history?app=rbac-apps%2Fvault").unwrap().1;
        assert!(!history.contains("hunter"), "{history}");
        assert!(d.stop().success());
    }

    /// Attribution from the managedFields the API server itself keeps: a Deployment Argo CD
    /// applied server-side, then made privileged by `kubectl edit` (a client-side update),
    /// and a ConfigMap whose value another tool took over by server-side apply. The page
    /// names kubectl-edit and the privileged field; the history names the other tool and
    /// its Apply.
    #[test]
    fn attribution_comes_from_the_api_servers_managed_fields_for_client_and_server_side_writes() {
        let api = &cp::shared().api;
        let dir = tempfile::tempdir().unwrap();
        let (got, port) = hook();
        std::fs::write(dir.path().join("driftwatch.yaml"), drift_config(port)).unwrap();
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        block_on(async {
            api.namespaces(&["attr-apps", "attr-shop"]).await;
            let admin = api.client(ADMIN).await;
            let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "attr-shop"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "shop:1.0"}]}}}});
            apply_as(&admin, "argocd-controller", deploy.clone()).await;
            patch_as(
                &admin,
                "kubectl-edit",
                &deploy,
                Patch::Strategic(
                    json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}}),
                ),
            )
            .await
            .unwrap();
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config", "namespace": "attr-shop"}, "data": {"LOG_LEVEL": "info"}});
            apply_as(&admin, "argocd-controller", cm.clone()).await;
            let mut taken = cm.clone();
            taken["data"]["LOG_LEVEL"] = json!("debug");
            apply_as(&admin, "helm", taken).await;
            let res = |group: &str, kind: &str, name: &str| json!({"group": group, "version": "v1", "kind": kind, "namespace": "attr-shop", "name": name, "status": "OutOfSync"});
            put_app(
                &admin,
                application(
                    AppBuilder::new("shop")
                        .out_of_sync()
                        .healthy()
                        .field("/metadata/namespace", json!("attr-apps"))
                        .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                        .field("/status/resources", json!([res("apps", "Deployment", "web"), res("", "ConfigMap", "web-config")])),
                ),
            )
            .await;
        });
        let d = Daemon::start_with(dir.path(), &["-n", "attr-apps", "--projects-namespace", "argocd"]);
        wait_for("the page", Duration::from_secs(30), || find(&got, "on-security-drift", "opened").is_some());
        let page = find(&got, "on-security-drift", "opened").unwrap();
        assert_eq!(page["user"]["name"], "kubectl-edit", "{page}");
        assert_eq!(page["event"]["severity"], 2, "critical: {page}");
        let message = page["message"].as_str().unwrap();
        assert!(
            message.contains(
                "kubectl-edit (Update) changed spec.template.spec.containers[web].securityContext.privileged on Deployment attr-shop/web"
            ),
            "{message}"
        );
        wait_for("the ConfigMap's attribution", Duration::from_secs(30), || {
            attribution_of(&d, "attr-apps/shop", "ConfigMap").is_some_and(|a| a["manager"] == "helm")
        });
        let cm = attribution_of(&d, "attr-apps/shop", "ConfigMap").unwrap();
        assert_eq!(cm["operation"], "Apply", "server-side apply: {cm}");
        assert_eq!(cm["fields"], json!(["data.LOG_LEVEL"]), "{cm}");
        let deploy = attribution_of(&d, "attr-apps/shop", "Deployment").unwrap();
        assert_eq!((deploy["manager"].as_str(), deploy["operation"].as_str()), (Some("kubectl-edit"), Some("Update")), "{deploy}");
        assert!(d.stop().success());
    }

    /// An Application is not a capability (review H1) and credentials never leave (H4),
    /// on the real API server, whose Application CRD has no status subresource: mallory,
    /// who may patch one Application of AppProject `team-a` (destination `team-a` only),
    /// writes its `status.resources` to name a ConfigMap in `kube-system` and one of
    /// team-b. Neither is read (the API server's own audit log has no GET of them), both
    /// are `notRead: outside-project` and counted. alice's changes in `team-a` — a
    /// `DB_PASSWORD` env item, a `DATABASE_URL` with a password, an `--api-key=` argument,
    /// a password line in a ConfigMap's properties — are listed with their paths, and no
    /// credential reaches the SIEM, the page, `/history` or `/ui`.
    #[test]
    fn an_application_is_not_a_capability_and_credentials_never_leave() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n    resources: [{group: \"\", resources: [configmaps]}]\n  - level: None\n").unwrap();
        let audit_log = dir.path().join("audit.log");
        let flags = vec![format!("--audit-policy-file={}", policy.display()), format!("--audit-log-path={}", audit_log.display())];
        let api = cpl.start_api_server("capability", &flags);
        let (got, port) = hook();
        std::fs::write(dir.path().join("driftwatch.yaml"), drift_config(port)).unwrap();
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let secret = "hunter2-c0ffee";
        block_on(async {
            api.namespaces(&["cap-apps", "team-a", "team-b"]).await;
            let admin = api.client(ADMIN).await;
            let project = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team-a", "namespace": "argocd"},
                "spec": {"sourceRepos": ["*"], "sourceNamespaces": ["cap-apps"], "destinations": [{"server": "https://kubernetes.default.svc", "namespace": "team-a"}]}});
            apply_as(&admin, "argocd-server", project).await;
            let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "team-a"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "app", "image": "shop:1.0", "env": [{"name": "MODE", "value": "a"}]}]}}}});
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "team-a"},
                "data": {"application.properties": "server.port=8080\n"}});
            apply_as(&admin, "argocd-controller", deploy.clone()).await;
            apply_as(&admin, "argocd-controller", cm.clone()).await;
            for (ns, name, value) in
                [("kube-system", "kubeadm-config", "apiServer: kube-system-private-value"), ("team-b", "payments", "team-b-private-value")]
            {
                let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"config": value}});
                apply_as(&admin, "argocd-controller", other).await;
            }
            // alice, by hand.
            grant(&admin, "team-a", "alice", "apps", &["deployments"], &["get", "patch"]).await;
            grant(&admin, "team-a", "alice", "", &["configmaps"], &["get", "patch"]).await;
            let alice = api.client(ALICE).await;
            let env = json!([{"name": "DB_PASSWORD", "value": secret}, {"name": "DATABASE_URL", "value": format!("postgres://app:{secret}@db:5432/shop")}]);
            let set = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": env, "args": [format!("--api-key={secret}")]}]}}}});
            patch_as(&alice, "kubectl-edit", &deploy, Patch::Strategic(set)).await.unwrap();
            let props = format!("server.port=8080\nspring.datasource.password={secret}\n");
            patch_as(&alice, "kubectl-edit", &cm, Patch::Merge(json!({"data": {"application.properties": props}}))).await.unwrap();
            // The Application, and mallory's forged status (she may patch Applications in cap-apps).
            put_app(
                &admin,
                application(
                    AppBuilder::new("mine")
                        .synced()
                        .healthy()
                        .field("/metadata/namespace", json!("cap-apps"))
                        .field("/spec/project", json!("team-a"))
                        .field("/spec/destination", json!({"server": "https://kubernetes.default.svc", "namespace": "team-a"}))
                        .field("/status/history", json!([{"id": 1, "revision": REV1}])),
                ),
            )
            .await;
            grant(&admin, "cap-apps", "mallory", "argoproj.io", &["applications"], &["get", "patch"]).await;
            let mallory = api.client(MALLORY).await;
            let res = |group: &str, kind: &str, ns: &str, name: &str| json!({"group": group, "version": "v1", "kind": kind, "namespace": ns, "name": name, "status": "OutOfSync"});
            let forged = json!({"status": {"sync": {"status": "OutOfSync", "revision": REV1}, "resources": [
                res("apps", "Deployment", "team-a", "web"), res("", "ConfigMap", "team-a", "cfg"),
                res("", "ConfigMap", "kube-system", "kubeadm-config"), res("", "ConfigMap", "team-b", "payments")]}});
            let app =
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "mine", "namespace": "cap-apps"}});
            patch_as(&mallory, "kubectl-patch", &app, Patch::Merge(forged))
                .await
                .expect("no status subresource: mallory writes the status");
        });
        let d = Daemon::start_with(dir.path(), &["-n", "cap-apps", "--projects-namespace", "argocd"]);
        wait_for("both outside-project resources counted", Duration::from_secs(30), || {
            d.metric("driftwatch_live_reads_outside_project_total") == Some(2.0)
        });
        wait_for("the two team-a resources diffed", Duration::from_secs(30), || {
            ["Deployment", "ConfigMap"]
                .iter()
                .all(|k| resource_of(&d, "cap-apps/mine", k).is_some_and(|r| r["changes"].as_array().is_some_and(|c| !c.is_empty())))
        });
        let (_, body) = get(&d.admin, "/history?app=cap-apps%2Fmine").unwrap();
        let eps: Vec<Value> = serde_json::from_str(&body).unwrap();
        let resources: Vec<Value> = eps[0]["resources"].as_array().cloned().unwrap();
        for name in ["kubeadm-config", "payments"] {
            let r = resources.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name}: {body}"));
            assert_eq!(r["attribution"]["notRead"]["reason"], "outside-project", "{r}");
            assert!(r.get("changes").is_none_or(|c| c.as_array().is_some_and(Vec::is_empty)), "{r}");
        }
        // Never asked for: the API server's audit log has no read of either by anyone.
        let reads = audited(&audit_log, "get /api/v1/namespaces/");
        assert!(reads.iter().any(|l| l.contains("/team-a/configmaps/cfg")), "the permitted one was read: {reads:?}");
        assert!(!reads.iter().any(|l| l.contains("kubeadm-config") || l.contains("/team-b/")), "{reads:?}");
        // The changes are listed, the credentials are not.
        let changes: Vec<(String, String)> = resources
            .iter()
            .flat_map(|r| r["changes"].as_array().cloned().unwrap_or_default())
            .map(|c| (c["path"].as_str().unwrap_or_default().to_string(), c["live"].as_str().unwrap_or_default().to_string()))
            .collect();
        for path in ["env[DB_PASSWORD]", "env[DATABASE_URL]", ".args", "data.application.properties"] {
            assert!(changes.iter().any(|(p, _)| p.contains(path)), "{path}: {changes:?}");
        }
        assert!(changes.iter().any(|(_, v)| v.contains("spring.datasource.password=(masked)")), "{changes:?}");
        wait_for("the episode in the SIEM", Duration::from_secs(30), || find(&got, "on-drift-episode", "opened").is_some());
        let (_, ui) = get(&d.admin, "/ui/api/app?app=cap-apps%2Fmine").unwrap();
        for (what, text) in [("the receivers", bodies(&got).join("\n")), ("/history", body), ("/ui", ui)] {
            for leaked in [secret, "kube-system-private-value", "team-b-private-value"] {
                assert!(!text.contains(leaked), "{leaked} reached {what}: {text}");
            }
        }
        assert!(d.stop().success());
    }

    /// The API server's own audit webhook, in batches, over TLS with the token: alice's
    /// privileged patch that Argo CD's controller takes back at once (self-heal: the
    /// Application never leaves Synced) alerts naming her; mallory's patch refused by RBAC
    /// (403) and alice's second privileged patch refused by a ValidatingAdmissionPolicy
    /// (422) each alert as a refused attempt; bob's JSON patch running the container as
    /// root is read by its op's path (a security field), not as a body.
    #[test]
    fn the_api_servers_audit_webhook_names_the_person_and_each_refusal() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let (got, port) = hook();
        let api = cpl.start_api_server("audit", &[]);
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "payments"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "app", "image": "payments:1.0"}]}}}});
        let mut worker = deploy.clone();
        worker["metadata"]["name"] = json!("worker");
        let controller = block_on(async {
            api.namespaces(&["argocd", "payments"]).await;
            let admin = api.client(ADMIN).await;
            let controller = argocd_controller(&api, &admin).await;
            for who in ["alice", "bob"] {
                grant(&admin, "payments", who, "apps", &["deployments"], &["get", "patch"]).await;
            }
            apply_as(&controller, "argocd-controller", deploy.clone()).await;
            apply_as(&controller, "argocd-controller", worker.clone()).await;
            let res = |name: &str| json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": name, "status": "Synced"});
            put_app(
                &controller,
                application(
                    AppBuilder::new("payments-api")
                        .synced()
                        .healthy()
                        .field("/spec/destination/namespace", json!("payments"))
                        .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                        .field("/status/resources", json!([res("api"), res("worker")])),
                ),
            )
            .await;
            controller
        });
        let d = start_audited(dir.path(), &crate::common::ATTEMPT_ALERT.replace("PORT", &port.to_string()), &api, &["-n", "argocd"]);

        let privileged =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}});
        // Self-heal: the controller takes the field back to Git (an apply would leave a
        // field another manager owns in place).
        let heal = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": null}]}}}});
        block_on(async {
            let alice = api.client(ALICE).await;
            patch_as(&alice, "kubectl-patch", &deploy, Patch::Strategic(privileged.clone())).await.unwrap();
            patch_as(&controller, "argocd-controller", &deploy, Patch::Strategic(heal.clone())).await.unwrap();
            let mallory = api.client(MALLORY).await;
            let refused = patch_as(&mallory, "kubectl-patch", &deploy, Patch::Strategic(json!({"spec": {"replicas": 9}}))).await;
            assert!(matches!(&refused, Err(kube::Error::Api(e)) if e.code == 403), "{refused:?}");
        });
        wait_for("alice and mallory", Duration::from_secs(30), || {
            let r = records(&got);
            r.iter().any(|r| r["who"] == "alice") && r.iter().any(|r| r["who"] == "mallory")
        });
        let sent = records(&got);
        let alice = sent.iter().find(|r| r["who"] == "alice").unwrap();
        assert_eq!(
            (alice["decision"].as_str(), alice["class"].as_str(), alice["security"].as_bool()),
            (Some("allowed"), Some("security-context"), Some(true)),
            "{alice}"
        );
        assert_eq!(alice["set"][0]["path"], "spec.template.spec.containers[app].securityContext.privileged", "{alice}");
        let mallory = sent.iter().find(|r| r["who"] == "mallory").unwrap();
        assert_eq!(mallory["decision"], "denied", "{mallory}");
        assert!(mallory["reason"].as_str().unwrap().contains("forbidden"), "{mallory}");

        // alice again, on the worker, under Argo CD's own field manager name (review H6):
        // the person is named, the change is security, and it is flagged.
        block_on(async {
            let alice = api.client(ALICE).await;
            patch_as(&alice, "argocd-controller", &worker, Patch::Strategic(privileged.clone())).await.unwrap();
        });
        wait_for("alice's change under argocd-controller", Duration::from_secs(30), || {
            records(&got).iter().any(|r| r["resource"] == "Deployment payments/worker")
        });
        let spoofed = records(&got).into_iter().find(|r| r["resource"] == "Deployment payments/worker").unwrap();
        assert_eq!(
            (spoofed["who"].as_str(), spoofed["security"].as_bool(), spoofed["argocdManager"].as_bool()),
            (Some("alice"), Some(true), Some(true)),
            "{spoofed}"
        );

        // An admission policy refuses privileged containers: the API server answers 422.
        block_on(async {
            let admin = api.client(ADMIN).await;
            apply_as(&admin, "test-setup", json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "no-privileged"},
                "spec": {"failurePolicy": "Fail",
                         "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                         "validations": [{"expression": "object.spec.template.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)",
                                          "message": "privileged containers are not allowed"}]}})).await;
            apply_as(
                &admin,
                "test-setup",
                json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": "no-privileged"},
                "spec": {"policyName": "no-privileged", "validationActions": ["Deny"],
                         "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "payments"}}}}}),
            )
            .await;
            let alice = api.client(ALICE).await;
            // The policy is in force once the API server has loaded it.
            let mut answer = None;
            for _ in 0..100 {
                match patch_as(&alice, "kubectl-patch", &deploy, Patch::Strategic(privileged.clone())).await {
                    Err(kube::Error::Api(e)) => {
                        answer = Some(e);
                        break;
                    }
                    Err(e) => panic!("{e}"),
                    Ok(_) => {
                        patch_as(&controller, "argocd-controller", &deploy, Patch::Strategic(heal.clone())).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }
            }
            let e = answer.expect("the policy refused the patch");
            assert_eq!(e.code, 422, "{e:?}");
            // A JSON patch (RFC 6902), as `kubectl patch --type=json` sends it: bob runs
            // the container as root.
            let bob = api.client(BOB).await;
            let ops = json!([{"op": "add", "path": "/spec/template/spec/containers/0/securityContext", "value": {"runAsUser": 0}}]);
            patch_as(&bob, "kubectl-patch", &deploy, Patch::Json(serde_json::from_value(ops).unwrap())).await.unwrap();
        });
        wait_for("the admission refusal and the JSON patch", Duration::from_secs(30), || {
            let r = records(&got);
            r.iter().any(|r| r["who"] == "alice" && r["decision"] == "denied") && r.iter().any(|r| r["who"] == "bob")
        });
        let sent = records(&got);
        let refused = sent.iter().find(|r| r["who"] == "alice" && r["decision"] == "denied").unwrap();
        assert_eq!(refused["code"], 422, "{refused}");
        assert!(refused["reason"].as_str().unwrap().contains("privileged containers are not allowed"), "{refused}");
        assert_eq!(refused["security"], true, "{refused}");
        let bob = sent.iter().find(|r| r["who"] == "bob").unwrap();
        // The map added whole is a write of its own (it replaces what was there).
        assert_eq!(
            bob["set"],
            json!([{"path": "spec.template.spec.containers[app].securityContext", "value": "(replaced)"},
                   {"path": "spec.template.spec.containers[app].securityContext.runAsUser", "value": "0"}]),
            "a JSON patch is read by its ops' paths, list items by name: {bob}"
        );
        assert_eq!((bob["class"].as_str(), bob["security"].as_bool()), (Some("security-context"), Some(true)), "{bob}");

        // The other patch types the API server audits (issue 38 item 6): bob turns
        // self-heal off on the Application itself with a merge patch's `null`, and
        // mallory, now granted the right, server-side applies a security field.
        block_on(async {
            let admin = api.client(ADMIN).await;
            grant(&admin, "argocd", "bob", "argoproj.io", &["applications"], &["get", "patch"]).await;
            grant(&admin, "payments", "mallory", "apps", &["deployments"], &["get", "patch"]).await;
            let bob = api.client(BOB).await;
            let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "payments-api", "namespace": "argocd"}});
            patch_as(&bob, "kubectl-patch", &app, Patch::Merge(json!({"spec": {"syncPolicy": {"automated": {"selfHeal": null}}}})))
                .await
                .unwrap();
            let mallory = api.client(MALLORY).await;
            let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "payments"},
                "spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"allowPrivilegeEscalation": true}}]}}}});
            // RBAC may take a moment to see the new binding.
            let mut result = Err(String::new());
            for _ in 0..50 {
                result = cp::try_apply_as(&mallory, "kubectl", applied.clone()).await.map_err(|e| e.to_string());
                if result.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            result.unwrap();
        });
        wait_for("the merge patch and the apply", Duration::from_secs(30), || {
            let r = records(&got);
            r.iter().any(|r| r["who"] == "bob" && r["resource"] == "Application argocd/payments-api")
                && r.iter().any(|r| r["who"] == "mallory" && r["decision"] == "allowed")
        });
        let sent = records(&got);
        let off = sent.iter().find(|r| r["who"] == "bob" && r["resource"] == "Application argocd/payments-api").unwrap();
        assert_eq!(off["set"], json!([{"path": "spec.syncPolicy.automated.selfHeal", "value": "(removed)"}]), "{off}");
        assert_eq!(off["security"], true, "turning self-heal off weakens what Argo CD enforces: {off}");
        let applied = sent.iter().find(|r| r["who"] == "mallory" && r["decision"] == "allowed").unwrap();
        let set = applied["set"].as_array().unwrap();
        assert!(
            set.iter().any(|f| f["path"] == "spec.template.spec.containers[app].securityContext.allowPrivilegeEscalation" && f["value"] == "true"),
            "an apply is read by the fields its object names: {applied}"
        );
        assert_eq!((applied["class"].as_str(), applied["security"].as_bool()), (Some("security-context"), Some(true)), "{applied}");
        assert!(d.metric(r#"driftwatch_audit_requests_total{code="200"}"#) >= Some(1.0), "{}", d.metrics());
        assert_eq!(d.metric(r#"driftwatch_audit_requests_total{code="401"}"#).unwrap_or(0.0), 0.0, "the API server's token was accepted");
        assert!(d.stop().success());
        api.stop();
    }

    /// Break-glass with people's own credentials on the real API server: `driftwatch
    /// break-glass` asks `SelfSubjectReview` who runs it, the real API server answers with
    /// the static token's user, and its audit webhook posts the writes. alice opens on
    /// shop and bob approves: verified from the audit log, shop's RBAC drift goes to the
    /// break-glass route, not the page. alice writes bob's approval on cart by hand: the
    /// audit log shows who wrote it, cart is paged.
    #[test]
    fn break_glass_is_checked_with_self_subject_review_and_the_api_servers_audit_log() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let (pages, pd) = hook();
        let (incident, incident_port) = hook();
        let api = cpl.start_api_server("break-glass", &[]);
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        for who in [ALICE, BOB] {
            api.kubeconfig(&dir.path().join(format!("{}.kubeconfig", who.name)), who);
        }
        let role = |name: &str| {
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": "shop"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]})
        };
        let app = |name: &str, sync: &str| {
            application(
                AppBuilder::new(name)
                    .sync(sync, REV1)
                    .healthy()
                    .field("/spec/destination/namespace", json!("shop"))
                    .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                    .field(
                        "/status/resources",
                        json!([{"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "shop", "name": name, "status": sync}]),
                    ),
            )
        };
        let controller = block_on(async {
            api.namespaces(&["argocd", "shop"]).await;
            let admin = api.client(ADMIN).await;
            let controller = argocd_controller(&api, &admin).await;
            for who in ["alice", "bob"] {
                grant(&admin, "argocd", who, "argoproj.io", &["applications"], &["get", "patch"]).await;
            }
            for name in ["shop", "cart"] {
                apply_as(&controller, "argocd-controller", role(name)).await;
                put_app(&controller, app(name, "Synced")).await;
            }
            controller
        });
        let config = crate::common::break_glass_routes(pd, incident_port);
        let d = start_audited(dir.path(), &config, &api, &["-n", "argocd"]);

        let break_glass = |user: &str, args: &[&str]| {
            let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
                .arg("break-glass")
                .args(args)
                .arg("--kubeconfig")
                .arg(dir.path().join(format!("{user}.kubeconfig")))
                .output()
                .unwrap();
            (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned() + &*String::from_utf8_lossy(&o.stderr))
        };
        let open = ["open", "argocd/shop", "--ticket", "INC-1234", "--reason", "checkout down: widening the Role by hand", "--for", "10m"];
        let (code, out) = break_glass("alice", &open);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("break-glass INC-1234 opened on argocd/shop by alice"), "SelfSubjectReview named alice: {out}");
        let (code, out) = break_glass("alice", &["approve", "argocd/shop"]);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("a second, different person must approve it"), "{out}");
        let (code, out) = break_glass("bob", &["approve", "argocd/shop"]);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("approved by bob"), "{out}");

        // cart: alice opens, then writes bob's approval in by hand with her own token.
        let (code, out) = break_glass("alice", &["open", "argocd/cart", "--ticket", "INC-1235", "--reason", "x", "--for", "10m"]);
        assert_eq!(code, 0, "{out}");
        block_on(async {
            let alice = api.client(ALICE).await;
            let cart = cp::get(&alice, &app("cart", "Synced")).await.unwrap();
            let mut forged: Value =
                serde_json::from_str(cart["metadata"]["annotations"]["driftwatch.io/break-glass"].as_str().unwrap()).unwrap();
            forged["approvedBy"] = "bob".into();
            forged["approvedAt"] = forged["openedAt"].clone();
            patch_as(
                &alice,
                "kubectl-edit",
                &cart,
                Patch::Merge(json!({"metadata": {"annotations": {"driftwatch.io/break-glass": forged.to_string()}}})),
            )
            .await
            .unwrap();
        });
        wait_for("shop's exception verified and cart's refused", Duration::from_secs(30), || {
            !d.log_lines("approved_by=bob verification=verified effective=true").is_empty()
                && !d.log_lines("break-glass exception refused").is_empty()
        });
        let refused = d.log_lines("break-glass exception refused").join("\n");
        assert!(refused.contains("forged: the audit log shows alice wrote the approval that names bob"), "{refused}");

        // The emergency change: both Roles widened by hand, both Applications OutOfSync.
        block_on(async {
            let admin = api.client(ADMIN).await;
            for name in ["shop", "cart"] {
                patch_as(
                    &admin,
                    "kubectl-edit",
                    &role(name),
                    Patch::Merge(json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})),
                )
                .await
                .unwrap();
                let current = cp::get(&controller, &app(name, "Synced")).await.unwrap();
                let mut drifted = app(name, "OutOfSync");
                drifted["metadata"]["annotations"] = current["metadata"]["annotations"].clone();
                put_app(&controller, drifted).await;
            }
        });
        wait_for("cart paged and shop on the break-glass route", Duration::from_secs(30), || {
            bodies(&pages).iter().any(|b| b.contains("Security drift in cart")) && bodies(&incident).iter().any(|b| b.contains("shop"))
        });
        let record = bodies(&incident).into_iter().find(|b| b.contains("shop")).unwrap();
        assert!(record.contains("Under break-glass INC-1234: opened by alice, approved by bob (verified)."), "{record}");
        assert!(!bodies(&pages).iter().any(|b| b.contains("Security drift in shop")), "shop was paged: {:?}", bodies(&pages));
        assert!(!bodies(&incident).iter().any(|b| b.contains("cart")), "the forged exception changed cart's routes");

        // alice alone stretches the verified exception to 72 h by hand (review H2): not in
        // force any more, and the RBAC drift it was holding pages.
        block_on(async {
            let alice = api.client(ALICE).await;
            let shop = cp::get(&alice, &app("shop", "Synced")).await.unwrap();
            let mut longer: Value =
                serde_json::from_str(shop["metadata"]["annotations"]["driftwatch.io/break-glass"].as_str().unwrap()).unwrap();
            let opened = chrono::DateTime::parse_from_rfc3339(longer["openedAt"].as_str().unwrap()).unwrap();
            longer["expiresAt"] = (opened + chrono::Duration::hours(72)).to_rfc3339().into();
            patch_as(
                &alice,
                "kubectl-edit",
                &shop,
                Patch::Merge(json!({"metadata": {"annotations": {"driftwatch.io/break-glass": longer.to_string()}}})),
            )
            .await
            .unwrap();
        });
        wait_for("shop paged after the hand edit", Duration::from_secs(30), || {
            bodies(&pages).iter().any(|b| b.contains("Security drift in shop"))
        });
        let refused = d.log_lines("break-glass exception refused").join("\n");
        assert!(refused.contains("INC-1234"), "{refused}");
        assert!(d.stop().success());
        api.stop();
    }

    /// A hub Argo CD deploying to a second cluster: the spoke is a second API server on the
    /// same etcd, read with its own kubeconfig. Its Deployment was applied the way Argo CD
    /// applies by default (client-side, with the last-applied annotation), then patched:
    /// the alert shows Git value → live value with who, read from the spoke.
    #[test]
    fn a_spoke_cluster_is_read_with_its_own_credentials_and_its_drift_is_diffed() {
        let cpl = cp::shared();
        let hub = &cpl.api;
        let spoke = cpl.start_api_server("spoke", &[]);
        let dir = tempfile::tempdir().unwrap();
        let (got, port) = hook();
        hub.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        spoke.kubeconfig(&dir.path().join("spoke.kubeconfig"), ADMIN);
        let config = format!(
            "{}  - name: chat\n    triggers: [on-live-drift]\n    recipients: [siem:chat]\nclusters:\n  - name: spoke-1\n    server: {}\n    kubeconfig: spoke.kubeconfig\n",
            crate::common::SIEM_AND_SECURITY_PAGE.replace("PORT", &port.to_string()),
            spoke.url()
        );
        std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
        block_on(async {
            spoke.namespaces(&["edge"]).await;
            hub.namespaces(&["spoke-apps"]).await;
            let on_spoke = spoke.client(ADMIN).await;
            let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "edge"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "shop:1.0"}]}}}});
            let mut created = applied.clone();
            created["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()});
            let deployments: kube::Api<kube::api::DynamicObject> = cp::api_of(&on_spoke, &created).await;
            let pp = kube::api::PostParams { field_manager: Some("argocd-controller".into()), ..Default::default() };
            deployments.create(&pp, &serde_json::from_value(created).unwrap()).await.unwrap();
            patch_as(
                &on_spoke,
                "kubectl-patch",
                &applied,
                Patch::Strategic(json!({"spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}})),
            )
            .await
            .unwrap();
            let admin = hub.client(ADMIN).await;
            put_app(
                &admin,
                application(
                    AppBuilder::new("edge")
                        .out_of_sync()
                        .healthy()
                        .field("/metadata/namespace", json!("spoke-apps"))
                        .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                        .field("/spec/destination", json!({"name": "spoke-1", "namespace": "edge"}))
                        .field(
                            "/status/resources",
                            json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "edge", "name": "web", "status": "OutOfSync"}]),
                        ),
                ),
            )
            .await;
        });
        let d = Daemon::start_with(dir.path(), &["-n", "spoke-apps", "--projects-namespace", "argocd"]);
        let alert = |trigger: &str| {
            records(&got).into_iter().find(|r| r["rule"]["name"] == trigger && r["orchestrator"]["resource"]["name"] == "edge")
        };
        wait_for("the live-drift alert and the page", Duration::from_secs(30), || {
            alert("on-live-drift").is_some() && alert("on-security-drift").is_some()
        });
        for trigger in ["on-live-drift", "on-security-drift"] {
            let r = alert(trigger).unwrap();
            let msg = r["message"].as_str().unwrap();
            assert!(msg.contains("spec.replicas: 2 → 5 by kubectl-patch"), "{trigger}: {msg}");
            assert!(
                msg.contains("spec.template.spec.containers[web].securityContext.privileged: (not set) → true by kubectl-patch"),
                "{msg}"
            );
            assert!(!msg.contains("terminationMessagePath") && !msg.contains("progressDeadlineSeconds"), "defaults are not drift: {msg}");
            assert_eq!(r["driftwatch"]["episode"]["resources"][0]["desiredSource"], "last-applied", "{r}");
        }
        assert_eq!(d.metric(r#"driftwatch_cluster_up{cluster="spoke-1"}"#), Some(1.0));
        assert!(d.metric(r#"driftwatch_cluster_reads_total{result="ok",cluster="spoke-1"}"#) >= Some(1.0));
        assert!(d.stop().success());
        spoke.stop();
    }

    /// Two replicas on one state file elect the sender with a real coordination.k8s.io
    /// Lease: the standby sends nothing; the leader killed with SIGKILL, the standby takes
    /// the Lease once it expires and sends what changed meanwhile, nothing twice.
    #[test]
    fn leader_election_on_a_real_lease_hands_over_after_kill_9_without_duplicates() {
        let api = &cp::shared().api;
        let dir = tempfile::tempdir().unwrap();
        let (got, port) = hook();
        std::fs::write(dir.path().join("driftwatch.yaml"), watch_config(port)).unwrap();
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let admin = block_on(async {
            api.namespaces(&["lease-apps", "lease-ns"]).await;
            api.client(ADMIN).await
        });
        let ha = elected("lease-apps", "lease-ns");
        let a = Daemon::start_with(dir.path(), &ha);
        wait_for("a leads", Duration::from_secs(20), || a.metric("driftwatch_leader") == Some(1.0));
        let b = Daemon::start_with(dir.path(), &ha);
        let lease = || {
            block_on(cp::get(
                &admin,
                &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "driftwatch", "namespace": "lease-ns"}}),
            ))
        };
        let holder = lease().expect("the Lease")["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string();
        assert!(!holder.is_empty(), "{:?}", lease());
        block_on(put_app(&admin, drifted("lease-apps", "ha-one", "OutOfSync", REV1)));
        wait_for("ha-one", Duration::from_secs(20), || sent(&got, "ha-one"));
        wait_for("ha-one recorded", Duration::from_secs(20), || a.metric(r#"driftwatch_queue_depth{service="hook"}"#) == Some(0.0));
        assert_eq!(b.metric("driftwatch_leader"), Some(0.0), "the standby must not lead while the leader renews");

        let mut a = a;
        a.child.kill().unwrap();
        a.child.wait().unwrap();
        block_on(put_app(&admin, drifted("lease-apps", "ha-two", "OutOfSync", REV1)));
        wait_for("b takes over", Duration::from_secs(30), || b.metric("driftwatch_leader") == Some(1.0));
        wait_for("ha-two", Duration::from_secs(20), || sent(&got, "ha-two"));
        let new_holder = lease().unwrap()["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string();
        assert_ne!(new_holder, holder, "the Lease changed hands");
        wait_for("ha-two recorded", Duration::from_secs(20), || b.metric(r#"driftwatch_queue_depth{service="hook"}"#) == Some(0.0));
        let all = bodies(&got);
        assert_eq!(all.iter().filter(|b| b.contains("ha-one")).count(), 1, "{all:?}");
        assert_eq!(all.iter().filter(|b| b.contains("ha-two")).count(), 1, "{all:?}");
        assert!(b.stop().success());
    }

    /// The flags of a replica watching `apps` with leader election on a 3 s Lease in
    /// `lease_ns`.
    fn elected<'a>(apps: &'a str, lease_ns: &'a str) -> [&'a str; 9] {
        ["-n", apps, "--projects-namespace", "argocd", "--leader-election", "--lease-duration", "3", "--lease-namespace", lease_ns]
    }

    /// Sends `sig` (`-STOP`, `-CONT`) to a daemon.
    fn signal(d: &Daemon, sig: &str) {
        assert!(Command::new("kill").args([sig, &d.child.id().to_string()]).status().unwrap().success());
    }

    /// Which of `ds` leads (the first that says so; `skip` is not asked: it may be
    /// stopped).
    fn leader(ds: &[Daemon], skip: &[usize]) -> Option<usize> {
        (0..ds.len()).filter(|i| !skip.contains(i)).find(|&i| ds[i].metric("driftwatch_leader") == Some(1.0))
    }

    /// `state:` in PostgreSQL (the URL from the secrets file), in `schema`.
    fn postgres_state(schema: &str, connections: u32) -> String {
        format!(
            "secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg-url\n    schema: {schema}\n    maxConnections: {connections}\n"
        )
    }

    /// Three replicas' directories (no shared volume): `config`, the URL of `pg` in the
    /// secrets file, a kubeconfig for the API server.
    fn replica_dirs(api: &cp::ApiServer, pg: &driftwatch::state::pgtest::Server, config: &str) -> Vec<tempfile::TempDir> {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        for dir in &dirs {
            std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
            std::fs::write(dir.path().join("secrets.yaml"), format!("pg-url: {:?}\n", pg.url())).unwrap();
            api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        }
        dirs
    }

    /// Three replicas, each with a directory of its own (no shared volume), keep the
    /// state in one PostgreSQL and elect the sender with a real Lease. The leader
    /// paused (SIGSTOP) past two lease durations loses the Lease; another takes over
    /// (fencing the paused one in PostgreSQL) and sends what changed meanwhile; the
    /// paused one, continued, stands down and tells nothing. Then, while Applications
    /// drift at a steady rate, the new leader is killed (SIGKILL) and another takes
    /// over. Every change is told; a second copy of one (in flight at the kill) carries
    /// the first one's `Idempotency-Key`.
    #[test]
    fn replicas_on_postgres_without_a_volume_fence_a_paused_leader_and_survive_kill_9() {
        use crate::common::receiver::{Mode, Scripted};
        let api = &cp::shared().api;
        let pg = driftwatch::state::pgtest::server().expect("a private PostgreSQL");
        let schema = driftwatch::state::pgtest::fresh_schema();
        let hook = Scripted::start(Mode::Up);
        let dirs = replica_dirs(api, pg, &format!("{}{}", watch_config(hook.port), postgres_state(&schema, 4)));
        let admin = block_on(async {
            api.namespaces(&["pg-apps", "pg-lease"]).await;
            api.client(ADMIN).await
        });
        let ha = elected("pg-apps", "pg-lease");
        let told = |name: &str| hook.requests().iter().any(|(_, b)| b.contains(&format!(r#""app": "{name}""#)));
        let mut ds = vec![Daemon::start_with(dirs[0].path(), &ha)];
        wait_for("the first leads", Duration::from_secs(20), || ds[0].metric("driftwatch_leader") == Some(1.0));
        ds.push(Daemon::start_with(dirs[1].path(), &ha));
        ds.push(Daemon::start_with(dirs[2].path(), &ha));
        let depth = r#"driftwatch_queue_depth{service="hook"}"#;
        block_on(put_app(&admin, drifted("pg-apps", "pg-one", "OutOfSync", REV1)));
        wait_for("pg-one", Duration::from_secs(20), || told("pg-one"));
        wait_for("pg-one recorded", Duration::from_secs(20), || ds[0].metric(depth) == Some(0.0));
        assert_eq!(leader(&ds, &[]), Some(0), "the standbys do not lead");

        // Paused past two lease durations: another replica takes over.
        signal(&ds[0], "-STOP");
        block_on(put_app(&admin, drifted("pg-apps", "pg-two", "OutOfSync", REV1)));
        wait_for("a standby takes over", Duration::from_secs(30), || leader(&ds, &[0]).is_some());
        let next = leader(&ds, &[0]).unwrap();
        wait_for("pg-two", Duration::from_secs(20), || told("pg-two"));
        wait_for("pg-two recorded", Duration::from_secs(20), || ds[next].metric(depth) == Some(0.0));
        signal(&ds[0], "-CONT");
        block_on(put_app(&admin, drifted("pg-apps", "pg-three", "OutOfSync", REV1)));
        wait_for("pg-three", Duration::from_secs(20), || told("pg-three"));
        wait_for("the continued one stands down", Duration::from_secs(20), || ds[0].metric("driftwatch_leader") == Some(0.0));
        let mut sql = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
        let epoch: i64 = sql.query_one(&format!("SELECT epoch FROM {schema}.fence"), &[]).unwrap().get(0);
        assert!(epoch >= 2, "taken over twice at least (the first leader, then the standby): {epoch}");

        // A steady stream of drifts (one every 20 ms, as fast as the API server takes
        // them) while the new leader is killed: another takes over.
        const LOAD: usize = 60;
        let killed_at = std::sync::Mutex::new(None);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..LOAD {
                    block_on(put_app(&admin, drifted("pg-apps", &format!("pg-load-{i}"), "OutOfSync", REV1)));
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            wait_for("the stream under way", Duration::from_secs(30), || (0..10).any(|i| told(&format!("pg-load-{i}"))));
            ds[next].child.kill().unwrap();
            *killed_at.lock().unwrap() = Some(std::time::Instant::now());
            ds[next].child.wait().unwrap();
        });
        wait_for("a third leader", Duration::from_secs(30), || leader(&ds, &[next]).is_some());
        let took = killed_at.lock().unwrap().map(|t| t.elapsed()).unwrap_or_default();
        eprintln!("takeover after kill -9: a new leader within {took:?} (lease 3 s)");
        let last = leader(&ds, &[next]).unwrap();
        wait_for("every drift of the stream", Duration::from_secs(60), || (0..LOAD).all(|i| told(&format!("pg-load-{i}"))));
        wait_for("all recorded", Duration::from_secs(20), || ds[last].metric(depth) == Some(0.0));
        let mut by_app: std::collections::BTreeMap<String, std::collections::BTreeSet<Option<String>>> = Default::default();
        for (key, body) in hook.keyed() {
            let app = body.split(r#""app": ""#).nth(1).and_then(|r| r.split('"').next()).unwrap_or_default().to_string();
            by_app.entry(app).or_default().insert(key);
        }
        assert_eq!(by_app.len(), LOAD + 3, "{by_app:?}");
        for (app, keys) in &by_app {
            assert_eq!(keys.len(), 1, "{app}: every copy under one key: {keys:?}");
        }
        for name in ["pg-one", "pg-two", "pg-three"] {
            assert_eq!(hook.requests().iter().filter(|(_, b)| b.contains(&format!(r#""app": "{name}""#))).count(), 1, "{name}");
        }
        let after: i64 = sql.query_one(&format!("SELECT epoch FROM {schema}.fence"), &[]).unwrap().get(0);
        assert!(after > epoch, "the third took the store over with a new epoch: {after}");
        for (i, d) in ds.into_iter().enumerate() {
            if i != next {
                let log = d.log.clone();
                let status = d.stop();
                assert!(status.success(), "replica {i}: {status}\n{}", std::fs::read_to_string(log).unwrap_or_default());
            }
        }
    }

    /// The holder of the Lease `name` in `ns` (empty when free or absent).
    fn lease_holder(admin: &kube::Client, ns: &str, name: &str) -> String {
        let lease = block_on(cp::get(
            admin,
            &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": ns}}),
        ));
        lease.and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from)).unwrap_or_default()
    }

    /// Three replicas with `sharding.shards: 4` on one PostgreSQL and a real
    /// kube-apiserver, and 40 Applications, each deploying to a cluster of its own.
    /// The shards' Leases end up spread with a bounded load (at most two a replica);
    /// each replica keeps only the Applications of its shards' clusters (its
    /// `driftwatch_applications` is exactly their number, by the same hash); each
    /// Application's drift is told once. Then the replica holding two shards is killed:
    /// another takes both over once their Leases expire, lists their Applications and
    /// tells their next drift, once each.
    #[test]
    fn four_shards_over_forty_clusters_split_between_replicas_and_move_when_one_is_killed() {
        use crate::common::receiver::{Mode, Scripted};
        const SHARDS: u32 = 4;
        const CLUSTERS: usize = 40;
        let api = &cp::shared().api;
        let pg = driftwatch::state::pgtest::server().expect("a private PostgreSQL");
        let schema = driftwatch::state::pgtest::fresh_schema();
        let hook = Scripted::start(Mode::Up);
        let config = format!("{}{}sharding:\n  shards: {SHARDS}\n", watch_config(hook.port), postgres_state(&schema, 2));
        let dirs = replica_dirs(api, pg, &config);
        let admin = block_on(async {
            api.namespaces(&["shard-apps", "shard-lease"]).await;
            api.client(ADMIN).await
        });
        let cluster = |c: usize| format!("https://cluster-{c}.example:6443");
        let shard_of = |c: usize| driftwatch::shard::of_cluster(&cluster(c), SHARDS);
        for s in 0..SHARDS {
            assert!((0..CLUSTERS).any(|c| shard_of(c) == s), "every shard has clusters");
        }
        let app = |c: usize, rev: &str| {
            let mut v = drifted("shard-apps", &format!("on-cluster-{c}"), "OutOfSync", rev);
            v["spec"]["destination"] = json!({"server": cluster(c), "namespace": "default"});
            v
        };
        let told = |name: &str| hook.requests().iter().filter(|(_, b)| b.contains(&format!(r#""app": "{name}""#))).count();
        let ha = elected("shard-apps", "shard-lease");
        let mut ds: Vec<Option<Daemon>> = dirs.iter().map(|d| Some(Daemon::start_with(d.path(), &ha))).collect();
        // Which replica holds each shard, by the pid in the Lease's holder identity.
        let holders = |ds: &[Option<Daemon>]| -> Vec<Option<usize>> {
            (0..SHARDS)
                .map(|s| {
                    let holder = lease_holder(&admin, "shard-lease", &format!("driftwatch-shard-{s}"));
                    ds.iter().position(|d| d.as_ref().is_some_and(|d| holder.ends_with(&format!("-{}", d.child.id()))))
                })
                .collect()
        };
        let held_by = |ds: &[Option<Daemon>], i: usize| ds[i].as_ref().and_then(|d| d.metric("driftwatch_leader")).unwrap_or(-1.0);
        // Settled: every shard held by a live replica, none holding more than its bound,
        // and each replica's own count agreeing with the Leases.
        let settled = |ds: &[Option<Daemon>], bound: usize| {
            let h = holders(ds);
            h.iter().all(Option::is_some)
                && (0..ds.len()).all(|i| {
                    let n = h.iter().filter(|x| **x == Some(i)).count();
                    n <= bound && (ds[i].is_none() || held_by(ds, i) == n as f64)
                })
        };
        wait_for("the shards spread, two at most a replica", Duration::from_secs(60), || settled(&ds, 2));
        for c in 0..CLUSTERS {
            block_on(put_app(&admin, app(c, REV1)));
        }
        wait_for("every Application's drift told", Duration::from_secs(60), || {
            (0..CLUSTERS).all(|c| told(&format!("on-cluster-{c}")) >= 1)
        });
        // Each replica keeps exactly the Applications of the clusters its shards own.
        let kept_as_hashed = |ds: &[Option<Daemon>]| {
            let h = holders(ds);
            (0..ds.len()).filter(|i| ds[*i].is_some()).all(|i| {
                let mine = (0..CLUSTERS).filter(|c| h[shard_of(*c) as usize] == Some(i)).count();
                ds[i].as_ref().and_then(|d| d.metric("driftwatch_applications")) == Some(mine as f64)
            })
        };
        wait_for("each replica keeps its shards' Applications only", Duration::from_secs(30), || kept_as_hashed(&ds));
        let h = holders(&ds);
        let spread: Vec<usize> = (0..3).map(|i| h.iter().filter(|x| **x == Some(i)).count()).collect();
        assert_eq!(spread.iter().sum::<usize>(), SHARDS as usize, "{spread:?}");
        for c in 0..CLUSTERS {
            assert_eq!(told(&format!("on-cluster-{c}")), 1, "on-cluster-{c} told once");
        }

        // The replica with two shards is killed: its Leases expire and the others take
        // both shards over (the bound is two with two replicas left).
        let victim = spread.iter().position(|n| *n == 2).expect("a replica with two shards");
        let moved: Vec<u32> = (0..SHARDS).filter(|s| h[*s as usize] == Some(victim)).collect();
        let mut d = ds[victim].take().unwrap();
        d.child.kill().unwrap();
        let killed = std::time::Instant::now();
        d.child.wait().unwrap();
        wait_for("its shards taken over", Duration::from_secs(30), || {
            let h = holders(&ds);
            moved.iter().all(|s| h[*s as usize].is_some_and(|i| i != victim))
        });
        eprintln!("shards {moved:?} of a killed replica held again {:?} after the kill (lease 3 s)", killed.elapsed());
        wait_for("settled again", Duration::from_secs(30), || settled(&ds, 2));
        // Their Applications drift again (a new revision): told once each, by the new holder.
        let on_moved: Vec<usize> = (0..CLUSTERS).filter(|c| moved.contains(&shard_of(*c))).collect();
        for c in &on_moved {
            block_on(put_app(&admin, app(*c, REV2)));
        }
        wait_for("the moved shards' drifts told", Duration::from_secs(60), || {
            on_moved.iter().all(|c| told(&format!("on-cluster-{c}")) >= 2)
        });
        wait_for("each replica keeps its shards' Applications only, after the move", Duration::from_secs(30), || kept_as_hashed(&ds));
        for c in 0..CLUSTERS {
            let expected = if on_moved.contains(&c) { 2 } else { 1 };
            assert_eq!(told(&format!("on-cluster-{c}")), expected, "on-cluster-{c}");
        }
        let total = |ds: &[Option<Daemon>]| ds.iter().flatten().map(|d| d.metric("driftwatch_applications").unwrap_or(0.0)).sum::<f64>();
        assert_eq!(total(&ds), CLUSTERS as f64);

        // One Application is pointed at a cluster of another shard: its old shard retires
        // it (its keys go), its new shard tells its drift.
        let from = 0;
        let to = (1..CLUSTERS).find(|c| shard_of(*c) != shard_of(from)).unwrap();
        let mut repointed = app(from, if on_moved.contains(&from) { REV2 } else { REV1 });
        repointed["spec"]["destination"]["server"] = json!(cluster(to));
        block_on(put_app(&admin, repointed));
        let before = if on_moved.contains(&from) { 2 } else { 1 };
        wait_for("the repointed Application told by its new shard", Duration::from_secs(30), || {
            told(&format!("on-cluster-{from}")) > before
        });
        wait_for("it is kept once, in its new shard", Duration::from_secs(30), || total(&ds) == CLUSTERS as f64);
        // Each shard's state is a schema of its own, taken over with its own epoch.
        let mut sql = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
        for s in 0..SHARDS {
            let epoch: i64 = sql.query_one(&format!("SELECT epoch FROM {schema}_shard_{s}.fence"), &[]).unwrap().get(0);
            let least = if moved.contains(&s) { 2 } else { 1 };
            assert!(epoch >= least, "shard {s}: epoch {epoch}");
        }
        // The tools read one shard's state, named by --shard: its clusters' episodes (the
        // repointed Application's in both: its old shard keeps its history).
        let tool = |args: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_driftwatch"))
                .args(args)
                .arg("--config")
                .arg(dirs[0].path().join("driftwatch.yaml"))
                .output()
                .unwrap()
        };
        for s in 0..SHARDS {
            let out = tool(&["history", "-o", "json", "--shard", &s.to_string()]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let episodes: Value = serde_json::from_slice(&out.stdout).unwrap();
            let mut apps: Vec<String> = episodes.as_array().unwrap().iter().filter_map(|e| e["name"].as_str().map(String::from)).collect();
            apps.sort();
            apps.dedup();
            let mut expected: Vec<String> = (0..CLUSTERS)
                .filter(|c| shard_of(*c) == s || (*c == from && shard_of(to) == s))
                .map(|c| format!("on-cluster-{c}"))
                .collect();
            expected.sort();
            assert_eq!(apps, expected, "shard {s}");
        }
        let out = tool(&["state", "list"]);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("give --shard 0 to 3"), "{out:?}");
        let keys_in = |s: u32| {
            let out = tool(&["state", "list", "-o", "json", "--shard", &s.to_string()]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).to_string()
        };
        let needle = format!("shard-apps/on-cluster-{from}@");
        assert!(!keys_in(shard_of(from)).contains(&needle), "retired from its old shard");
        assert!(keys_in(shard_of(to)).contains(&needle), "kept by its new shard");

        // A replica stopped (SIGTERM) gives its shards up at once: the last one holds all
        // four well before their Leases would have expired.
        let stopping = (0..ds.len()).find(|i| ds[*i].is_some()).unwrap();
        let d = ds[stopping].take().unwrap();
        let stopped = std::time::Instant::now();
        let log = d.log.clone();
        assert!(d.stop().success(), "{}", std::fs::read_to_string(log).unwrap_or_default());
        let stop_took = stopped.elapsed();
        wait_for("the last replica holds every shard", Duration::from_secs(30), || settled(&ds, SHARDS as usize));
        eprintln!(
            "after a graceful stop ({stop_took:?}), every shard held by the last replica {:?} after the stop began",
            stopped.elapsed()
        );
        wait_for("the last replica keeps every Application", Duration::from_secs(30), || total(&ds) == CLUSTERS as f64);
        // The shards are split at start: a reload that changes their number is refused.
        let last = (0..ds.len()).find(|i| ds[*i].is_some()).unwrap();
        let path = dirs[last].path().join("driftwatch.yaml");
        let text = std::fs::read_to_string(&path).unwrap().replace("shards: 4", "shards: 2");
        std::fs::write(&path, text).unwrap();
        let d = ds[last].as_ref().unwrap();
        wait_for("the reload refused", Duration::from_secs(30), || d.metric("driftwatch_config_last_reload_successful") == Some(0.0));
        assert_eq!(d.log_lines("sharding.shards changed from 4 to 2").len(), 1, "{:?}", d.log_lines("reload"));
        assert_eq!(d.metric("driftwatch_leader"), Some(4.0), "still every shard");
        for (i, d) in ds.into_iter().enumerate() {
            if let Some(d) = d {
                let log = d.log.clone();
                let status = d.stop();
                assert!(status.success(), "replica {i}: {status}\n{}", std::fs::read_to_string(log).unwrap_or_default());
            }
        }
    }

    /// A Flux Kustomization and HelmRelease and a Fleet BundleDeployment written through
    /// the real API server with the CRDs their projects ship (`tests/data/flux`,
    /// `tests/data/fleet`), their status through the status subresource as their
    /// controllers write it, read back as units: the schemas keep what `unit` reads.
    #[test]
    fn flux_and_fleet_units_read_as_the_api_server_serves_them() {
        use driftwatch::unit::{Change, Engine, Health, Sync, Unit};
        let plane = cp::shared();
        block_on(async {
            let admin = plane.api.client(ADMIN).await;
            plane.api.namespaces(&["units-flux", "units-fleet"]).await;
            let objects = [
                (
                    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                        "metadata": {"name": "apps", "namespace": "units-flux"},
                        "spec": {"interval": "10m", "path": "./apps", "prune": true, "serviceAccountName": "apps-deployer",
                                 "sourceRef": {"kind": "GitRepository", "name": "fleet-infra"}}}),
                    json!({"observedGeneration": 1,
                        "lastAppliedRevision": "main@sha1:1111111111111111111111111111111111111111",
                        "lastAttemptedRevision": "main@sha1:1111111111111111111111111111111111111111",
                        "conditions": [{"type": "Ready", "status": "False", "reason": "HealthCheckFailed",
                            "message": "timeout waiting for: [Deployment/shop/web status: 'InProgress']",
                            "lastTransitionTime": "2026-12-07T10:00:00Z", "observedGeneration": 1}],
                        "inventory": {"entries": [{"id": "shop_web_apps_Deployment", "v": "v1"}]}}),
                ),
                (
                    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                        "metadata": {"name": "podinfo", "namespace": "units-flux"},
                        "spec": {"interval": "5m", "driftDetection": {"mode": "warn"},
                                 "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}}}}),
                    json!({"observedGeneration": 1, "lastAttemptedRevision": "6.7.1",
                        "history": [{"name": "podinfo", "namespace": "units-flux", "version": 2, "status": "deployed",
                            "chartName": "podinfo", "chartVersion": "6.7.1", "appVersion": "6.7.1",
                            "digest": "sha256:aa", "configDigest": "sha256:bb",
                            "firstDeployed": "2026-12-07T09:00:00Z", "lastDeployed": "2026-12-07T10:00:00Z"}],
                        "conditions": [
                            {"type": "Ready", "status": "True", "reason": "UpgradeSucceeded", "message": "ok",
                             "lastTransitionTime": "2026-12-07T10:00:00Z"},
                            {"type": "Drifted", "status": "True", "reason": "DriftDetected",
                             "message": "Cluster state of release units-flux/podinfo.v2 has drifted from the desired state:\nDeployment/units-flux/podinfo changed (0 additions, 1 changes, 0 removals)",
                             "lastTransitionTime": "2026-12-07T10:01:00Z"}],
                        "inventory": {"entries": [{"id": "units-flux_podinfo_apps_Deployment", "v": "v1"}]}}),
                ),
                (
                    json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
                        "metadata": {"name": "apps-web", "namespace": "units-fleet",
                            "labels": {"fleet.cattle.io/bundle-namespace": "fleet-default", "fleet.cattle.io/cluster": "prod-eu",
                                       "fleet.cattle.io/cluster-namespace": "fleet-default", "fleet.cattle.io/repo-name": "apps",
                                       "fleet.cattle.io/commit": "3333333333333333333333333333333333333333"}},
                        "spec": {"deploymentID": "s-4d5e6f:9a8b7c", "options": {"defaultNamespace": "web"}}}),
                    json!({"appliedDeploymentID": "s-4d5e6f:9a8b7c", "ready": true, "nonModified": false,
                        "display": {"state": "Modified"},
                        "modifiedStatus": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "web", "name": "web",
                            "patch": "{\"spec\":{\"replicas\":2}}"}],
                        "incompleteState": true,
                        "resources": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "web", "name": "web"}]}),
                ),
            ];
            let mut units = Vec::new();
            for (object, status) in objects {
                let api = cp::api_of(&admin, &object).await;
                let name = object["metadata"]["name"].as_str().unwrap().to_string();
                let created: kube::api::DynamicObject = serde_json::from_value(object.clone()).unwrap();
                api.create(&Default::default(), &created).await.unwrap_or_else(|e| panic!("{name}: {e}"));
                // The status subresource, as the controllers write it (the main
                // resource ignores a status).
                api.patch_status(&name, &Default::default(), &Patch::Merge(json!({"status": status})))
                    .await
                    .unwrap_or_else(|e| panic!("{name} status: {e}"));
                let read = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
                assert!(read["status"].is_object(), "{name}: the API server kept the status: {read}");
                units.push(Unit::read(&read).unwrap_or_else(|e| panic!("{name}: {e}")));
            }
            let (k, h, b) = (&units[0], &units[1], &units[2]);
            assert_eq!(k.engine(), Engine::FluxKustomization);
            assert!(k.reconcile.failed && k.reconcile.reason == "HealthCheckFailed", "{k:?}");
            assert_eq!((k.sync, k.health), (Some(Sync::Unknown), Some(Health::Degraded)));
            assert_eq!(k.managed[0].to_string(), "Deployment/shop/web");
            assert_eq!(k.tenancy.service_account, "apps-deployer");
            assert_eq!(h.engine(), Engine::FluxHelmRelease);
            assert_eq!(h.revision.chart.as_ref().map(|c| c.release), Some(2));
            assert!(h.drift.drifted);
            assert_eq!(h.drift.modified[0].object.group, "apps", "the group from the inventory");
            assert_eq!(b.engine(), Engine::Fleet);
            assert!(b.drift.drifted && b.drift.incomplete);
            assert_eq!((b.drift.modified[0].change, b.drift.modified[0].patch.as_str()), (Change::Modified, r#"{"spec":{"replicas":2}}"#));
            assert_eq!(b.destination.cluster, "fleet-default/prod-eu");
        });
    }

    /// Issue 54's checks on the real API server with Flux's and Fleet's own CRDs and the
    /// audit webhook, routed by class and trigger as an existing configuration routes
    /// them: security classes paged, drift to one Slack channel, reconcile failures to
    /// another. (a) a person makes a Deployment in a Kustomization's inventory
    /// privileged and kustomize-controller's ServiceAccount puts it back: paged, naming
    /// the person, `privileged` and the Kustomization, the controller's write not; (b) a
    /// HelmRelease in warn mode turns `Drifted=True`: told; (c) a Kustomization turns
    /// `Ready=False` with `BuildFailed`: told with the controller's message, resolved
    /// when ready again; (d) a Fleet BundleDeployment turns `Modified` with a recorded
    /// patch: told, naming the bundle and the patch's value. Then a unit deleted, and a
    /// relist after the API server restarts: nothing sent twice, a new failure once.
    /// The statuses are written through the status subresource by the controllers'
    /// ServiceAccounts, as the controllers write them.
    #[test]
    fn flux_and_fleet_units_page_the_person_their_failures_and_their_drift() {
        use crate::common::audited::{audit_addr, audit_flags, controller};
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let ((pd, pd_port), (drift, drift_port), (reconcile, reconcile_port)) = (hook(), hook(), hook());
        let api = cpl.start_api_server("units", &[]);
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        const BUNDLES: &str = "cluster-fleet-local-local-1a3d67d0a899";
        let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "shop:1.0"}]}}}});
        let kustomization = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {"interval": "10m", "path": "./apps", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "flux-system"}}});
        let helm_release = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "shop"},
            "spec": {"interval": "5m", "driftDetection": {"mode": "warn"},
                     "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"}}}}});
        let bundle = json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "shop-cart", "namespace": BUNDLES,
                "labels": {"fleet.cattle.io/bundle-namespace": "fleet-local", "fleet.cattle.io/bundle-name": "shop-cart",
                           "fleet.cattle.io/cluster": "local", "fleet.cattle.io/cluster-namespace": "fleet-local",
                           "fleet.cattle.io/repo-name": "shop", "fleet.cattle.io/commit": "3333333333333333333333333333333333333333"}},
            "spec": {"deploymentID": "s-4d5e6f:9a8b7c", "options": {"defaultNamespace": "shop"}}});
        const REV: &str = "main@sha1:1111111111111111111111111111111111111111";
        let ready = |status: &str, reason: &str, message: &str| {
            json!({"type": "Ready", "status": status, "reason": reason, "message": message,
                   "lastTransitionTime": "2026-12-07T10:00:00Z", "observedGeneration": 1})
        };
        let (kustomize, helm, agent) = block_on(async {
            api.namespaces(&["flux-system", "shop", BUNDLES]).await;
            let admin = api.client(ADMIN).await;
            let kustomize = controller(&api, &admin, "flux-system", "kustomize-controller").await;
            let helm = controller(&api, &admin, "flux-system", "helm-controller").await;
            let agent = controller(&api, &admin, "cattle-fleet-local-system", "fleet-agent").await;
            grant(&admin, "shop", "alice", "apps", &["deployments"], &["get", "patch"]).await;
            apply_as(&kustomize, "kustomize-controller", web.clone()).await;
            for (unit, status) in [
                (
                    &kustomization,
                    json!({"observedGeneration": 1, "lastAppliedRevision": REV, "lastAttemptedRevision": REV,
                    "conditions": [ready("True", "ReconciliationSucceeded", &format!("Applied revision: {REV}"))],
                    "inventory": {"entries": [{"id": "shop_web_apps_Deployment", "v": "v1"}]}}),
                ),
                (
                    &helm_release,
                    json!({"observedGeneration": 1, "lastAttemptedRevision": "6.7.1",
                    "history": [{"name": "podinfo", "namespace": "shop", "version": 1, "status": "deployed", "chartName": "podinfo",
                        "chartVersion": "6.7.1", "appVersion": "6.7.1", "digest": "sha256:aa", "configDigest": "sha256:bb",
                        "firstDeployed": "2026-12-07T09:00:00Z", "lastDeployed": "2026-12-07T09:00:00Z"}],
                    "conditions": [ready("True", "InstallSucceeded", "Helm install succeeded")],
                    "inventory": {"entries": [{"id": "shop_podinfo_apps_Deployment", "v": "v1"}]}}),
                ),
                (
                    &bundle,
                    json!({"appliedDeploymentID": "s-4d5e6f:9a8b7c", "ready": true, "nonModified": true,
                    "display": {"state": "Ready"}, "resources": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "cart"}]}),
                ),
            ] {
                let writer = match unit["kind"].as_str() {
                    Some("HelmRelease") => &helm,
                    Some("BundleDeployment") => &agent,
                    _ => &kustomize,
                };
                apply_as(&admin, "kubectl", unit.clone()).await;
                status_as(writer, unit, status).await;
            }
            (kustomize, helm, agent)
        });
        let config = format!(
            r#"services:
  oncall:
    type: pagerduty
    apiUrl: http://127.0.0.1:{pd_port}
    routingKeys: {{platform: R0UTINGKEY}}
  drift:
    type: slack
    webhookUrl: http://127.0.0.1:{drift_port}
  reconcile:
    type: slack
    webhookUrl: http://127.0.0.1:{reconcile_port}
routes:
  - name: security-page
    match: {{class: [rbac, network-policy, security-context, admission, application]}}
    triggers: [on-security-drift]
    recipients: [oncall:platform]
    continue: true
  - name: drift
    triggers: [on-live-drift, on-drift-resolved, on-drift-attempt]
    recipients: [drift]
    continue: true
  - name: reconcile
    triggers: [on-reconcile-failed, on-deleted]
    recipients: [reconcile]
"#
        );
        let d = start_audited(dir.path(), &config, &api, &[]);

        // (a) alice makes the Deployment privileged; kustomize-controller puts it back.
        let privileged =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}});
        let heal = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": null}]}}}});
        let started = std::time::Instant::now();
        block_on(async {
            let alice = api.client(ALICE).await;
            patch_as(&alice, "kubectl-patch", &web, Patch::Strategic(privileged)).await.unwrap();
            patch_as(&kustomize, "kustomize-controller", &web, Patch::Strategic(heal)).await.unwrap();
        });
        wait_for("the page naming alice", Duration::from_secs(30), || has(&pd, "alice"));
        eprintln!("(a) paged {} ms after the patch", started.elapsed().as_millis());
        let page = bodies(&pd).into_iter().find(|b| b.contains("alice")).unwrap();
        for needle in ["Kustomization flux-system/apps", "securityContext.privileged", "Deployment shop/web"] {
            assert!(page.contains(needle), "{needle}: {page}");
        }
        wait_for("the drift channel's attempt", Duration::from_secs(30), || {
            has(&drift, "Change on Kustomization flux-system/apps by alice")
        });
        let told = bodies(&drift).into_iter().find(|b| b.contains("by alice")).unwrap();
        assert!(told.contains(REV) && told.contains("privileged = true"), "the revision and the value set: {told}");
        let by_controller: Vec<String> = bodies(&pd)
            .into_iter()
            .chain(bodies(&drift))
            .filter(|b| b.contains("by system:serviceaccount:flux-system:kustomize-controller"))
            .collect();
        assert!(by_controller.is_empty(), "the controller's own write is Flux's desired state: {by_controller:?}");

        // (b) helm-controller reports drift in warn mode.
        block_on(status_as(
            &helm,
            &helm_release,
            json!({"conditions": [ready("True", "UpgradeSucceeded", "ok"),
            {"type": "Drifted", "status": "True", "reason": "DriftDetected", "lastTransitionTime": "2026-12-07T10:05:00Z",
             "message": "Cluster state of release shop/podinfo.v1 has drifted from the desired state:\nDeployment/shop/podinfo changed (0 additions, 1 changes, 0 removals)"}]}),
        ));
        wait_for("the HelmRelease's drift", Duration::from_secs(30), || has(&drift, "Live drift in HelmRelease shop/podinfo"));

        // (c) the Kustomization fails to build, then is ready again.
        block_on(status_as(
            &kustomize,
            &kustomization,
            json!({"lastAttemptedRevision": "main@sha1:2222222222222222222222222222222222222222",
            "conditions": [ready("False", "BuildFailed", "kustomize build failed: accumulating resources: 'apps/missing.yaml' not found")]}),
        ));
        wait_for("the build failure", Duration::from_secs(30), || has(&reconcile, "BuildFailed"));
        assert!(has(&reconcile, "apps/missing.yaml"), "the controller's message: {:?}", bodies(&reconcile));
        assert!(has(&reconcile, "Kustomization flux-system/apps"), "{:?}", bodies(&reconcile));
        block_on(status_as(
            &kustomize,
            &kustomization,
            json!({"lastAppliedRevision": "main@sha1:2222222222222222222222222222222222222222",
            "conditions": [ready("True", "ReconciliationSucceeded", "Applied revision")]}),
        ));
        wait_for("ready again", Duration::from_secs(30), || has(&reconcile, "is ready again"));

        // (d) Fleet's agent records a modified Deployment with the patch it would apply.
        block_on(status_as(
            &agent,
            &bundle,
            json!({"nonModified": false, "display": {"state": "Modified"},
            "modifiedStatus": [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "shop", "name": "cart", "patch": "{\"spec\":{\"replicas\":3}}"}]}),
        ));
        wait_for("the bundle's drift", Duration::from_secs(30), || {
            has(&drift, &format!("Live drift in BundleDeployment {BUNDLES}/shop-cart"))
        });
        let told = bodies(&drift).into_iter().find(|b| b.contains("BundleDeployment")).unwrap();
        assert!(told.contains("spec.replicas: 3"), "the patch's value: {told}");
        // Fleet's agent puts it back: the drift is resolved.
        block_on(status_as(&agent, &bundle, json!({"nonModified": true, "display": {"state": "Ready"}, "modifiedStatus": []})));
        // on-drift-resolved, and on-live-drift's message resolved.
        let resolved = format!("BundleDeployment {BUNDLES}/shop-cart matches Git again");
        wait_for("the bundle's drift resolved, and its message", Duration::from_secs(30), || {
            bodies(&drift).iter().filter(|b| b.contains(&resolved)).count() == 2
        });

        // A unit deleted.
        block_on(async {
            let admin = api.client(ADMIN).await;
            cp::api_of(&admin, &helm_release).await.delete("podinfo", &Default::default()).await.unwrap();
        });
        wait_for("the deletion", Duration::from_secs(30), || has(&reconcile, "podinfo has been deleted"));
        // Its drift ends with it: the drift message is resolved.
        wait_for("the HelmRelease's drift message resolved", Duration::from_secs(30), || {
            has(&drift, "HelmRelease shop/podinfo matches Git again")
        });

        // A relist after the API server restarts (with the audit webhook still on):
        // nothing is sent again, and a new failure once.
        let sent_before = (bodies(&pd).len(), bodies(&drift).len(), bodies(&reconcile).len());
        let ca = std::fs::read_to_string(dir.path().join("audit-ca.crt")).unwrap();
        api.restart(&audit_flags(dir.path(), &audit_addr(&d), &ca));
        block_on(async {
            let kustomize = api.client_with_token(&api.service_account_token("flux-system", "kustomize-controller").await).await;
            status_as(
                &kustomize,
                &kustomization,
                json!({"conditions": [ready("False", "HealthCheckFailed", "timeout waiting for: [Deployment/shop/web]")]}),
            )
            .await;
        });
        wait_for("the failure after the relist", Duration::from_secs(60), || has(&reconcile, "HealthCheckFailed"));
        let count = |got: &Arc<Mutex<Vec<String>>>, needle: &str| bodies(got).iter().filter(|b| b.contains(needle)).count();
        assert_eq!(count(&reconcile, "HealthCheckFailed"), 1);
        assert_eq!(count(&reconcile, "BuildFailed"), 1, "{:?}", bodies(&reconcile));
        assert_eq!(
            (bodies(&pd).len(), bodies(&drift).len()),
            (sent_before.0, sent_before.1),
            "nothing sent again after the relist: {:?}",
            &bodies(&drift)[sent_before.1.min(bodies(&drift).len())..]
        );
        drop(d);
    }

    /// Writes `status` (merged) through the status subresource of `unit`, as its
    /// controller does.
    async fn status_as(client: &kube::Client, unit: &Value, status: Value) {
        let api = cp::api_of(client, unit).await;
        let name = unit["metadata"]["name"].as_str().unwrap();
        api.patch_status(name, &kube::api::PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap_or_else(|e| panic!("{name} status: {e}"));
    }
}
