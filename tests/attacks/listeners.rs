//! driftwatch's own ports: the audit webhook and the operations listener, against
//! large batches, held connections and scrape floods; the SIEM's source address and
//! record identity. Each row runs the real `driftwatch` binary against the fake API
//! server (no real control plane is needed: the API server's part is its webhook's
//! POST, sent here as it sends it), except where it says why not.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;
use common::AppBuilder;
use common::apiserver::FakeApiServer;
use common::daemon::{Daemon, records, wait_for};
use common::receiver::{get, receiver};

const TOKEN: &str = "listeners-audit-token-0123456789";

/// The audit webhook on TLS with the token, every bound at its default (16 MiB).
const AUDIT: &str =
    "secretsFile: secrets\naudit:\n  listen: 127.0.0.1:0\n  tls: {certFile: tls.crt, keyFile: tls.key}\n  token: $audit-token\n";

/// A directory for a daemon with the audit webhook, the fake API server holding
/// `payments-api` (Synced, managing Deployment payments/api), and the CA of the
/// webhook's serving certificate.
fn audit_dir() -> (tempfile::TempDir, FakeApiServer, String) {
    driftwatch::tls::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let ca = common::tls::serving_tls(dir.path());
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/audit-token"), TOKEN).unwrap();
    api.apply(
        AppBuilder::new("payments-api")
            .synced()
            .healthy()
            .field("/status/history", json!([{"id": 1, "revision": common::REV1}]))
            .field("/spec/destination/namespace", "payments".into())
            .field(
                "/status/resources",
                json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "api", "status": "Synced"}]),
            )
            .build(),
    );
    (dir, api, ca)
}

/// Starts the daemon in `dir`: it, its audit listener's address, and a client that
/// trusts `ca`, with a runtime to drive it.
fn start_listening(dir: &Path, ca: &str) -> (Daemon, String, tokio::runtime::Runtime, reqwest::Client) {
    let d = Daemon::start(dir);
    let mut addr = String::new();
    wait_for("the audit listener's address in the log", Duration::from_secs(10), || {
        let line = d.log_lines("audit webhook listening").into_iter().next().unwrap_or_default();
        addr = line.split("bound=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default().to_string();
        !addr.is_empty()
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    (d, addr, rt, client)
}

/// POSTs `body` as the API server's webhook does; the status (0: no answer).
fn post(rt: &tokio::runtime::Runtime, client: &reqwest::Client, addr: &str, body: Vec<u8>) -> u16 {
    rt.block_on(async {
        let req = client.post(format!("https://{addr}/audit?timeout=30s")).header("content-type", "application/json").bearer_auth(TOKEN);
        req.body(body).send().await.map(|r| r.status().as_u16()).unwrap_or(0)
    })
}

/// alice's privileged patch of Deployment payments/api as kube-apiserver v1.36
/// recorded it, made by `user` under `audit_id`.
fn privileged_patch(user: &str, audit_id: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-audit/eventlist-changes-1.json");
    let list: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut e = list["items"][6].clone();
    e["user"]["username"] = user.into();
    e["auditID"] = audit_id.into();
    e
}

/// A ConfigMap of `chars` control characters created in an unmanaged namespace: each
/// is escaped as `\u0001` (6 bytes) in both the request and the response object.
fn padded_configmap(template: &Value, name: &str, chars: usize) -> Value {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "mine"},
        "data": {"x": "\u{1}".repeat(chars)}});
    let mut e = template.clone();
    e["auditID"] = format!("pad-{name}").into();
    e["verb"] = "create".into();
    e["requestURI"] = "/api/v1/namespaces/mine/configmaps".into();
    e["objectRef"] = json!({"resource": "configmaps", "namespace": "mine", "name": name, "apiVersion": "v1"});
    e["requestObject"] = cm.clone();
    e["responseObject"] = cm;
    e
}

/// An `EventList` of `items`, as if the API server had received the last now.
fn batch(items: Vec<Value>) -> Vec<u8> {
    let mut list = json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": items});
    common::received_at(&mut list, chrono::Utc::now() - chrono::Duration::minutes(1));
    serde_json::to_vec(&list).unwrap()
}

