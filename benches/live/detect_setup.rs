//! The `detect` scenario's clusters, people, daemons' directories and load driver.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::AppBuilder;
use crate::common::audited::{AUDIT_TOKEN, application, audit_flags, controller, in_force, put_app};
use crate::common::control_plane::{self as cp, ADMIN, ALICE, BOB, MALLORY, apply_as};
use crate::relay::Relay;

/// Deployments per Application.
pub const PER_APP: usize = 3;
const IN_CLUSTER: &str = "https://kubernetes.default.svc";
const SPOKE_TOKEN: &str = "detect-spoke-audit-token-0123456789";
/// A person's write: a security field (`kubectl patch`, strategic merge).
const PRIVILEGED: &str = r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","securityContext":{"privileged":true}}]}}}}"#;
/// Argo CD's self-heal taking it back.
const HEAL: &str = r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","securityContext":null}]}}}}"#;

/// One cluster: its API server, the relay its audit feed posts through, how many
/// Deployments it has (`d000`...), Argo CD's identity there (a token), its shard.
pub struct Cluster {
    /// `in-cluster` for the hub, the spoke's name in `clusters:`.
    pub label: String,
    pub api: cp::ApiServer,
    pub ns: &'static str,
    pub relay: Relay,
    pub deployments: usize,
    argocd: String,
    pub shard: u32,
}

/// The hub and the spoke, the people (name, token), and the folder with the daemons'
/// certificate, the API servers' token file and the spoke's kubeconfig.
pub struct Bench {
    pub clusters: [Cluster; 2],
    pub people: Vec<(String, String)>,
    dir: tempfile::TempDir,
}

impl Bench {
    /// Both API servers posting through their relays, and every object, for `writes`
    /// writes by `people` people without a (person, Deployment) pair written twice.
    pub fn start(people: usize, writes: usize) -> Bench {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let ca = crate::common::tls::serving_tls(dir.path());
        let people: Vec<(String, String)> =
            (0..people.max(1)).map(|i| (format!("person-{i:02}"), format!("detect-person-{i:02}-token-5f3a9c"))).collect();
        let tokens = dir.path().join("tokens.csv");
        let mut lines: String =
            [ADMIN, ALICE, BOB, MALLORY].iter().map(|w| format!("{},{},{},\"{}\"\n", w.token, w.name, w.uid, w.groups)).collect();
        lines.extend(people.iter().map(|(name, token)| format!("{token},{name},uid-{name},\"people\"\n")));
        std::fs::write(&tokens, lines).unwrap();
        let relays = [Relay::start(), Relay::start()];
        let flags = |feed: &str, relay: &Relay, token: &str| -> Vec<String> {
            let d = dir.path().join(feed);
            std::fs::create_dir(&d).unwrap();
            let mut f = audit_flags(&d, &relay.addr, &ca);
            let kubeconfig = d.join("audit-webhook.yaml");
            let text = std::fs::read_to_string(&kubeconfig).unwrap().replace(AUDIT_TOKEN, token);
            std::fs::write(&kubeconfig, text).unwrap();
            f.push("--audit-webhook-initial-backoff=1s".into());
            f.push(format!("--token-auth-file={}", tokens.display()));
            f
        };
        let hub = cpl.start_api_server("detect-hub", &flags("hub-feed", &relays[0], AUDIT_TOKEN));
        let spoke = cpl.start_api_server("detect-spoke", &flags("spoke-feed", &relays[1], SPOKE_TOKEN));
        spoke.kubeconfig(&dir.path().join("spoke.kubeconfig"), ADMIN);
        let per_cluster = writes.div_ceil(people.len()).div_ceil(2).div_ceil(PER_APP).max(1) * PER_APP;
        let hub_shard = driftwatch::shard::of_cluster(IN_CLUSTER, super::SHARDS);
        let label = (1..)
            .map(|i| format!("edge-{i}"))
            .find(|l| driftwatch::shard::of_cluster(&format!("name:{l}"), super::SHARDS) != hub_shard)
            .unwrap();
        let spoke_shard = driftwatch::shard::of_cluster(&format!("name:{label}"), super::SHARDS);
        let (hub_argocd, spoke_argocd) = cp::block_on(objects(&hub, &spoke, &people, per_cluster, &label));
        let [hub_relay, spoke_relay] = relays;
        let cluster =
            |label: String, api, ns, relay, argocd, shard| Cluster { label, api, ns, relay, deployments: per_cluster, argocd, shard };
        Bench {
            clusters: [
                cluster("in-cluster".into(), hub, "shop", hub_relay, hub_argocd, hub_shard),
                cluster(label, spoke, "edge", spoke_relay, spoke_argocd, spoke_shard),
            ],
            people,
            dir,
        }
    }

