//! What an Application may reach: Argo CD's admission rules (`sourceNamespaces`, one
//! of destination name or server, cluster-scoped kinds by discovery and
//! `clusterResourceWhitelist`) decide what is read and indexed.

mod on_a_real_api_server {
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crate::common::audited::{application, grant, hook, put_app};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, BOB, apply_as, block_on, patch_as};
    use crate::common::daemon::{Daemon, bodies, wait_for};
    use crate::common::receiver::get;
    use crate::common::{AppBuilder, REV1};
    use kube::api::Patch;
    use serde_json::{Value, json};

    const IN_CLUSTER: &str = "https://kubernetes.default.svc";

    /// Every episode to the SIEM receiver at `port`, live reads fresh for 1 s.
    fn config(port: u16, extra: &str) -> String {
        let routes = "  - name: siem\n    triggers: [on-drift-episode]\n    recipients: [siem]\nattribution:\n  ttl: 1s\n";
        format!("{}{routes}{extra}", crate::common::SIEM_AND_SECURITY_PAGE.replace("PORT", &port.to_string()))
    }

    /// An API server of the test's own whose audit log (`audit.log` in `dir`) records
    /// every request for ConfigMaps and ClusterRoles: the proof of what was read.
    fn api_server(name: &str, dir: &Path) -> (cp::ApiServer, PathBuf) {
        let policy = dir.join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n    resources: [{group: \"\", resources: [configmaps]}, {group: rbac.authorization.k8s.io, resources: [clusterroles]}]\n  - level: None\n",
        )
        .unwrap();
        let log = dir.join("audit.log");
        let flags = vec![format!("--audit-policy-file={}", policy.display()), format!("--audit-log-path={}", log.display())];
        let api = cp::shared().start_api_server(name, &flags);
        api.kubeconfig(&dir.join("kubeconfig"), ADMIN);
        (api, log)
    }

    /// The GETs in the audit log whose URI contains `needle`.
    fn gets(log: &Path, needle: &str) -> Vec<String> {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["verb"] == "get")
            .filter_map(|e| e["requestURI"].as_str().map(str::to_string))
            .filter(|uri| uri.contains(needle))
            .collect()
    }

    /// Server-side applies `obj` once its kind is served: a new API server may list the
    /// Argo CD CRDs before its discovery has them.
    async fn apply_when_served(admin: &kube::Client, manager: &str, obj: Value) {
        for _ in 0..300 {
            match cp::try_apply_as(admin, manager, obj.clone()).await {
                Err(kube::Error::Discovery(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("apply: {e}"),
                Ok(_) => return,
            }
        }
        panic!("{} not served within 30 s", obj["kind"]);
    }

    /// Argo CD's stock `default` AppProject (every destination and kind, no
    /// `sourceNamespaces`), the AppProject `team-a` (only namespace `team-a`, for
    /// Applications in `team-a`), a ConfigMap in `kube-system` holding a private value,
    /// and `team-a/cfg` with a change alice made by hand (the permitted control).
    async fn tenants(api: &cp::ApiServer, team_a_destinations: Value) -> kube::Client {
        api.namespaces(&["argocd", "team-a"]).await;
        let admin = api.client(ADMIN).await;
        let default = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "default", "namespace": "argocd"},
            "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}], "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}});
        apply_when_served(&admin, "argocd-server", default).await;
        let team_a = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team-a", "namespace": "argocd"},
            "spec": {"sourceRepos": ["*"], "sourceNamespaces": ["team-a"], "destinations": team_a_destinations}});
        apply_as(&admin, "argocd-server", team_a).await;
        let private = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
            "data": {"config": "apiServer: kube-system-private-value"}});
        apply_as(&admin, "argocd-controller", private).await;
        let cfg =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "team-a"}, "data": {"MODE": "a"}});
        apply_as(&admin, "argocd-controller", cfg.clone()).await;
        grant(&admin, "team-a", "alice", "", &["configmaps"], &["get", "patch"]).await;
        grant(&admin, "team-a", "alice", "argoproj.io", &["applications"], &["get", "patch"]).await;
        let alice = api.client(ALICE).await;
        patch_as(&alice, "kubectl-edit", &cfg, Patch::Merge(json!({"data": {"MODE": "b"}}))).await.unwrap();
        admin
    }

    fn res(group: &str, kind: &str, ns: &str, name: &str) -> Value {
        json!({"group": group, "version": "v1", "kind": kind, "namespace": ns, "name": name, "status": "OutOfSync"})
    }

    /// team-a's Application `mine`, in namespace `team-a`, OutOfSync with `resources`.
    fn mine(project: &str, destination: Value, resources: Value) -> Value {
        application(
            AppBuilder::new("mine")
                .out_of_sync()
                .healthy()
                .field("/metadata/namespace", json!("team-a"))
                .field("/spec/project", json!(project))
                .field("/spec/destination", destination)
                .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                .field("/status/resources", resources),
        )
    }

    /// The drifted resource `name` in team-a/mine's newest episode.
    fn resource(d: &Daemon, name: &str) -> Option<Value> {
        let (_, body) = get(&d.admin, "/history?app=team-a%2Fmine")?;
        let eps: Vec<Value> = serde_json::from_str(&body).ok()?;
        eps.first()?["resources"].as_array()?.iter().find(|r| r["name"] == name).cloned()
    }

    fn not_read(d: &Daemon, name: &str) -> Option<(String, String)> {
        let r = resource(d, name)?;
        let n = &r["attribution"]["notRead"];
        Some((n["reason"].as_str()?.to_string(), n["message"].as_str()?.to_string()))
    }

    /// Nothing of `leaked` in the receiver, `/history` or `/ui`.
    fn nowhere(d: &Daemon, got: &Arc<Mutex<Vec<String>>>, leaked: &str) {
        let (_, history) = get(&d.admin, "/history?app=team-a%2Fmine").unwrap();
        let (_, ui) = get(&d.admin, "/ui/api/app?app=team-a%2Fmine").unwrap();
        for (what, text) in [("the receiver", bodies(got).join("\n")), ("/history", history), ("/ui", ui)] {
            assert!(!text.contains(leaked), "{leaked} reached {what}: {text}");
        }
    }

    /// Review N1 (a). Applications in any namespace; the daemon watches them all,
    /// `argocd` is Argo CD's namespace. The admin writes the AppProjects (`default` as
    /// Argo CD ships it, `team-a` with `sourceNamespaces: [team-a]`) and team-a's
    /// Application `mine` (project `team-a`) listing `team-a/cfg`, which alice changed
    /// by hand, and `kube-system/kubeadm-config`. Then alice, who may patch
    /// Applications in `team-a`, merge-patches `mine` (field manager `kubectl-patch`,
    /// no other header) to `spec.project: default`, `status.resources` still naming the
    /// kube-system ConfigMap. Expected: before the patch `cfg` is read (the control) and
    /// the kube-system one is not (namespace outside the project); after it, Argo CD
    /// would refuse `mine` (`default` does not list `team-a`), so nothing of it is read:
    /// `notRead: outside-project` naming `sourceNamespaces`, the metric counts it, the
    /// API server's audit log has no GET of the kube-system ConfigMap, and its value is
    /// in no receiver, `/history` or `/ui`.
    #[test]
    fn a_tenant_renaming_its_project_to_default_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (api, log) = api_server("project-swap", dir.path());
        let (got, port) = hook();
        std::fs::write(dir.path().join("driftwatch.yaml"), config(port, "")).unwrap();
        let team_a = json!([{"server": IN_CLUSTER, "namespace": "team-a"}]);
        let resources = json!([res("", "ConfigMap", "team-a", "cfg"), res("", "ConfigMap", "kube-system", "kubeadm-config")]);
        block_on(async {
            let admin = tenants(&api, team_a).await;
            put_app(&admin, mine("team-a", json!({"server": IN_CLUSTER, "namespace": "team-a"}), resources.clone())).await;
        });
        let d = Daemon::start_with(dir.path(), &[]);
        wait_for("the permitted ConfigMap read (the control)", Duration::from_secs(30), || {
            resource(&d, "cfg").is_some_and(|r| r["changes"].as_array().is_some_and(|c| !c.is_empty()))
        });
        assert_eq!(not_read(&d, "kubeadm-config").map(|n| n.0).as_deref(), Some("outside-project"));
        let before = d.metric("driftwatch_live_reads_outside_project_total").unwrap_or(0.0);
        block_on(async {
            let alice = api.client(ALICE).await;
            let app =
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "mine", "namespace": "team-a"}});
            let swap = json!({"spec": {"project": "default"}, "status": {"resources": resources}});
            patch_as(&alice, "kubectl-patch", &app, Patch::Merge(swap)).await.expect("alice may patch her Application");
        });
        wait_for("kube-system's ConfigMap refused for sourceNamespaces", Duration::from_secs(30), || {
            not_read(&d, "kubeadm-config").is_some_and(|(_, m)| m.contains("sourceNamespaces"))
        });
        wait_for("counted", Duration::from_secs(30), || {
            d.metric("driftwatch_live_reads_outside_project_total").is_some_and(|n| n > before)
        });
        let (reason, message) = not_read(&d, "cfg").unwrap();
        assert_eq!(reason, "outside-project", "the whole Application is refused: {message}");
        assert!(message.contains("does not list namespace team-a in sourceNamespaces"), "{message}");
        assert!(!gets(&log, "/namespaces/team-a/configmaps/cfg").is_empty(), "the control was read");
        assert_eq!(gets(&log, "kubeadm-config"), Vec::<String>::new(), "never asked for");
        nowhere(&d, &got, "kube-system-private-value");
        assert!(d.stop().success());
    }

    /// A tenant who may write AppProjects in its own namespace creates one named like
    /// its real project (`team-a`, in `team-a`, permitting nothing), then deletes it.
    /// Argo CD reads AppProjects from its own namespace only, so neither write changes
    /// what `mine` may read: evaluated after both, nothing of it is refused. (Before, the projects were kept by name: the copy replaced the real
    /// `team-a`, refusing every read, and its deletion removed the real one.)
    #[test]
    fn a_same_named_app_project_in_a_tenants_namespace_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (api, _log) = api_server("project-elsewhere", dir.path());
        let (_got, port) = hook();
        std::fs::write(dir.path().join("driftwatch.yaml"), config(port, "")).unwrap();
        let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "team-a"}});
        block_on(async {
            let admin = tenants(&api, json!([{"server": IN_CLUSTER, "namespace": "team-a"}])).await;
            grant(&admin, "team-a", "alice", "argoproj.io", &["appprojects"], &["get", "create", "patch", "delete"]).await;
            put_app(
                &admin,
                mine("team-a", json!({"server": IN_CLUSTER, "namespace": "team-a"}), json!([res("", "ConfigMap", "team-a", "cfg")])),
            )
            .await;
        });
        let d = Daemon::start_with(dir.path(), &[]);
        let shows = |value: &str| {
            resource(&d, "cfg").is_some_and(|r| r["changes"].as_array().is_some_and(|c| c.iter().any(|c| c["live"] == value)))
        };
        wait_for("alice's first change read (the control)", Duration::from_secs(30), || shows("b"));
        let copy = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "team-a", "namespace": "team-a"},
            "spec": {"sourceRepos": ["*"], "sourceNamespaces": ["team-a"], "destinations": []}});
        block_on(async {
            let alice = api.client(ALICE).await;
            apply_as(&alice, "kubectl", copy).await;
        });
        let elsewhere = "driftwatch_watch_events_total{type=\"appproject_elsewhere\"}";
        wait_for("the copy seen and set aside", Duration::from_secs(30), || d.metric(elsewhere) == Some(1.0));
        block_on(async {
            let alice = api.client(ALICE).await;
            let projects: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
                alice.clone(),
                "team-a",
                &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("argoproj.io", "v1alpha1", "AppProject")),
            );
            projects.delete("team-a", &Default::default()).await.expect("alice may delete her copy");
            patch_as(&alice, "kubectl-edit", &cfg, Patch::Merge(json!({"data": {"MODE": "after-the-copy"}}))).await.unwrap();
        });
        wait_for("the deletion seen and set aside", Duration::from_secs(30), || d.metric(elsewhere) == Some(2.0));
        // The Application changes (Argo CD refreshes it): evaluated again under the
        // real project (a copy kept by name would refuse cfg: `outside-project`).
        let evaluations = d.metric("driftwatch_evaluations_total").unwrap_or(0.0);
        block_on(async {
            let admin = api.client(ADMIN).await;
            let app =
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "mine", "namespace": "team-a"}});
            let refresh = json!({"metadata": {"annotations": {"refreshed": "1"}}});
            patch_as(&admin, "argocd-controller", &app, Patch::Merge(refresh)).await.unwrap();
        });
        wait_for("mine evaluated again after the copy", Duration::from_secs(30), || {
            d.metric("driftwatch_evaluations_total").is_some_and(|n| n > evaluations)
        });
        assert_eq!(d.metric("driftwatch_live_reads_outside_project_total").unwrap_or(0.0), 0.0);
        assert_eq!(not_read(&d, "cfg"), None);
        assert!(d.stop().success());
    }

    /// Review N1 (c). The admin writes AppProject `team-a` (namespace `team-a` only, no
    /// `clusterResourceWhitelist`: no cluster-scoped kind) and a ClusterRole
    /// `secret-reader` whose rule names a private resourceName. team-a's Application
    /// `mine` (in `team-a`, project `team-a`) lists, as alice could write it, the
    /// ClusterRole under `namespace: team-a` beside `team-a/cfg`. Expected: the
    /// ClusterRole is judged as what the API server's discovery says it is —
    /// cluster-scoped, so outside the project — and not read (`notRead:
    /// outside-project` saying so, counted, no GET of it in the audit log, its rule in no
    /// receiver, `/history` or `/ui`); `cfg` is read.
    #[test]
    fn a_cluster_scoped_kind_claimed_under_a_namespace_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let (api, log) = api_server("project-cluster-scoped", dir.path());
        let (got, port) = hook();
        std::fs::write(dir.path().join("driftwatch.yaml"), config(port, "")).unwrap();
        block_on(async {
            let admin = tenants(&api, json!([{"server": IN_CLUSTER, "namespace": "team-a"}])).await;
            let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "secret-reader"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["cluster-private-name"], "verbs": ["get"]}]});
            apply_as(&admin, "argocd-controller", role).await;
            let resources =
                json!([res("", "ConfigMap", "team-a", "cfg"), res("rbac.authorization.k8s.io", "ClusterRole", "team-a", "secret-reader")]);
            put_app(&admin, mine("team-a", json!({"server": IN_CLUSTER, "namespace": "team-a"}), resources)).await;
        });
        let d = Daemon::start_with(dir.path(), &[]);
        wait_for("the ClusterRole refused", Duration::from_secs(30), || not_read(&d, "secret-reader").is_some());
        let (reason, message) = not_read(&d, "secret-reader").unwrap();
        assert_eq!(reason, "outside-project", "{message}");
        assert!(message.contains("cluster-scoped"), "{message}");
        wait_for("the permitted ConfigMap read", Duration::from_secs(30), || {
            resource(&d, "cfg").is_some_and(|r| r["changes"].as_array().is_some_and(|c| !c.is_empty()))
        });
        wait_for("counted", Duration::from_secs(30), || d.metric("driftwatch_live_reads_outside_project_total") == Some(1.0));
        assert_eq!(gets(&log, "clusterroles/secret-reader"), Vec::<String>::new(), "never asked for");
        nowhere(&d, &got, "cluster-private-name");
        assert!(d.stop().success());
    }

    /// Review N1 (b). Two configured spokes on the same API server: `spoke-dev`
    /// (`server: https://spoke-dev.example`), which AppProject `team-a` permits, and
    /// `spoke-prod`, which it does not. team-a's Application `mine` names both halves of
    /// its destination, `name: spoke-prod` and `server: https://spoke-dev.example`, and
    /// lists `kube-system/kubeadm-config` there (the project's destination namespace
    /// `*`). Argo CD refuses a destination with both: expected, nothing read on either
    /// (`notRead: outside-project` saying why, no GET in the audit log, the value
    /// nowhere).
    #[test]
    fn a_destination_with_both_name_and_server_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (api, log) = api_server("project-both", dir.path());
        let (got, port) = hook();
        let spokes = "clusters:\n  - {name: spoke-dev, server: 'https://spoke-dev.example', kubeconfig: kubeconfig}\n  - {name: spoke-prod, kubeconfig: kubeconfig}\n";
        std::fs::write(dir.path().join("driftwatch.yaml"), config(port, spokes)).unwrap();
        block_on(async {
            let admin = tenants(&api, json!([{"server": "https://spoke-dev.example", "namespace": "*"}])).await;
            let dest = json!({"name": "spoke-prod", "server": "https://spoke-dev.example", "namespace": "team-a"});
            put_app(&admin, mine("team-a", dest, json!([res("", "ConfigMap", "kube-system", "kubeadm-config")]))).await;
        });
        let d = Daemon::start_with(dir.path(), &[]);
        wait_for("refused", Duration::from_secs(30), || not_read(&d, "kubeadm-config").is_some());
        let (reason, message) = not_read(&d, "kubeadm-config").unwrap();
        assert_eq!(reason, "outside-project", "{message}");
        assert!(message.contains("both name (spoke-prod) and server"), "{message}");
        wait_for("counted", Duration::from_secs(30), || d.metric("driftwatch_live_reads_outside_project_total") == Some(1.0));
        assert_eq!(gets(&log, "kubeadm-config"), Vec::<String>::new(), "never asked for");
        nowhere(&d, &got, "kube-system-private-value");
        assert!(d.stop().success());
    }

    /// Review L-f. `deploy/kubernetes/break-glass-operators.yaml` grants its group `get`
    /// and `patch` on Applications; `deploy/kubernetes/break-glass-admission.yaml`
    /// limits that group's writes to the break-glass annotation. Both applied as shipped
    /// (the group renamed to `sre`, bob's), bob merge-patches `argocd/shop`: the
    /// annotation alone is allowed; `spec.project: default`, a forged `status` and a
    /// subscription annotation are each refused by the API server (422), and the
    /// Application keeps its project.
    #[test]
    fn the_break_glass_group_may_write_only_the_annotation() {
        let api = cp::shared().start_api_server("project-break-glass", &[]);
        block_on(async {
            api.namespaces(&["argocd"]).await;
            let admin = api.client(ADMIN).await;
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
            for file in ["break-glass-operators.yaml", "break-glass-admission.yaml"] {
                let text = std::fs::read_to_string(root.join(file)).unwrap().replace("sre-on-call", "sre");
                let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
                for doc in docs.into_iter().filter(|d| d.get("kind").is_some()) {
                    apply_as(&admin, "test-setup", doc).await;
                }
            }
            let app = application(AppBuilder::new("shop").synced().healthy().field("/spec/project", json!("shop")));
            apply_when_served(&admin, "argocd-application-controller", app.clone()).await;
            let bob = api.client(BOB).await;
            let write = |patch: Value| {
                let (bob, app) = (bob.clone(), app.clone());
                async move { patch_as(&bob, "kubectl-patch", &app, Patch::Merge(patch)).await }
            };
            // The RoleBinding names a group, which `in_force`'s review cannot: bob's own
            // annotation write is retried until RBAC lets it through (403 until then).
            let annotation = json!({"metadata": {"annotations": {"driftwatch.io/break-glass": "{\"ticket\": \"INC-1\"}"}}});
            let mut allowed = false;
            for _ in 0..300 {
                match write(annotation.clone()).await {
                    Ok(_) => {
                        allowed = true;
                        break;
                    }
                    Err(kube::Error::Api(e)) if e.code == 403 => tokio::time::sleep(Duration::from_millis(100)).await,
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(allowed, "the annotation alone is the group's to write");
            // In force once the API server has loaded the policy: until then the
            // forbidden write goes through, and is put back.
            let project = json!({"spec": {"project": "default"}});
            let mut refused = None;
            for _ in 0..200 {
                match write(project.clone()).await {
                    Err(kube::Error::Api(e)) => {
                        refused = Some(e);
                        break;
                    }
                    Err(e) => panic!("{e}"),
                    Ok(_) => {
                        put_app(&admin, app.clone()).await;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            let refused = refused.expect("the policy refuses spec.project within 20 s");
            assert_eq!(refused.code, 422, "{refused:?}");
            assert!(refused.message.contains("may not change an Application's spec"), "{}", refused.message);
            let closed = json!({"metadata": {"annotations": {"driftwatch.io/break-glass": "{\"ticket\": \"INC-1\", \"closed\": true}"}}});
            write(closed).await.expect("the annotation alone, with the policy in force");
            let status = json!({"status": {"resources": [res("", "ConfigMap", "kube-system", "kubeadm-config")]}});
            assert!(matches!(write(status).await, Err(kube::Error::Api(e)) if e.code == 422), "a forged status");
            let subscribe =
                json!({"metadata": {"annotations": {"notifications.argoproj.io/subscribe.on-live-drift.mail": "evil@example.com"}}});
            assert!(matches!(write(subscribe).await, Err(kube::Error::Api(e)) if e.code == 422), "a subscription");
            let now = crate::common::control_plane::get(&admin, &app).await.expect("the Application");
            assert_eq!(now["spec"]["project"], "shop", "{now}");
        });
    }
}
