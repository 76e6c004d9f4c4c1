//! The audit input end to end: `driftwatch run` against the fake API server, with its
//! audit webhook on TLS and a token; the real batch kube-apiserver v1.36 sent
//! (`tests/data/k8s-audit/`) posted as the API server posts it. alice's privileged patch
//! that self-heal erased (the Application stays Synced) and mallory's refused attempt
//! each alert, naming the person; the episode is in the history; a request without the
//! token, a forged batch and a malformed one each get their status and change nothing.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use common::AppBuilder;
use common::apiserver::FakeApiServer;
use common::daemon::{Daemon, bodies, records, wait_for};
use common::receiver::{get, receiver};

const TOKEN: &str = "audit-e2e-token-0123456789";

/// The audit webhook on TLS with the token, a body limit.
const AUDIT: &str = "secretsFile: secrets\naudit:\n  listen: 127.0.0.1:0\n  tls: {certFile: tls.crt, keyFile: tls.key}\n  token: $audit-token\n  maxBodyBytes: 65536\n";

/// POSTs `body` to the audit webhook as the API server does (`?timeout=30s`, the
/// bearer token of its webhook kubeconfig); the status code.
fn post(rt: &tokio::runtime::Runtime, client: &reqwest::Client, addr: &str, token: Option<&str>, body: Vec<u8>) -> u16 {
    rt.block_on(async {
        let mut req = client.post(format!("https://{addr}/audit?timeout=30s")).header("content-type", "application/json").body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.map(|r| r.status().as_u16()).unwrap_or(0)
    })
}

/// A recorded batch of `tests/data/k8s-audit`, as if the API server had received it
/// half an hour ago (within `audit.maxEventAge`; detection times are then measurable).
fn data(name: &str) -> Vec<u8> {
    let raw = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-audit").join(name)).unwrap();
    let mut list: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    common::received_at(&mut list, chrono::Utc::now() - chrono::Duration::minutes(30));
    serde_json::to_vec(&list).unwrap()
}

/// The batch with one event replaced by `user` patching the Deployment.
fn batch_by(user: &str) -> Vec<u8> {
    let mut list: serde_json::Value = serde_json::from_slice(&data("eventlist-changes-1.json")).unwrap();
    let mut alice = list["items"][6].clone();
    alice["user"]["username"] = user.into();
    alice["auditID"] = format!("audit-{user}").into();
    list["items"] = serde_json::json!([alice]);
    serde_json::to_vec(&list).unwrap()
}

/// A directory for a daemon with the audit webhook: the fake API server's kubeconfig,
/// the serving certificate (its CA returned) and the token in `secrets/`.
fn audit_dir() -> (tempfile::TempDir, FakeApiServer, String) {
    driftwatch::tls::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let ca = common::tls::serving_tls(dir.path());
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/audit-token"), TOKEN).unwrap();
    (dir, api, ca)
}

/// The attempt alert (`common::ATTEMPT_ALERT`) with the audit webhook as `dir`'s
/// configuration; the receiver of the alerts.
fn attempt_alerts(dir: &Path) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    std::fs::write(dir.join("driftwatch.yaml"), format!("{}{AUDIT}", common::ATTEMPT_ALERT.replace("PORT", &port.to_string()))).unwrap();
    got
}

/// `payments-api`, Synced and Healthy, deploying to `payments` and managing `resources`.
fn quiet_payments(resources: serde_json::Value) -> serde_json::Value {
    AppBuilder::new("payments-api")
        .synced()
        .healthy()
        .field("/status/history", serde_json::json!([{"id": 1, "revision": common::REV1}]))
        .field("/spec/destination/namespace", "payments".into())
        .field("/status/resources", resources)
        .build()
}

/// Starts the daemon in `dir`: it, its audit listener's address (from its log), and a
/// client trusting `ca` with a runtime to drive it.
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
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    (d, addr, rt, client)
}