    /// Write `n`'s person, cluster and Deployment: person `n % people`, and Deployments
    /// taken in turn from each cluster, so that no pair is written twice for `n` below
    /// people × Deployments and writes close in time go to different Deployments.
    fn plan(&self, n: usize) -> (usize, usize, usize) {
        let (p, all) = (self.people.len(), 2 * self.clusters[0].deployments);
        let d = (n / p + n % p) % all;
        (n % p, d % 2, d / 2)
    }

    /// A daemon's directory: the audit listener's certificate, the secrets (the
    /// PostgreSQL URL when given), the spoke's kubeconfig; and a free port for its
    /// audit listener.
    pub fn daemon_dir(&self, pg_url: Option<&str>) -> (tempfile::TempDir, u16) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for f in ["tls.crt", "tls.key", "spoke.kubeconfig"] {
            std::fs::copy(self.dir.path().join(f), d.join(f)).unwrap();
        }
        std::fs::create_dir(d.join("secrets")).unwrap();
        std::fs::write(d.join("secrets/audit-token"), AUDIT_TOKEN).unwrap();
        std::fs::write(d.join("secrets/spoke-audit-token"), SPOKE_TOKEN).unwrap();
        if let Some(url) = pg_url {
            std::fs::write(d.join("secrets/pg-url"), url).unwrap();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        (dir, port)
    }

    /// A replica's configuration: the page (a security write by a person, naming them
    /// and the resource, `rev` being both), the spoke's feed, the audit listener (TLS,
    /// token); with `schema`, the state in PostgreSQL and four shards.
    pub fn config(&self, hook: u16, audit: u16, schema: Option<&str>) -> String {
        let spoke = &self.clusters[1];
        let state = schema.map_or(String::new(), |s| {
            format!(
                "state:\n  postgres:\n    url: $pg-url\n    schema: {s}\n    maxConnections: 4\nsharding:\n  shards: {}\n",
                super::SHARDS
            )
        });
        format!(
            r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:{hook}
    rateLimit: {{perSecond: 500, burst: 100}}
    retry: {{initialBackoff: 200ms, maxBackoff: 1s, maxAttempts: 1000, deadline: 1h}}
templates:
  attempt:
    message: attempt
    webhook:
      hook:
        body: '{{"rev": "{{{{drift.attempts.[0].actor.username}}}} {{{{drift.attempts.[0].resource}}}}", "who": {{{{json drift.attempts.[0].actor.username}}}}, "class": {{{{json drift.attempts.[0].class}}}}, "app": {{{{json app.metadata.name}}}}}}'
triggers:
  on-attempt:
    - when: drift.attempts.len() > 0 && drift.attempts[0].security
      oncePer: drift.attempts[0].id
      send: [attempt]
routes:
  - name: security
    triggers: [on-attempt]
    recipients: [hook]
secretsFile: secrets
clusters:
  - name: {label}
    server: {server}
    kubeconfig: spoke.kubeconfig
    auditToken: $spoke-audit-token
audit:
  listen: 127.0.0.1:{audit}
  tls: {{certFile: tls.crt, keyFile: tls.key}}
  token: $audit-token
{state}"#,
            label = spoke.label,
            server = spoke.api.url(),
        )
    }
}

