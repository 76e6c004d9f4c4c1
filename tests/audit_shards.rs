//! The audit input with replicas and shards, on a real etcd and kube-apiserver with
//! PostgreSQL: the API server posts its audit batches to one address (a TCP forwarder
//! standing for the Service: it connects each connection to the first replica that
//! answers), whichever replica takes a batch writes it to the audit inbox, and each
//! shard's leader reads what concerns its Applications. The receiving replica is killed
//! with SIGKILL mid-run: every person's write is still paged once, naming them.

mod common;

mod on_a_real_api_server {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use kube::api::Patch;
    use serde_json::{Value, json};

    use crate::common::AppBuilder;
    use crate::common::audited::{AUDIT_TOKEN, application, argocd_controller, audit_addr, audit_flags, grant, put_app};
    use crate::common::control_plane::{self as cp, ADMIN, ALICE, BOB, Who, block_on, patch_as};
    use crate::common::daemon::{Daemon, wait_for};
    use crate::common::receiver::{Mode, Scripted};

    const SHARDS: u32 = 4;

    /// A TCP forwarder on loopback: each connection goes to the first of `backends`
    /// that accepts one (a Service over the replicas). Returns its address.
    fn forwarder(backends: Arc<Mutex<Vec<String>>>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let order = backends.lock().unwrap().clone();
                let Some(backend) = order.iter().find_map(|b| TcpStream::connect(b).ok()) else { continue };
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                        let _ = from.shutdown(std::net::Shutdown::Both);
                    });
                };
                if let (Ok(c2), Ok(b2)) = (client.try_clone(), backend.try_clone()) {
                    pipe(client, backend);
                    pipe(b2, c2);
                }
            }
        });
        addr
    }

    /// The configuration of every replica: four shards in PostgreSQL, the audit
    /// listener (TLS, token) and the attempt alert.
    fn config(hook_port: u16, schema: &str) -> String {
        format!(
            "{}secretsFile: secrets\nstate:\n  postgres:\n    url: $pg-url\n    schema: {schema}\n    maxConnections: 4\n\
             sharding:\n  shards: {SHARDS}\naudit:\n  listen: 127.0.0.1:0\n  tls: {{certFile: tls.crt, keyFile: tls.key}}\n  token: $audit-token\n",
            crate::common::ATTEMPT_ALERT.replace("PORT", &hook_port.to_string())
        )
    }

    /// 3 replicas × 4 shards take the API server's batches through one address: a
    /// person's write of an Application of each shard, and a privileged patch of the
    /// in-cluster Application's Deployment that Argo CD's controller takes back at once,
    /// are paged once each naming alice; the receiving replica is then killed mid-run
    /// and bob's writes, before and after the kill, are paged once each naming bob,
    /// by whichever replica holds each shard; what every shard took leaves the inbox.
    #[test]
    fn every_replica_takes_audit_batches_and_each_shards_leader_pages_them_once() {
        let cpl = cp::shared();
        let pg = driftwatch::state::pgtest::server().expect("a private PostgreSQL");
        let schema = driftwatch::state::pgtest::fresh_schema();
        let hook = Scripted::start(Mode::Up);
        let port = hook.port;
        let api = cpl.start_api_server("audit-shards", &[]);
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let ca = crate::common::tls::serving_tls(dirs[0].path());
        for dir in &dirs {
            let d = dir.path();
            if d != dirs[0].path() {
                for f in ["tls.crt", "tls.key"] {
                    std::fs::copy(dirs[0].path().join(f), d.join(f)).unwrap();
                }
            }
            std::fs::create_dir(d.join("secrets")).unwrap();
            std::fs::write(d.join("secrets/audit-token"), AUDIT_TOKEN).unwrap();
            std::fs::write(d.join("secrets/pg-url"), pg.url()).unwrap();
            std::fs::write(d.join("driftwatch.yaml"), config(port, &schema)).unwrap();
            api.kubeconfig(&d.join("kubeconfig"), ADMIN);
        }
        let cluster = |c: usize| format!("https://cluster-{c}.example:6443");
        // Two clusters per shard.
        let mut clusters: Vec<usize> = Vec::new();
        for s in 0..SHARDS {
            clusters.extend((0..200).filter(|c| driftwatch::shard::of_cluster(&cluster(*c), SHARDS) == s).take(2));
        }
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "payments"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "app", "image": "payments:1.0"}]}}}});
        let app_ref = |name: &str| json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name, "namespace": "argocd"}});
        let controller = block_on(async {
            api.namespaces(&["argocd", "payments", "hub-lease"]).await;
            let admin = api.client(ADMIN).await;
            let controller = argocd_controller(&api, &admin).await;
            for who in ["alice", "bob"] {
                grant(&admin, "payments", who, "apps", &["deployments"], &["get", "patch"]).await;
                grant(&admin, "argocd", who, "argoproj.io", &["applications"], &["get", "patch"]).await;
            }
            crate::common::control_plane::apply_as(&controller, "argocd-controller", deploy.clone()).await;
            let res =
                json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "api", "status": "Synced"});
            put_app(
                &controller,
                application(
                    AppBuilder::new("payments-api")
                        .synced()
                        .healthy()
                        .field("/spec/destination/namespace", json!("payments"))
                        .field("/status/resources", json!([res])),
                ),
            )
            .await;
            for c in &clusters {
                let mut app = application(AppBuilder::new(&format!("on-cluster-{c}")).synced().healthy());
                app["spec"]["destination"] = json!({"server": cluster(*c), "namespace": "default"});
                put_app(&controller, app).await;
            }
            controller
        });
        let ha = ["-n", "argocd", "--leader-election", "--lease-duration", "3", "--lease-namespace", "hub-lease"];
        let mut ds: Vec<Option<Daemon>> = dirs.iter().map(|d| Some(Daemon::start_with(d.path(), &ha))).collect();
        let addrs: Vec<String> = ds.iter().flatten().map(audit_addr).collect();
        let backends = Arc::new(Mutex::new(addrs.clone()));
        let service = forwarder(backends.clone());
        let mut flags = audit_flags(dirs[0].path(), &service, &ca);
        flags.push("--audit-webhook-initial-backoff=1s".into());
        api.restart(&flags);
        let held = |ds: &[Option<Daemon>]| ds.iter().flatten().map(|d| d.metric("driftwatch_leader").unwrap_or(0.0)).sum::<f64>();
        wait_for("every shard held", Duration::from_secs(60), || held(&ds) == f64::from(SHARDS));

        let privileged =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}});
        let heal = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": null}]}}}});
        let names: Vec<String> = clusters.iter().map(|c| format!("on-cluster-{c}")).chain(["payments-api".to_string()]).collect();
        let write = |who: Who, apps: &[String]| {
            block_on(async {
                let person = api.client(who).await;
                for name in apps {
                    if name == "payments-api" {
                        patch_as(&person, "kubectl-patch", &deploy, Patch::Strategic(privileged.clone())).await.unwrap();
                        patch_as(&controller, "argocd-controller", &deploy, Patch::Strategic(heal.clone())).await.unwrap();
                    } else {
                        let change = json!({"spec": {"source": {"targetRevision": format!("{}-{name}", who.name)}}});
                        patch_as(&person, "kubectl-patch", &app_ref(name), Patch::Merge(change)).await.unwrap();
                    }
                }
            })
        };
        // Each page with its `Idempotency-Key`: a copy sent again after the kill (its
        // delivery in flight, not yet recorded) carries the first one's.
        let pages = || -> Vec<(Option<String>, Value)> {
            hook.keyed().into_iter().filter_map(|(k, b)| serde_json::from_str(&b).ok().map(|v| (k, v))).collect()
        };
        let records = || pages().into_iter().map(|(_, v)| v).collect::<Vec<Value>>();
        let paged = |who: &str, app: &str| records().iter().filter(|r| r["who"] == who && r["app"] == app).count();
        // How many distinct notifications paged `who` on `app`.
        let notifications = |who: &str, app: &str| {
            let mut keys: Vec<Option<String>> =
                pages().into_iter().filter(|(_, r)| r["who"] == who && r["app"] == app).map(|(k, _)| k).collect();
            keys.sort();
            keys.dedup();
            keys.len()
        };
        write(ALICE, &names);
        wait_for("each of alice's writes paged", Duration::from_secs(60), || names.iter().all(|n| paged("alice", n) >= 1));
        let alice: Vec<Value> = records().into_iter().filter(|r| r["who"] == "alice" && r["app"] == "payments-api").collect();
        assert_eq!(alice[0]["set"][0]["path"], "spec.template.spec.containers[app].securityContext.privileged", "{alice:?}");

        // Mid-run: half of bob's writes, the receiving replica killed, the other half.
        let (first, second) = names.split_at(names.len() / 2);
        write(BOB, first);
        let mut victim = ds[0].take().unwrap();
        victim.child.kill().unwrap();
        victim.child.wait().unwrap();
        write(BOB, second);
        wait_for("each of bob's writes paged", Duration::from_secs(90), || names.iter().all(|n| paged("bob", n) >= 1));
        wait_for("the shards held by the two left", Duration::from_secs(30), || held(&ds) == f64::from(SHARDS));
        // What every shard took is forgotten.
        let mut sql = postgres::Client::connect(&pg.url(), postgres::NoTls).unwrap();
        let waiting = |sql: &mut postgres::Client| -> i64 {
            sql.query_one(&format!("SELECT count(*) FROM {schema}.kv WHERE t = 'audit_inbox'"), &[]).unwrap().get(0)
        };
        wait_for("the inbox emptied", Duration::from_secs(30), || waiting(&mut sql) == 0);
        let people = || ["alice", "bob"].into_iter().flat_map(|who| names.iter().map(move |n| (who, n)));
        let copies: Vec<(&str, &String, usize)> = people().map(|(w, n)| (w, n, paged(w, n))).filter(|(_, _, c)| *c > 1).collect();
        eprintln!("pages sent again after the kill (in flight, under their first key): {copies:?}");
        for (who, n) in people() {
            assert_eq!(notifications(who, n), 1, "{who} on {n}: one notification, each copy under its key: {:?}", pages());
            assert!(pages().iter().all(|(k, _)| k.is_some()), "every page carries its key");
        }
        for d in ds.into_iter().flatten() {
            let log = d.log.clone();
            assert!(d.stop().success(), "{}", std::fs::read_to_string(log).unwrap_or_default());
        }
        api.stop();
    }
}