#[test]
fn a_person_behind_a_self_healed_change_and_a_refused_attempt_is_named() {
    let (dir, api, ca) = audit_dir();
    let got = attempt_alerts(dir.path());
    // Synced and Healthy throughout: self-heal re-applied Git before Argo CD showed drift.
    let payments = |sync: &str| {
        AppBuilder::new("payments-api")
            .sync(sync, common::REV1)
            .healthy()
            .field("/status/history", serde_json::json!([{"id": 1, "revision": common::REV1}]))
            .field("/spec/destination/namespace", "payments".into())
            .field(
                "/status/resources",
                serde_json::json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "api", "status": sync}]),
            )
            .build()
    };
    api.apply(payments("Synced"));
    let (d, addr, rt, client) = start_listening(dir.path(), &ca);

    // Without the token, or with a wrong one, nothing is read: a forged batch naming
    // eve alerts nobody.
    assert_eq!(post(&rt, &client, &addr, None, batch_by("eve")), 401);
    assert_eq!(post(&rt, &client, &addr, Some("not-the-token-0000000000"), batch_by("eve")), 401);
    assert_eq!(d.metric("driftwatch_audit_events_total{result=\"relevant\"}").unwrap_or(0.0), 0.0, "nothing was decoded");
    // Malformed and oversized bodies.
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), b"{\"items\": [".to_vec()), 400);
    // A body of any size is read (review N6: no 413): 200 KB of blanks is no list.
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), vec![b' '; 200_000]), 400);

    // The real batch: the controller's applies dropped, alice's change and mallory's
    // refused attempt each alert.
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), data("eventlist-changes-1.json")), 200);
    wait_for("alice and mallory", Duration::from_secs(15), || records(&got).len() >= 2);
    let sent = records(&got);
    let alice = sent.iter().find(|r| r["who"] == "alice").expect("an alert naming alice");
    assert_eq!(alice["groups"], serde_json::json!(["sre", "system:authenticated"]));
    assert_eq!(
        (alice["decision"].as_str(), alice["class"].as_str(), alice["security"].as_bool()),
        (Some("allowed"), Some("security-context"), Some(true))
    );
    assert_eq!(alice["set"][0]["path"], "spec.template.spec.containers[app].securityContext.privileged");
    assert_eq!((alice["episode"].as_str(), alice["severity"].as_str()), (Some("self-heal"), Some("critical")));
    let mallory = sent.iter().find(|r| r["who"] == "mallory").expect("an alert naming mallory");
    assert_eq!(mallory["decision"], "denied");
    assert!(mallory["reason"].as_str().unwrap().contains("forbidden"), "{mallory}");
    // One attempt-only episode takes both (review M2): alice's change made it self-heal.
    assert_eq!(mallory["episode"], "self-heal");
    assert!(!sent.iter().any(|r| r["who"] == "eve"), "the forged batches alerted: {sent:?}");

    // The same batch again (the API server retries): the same people in the window
    // only count, nobody is alerted twice. A new person after it is.
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), data("eventlist-changes-1.json")), 200);
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), batch_by("carol")), 200);
    wait_for("carol", Duration::from_secs(15), || records(&got).iter().any(|r| r["who"] == "carol"));
    assert_eq!(records(&got).len(), 3, "{:?}", bodies(&got));

    // The history says who, and how it ended.
    let (status, history) = get(&d.admin, "/history").unwrap();
    assert_eq!(status, 200);
    let episodes: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    let by = |list: &serde_json::Value, who: &str| list.as_array().is_some_and(|l| l.iter().any(|a| a["actor"]["username"] == who));
    // alice's, mallory's and carol's requests within the hour are one attempt-only
    // episode (review M2).
    let healed = episodes
        .iter()
        .find(|e| e["resolution"] == "self-heal" && by(&e["attempts"], "alice"))
        .expect("alice's self-healed change in the history");
    assert!(by(&healed["attempts"], "mallory") && by(&healed["attempts"], "carol"), "{healed}");
    assert!(by(&healed["attribution"], "alice"), "{healed}");
    assert!(healed["changedAt"].is_string());
    // Argo CD does report it this time, then Git wins again: an episode with the time to
    // detect (from alice's audited request) and to resolve, in /metrics by class.
    api.apply(payments("OutOfSync"));
    wait_for("the drift episode to open", Duration::from_secs(15), || {
        get(&d.admin, "/history").is_some_and(|(_, b)| b.contains("\"outOfSync\":true"))
    });
    api.apply(payments("Synced"));
    wait_for("the detection histogram", Duration::from_secs(15), || {
        d.metric("driftwatch_episode_detection_seconds_count{class=\"security-context\"}") == Some(1.0)
    });
    // Every resolution has its series from the start (at 0): this one resolved once.
    let resolved: f64 = d
        .metrics()
        .lines()
        .filter(|l| l.starts_with("driftwatch_episode_resolution_seconds_count{class=\"security-context\","))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(resolved, 1.0);
    let metrics = d.metrics();
    assert!(metrics.contains("driftwatch_audit_requests_total{code=\"401\"} 2"), "{metrics}");
    assert!(metrics.contains("driftwatch_audit_requests_total{code=\"400\"} 2"), "{metrics}");
    assert!(metrics.contains("driftwatch_audit_requests_total{code=\"413\"} 0"), "{metrics}");
    assert!(metrics.contains("driftwatch_audit_events_total{result=\"argocd\"} 4"), "{metrics}");
    assert!(d.stop().success());

    // `history --stats`: p50/p95 per class and per Application.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["history", "--stats", "-o", "json", "--state"])
        .arg(dir.path().join("state.redb"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sc = &stats["byClass"]["security-context"];
    assert!(sc["detectionP50"].as_i64().is_some_and(|s| s > 0), "{stats}");
    assert!(sc["resolutionP95"].as_i64().is_some(), "{stats}");
    // The attempt-only episode (alice, mallory, carol) and the drift episode.
    assert_eq!(stats["byApp"]["argocd/payments-api"]["episodes"], 2, "{stats}");
}

/// A reload never weakens what the running audit listener accepts (review H3): dropping
/// `audit:` or its token, or moving to a client CA, is refused with the running
/// configuration kept and says why on `/readyz`; a token rotation is applied, after
/// which only the new token is accepted.
#[test]
fn a_reload_never_opens_the_audit_listener() {
    let (dir, _api, ca) = audit_dir();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let _got = receiver(listener);
    std::fs::write(dir.path().join("secrets/rotated"), "rotated-audit-token-0123456789").unwrap();
    let base = common::ATTEMPT_ALERT.replace("PORT", &port.to_string());
    let cfg = dir.path().join("driftwatch.yaml");
    std::fs::write(&cfg, format!("{base}{AUDIT}")).unwrap();
    let (d, addr, rt, client) = start_listening(dir.path(), &ca);
    let empty = || br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}"#.to_vec();
    assert_eq!(post(&rt, &client, &addr, None, empty()), 401);
    let refused = |n: f64| {
        wait_for("the refused reload", Duration::from_secs(15), || {
            d.metric("driftwatch_config_reloads_total{result=\"refused\"}") == Some(n)
        })
    };

    // 1. The audit input removed from the file: the listener keeps its token.
    std::fs::write(&cfg, format!("{base}secretsFile: secrets\n")).unwrap();
    d.signal("HUP");
    refused(1.0);
    let (_, ready) = get(&d.admin, "/readyz").unwrap();
    assert!(ready.contains("restart driftwatch to turn the audit input off"), "{ready}");
    assert_eq!(post(&rt, &client, &addr, None, empty()), 401);
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), empty()), 200);

    // 2. A move to a client CA without a token: refused the same way.
    let mtls = AUDIT
        .replace("keyFile: tls.key}", "keyFile: tls.key, clientCAFile: ca.crt, clientNames: [kube-apiserver]}")
        .replace("  token: $audit-token\n", "");
    std::fs::write(dir.path().join("ca.crt"), &ca).unwrap();
    std::fs::write(&cfg, format!("{base}{mtls}")).unwrap();
    d.signal("HUP");
    refused(2.0);
    assert_eq!(post(&rt, &client, &addr, None, empty()), 401);

    // 3. A token rotation is applied: the old token is refused from then on.
    std::fs::write(&cfg, format!("{base}{}", AUDIT.replace("$audit-token", "$rotated"))).unwrap();
    d.signal("HUP");
    wait_for("the reload", Duration::from_secs(15), || d.metric("driftwatch_config_reloads_total{result=\"ok\"}") == Some(1.0));
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), empty()), 401);
    assert_eq!(post(&rt, &client, &addr, Some("rotated-audit-token-0123456789"), empty()), 200);
    assert_eq!(post(&rt, &client, &addr, None, empty()), 401);
    assert!(d.stop().success());
}