/// Review N6. alice patches Deployment payments/api to `privileged: true`; right after
/// it, in the same webhook batch (`batch-max-wait=1s`), two ConfigMaps of 850,000
/// `\x01` bytes each are created in `mine` (about 10 MB of escaped JSON per event, the
/// batch over 20 MB); then bob patches the Deployment with an annotation padded past
/// `maxBodyBytes` (16 MiB) in the same request. The API server POSTs the batch with
/// its bearer token. Expected: 200 (a 413 made the API server drop everyone's
/// events), alice's attempt alerted as security-context, bob's alerted by who and what
/// though his request body was left out, and what was left out counted.
#[test]
fn a_20_mb_batch_is_taken_and_its_writes_alerted() {
    let (dir, _api, ca) = audit_dir();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    std::fs::write(dir.path().join("driftwatch.yaml"), format!("{}{AUDIT}", common::ATTEMPT_ALERT.replace("PORT", &port.to_string())))
        .unwrap();
    let (d, addr, rt, client) = start_listening(dir.path(), &ca);

    let alice = privileged_patch("alice", "audit-alice");
    let mut bob = privileged_patch("bob", "audit-bob");
    bob["requestObject"]["metadata"] = json!({"annotations": {"pad": "\u{1}".repeat(3_000_000)}});
    let items = vec![padded_configmap(&alice, "a", 850_000), alice.clone(), padded_configmap(&alice, "b", 850_000), bob];
    let body = batch(items);
    assert!(body.len() > 30 << 20, "{}", body.len());
    assert_eq!(post(&rt, &client, &addr, body), 200, "the batch was refused");

    wait_for("alice's and bob's attempts", Duration::from_secs(30), || {
        let sent = records(&got);
        ["alice", "bob"].iter().all(|who| sent.iter().any(|r| r["who"] == *who))
    });
    let sent = records(&got);
    let alice = sent.iter().find(|r| r["who"] == "alice").unwrap();
    assert_eq!((alice["class"].as_str(), alice["security"].as_bool()), (Some("security-context"), Some(true)), "{alice}");
    let bob = sent.iter().find(|r| r["who"] == "bob").unwrap();
    assert_eq!(bob["resource"], "Deployment payments/api", "{bob}");
    assert_eq!(d.metric("driftwatch_audit_dropped_total{reason=\"objects-over-limit\"}"), Some(1.0), "{}", d.metrics());
    assert_eq!(d.metric("driftwatch_audit_requests_total{code=\"413\"}").unwrap_or(0.0), 0.0);
}