/// Namespaces, Argo CD's identities (bound to cluster-admin as Argo CD installs them),
/// the people's RBAC, the Deployments (written by Argo CD's identities) and the
/// Applications; Argo CD's tokens in the hub and in the spoke.
async fn objects(
    hub: &cp::ApiServer,
    spoke: &cp::ApiServer,
    people: &[(String, String)],
    per_cluster: usize,
    label: &str,
) -> (String, String) {
    hub.namespaces(&["argocd", "shop"]).await;
    spoke.namespaces(&["edge"]).await;
    let (hub_admin, spoke_admin) = (hub.client(ADMIN).await, spoke.client(ADMIN).await);
    let hub_argocd = controller(hub, &hub_admin, "argocd", "argocd-application-controller").await;
    let spoke_argocd = controller(spoke, &spoke_admin, "kube-system", "argocd-manager").await;
    for (admin, ns) in [(&hub_admin, "shop"), (&spoke_admin, "edge")] {
        grant_people(admin, ns, people).await;
    }
    for (client, ns) in [(&hub_argocd, "shop"), (&spoke_argocd, "edge")] {
        for d in 0..per_cluster {
            apply_as(client, "argocd-controller", deployment(ns, d)).await;
        }
    }
    for a in 0..per_cluster / PER_APP {
        let range = a * PER_APP..(a + 1) * PER_APP;
        put_app(&hub_argocd, app(&format!("hub-{a:02}"), "shop", json!({"server": IN_CLUSTER, "namespace": "shop"}), range.clone())).await;
        put_app(&hub_argocd, app(&format!("edge-{a:02}"), "edge", json!({"name": label, "namespace": "edge"}), range)).await;
    }
    (
        hub.service_account_token("argocd", "argocd-application-controller").await,
        spoke.service_account_token("kube-system", "argocd-manager").await,
    )
}

/// `get` and `patch` on the Deployments of `ns` for each person (one RoleBinding naming
/// them all), in force for each of them.
async fn grant_people(admin: &kube::Client, ns: &str, people: &[(String, String)]) {
    let name = "people-deployments";
    let subjects: Vec<Value> =
        people.iter().map(|(who, _)| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": who})).collect();
    apply_as(
        admin,
        "test-setup",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns},
               "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]}]}),
    )
    .await;
    apply_as(
        admin,
        "test-setup",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": subjects}),
    )
    .await;
    for (who, _) in people {
        in_force(admin, who, Some(ns), "apps", "deployments", "patch").await;
    }
}

fn deployment(ns: &str, d: usize) -> Value {
    let name = format!("d{d:03}");
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": "shop:1.0"}]}}}})
}

