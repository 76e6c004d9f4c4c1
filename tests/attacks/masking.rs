//! Credentials inside text (env files, scripts, connection strings, registry auth,
//! keys): masked line by line and token by token before any receiver or `/history` sees
//! them.

mod on_a_real_api_server {
    use std::time::Duration;

    use crate::common::audited::{application, argocd_controller, grant, hook, put_app, start_audited};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, apply_as, block_on, patch_as};
    use crate::common::daemon::{bodies, records, wait_for};
    use crate::common::receiver::get;
    use crate::common::{AppBuilder, REV1};
    use kube::api::Patch;
    use serde_json::{Value, json};

    /// The secrets alice writes, one per shape, each to be found nowhere.
    const ENV_PASS: &str = "hunter2-envfile-7f3a9c";
    const CURL_PASS: &str = "hunter2-curl-81c2d4";
    const PG_PASS: &str = "hunter2-pg-5e7b1a";
    const KEY_BODY: &str = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ";
    const NPM_TOKEN: &str = "npm-token-hunter2-0a9b8c";
    const BEARER: &str = "hunter2bearer0d1e2f3a";
    const ADO_PASS: &str = "hunter2-ado-4c5d6e";
    const GH_TOKEN: &str = "ghp_R4nd0mT0kenV4lu3F0rTh3Att4ckR0w01x";

    /// Review N9 and issue 52 item 6 (confirmed live: `DB_PASS=…` in an env file held in
    /// a ConfigMap, `curl -u deploy:…` in a script). Argo CD's controller applies the
    /// ConfigMap `shop/shop-config` (an env file `app.env`, a script `deploy.sh`) of the
    /// Application `argocd/shop`; the API server posts its audit log to driftwatch.
    /// alice (RBAC: get/patch configmaps in `shop`) sends one merge patch
    /// (`kubectl-edit`): in `app.env` `LOG_LEVEL` info → debug (harmless) and a
    /// `DB_PASS=` line; in scripts `curl -u deploy:…`, a `postgres://app:…@db` URL, an
    /// OpenSSH private key block in a heredoc, `gh auth login` with a `ghp_` token; an
    /// `.npmrc` `_authToken`, a JSON `"auth": "Bearer …"` and an ADO connection string
    /// `Password=…;`. The controller then takes the ConfigMap back to Git.
    /// Expected: the attempt alert names alice with each data key set, the harmless
    /// change shown with its value (`LOG_LEVEL=debug`), each credential line shown with
    /// only its value masked; none of the secrets reaches the receiver, `/history` or
    /// `/ui`.
    #[test]
    fn credentials_written_into_a_config_maps_env_file_and_scripts_never_leave() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let (got, port) = hook();
        let api = cpl.start_api_server("masking", &[]);
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        let git_data = json!({"app.env": "LOG_LEVEL=info\nDB_HOST=db\n", "deploy.sh": "#!/bin/sh\nset -eu\n"});
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shop-config", "namespace": "shop"}, "data": git_data});
        let controller = block_on(async {
            api.namespaces(&["argocd", "shop"]).await;
            let admin = api.client(ADMIN).await;
            let controller = argocd_controller(&api, &admin).await;
            grant(&admin, "shop", "alice", "", &["configmaps"], &["get", "patch"]).await;
            apply_as(&controller, "argocd-controller", cm.clone()).await;
            let res =
                json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "shop", "name": "shop-config", "status": "Synced"});
            put_app(
                &controller,
                application(
                    AppBuilder::new("shop")
                        .synced()
                        .healthy()
                        .field("/status/history", json!([{"id": 1, "revision": REV1}]))
                        .field("/status/resources", json!([res])),
                ),
            )
            .await;
            controller
        });
        let d = start_audited(dir.path(), &crate::common::ATTEMPT_ALERT.replace("PORT", &port.to_string()), &api, &["-n", "argocd"]);

        let written = json!({"data": {
            "app.env": format!("LOG_LEVEL=debug\nDB_HOST=db\nDB_PASS={ENV_PASS}\n"),
            "deploy.sh": format!("#!/bin/sh\nset -eu\ncurl -fsS -u deploy:{CURL_PASS} https://ci/hook\n"),
            "migrate.sh": format!("psql postgres://app:{PG_PASS}@db/shop\n"),
            "bootstrap.sh": format!("cat > /etc/ssh/id <<EOF\n-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\nEOF\n"),
            "ci.sh": format!("echo {GH_TOKEN} | gh auth login\n"),
            ".npmrc": format!("//registry.npmjs.org/:_authToken={NPM_TOKEN}\n"),
            "settings.json": format!("{{\"apiUrl\": \"https://api\", \"auth\": \"Bearer {BEARER}\"}}"),
            "db.conn": format!("Server=db;User Id=sa;Password={ADO_PASS};"),
        }});
        let revert = json!({"data": {"app.env": git_data["app.env"], "deploy.sh": git_data["deploy.sh"], "migrate.sh": null,
            "bootstrap.sh": null, "ci.sh": null, ".npmrc": null, "settings.json": null, "db.conn": null}});
        block_on(async {
            let alice = api.client(ALICE).await;
            patch_as(&alice, "kubectl-edit", &cm, Patch::Merge(written)).await.unwrap();
            patch_as(&controller, "argocd-controller", &cm, Patch::Merge(revert)).await.unwrap();
        });
        wait_for("alice's edit of the ConfigMap alerted", Duration::from_secs(30), || {
            records(&got).iter().any(|r| r["who"] == "alice" && r["resource"] == "ConfigMap shop/shop-config")
        });
        let sent = records(&got);
        let alice = sent.iter().find(|r| r["who"] == "alice").unwrap();
        let set: Vec<(String, String)> = alice["set"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["path"].as_str().unwrap_or_default().to_string(), f["value"].as_str().unwrap_or_default().to_string()))
            .collect();
        let value = |path: &str| set.iter().find(|(p, _)| p == path).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("{path}: {set:?}"));
        assert_eq!(value("data.app.env"), "LOG_LEVEL=debug\nDB_HOST=db\nDB_PASS=(masked)\n");
        assert_eq!(value("data.deploy.sh"), "#!/bin/sh\nset -eu\ncurl -fsS -u deploy:(masked) https://ci/hook\n");
        assert_eq!(value("data.migrate.sh"), "psql postgres://app:(masked)@db/shop\n");
        assert_eq!(value("data.bootstrap.sh"), "cat > /etc/ssh/id <<EOF\n(masked)\nEOF\n");
        assert_eq!(value("data.ci.sh"), "echo (masked) | gh auth login\n");
        assert_eq!(value("data..npmrc"), "//registry.npmjs.org/:_authToken=(masked)\n");
        assert_eq!(value("data.settings.json"), r#"{"apiUrl": "https://api", "auth": "(masked)"}"#);
        assert_eq!(value("data.db.conn"), "Server=db;User Id=sa;Password=(masked);");

        let (_, history) = get(&d.admin, "/history?app=argocd%2Fshop").unwrap();
        let episodes: Vec<Value> = serde_json::from_str(&history).unwrap();
        assert!(history.contains("DB_PASS=(masked)"), "the attempt is kept with its masked lines: {history}");
        assert!(!episodes.is_empty());
        let (_, ui) = get(&d.admin, "/ui/api/app?app=argocd%2Fshop").unwrap();
        for (what, text) in [("the receiver", bodies(&got).join("\n")), ("/history", history), ("/ui", ui)] {
            for secret in [ENV_PASS, CURL_PASS, PG_PASS, KEY_BODY, NPM_TOKEN, BEARER, ADO_PASS, GH_TOKEN] {
                assert!(!text.contains(secret), "{secret} reached {what}: {text}");
            }
        }
        assert!(d.stop().success());
        api.stop();
    }
}