/// An async GET on a kept-alive connection: the status (0: closed) and the head.
async fn get_on(s: &mut tokio::net::TcpStream, path: &str) -> (u16, String) {
    if s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.is_err() {
        return (0, String::new());
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").and_then(|v| v.trim().parse::<usize>().ok()))
                .unwrap_or(0);
            if body.len() >= len {
                return (head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), head.to_string());
            }
        }
        match tokio::time::timeout(Duration::from_secs(20), s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return (0, String::new()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A connection to `addr` from the loopback address `ip`.
async fn connect_from(ip: &str, addr: SocketAddr) -> Option<tokio::net::TcpStream> {
    let s = tokio::net::TcpSocket::new_v4().ok()?;
    s.bind(format!("{ip}:0").parse().ok()?).ok()?;
    s.connect(addr).await.ok()
}

/// A daemon with nothing to watch: only its operations listener matters.
fn quiet_daemon() -> (tempfile::TempDir, FakeApiServer, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    std::fs::write(dir.path().join("driftwatch.yaml"), "").unwrap();
    let d = Daemon::start(dir.path());
    (dir, api, d)
}

/// Review N7. Someone who reaches the operations port (no credential needed) opens 40
/// keep-alive connections from 127.0.0.12 (`GET /ui/app.css` on each), then 130 from ten
/// more addresses (127.0.0.2 to 127.0.0.11, 13 each) with `GET /healthz`, and sends it
/// again on every one still open (the attacker re-sends every few seconds to beat the
/// idle timeout). Then the kubelet probes `/healthz` and `/readyz` from its own
/// address, each on a new connection. Expected: one address holds at most 32; both
/// probes answered 200 though the connection cap is full (the probes' lane serves
/// them); the connections over a cap counted.
#[test]
fn held_keep_alive_connections_cannot_fail_the_probes() {
    let (_dir, _api, d) = quiet_daemon();
    let admin: SocketAddr = d.admin.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // One address first: 40 connections from 127.0.0.12, of which it keeps at most its
    // share (the rest get only the probes: the web view's style is 503 there).
    let from_one = rt.block_on(async {
        let mut kept = Vec::new();
        for _ in 0..40 {
            if let Some(mut s) = connect_from("127.0.0.12", admin).await
                && get_on(&mut s, "/ui/app.css").await.0 == 200
            {
                kept.push(s);
            }
        }
        kept
    });
    assert!(from_one.len() <= 32, "one address held {} connections", from_one.len());
    let held = rt.block_on(async {
        let mut held = Vec::new();
        for n in 0..130 {
            let ip = format!("127.0.0.{}", 2 + n % 10);
            if let Some(mut s) = connect_from(&ip, admin).await
                && get_on(&mut s, "/healthz").await.0 == 200
            {
                held.push(s);
            }
        }
        let mut open = Vec::new();
        for mut s in held {
            if get_on(&mut s, "/healthz").await.0 == 200 {
                open.push(s);
            }
        }
        open
    });
    let total = held.len() + from_one.len();
    assert!(total >= 120, "the attack held {total} connections");
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(get(&d.admin, probe).map(|(s, _)| s), Some(200), "{probe} failed with {total} connections held");
    }
    // The scrape itself is only a probe's lane answer while the cap is full.
    drop((held, from_one));
    wait_for("the connections over a cap counted", Duration::from_secs(20), || {
        d.metric("driftwatch_operations_connections_refused_total").unwrap_or(0.0) > 0.0
    });
}

/// Review N7. A client keeps one connection to the operations port alive and sends
/// `GET /healthz` on it again and again (each request restarted hyper's header
/// timeout, so it held its slot forever). Expected: its 1,000th response says
/// `Connection: close` and the connection is closed. (The maximum age, 5 minutes on
/// the daemon's listeners, is the library's row below.)
#[test]
fn a_kept_alive_connection_is_closed_after_its_requests() {
    let (_dir, _api, d) = quiet_daemon();
    let admin: SocketAddr = d.admin.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (served, last) = rt.block_on(async {
        let mut s = connect_from("127.0.0.1", admin).await.unwrap();
        let (mut served, mut last) = (0, String::new());
        for _ in 0..1001 {
            let (status, head) = get_on(&mut s, "/healthz").await;
            if status != 200 {
                break;
            }
            served += 1;
            last = head;
        }
        (served, last)
    });
    assert_eq!(served, 1000, "a connection made {served} requests");
    assert!(last.to_ascii_lowercase().contains("connection: close"), "{last}");
}

/// Review N7, the maximum age, on the listener the daemon uses (`driftwatch::serve`)
/// with the age shortened from 5 minutes to 1 s: a client keeps one connection alive,
/// sending a request every 50 ms (well inside the header timeout). Expected: the
/// connection is closed once it is older than its age, though it never went idle.
#[test]
fn a_connection_older_than_its_age_is_closed() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
        let bounds = driftwatch::serve::Bounds { max_age: Duration::from_secs(1), ..driftwatch::serve::Bounds::default() };
        tokio::spawn(driftwatch::serve::run(listener, None, app, bounds, |_| {}, std::future::pending()));
        let mut s = connect_from("127.0.0.1", addr).await.unwrap();
        let started = Instant::now();
        let mut served = 0;
        while get_on(&mut s, "/healthz").await.0 == 200 {
            served += 1;
            assert!(started.elapsed() < Duration::from_secs(30), "still open after {served} requests");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(started.elapsed() >= Duration::from_secs(1) && served > 5, "closed after {served} in {:?}", started.elapsed());
    });
}