/// An Application managing the Deployments `range` of `ns`, Synced and Healthy.
fn app(name: &str, ns: &str, destination: Value, range: std::ops::Range<usize>) -> Value {
    let resources: Vec<Value> = range
        .map(|d| json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": ns, "name": format!("d{d:03}"), "status": "Synced"}))
        .collect();
    let mut v = application(AppBuilder::new(name).synced().healthy().field("/status/resources", json!(resources)));
    v["spec"]["destination"] = destination;
    v
}

/// A person's write, as the driver saw it.
pub struct Write {
    /// `<person> Deployment <ns>/<name>`: what its page's `rev` says.
    pub rev: String,
    pub cluster: usize,
    pub sent: Instant,
    pub answered: Instant,
    /// The API server took it.
    pub ok: bool,
    /// Why it was refused, or why its self-heal was.
    pub error: String,
}

/// The load driver: its own runtime and an HTTP/2 client for both API servers.
pub struct Driver {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
}

impl Driver {
    pub fn new(bench: &Bench) -> Driver {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let ca = reqwest::Certificate::from_pem(bench.clusters[0].api.ca_pem().as_bytes()).unwrap();
        let http = reqwest::Client::builder().add_root_certificate(ca).build().unwrap();
        Driver { rt, http }
    }

    /// An API server's `/metrics`.
    pub fn api_metrics(&self, api: &cp::ApiServer) -> String {
        self.get(api, "/metrics")
    }

    /// A GET as the admin: the body, empty when it failed.
    pub fn get(&self, api: &cp::ApiServer, path: &str) -> String {
        self.rt.block_on(async {
            match self.http.get(format!("{}{path}", api.url())).bearer_auth(ADMIN.token).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        })
    }

    /// The admin's write of each cluster's first Deployment, taken back: the pages'
    /// `rev`s.
    pub fn warm_up(&self, bench: &Bench) -> Vec<String> {
        self.rt.block_on(async {
            let mut revs = Vec::new();
            for (c, cl) in bench.clusters.iter().enumerate() {
                let url = format!("{}/apis/apps/v1/namespaces/{}/deployments/d000", cl.api.url(), cl.ns);
                let w = write(&self.http, &url, (ADMIN.token, &cl.argocd), format!("admin Deployment {}/d000", cl.ns), c).await;
                assert!(w.ok, "the warm-up write: {}", w.error);
                revs.push(w.rev);
            }
            revs
        })
    }

    /// `rate` writes a second for `secs`, writes `first`.. of the plan.
    pub fn drive(&self, bench: &Bench, (rate, secs, first): (u64, u64, usize)) -> Vec<Write> {
        let out: Arc<Mutex<Vec<Write>>> = Arc::default();
        self.rt.block_on(async {
            let start = tokio::time::Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for k in 0..(rate * secs) as usize {
                tokio::time::sleep_until(start + Duration::from_secs_f64(k as f64 / rate as f64)).await;
                let (p, c, d) = bench.plan(first + k);
                let cl = &bench.clusters[c];
                let url = format!("{}/apis/apps/v1/namespaces/{}/deployments/d{d:03}", cl.api.url(), cl.ns);
                let (who, token) = bench.people[p].clone();
                let rev = format!("{who} Deployment {}/d{d:03}", cl.ns);
                let (http, argocd, out) = (self.http.clone(), cl.argocd.clone(), out.clone());
                tasks.spawn(async move {
                    let w = write(&http, &url, (&token, &argocd), rev, c).await;
                    out.lock().unwrap().push(w);
                });
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
        });
        std::mem::take(&mut *out.lock().unwrap())
    }
}

/// One write: the person's privileged patch, then Argo CD's identity taking it back.
async fn write(http: &reqwest::Client, url: &str, (person, argocd): (&str, &str), rev: String, cluster: usize) -> Write {
    let sent = Instant::now();
    let answer = patch(http, &format!("{url}?fieldManager=kubectl-patch"), person, PRIVILEGED).await;
    let answered = Instant::now();
    let healed = match &answer {
        Ok(()) => {
            patch(http, &format!("{url}?fieldManager=argocd-controller"), argocd, HEAL).await.map_err(|e| format!("self-heal refused: {e}"))
        }
        Err(_) => Ok(()),
    };
    let error = [answer.as_ref().err(), healed.as_ref().err()].into_iter().flatten().cloned().collect::<Vec<_>>().join("; ");
    Write { rev, cluster, sent, answered, ok: answer.is_ok(), error }
}

/// A strategic-merge patch with `token`; the refusal when it is one.
async fn patch(http: &reqwest::Client, url: &str, token: &str, body: &'static str) -> Result<(), String> {
    let r = http
        .patch(url)
        .bearer_auth(token)
        .header("content-type", "application/strategic-merge-patch+json")
        .body(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let text = r.text().await.map_err(|e| e.to_string())?;
    match status.is_success() {
        true => Ok(()),
        false => Err(format!("{status}: {}", text.chars().take(200).collect::<String>())),
    }
}