/// The issue's observation on the real API server: a refused `privileged` patch (422
/// from an admission policy) a few seconds after a NetworkPolicy deletion on the same
/// Application was paged reached the chat but never PagerDuty. Both attempts page, and
/// both reach the chat.
#[test]
fn a_refused_attempt_after_a_paged_attempt_on_the_same_application_is_paged() {
    let (dir, api, ca) = audit_dir();
    let (pd_listener, chat_listener) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
    let (pd_port, chat_port) = (pd_listener.local_addr().unwrap().port(), chat_listener.local_addr().unwrap().port());
    let (pages, chat) = (receiver(pd_listener), receiver(chat_listener));
    let config = format!(
        "services:\n  oncall:\n    type: pagerduty\n    apiUrl: http://127.0.0.1:{pd_port}\n    routingKeys: {{security: R0UTINGKEY}}\n    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}\n  chat:\n    type: slack\n    webhookUrl: http://127.0.0.1:{chat_port}\n    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}\n\
         routes:\n  - name: security-attempts\n    match: {{class: [rbac, network-policy, security-context, admission]}}\n    triggers: [on-drift-attempt]\n    recipients: [oncall:security]\n    continue: true\n  - name: attempts\n    triggers: [on-drift-attempt]\n    recipients: [chat:drift]\n{AUDIT}"
    );
    std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
    api.apply(quiet_payments(serde_json::json!([
                    {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "api", "status": "Synced"},
                    {"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy", "namespace": "payments", "name": "deny-all", "status": "Synced"}])));
    let (d, addr, rt, client) = start_listening(dir.path(), &ca);
    let list: serde_json::Value = serde_json::from_slice(&data("eventlist-changes-1.json")).unwrap();
    let alice = list["items"][6].clone();
    let now = chrono::Utc::now();
    // alice deletes the NetworkPolicy.
    let mut delete = alice.clone();
    delete["auditID"] = "audit-np-delete".into();
    delete["verb"] = "delete".into();
    delete["requestURI"] = "/apis/networking.k8s.io/v1/namespaces/payments/networkpolicies/deny-all".into();
    delete["objectRef"] = serde_json::json!({"resource": "networkpolicies", "namespace": "payments", "name": "deny-all", "apiGroup": "networking.k8s.io", "apiVersion": "v1"});
    delete["requestReceivedTimestamp"] = now.to_rfc3339().into();
    delete.as_object_mut().unwrap().remove("requestObject");
    let batch = |items: Vec<serde_json::Value>| {
        serde_json::to_vec(&serde_json::json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items})).unwrap()
    };
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), batch(vec![delete])), 200);
    wait_for("the NetworkPolicy deletion paged", Duration::from_secs(15), || bodies(&pages).len() == 1 && bodies(&chat).len() == 1);
    // Four seconds later, an admission policy refuses her privileged patch (422).
    let mut refused = alice.clone();
    refused["auditID"] = "audit-privileged-422".into();
    refused["requestReceivedTimestamp"] = (now + chrono::Duration::seconds(4)).to_rfc3339().into();
    refused["responseStatus"] = serde_json::json!({"metadata": {}, "status": "Failure", "code": 422, "reason": "Invalid",
        "message": "deployments.apps \"api\" is forbidden: ValidatingAdmissionPolicy 'no-privileged' denied request: privileged containers are not allowed"});
    refused.as_object_mut().unwrap().remove("responseObject");
    // Any client picks its User-Agent (review M7): it must stay text in Slack.
    refused["userAgent"] = "<!channel> <https://sso.evil.example/argocd|Re-authenticate to Argo CD>".into();
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), batch(vec![refused])), 200);
    wait_for("the refused attempt in the chat", Duration::from_secs(15), || bodies(&chat).len() == 2);
    let sent = bodies(&chat).join("\n");
    assert!(!sent.contains("<!channel>") && !sent.contains("<https://sso.evil.example"), "{sent}");
    assert!(sent.contains("&lt;!channel&gt; &lt;https://sso.evil.example/argocd|Re-authenticate to Argo CD&gt;"), "{sent}");
    wait_for("the refused attempt paged", Duration::from_secs(15), || bodies(&pages).len() == 2);
    let page = bodies(&pages).into_iter().find(|b| b.contains("Refused attempt")).expect("the refused attempt's page");
    assert!(page.contains("privileged containers are not allowed"), "{page}");
    // Two incidents: a second attempt is a new page, not a note on the open one.
    let keys: std::collections::BTreeSet<String> = bodies(&pages)
        .iter()
        .map(|b| serde_json::from_str::<serde_json::Value>(b).unwrap()["dedup_key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(d.stop().success());
}

/// Review M3: the audit input is this cluster's. Two Applications list the same
/// `payments/api`: one deploying here, one to another cluster. alice's patch here is an
/// attempt on the first only; a same-named object elsewhere is another's.
#[test]
fn an_application_deploying_elsewhere_gets_no_attempt_on_this_clusters_object() {
    let (dir, api, ca) = audit_dir();
    let got = attempt_alerts(dir.path());
    let app = |name: &str, server: &str| {
        AppBuilder::new(name)
            .synced()
            .healthy()
            .field("/status/history", serde_json::json!([{"id": 1, "revision": common::REV1}]))
            .field("/spec/destination", serde_json::json!({"server": server, "namespace": "payments"}))
            .field(
                "/status/resources",
                serde_json::json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "api", "status": "Synced"}]),
            )
            .build()
    };
    api.apply(app("here", "https://kubernetes.default.svc"));
    api.apply(app("there", "https://other-cluster.example.com:6443"));
    let (d, addr, rt, client) = start_listening(dir.path(), &ca);
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), batch_by("alice")), 200);
    wait_for("alice's attempt on here", Duration::from_secs(15), || records(&got).iter().any(|r| r["app"] == "here"));
    // A second batch after it: once it is in, the first was fully handled.
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), batch_by("carol")), 200);
    wait_for("carol's attempt on here", Duration::from_secs(15), || records(&got).iter().any(|r| r["who"] == "carol"));
    assert!(!records(&got).iter().any(|r| r["app"] == "there"), "{:?}", bodies(&got));
    assert!(d.stop().success());
}