/// Review N7. Anyone who reaches the open `/metrics` scrapes it 80 times, 8 at a time.
/// Expected: every scrape answered, and the state store read only by the figures'
/// refresh (at most every 500 ms, 4 reads each), not per scrape:
/// `driftwatch_operations_store_reads_total` rises by far less than 4 per scrape.
#[test]
fn a_metrics_flood_does_not_read_the_store_per_scrape() {
    let (_dir, _api, d) = quiet_daemon();
    let reads = || d.metric("driftwatch_operations_store_reads_total").expect("the store reads are counted");
    let before = reads();
    let started = Instant::now();
    let answered: usize = std::thread::scope(|s| {
        let workers: Vec<_> =
            (0..8).map(|_| s.spawn(|| (0..10).filter(|_| get(&d.admin, "/metrics").is_some_and(|(st, _)| st == 200)).count())).collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    let elapsed = started.elapsed();
    let made = reads() - before;
    assert_eq!(answered, 80);
    // The refreshes that can have run in the time, and the one the last read asked for.
    let refreshes = (elapsed.as_millis() / 500 + 2) as f64;
    assert!(made <= 4.0 * refreshes, "{made} store reads for 80 scrapes in {elapsed:?}");
    assert!(made < 4.0 * 80.0 / 2.0, "{made} store reads for 80 scrapes");
}

/// Review N12. alice patches Deployment payments/api to `privileged: true` with
/// `X-Forwarded-For: 10.0.0.7`: kube-apiserver records `sourceIPs: ["10.0.0.7",
/// "127.0.0.1"]` (the header's entries first, the peer it saw last). The attempt goes
/// to a SIEM (signed webhook, ECS). Expected: the record's `source.ip` is 127.0.0.1,
/// the header's entry only among `related.ip`.
#[test]
fn the_siem_source_is_the_peer_the_api_server_saw() {
    let (dir, _api, ca) = audit_dir();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    let routes = "  - name: attempts\n    triggers: [on-drift-attempt]\n    recipients: [siem]\n";
    let cfg = format!("{}{routes}{AUDIT}", common::SIEM_AND_SECURITY_PAGE.replace("PORT", &port.to_string()));
    std::fs::write(dir.path().join("driftwatch.yaml"), cfg).unwrap();
    let (_d, addr, rt, client) = start_listening(dir.path(), &ca);
    let mut alice = privileged_patch("alice", "audit-forwarded");
    alice["sourceIPs"] = json!(["10.0.0.7", "127.0.0.1"]);
    assert_eq!(post(&rt, &client, &addr, batch(vec![alice])), 200);
    wait_for("the SIEM record of alice's attempt", Duration::from_secs(30), || records(&got).iter().any(|r| r["user"]["name"] == "alice"));
    let sent = records(&got);
    let record = sent.iter().find(|r| r["user"]["name"] == "alice").unwrap();
    assert_eq!(record["source"]["ip"], "127.0.0.1", "{record}");
    assert_eq!(record["related"]["ip"], json!(["10.0.0.7", "127.0.0.1"]), "{record}");
}

/// Issue 52 item 2. alice sends a harmless ConfigMap patch with `Audit-ID: X`, then the
/// privileged Deployment patch with the same `X` (the API server keeps a client's
/// `Audit-ID`). driftwatch tells them apart (`Attempt.id`, its own digest of the
/// event); here the two attempts are built with distinct ids and the same audit ID, as
/// the audit input makes them, and put in one episode's notification to an OCSF SIEM
/// (the audit input's dedup is another row). Expected: two API Activity records with
/// two identities (`metadata.uid`, the `_id` an index keeps), neither the client's `X`,
/// which is only the correlation field `api.request.uid`.
#[test]
fn two_writes_under_one_audit_id_are_two_siem_records() {
    use driftwatch::drift::audit::{Actor, Attempt};
    let now = chrono::Utc::now();
    let write = |id: &str, kind: &str, name: &str| Attempt {
        id: id.into(),
        object: driftwatch::model::ResourceRef { kind: kind.into(), namespace: "payments".into(), name: name.into(), ..Default::default() },
        resource: format!("{kind} payments/{name}"),
        verb: "patch".into(),
        code: 200,
        audit_id: "X".into(),
        time: now,
        count: 1,
        actor: Actor { username: "alice".into(), source_ips: vec!["127.0.0.1".into()], ..Actor::default() },
        ..Attempt::default()
    };
    let harmless = write("dw-digest-1", "ConfigMap", "settings");
    let mut privileged = write("dw-digest-2", "Deployment", "api");
    privileged.security = true;
    let episode: driftwatch::drift::episode::Episode = serde_json::from_value(json!({"id": "argocd/payments-api@1",
        "appKey": "argocd/payments-api@u", "namespace": "argocd", "name": "payments-api", "project": "default",
        "cluster": "in-cluster", "openedAt": now, "severity": "critical", "direction": "live", "revision": common::REV1,
        "outOfSync": false, "degraded": false, "classes": ["security-context"], "resources": [], "attribution": [],
        "attempts": [privileged, harmless]}))
    .unwrap();
    let n = driftwatch::model::Notification {
        received_ms: None,
        app: "argocd/payments-api".into(),
        meta: driftwatch::model::AppMeta {
            name: "payments-api".into(),
            namespace: "argocd".into(),
            uid: "u".into(),
            project: "default".into(),
            ..Default::default()
        },
        trigger: "on-drift-attempt".into(),
        condition: 0,
        condition_key: "[0].a".into(),
        template: "app-drift-attempt".into(),
        destination: driftwatch::model::Destination::new("siem", ""),
        kind: driftwatch::model::DestinationKind::Splunk,
        action: driftwatch::model::Action::Fire,
        severity: driftwatch::model::Severity::Critical,
        payload: json!({"message": "attempt"}),
        record: None,
        episode: Some(episode.view(now)),
        operation: None,
        idempotency_key: Some("idem-1".into()),
        group: None,
    };
    let origin = driftwatch::deliver::ecs::Origin::default();
    let records = driftwatch::deliver::siem::Schema::Ocsf.records(&n, &origin, now);
    let requests: Vec<&Value> = records.iter().filter(|r| r["class_uid"] == 6003).collect();
    assert_eq!(requests.len(), 2, "{records:#?}");
    let ids: Vec<&str> = requests.iter().map(|r| driftwatch::deliver::siem::record_id(r)).collect();
    assert_eq!(ids, ["dw-digest-2", "dw-digest-1"]);
    assert!(requests.iter().all(|r| r["api"]["request"]["uid"] == "X"));
}