/// Review M4: an event the API server received longer ago than `audit.maxEventAge` (a
/// replayed batch) or dated ahead of now (a forgery dated to come first or to absorb
/// the real attempts of the window) is refused and counted; one received now alerts.
#[test]
fn events_dated_outside_the_clock_skew_are_refused_and_counted() {
    let (dir, api, ca) = audit_dir();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    let config = format!("{}{AUDIT}  maxEventAge: 10m\n  maxEventAhead: 1m\n", common::ATTEMPT_ALERT.replace("PORT", &port.to_string()));
    std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
    api.apply(quiet_payments(serde_json::json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": "api", "status": "Synced"}])));
    let (d, addr, rt, client) = start_listening(dir.path(), &ca);
    let dated = |user: &str, offset: chrono::Duration| {
        let mut list: serde_json::Value = serde_json::from_slice(&batch_by(user)).unwrap();
        let t = (chrono::Utc::now() + offset).to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        list["items"][0]["requestReceivedTimestamp"] = t.clone().into();
        list["items"][0]["stageTimestamp"] = t.into();
        serde_json::to_vec(&list).unwrap()
    };
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), dated("replayed", chrono::Duration::minutes(-20))), 200);
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), dated("ahead", chrono::Duration::minutes(3))), 200);
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), dated("carol", chrono::Duration::seconds(-30))), 200);
    wait_for("carol's attempt", Duration::from_secs(15), || records(&got).iter().any(|r| r["who"] == "carol"));
    assert_eq!(d.metric("driftwatch_audit_events_total{result=\"out-of-time\"}"), Some(2.0), "{}", d.metrics());
    assert_eq!(records(&got).len(), 1, "{:?}", bodies(&got));
    assert!(d.stop().success());
}

/// Review M2: mallory, with no right at all, loops over an Application's 40 managed
/// objects with a patch RBAC refuses. The first 32 refusals of the window are taken and
/// the rest counted; the history holds one attempt-only episode for the Application,
/// not one per request, so it cannot push out the rest of the history.
#[test]
fn a_loop_of_refused_requests_cannot_flood_the_history() {
    let (dir, api, ca) = audit_dir();
    let got = attempt_alerts(dir.path());
    let names: Vec<String> = (0..40).map(|i| format!("api-{i}")).collect();
    let resources: Vec<serde_json::Value> = names
        .iter()
        .map(|n| serde_json::json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments", "name": n, "status": "Synced"}))
        .collect();
    api.apply(quiet_payments(resources.into()));
    let (d, addr, rt, client) = start_listening(dir.path(), &ca);
    let list: serde_json::Value = serde_json::from_slice(&data("eventlist-changes-1.json")).unwrap();
    let mallory = list["items"].as_array().unwrap().iter().find(|e| e["user"]["username"] == "mallory").unwrap().clone();
    let items: Vec<serde_json::Value> = names
        .iter()
        .map(|n| {
            let mut e = mallory.clone();
            e["auditID"] = format!("flood-{n}").into();
            e["objectRef"]["name"] = n.as_str().into();
            e["requestURI"] = format!("/apis/apps/v1/namespaces/payments/deployments/{n}").into();
            e
        })
        .collect();
    let body = serde_json::to_vec(&serde_json::json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items})).unwrap();
    assert_eq!(post(&rt, &client, &addr, Some(TOKEN), body), 200);
    wait_for("the budget's attempts alerted", Duration::from_secs(30), || records(&got).len() >= 32);
    assert_eq!(d.metric("driftwatch_audit_dropped_total{reason=\"actor-over-budget\"}"), Some(8.0), "{}", d.metrics());
    let (_, history) = get(&d.admin, "/history?app=argocd/payments-api").unwrap();
    let episodes: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    assert_eq!(episodes.len(), 1, "one attempt-only episode: {history}");
    assert_eq!(episodes[0]["resolution"], "refused");
    assert_eq!(records(&got).len(), 32, "{:?}", bodies(&got));
    assert!(d.stop().success());
}
