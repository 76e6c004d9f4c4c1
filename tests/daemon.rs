//! `driftwatch run` against a fake API server that speaks the real list/watch protocol,
//! through the real kube client: initial list, status updates of the whole object, a
//! malformed Application, watch restarts, 410 Gone and relist, deletes, a bad reload
//! that keeps the old configuration, the operations endpoints, SIGTERM, and a restart
//! that re-sends nothing.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::apiserver::{FakeApiServer, KUSTOMIZATIONS};
use common::daemon::{Daemon, bodies, has, records, wait_for};
use common::receiver::{get, receiver};
use common::{AppBuilder, REV1, REV2};

const CONFIG: &str = r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:PORT
    retry: {initialBackoff: 100ms, maxBackoff: 500ms}
templates:
  drift:
    message: "{{app.metadata.name}} drifted"
    webhook:
      hook:
        body: '{"VERSION": "{{app.metadata.name}}", "rev": "{{app.status.sync.revision}}"}'
  gone:
    message: "{{app.metadata.name}} deleted"
    webhook:
      hook:
        body: '{"gone": "{{app.metadata.name}}"}'
triggers:
  on-drift:
    - when: app.status.sync.status == "OutOfSync"
      oncePer: app.status.sync.revision
      send: [drift]
  on-gone:
    - when: app.metadata.deletionTimestamp != ()
      oncePer: app.metadata.name
      send: [gone]
"#;

fn config(version: &str, port: u16) -> String {
    CONFIG.replace("PORT", &port.to_string()).replace("VERSION", version)
}

fn app(name: &str, status: &str, rev: &str) -> serde_json::Value {
    AppBuilder::new(name)
        .sync(status, rev)
        .healthy()
        .annotate("notifications.argoproj.io/subscribe.on-drift.hook", "")
        .annotate("notifications.argoproj.io/subscribe.on-gone.hook", "")
        .build()
}

/// Starts the daemon again on the same state, waits for its initial evaluations, and
/// checks that nothing more reached the receiver; stops it.
fn restart_sends_nothing(dir: &Path, got: &Arc<Mutex<Vec<String>>>, evaluations: f64) {
    let before = bodies(got).len();
    let d = Daemon::start(dir);
    wait_for("the initial evaluations", Duration::from_secs(15), || {
        d.metric("driftwatch_evaluations_total").is_some_and(|v| v >= evaluations)
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(bodies(got).len(), before, "re-sent after a restart: {:?}", &bodies(got)[before..]);
    assert!(d.stop().success());
}

/// A fake API server, a receiver for the `hook` service, and a config pointing at it.
struct Setup {
    dir: tempfile::TempDir,
    api: FakeApiServer,
    got: Arc<Mutex<Vec<String>>>,
    port: u16,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    std::fs::write(dir.path().join("driftwatch.yaml"), config("app", port)).unwrap();
    Setup { dir, api, got, port }
}

/// The watch decodes any JSON object and lets the model judge it: an Application whose
/// metadata a typed decoder refuses (labels that are not strings) is one skipped
/// object, not a list page that fails and is retried for ever (never ready).
#[test]
fn an_application_with_bad_metadata_in_the_first_list_is_skipped_and_counted() {
    let Setup { dir, api, got, .. } = setup();
    let mut bad = app("shop-broken", "OutOfSync", REV1);
    bad["metadata"]["labels"] = serde_json::json!({"team": 7});
    api.apply(bad);
    api.apply(app("shop-frontend", "OutOfSync", REV1));
    let d = Daemon::start(dir.path());
    wait_for("shop-frontend", Duration::from_secs(15), || has(&got, r#""app": "shop-frontend""#));
    wait_for("ready", Duration::from_secs(15), || d.metric("driftwatch_ready") == Some(1.0));
    assert_eq!(d.metric("driftwatch_malformed_objects_total{kind=\"application\"}"), Some(1.0));
    assert!(!has(&got, r#""app": "shop-broken""#));
    assert!(d.stop().success());
}

/// An AppProject's subscriptions apply to its Applications: when they change, its
/// Applications are evaluated again without a change of their own.
#[test]
fn a_project_subscription_added_later_notifies_its_applications() {
    let Setup { dir, api, got, .. } = setup();
    let project = |annotations: serde_json::Value| {
        serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
            "metadata": {"name": "default", "namespace": "argocd", "annotations": annotations}, "spec": {}})
    };
    api.apply(project(serde_json::json!({})));
    api.apply(AppBuilder::new("shop-frontend").sync("OutOfSync", REV1).healthy().build());
    api.apply(AppBuilder::new("shop-backend").sync("OutOfSync", REV1).healthy().build());
    let d = Daemon::start(dir.path());
    wait_for("the initial evaluations", Duration::from_secs(15), || d.metric("driftwatch_evaluations_total").is_some_and(|v| v >= 2.0));
    assert!(bodies(&got).is_empty(), "nobody subscribed yet: {:?}", bodies(&got));
    api.apply(project(serde_json::json!({"notifications.argoproj.io/subscribe.on-drift.hook": ""})));
    wait_for("both Applications", Duration::from_secs(15), || {
        has(&got, r#""app": "shop-frontend""#) && has(&got, r#""app": "shop-backend""#)
    });
    assert!(d.stop().success());
}

#[test]
fn watches_a_cluster_end_to_end() {
    let Setup { dir, api, got, port } = setup();
    let cfg = dir.path().join("driftwatch.yaml");

    api.apply(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": "default", "namespace": "argocd"}, "spec": {}}));
    api.apply(app("shop-frontend", "OutOfSync", REV1));
    api.apply(app("shop-backend", "Synced", REV1));
    let d = Daemon::start(dir.path());

    // Initial list: the drifted app is notified once.
    wait_for("shop-frontend", Duration::from_secs(15), || has(&got, r#""app": "shop-frontend""#));

    // A status change arrives as an update of the whole object (no status subresource).
    api.apply(app("shop-backend", "OutOfSync", REV1));
    if std::env::var_os("DRIFTWATCH_TEST_LOGS").is_some() {
        std::thread::sleep(Duration::from_secs(3));
        eprintln!("bodies: {:?}\n{}", bodies(&got), d.metrics());
    }
    wait_for("shop-backend", Duration::from_secs(15), || has(&got, r#""app": "shop-backend""#));

    // A malformed Application is skipped and counted; the stream goes on.
    let mut bad = app("shop-broken", "OutOfSync", REV1);
    bad["status"] = serde_json::json!("not a mapping");
    api.apply(bad);
    api.apply(app("shop-cart", "OutOfSync", REV1));
    wait_for("shop-cart", Duration::from_secs(15), || has(&got, r#""app": "shop-cart""#));
    assert_eq!(d.metric("driftwatch_malformed_objects_total{kind=\"application\"}"), Some(1.0));

    // The watch connection drops mid-stream: the watcher resumes.
    api.drop_watches();
    std::thread::sleep(Duration::from_millis(200));
    api.apply(app("shop-search", "OutOfSync", REV1));
    wait_for("shop-search", Duration::from_secs(20), || has(&got, r#""app": "shop-search""#));

    // History compacted while disconnected: 410 Gone, relist; nothing is re-sent, and
    // what changed in between is delivered once.
    let (lists_before, _) = api.counts();
    api.compact();
    api.drop_watches();
    api.apply(app("shop-payments", "OutOfSync", REV1));
    wait_for("shop-payments", Duration::from_secs(30), || has(&got, r#""app": "shop-payments""#));
    wait_for("a relist", Duration::from_secs(10), || api.counts().0 > lists_before);

    // A deleted Application: on-deleted style trigger fires, its state is cleaned.
    api.delete("applications", "argocd", "shop-cart");
    wait_for("the deletion", Duration::from_secs(15), || has(&got, r#""gone": "shop-cart""#));

    // A bad reload keeps the old configuration running.
    std::fs::write(&cfg, config("app", port).replace("app.status.sync.status == \"OutOfSync\"", "app.status.sync.status ==")).unwrap();
    d.signal("HUP");
    wait_for("reload failure gauge", Duration::from_secs(10), || d.metric("driftwatch_config_last_reload_successful") == Some(0.0));
    api.apply(app("shop-admin", "OutOfSync", REV1));
    wait_for("shop-admin with the old config", Duration::from_secs(15), || has(&got, r#""app": "shop-admin""#));
    // A good configuration is picked up from the file change alone.
    std::fs::write(&cfg, config("v2", port)).unwrap();
    wait_for("reload success gauge", Duration::from_secs(15), || d.metric("driftwatch_config_last_reload_successful") == Some(1.0));
    api.apply(app("shop-admin", "OutOfSync", REV2));
    wait_for("the new config", Duration::from_secs(15), || has(&got, r#""v2": "shop-admin""#));

    // No notification was sent twice.
    let mut all = bodies(&got);
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "duplicates: {:?}", bodies(&got));

    // Operations endpoints. (The receiver records a body before the daemon's settle
    // commits: wait for the record, which empties the queue, before reading.)
    assert_eq!(get(&d.admin, "/healthz").map(|(s, _)| s), Some(200));
    wait_for("the last deliveries recorded", Duration::from_secs(10), || {
        d.metric(r#"driftwatch_queue_depth{service="hook"}"#) == Some(0.0)
    });
    let metrics = d.metrics();
    for needle in [
        "driftwatch_watch_events_total{type=\"application_apply\"}",
        "driftwatch_evaluations_total ",
        "driftwatch_notifications_sent_total{kind=\"webhook\"}",
        "driftwatch_queue_depth{service=\"hook\"} 0",
        "driftwatch_evaluation_duration_seconds_bucket",
        "driftwatch_leader 1",
        "driftwatch_triggers_fired_total{trigger=\"on-drift\"}",
    ] {
        assert!(metrics.contains(needle), "no {needle} in\n{metrics}");
    }
    assert!(!metrics.contains("shop-"), "an Application name is a metric label:\n{metrics}");
    // Every delivery came from a watch event: each is one observation of the time from
    // that event's arrival to the delivery acknowledged.
    assert_eq!(
        d.metric(r#"driftwatch_notification_latency_seconds_count{kind="webhook"}"#),
        Some(n as f64),
        "one latency per delivery:\n{metrics}"
    );
    assert!(d.metric(r#"driftwatch_notification_latency_seconds_sum{kind="webhook"}"#).is_some_and(|s| s > 0.0));

    // SIGTERM: a clean exit.
    let status = d.stop();
    assert!(status.success(), "{status:?}");

    // Restarted with the same state: the initial list re-sends nothing.
    restart_sends_nothing(dir.path(), &got, 5.0);
}

/// Two replicas share the state file (as on a shared volume) and elect the sender with a
/// Lease: the standby sends nothing; when the leader is killed, the standby takes over
/// once the lease expires, delivers what changed meanwhile, and re-sends nothing.
#[test]
fn leader_handover_without_duplicates() {
    let Setup { dir, api, got, .. } = setup();
    let ha = ["--leader-election", "--lease-duration", "2", "--lease-namespace", "argocd"];

    let a = Daemon::start_with(dir.path(), &ha);
    wait_for("a leads", Duration::from_secs(10), || a.metric("driftwatch_leader") == Some(1.0));
    let b = Daemon::start_with(dir.path(), &ha);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(b.metric("driftwatch_leader"), Some(0.0), "the standby must not lead while the leader renews");

    api.apply(app("ha-one", "OutOfSync", REV1));
    wait_for("ha-one", Duration::from_secs(10), || has(&got, r#""app": "ha-one""#));
    // Recorded: the queue depth comes from the counters the settle that records the
    // key changes, in the same transaction. (A kill between a receiver's answer and
    // that record repeats the delivery, with the same Idempotency-Key; that window is
    // the crash test's, not this one's.)
    wait_for("ha-one recorded", Duration::from_secs(10), || a.metric(r#"driftwatch_queue_depth{service="hook"}"#) == Some(0.0));

    // The leader dies without a goodbye; a change happens before anyone takes over.
    let mut a = a;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    api.apply(app("ha-two", "OutOfSync", REV1));
    wait_for("b takes over", Duration::from_secs(15), || b.metric("driftwatch_leader") == Some(1.0));
    wait_for("ha-two", Duration::from_secs(10), || has(&got, r#""app": "ha-two""#));
    std::thread::sleep(Duration::from_millis(500));
    let all = bodies(&got);
    assert_eq!(all.iter().filter(|b| b.contains("ha-one")).count(), 1, "{all:?}");
    assert_eq!(all.iter().filter(|b| b.contains("ha-two")).count(), 1, "{all:?}");

    // A leader that cannot renew its lease stops sending (before the lease could pass
    // to another replica), and leads again once it can.
    api.lease_outage(true);
    wait_for("b steps down", Duration::from_secs(10), || b.metric("driftwatch_leader") == Some(0.0));
    api.lease_outage(false);
    wait_for("b leads again", Duration::from_secs(10), || b.metric("driftwatch_leader") == Some(1.0));
    assert!(b.stop().success());
}

/// The SIEM and the security page, every episode record to the SIEM, attribution
/// fresh for a second.
fn drift_config(port: u16) -> String {
    let routes = "  - name: siem\n    triggers: [on-drift-episode]\n    recipients: [siem]\nattribution:\n  ttl: 1s\n";
    format!("{}{routes}", common::SIEM_AND_SECURITY_PAGE.replace("PORT", &port.to_string()))
}

fn drifted_shop(sync: &str) -> serde_json::Value {
    let status = |kind: &str| if sync == "OutOfSync" && kind != "Service" { "OutOfSync" } else { "Synced" };
    AppBuilder::new("shop")
        .sync(sync, REV1)
        .healthy()
        .field("/status/history", serde_json::json!([{"id": 1, "revision": REV1}]))
        .field(
            "/status/resources",
            serde_json::json!([
                {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "shop", "name": "web", "status": status("Deployment")},
                {"version": "v1", "kind": "ConfigMap", "namespace": "shop", "name": "web-config", "status": status("ConfigMap")},
                {"version": "v1", "kind": "Service", "namespace": "shop", "name": "web", "status": status("Service")}
            ]),
        )
        .build()
}

fn find(got: &Arc<Mutex<Vec<String>>>, rule: &str, event: &str) -> Option<serde_json::Value> {
    records(got).into_iter().find(|r| r["rule"]["name"] == rule && r["driftwatch"]["episode"]["event"] == event)
}

/// Drift intelligence against the API server, through the real kube client: the
/// daemon reads the drifted resources' live objects, attributes a privileged
/// securityContext to `kubectl-edit`, holds the new episode's notifications for those
/// reads so it opens as the page it is (by route, with no annotation), resolves the page when the Application is Synced again,
/// and keeps the episode in a history that survives a restart.
#[test]
fn live_drift_is_attributed_escalated_resolved_and_kept() {
    let Setup { dir, api, got, port } = setup();
    std::fs::write(dir.path().join("driftwatch.yaml"), drift_config(port)).unwrap();
    api.put_live(serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop",
        "managedFields": [
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-03-01T10:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}}}},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-02T03:12:04Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:securityContext": {".": {}, "f:privileged": {}}}}}}}}}]},
        "spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}}));
    api.put_live(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config", "namespace": "shop",
        "managedFields": [{"manager": "kubectl-patch", "operation": "Update", "time": "2026-03-02T03:13:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:data": {"f:LOG_LEVEL": {}}}}]}, "data": {"LOG_LEVEL": "debug"}}));
    api.apply(drifted_shop("OutOfSync"));
    let d = Daemon::start(dir.path());

    // Its notifications waited for the live reads: it opens as the security drift
    // they show (critical), with who, and nothing was said before.
    wait_for("the episode opening", Duration::from_secs(15), || find(&got, "on-drift-episode", "opened").is_some());
    wait_for("the page", Duration::from_secs(15), || find(&got, "on-security-drift", "opened").is_some());
    let opened = find(&got, "on-drift-episode", "opened").unwrap();
    assert_eq!(opened["driftwatch"]["episode"]["severity"], "critical", "{opened}");
    let page = find(&got, "on-security-drift", "opened").unwrap();
    assert_eq!(page["user"]["name"], "kubectl-edit", "{page}");
    assert_eq!(page["event"]["severity"], 2, "critical: {page}");
    let ep = &page["driftwatch"]["episode"];
    assert_eq!(
        ep["classes"],
        serde_json::json!(["config", "security-context", "workload"]),
        "the episode keeps what it saw before attribution: {ep}"
    );
    assert_eq!(ep["direction"], "live");
    let edit = ep["attribution"].as_array().unwrap().iter().find(|a| a["resource"] == "Deployment shop/web").unwrap();
    assert_eq!(edit["securityFields"], serde_json::json!(["spec.template.spec.containers[web].securityContext.privileged"]));
    assert!(page["message"].as_str().unwrap().contains("kubectl-edit (Update) changed spec.template.spec.containers[web].securityContext.privileged on Deployment shop/web at 03:12 UTC"), "{page}");

    // The drifted objects were read in full (for the diff); nothing escalated.
    let gets = api.live_gets();
    assert!(gets.iter().any(|(p, _)| p == "/apis/apps/v1/namespaces/shop/deployments/web"), "{gets:?}");
    assert!(gets.iter().any(|(p, _)| p == "/api/v1/namespaces/shop/configmaps/web-config"), "{gets:?}");
    // A Synced resource is read once for its revision (the in-sync record of its
    // security values), not at every evaluation: the Service is not there, which is
    // recorded too.
    assert!(gets.iter().filter(|(p, _)| p.contains("/services/")).count() <= 1, "a Synced resource is read once: {gets:?}");
    assert_eq!(d.metric("driftwatch_drift_episodes_total{event=\"escalated\"}").unwrap_or(0.0), 0.0);
    assert_eq!(records(&got).iter().filter(|r| r["driftwatch"]["episode"]["event"] == "escalated").count(), 0);
    assert!(d.metric("driftwatch_live_reads_total").is_some_and(|n| n >= 2.0));

    // Both reads are in the episode (the ConfigMap's may come after the page).
    wait_for("the ConfigMap's attribution", Duration::from_secs(15), || {
        get(&d.admin, "/history").is_some_and(|(_, body)| body.contains("\"manager\":\"kubectl-patch\""))
    });

    // Self-heal: Synced again. The page is resolved (same condition), the SIEM gets the
    // resolved record with the duration.
    api.apply(drifted_shop("Synced"));
    wait_for("the resolve", Duration::from_secs(15), || {
        records(&got).iter().any(|r| r["rule"]["name"] == "on-security-drift" && r["labels"]["action"] == "resolve")
    });
    wait_for("the resolved record", Duration::from_secs(15), || find(&got, "on-drift-episode", "resolved").is_some());
    let resolved = find(&got, "on-drift-episode", "resolved").unwrap();
    assert_eq!(resolved["event"]["type"], serde_json::json!(["change", "end"]));
    assert!(resolved["event"]["duration"].as_u64().is_some(), "{resolved}");
    let pages: Vec<serde_json::Value> = records(&got).into_iter().filter(|r| r["rule"]["name"] == "on-security-drift").collect();
    assert_eq!(pages.len(), 2, "one page, one resolve: {pages:?}");
    assert_eq!(pages[0]["rule"]["id"], pages[1]["rule"]["id"]);

    // The history, from the running leader and after a restart. A delivery is noted in
    // its episode by the settle that records it, which commits after the receiver got
    // it: wait for the resolve's note.
    let noted = |body: &str| -> Vec<String> {
        let eps: Vec<serde_json::Value> = serde_json::from_str(body).unwrap_or_default();
        eps.iter()
            .flat_map(|e| e["notifications"].as_array().cloned().unwrap_or_default())
            .map(|n| format!("{} {}", n["trigger"].as_str().unwrap_or_default(), n["action"].as_str().unwrap_or_default()))
            .collect()
    };
    wait_for("the resolve noted in the episode", Duration::from_secs(10), || {
        get(&d.admin, "/history?app=argocd%2Fshop").is_some_and(|(_, b)| noted(&b).contains(&"on-security-drift resolve".to_string()))
    });
    let (status, body) = get(&d.admin, "/history?app=argocd%2Fshop").unwrap();
    assert_eq!(status, 200, "{body}");
    let eps: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(eps.len(), 1, "{body}");
    assert_eq!((eps[0]["state"].as_str(), eps[0]["severity"].as_str()), (Some("resolved"), Some("critical")));
    let sent: Vec<String> = eps[0]["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| format!("{} {}", n["trigger"].as_str().unwrap(), n["action"].as_str().unwrap()))
        .collect();
    assert!(sent.contains(&"on-security-drift fire".to_string()) && sent.contains(&"on-security-drift resolve".to_string()), "{sent:?}");
    // While the daemon holds the state file, the CLI says where to ask instead.
    let o =
        Command::new(env!("CARGO_BIN_EXE_driftwatch")).args(["history", "--state"]).arg(dir.path().join("state.redb")).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/history endpoint"), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(d.stop().success());
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["history", "--state"])
        .arg(dir.path().join("state.redb"))
        .args(["--class", "security-context", "-o", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let eps: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(eps.len(), 1);
    assert_eq!(eps[0]["attribution"][0]["manager"], "kubectl-edit", "the security change leads: {eps:?}");
    assert_eq!(eps[0]["attribution"][1]["manager"], "kubectl-patch", "{eps:?}");
    // Restarted on a Synced cluster: nothing is sent again.
    restart_sends_nothing(dir.path(), &got, 1.0);
}

/// A hold-down in the daemon: an Application Degraded longer than `for:` is notified
/// with no further change from the API server (the daemon wakes itself up); one that
/// recovers within it is never notified.
#[test]
fn hold_down_wakes_the_daemon_and_a_blip_pages_nobody() {
    let Setup { dir, api, got, port } = setup();
    let config = r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:PORT
triggers:
  on-degraded-held:
    - when: app.status.health.status == "Degraded"
      for: 2s
      send: [degraded]
templates:
  degraded:
    message: "{{app.metadata.name}} degraded"
    webhook:
      hook:
        body: '{"degraded": "{{app.metadata.name}}"}'
subscriptions:
  - recipients: [hook]
    triggers: [on-degraded-held]
"#;
    std::fs::write(dir.path().join("driftwatch.yaml"), config.replace("PORT", &port.to_string())).unwrap();
    api.apply(AppBuilder::new("steady").synced().degraded().build());
    api.apply(AppBuilder::new("blip").synced().degraded().build());
    let d = Daemon::start(dir.path());
    api.apply(AppBuilder::new("blip").synced().healthy().build());
    wait_for("the held-down notification", Duration::from_secs(15), || has(&got, r#""degraded": "steady""#));
    // Past the hold-down of the blip as well: it was never notified.
    std::thread::sleep(Duration::from_secs(2));
    assert!(!has(&got, r#""degraded": "blip""#), "{:?}", bodies(&got));
    assert_eq!(bodies(&got).len(), 1, "{:?}", bodies(&got));
    assert!(d.stop().success());
}

/// An Application whose Secret, custom resource (a kind the shipped RBAC does not
/// cover) and ConfigMap drifted live.
fn drifted_vault(generation: u32) -> serde_json::Value {
    AppBuilder::new("vault")
        .sync("OutOfSync", REV1)
        .healthy()
        .field("/metadata/labels/generation", serde_json::json!(generation.to_string()))
        .field("/status/history", serde_json::json!([{"id": 1, "revision": REV1}]))
        .field(
            "/status/resources",
            serde_json::json!([
                {"version": "v1", "kind": "Secret", "namespace": "shop", "name": "db", "status": "OutOfSync"},
                {"group": "example.com", "version": "v1", "kind": "Widget", "namespace": "shop", "name": "w", "status": "OutOfSync"},
                {"version": "v1", "kind": "ConfigMap", "namespace": "shop", "name": "cfg", "status": "OutOfSync"}
            ]),
        )
        .build()
}

/// The attribution of `kind` in the one episode `/history` holds.
fn attribution_in_history(d: &Daemon, kind: &str) -> Option<serde_json::Value> {
    let (_, body) = get(&d.admin, "/history?app=argocd%2Fvault")?;
    let eps: Vec<serde_json::Value> = serde_json::from_str(&body).ok()?;
    let r = eps.first()?["resources"].as_array()?.iter().find(|r| r["kind"] == kind)?.clone();
    Some(r["attribution"].clone()).filter(|a| !a.is_null())
}

/// Least privilege under the shipped RBAC (the fake API server enforces it): a drifted
/// Secret is classified and reported but never read; a kind the RBAC does not cover is
/// refused once, logged once, counted, marked "forbidden" in the episode and not asked
/// again while the drift lasts; the ConfigMap is attributed as usual. With the opt-in
/// (its ClusterRole and `attribution.readSecrets`), the Secret's metadata is read.
#[test]
fn secrets_are_not_read_and_a_forbidden_kind_is_reported_once() {
    let Setup { dir, api, got, port } = setup();
    std::fs::write(dir.path().join("driftwatch.yaml"), drift_config(port)).unwrap();
    let edited = |kind: &str, name: &str, fields: serde_json::Value| {
        serde_json::json!({"metadata": {"name": name, "namespace": "shop", "managedFields": [
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-02T03:12:04Z", "fieldsType": "FieldsV1", "fieldsV1": fields}]},
            "kind": kind})
    };
    let mut secret = edited("Secret", "db", serde_json::json!({"f:data": {"f:password": {}}}));
    secret["apiVersion"] = "v1".into();
    secret["data"] = serde_json::json!({"password": "aHVudGVyMg=="});
    api.put_live(secret);
    let mut widget = edited("Widget", "w", serde_json::json!({"f:spec": {"f:size": {}}}));
    widget["apiVersion"] = "example.com/v1".into();
    api.put_live(widget);
    let mut cm = edited("ConfigMap", "cfg", serde_json::json!({"f:data": {"f:LOG_LEVEL": {}}}));
    cm["apiVersion"] = "v1".into();
    api.put_live(cm);
    api.apply(drifted_vault(0));
    let d = Daemon::start(dir.path());

    // Reported (classified) although nothing about the Secret or the Widget is known.
    wait_for("the episode opening", Duration::from_secs(15), || find(&got, "on-drift-episode", "opened").is_some());
    let opened = find(&got, "on-drift-episode", "opened").unwrap();
    assert_eq!(opened["driftwatch"]["episode"]["classes"], serde_json::json!(["config", "other", "secret"]), "{opened}");
    wait_for("all three attributions", Duration::from_secs(15), || {
        ["Secret", "Widget", "ConfigMap"].iter().all(|k| attribution_in_history(&d, k).is_some())
    });
    let secret = attribution_in_history(&d, "Secret").unwrap();
    assert_eq!(secret["notRead"]["reason"], "secrets-off", "{secret}");
    assert!(secret["notRead"]["message"].as_str().unwrap().contains("attribution.readSecrets"), "{secret}");
    let widget = attribution_in_history(&d, "Widget").unwrap();
    assert_eq!(widget["notRead"]["reason"], "forbidden", "{widget}");
    let why = widget["notRead"]["message"].as_str().unwrap();
    assert!(why.contains(r#"{apiGroups: ["example.com"], resources: ["widgets"], verbs: ["get"]}"#), "{why}");
    assert!(why.contains("driftwatch.io/aggregate-to-attribution"), "{why}");
    let cm = attribution_in_history(&d, "ConfigMap").unwrap();
    assert_eq!(cm["managers"][0]["manager"], "kubectl-edit", "{cm}");
    assert!(cm.get("notRead").is_none(), "{cm}");

    // The drift goes on past the attribution TTL (1s) and the Application changes:
    // the refusal is answered from memory, no request is sent again.
    let forbidden = r#"driftwatch_live_reads_forbidden_total{resource="widgets.example.com"}"#;
    for generation in 1..=2 {
        std::thread::sleep(Duration::from_millis(1100));
        api.apply(drifted_vault(generation));
        wait_for("the refusal answered again", Duration::from_secs(15), || d.metric(forbidden) >= Some(f64::from(generation) + 1.0));
    }
    let refused = api.refused();
    assert_eq!(
        refused,
        vec![("get".to_string(), "/apis/example.com/v1/namespaces/shop/widgets/w".to_string())],
        "one request, one refusal"
    );
    let gets = api.live_gets();
    assert!(!gets.iter().any(|(p, _)| p.contains("/secrets/")), "a Secret was asked for: {gets:?}");
    assert_eq!(d.log_lines("attribution is not permitted").len(), 1, "logged once per kind");
    assert!(d.log_lines("attribution is not permitted")[0].contains("widgets.example.com"));
    assert!(d.stop().success());

    // The opt-in: its ClusterRole applied and readSecrets on. The Secret is read (in
    // full, for the diff), and its data is only ever shown as changed.
    api.set_rbac(Some(common::rbac::service_account_rules(true)));
    let opt_in = drift_config(port).replace("  ttl: 1s\n", "  ttl: 1s\n  readSecrets: true\n");
    std::fs::write(dir.path().join("driftwatch.yaml"), opt_in).unwrap();
    let d = Daemon::start(dir.path());
    wait_for("the Secret's attribution", Duration::from_secs(15), || {
        attribution_in_history(&d, "Secret").is_some_and(|a| a["managers"][0]["manager"] == "kubectl-edit")
    });
    let gets = api.live_gets();
    assert!(gets.iter().any(|(p, _)| p == "/api/v1/namespaces/shop/secrets/db"), "{gets:?}");
    let (_, history) = get(&d.admin, "/history?app=argocd%2Fvault").unwrap();
    assert!(history.contains(r#""path":"data.password","desired":"(not known)","live":"(changed)""#), "{history}");
    assert!(!history.contains("aHVudGVyMg=="), "a Secret's data never shows: {history}");
    assert!(d.stop().success());
}

/// A service whose secret is not set: `run` says which service, which key and where it
/// was looked for, exits non-zero before touching the cluster or the state file, with
/// no second error; `check` names the same secret.
#[test]
fn a_missing_secret_is_the_one_start_up_error() {
    let Setup { dir, .. } = setup();
    let cfg = "services:\n  oncall:\n    type: pagerduty\n    routingKeys:\n      platform: $pd-key\n";
    std::fs::write(dir.path().join("driftwatch.yaml"), cfg).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(common::daemon::run_args(dir.path()))
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("DRIFTWATCH_SECRET_PD_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let missing =
        "services.oncall: secret $pd-key is not set: no secretsFile is configured, and no environment variable DRIFTWATCH_SECRET_PD_KEY";
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors, [format!("error: {missing}")], "{stderr}");
    assert!(!stderr.contains("state store"), "no second, misleading error: {stderr}");
    assert!(!dir.path().join("state.redb").exists(), "nothing created");

    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["check", "--config"])
        .arg(dir.path().join("driftwatch.yaml"))
        .env_remove("DRIFTWATCH_SECRET_PD_KEY")
        .output()
        .unwrap();
    let check = String::from_utf8_lossy(&o.stderr);
    assert!(check.contains(&format!("warning: {missing} (driftwatch run will not start without it)")), "{check}");
}

/// An Application in `ns` subscribed to `on-drift` and `on-gone` on the hook.
fn app_in(ns: &str, name: &str, rev: &str) -> serde_json::Value {
    let mut v = app(name, "OutOfSync", rev);
    v["metadata"]["namespace"] = ns.into();
    v
}

/// The AppProject `payments` in `argocd`, whose subscription (`on-drift` to `hook`)
/// applies to its Applications, which carry no annotation.
fn payments_project() -> serde_json::Value {
    serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": "payments", "namespace": "argocd",
                     "annotations": {"notifications.argoproj.io/subscribe.on-drift.hook": ""}}, "spec": {}})
}

/// An OutOfSync Application of the project `payments`, in `team-a`.
fn payments_app(name: &str) -> serde_json::Value {
    let mut a = AppBuilder::new(name).sync("OutOfSync", REV1).healthy().field("/metadata/namespace", serde_json::json!("team-a")).build();
    a["spec"]["project"] = "payments".into();
    a
}

/// `-n team-a -n team-b`, as the issue saw it against a real API server: readiness waits
/// for every namespace's list, AppProjects are watched in Argo CD's namespace whatever
/// `-n` says, and a `410 Gone` in one namespace relists that namespace only: nothing is
/// deleted, nothing re-sent, the other namespace's stream goes on.
#[test]
fn several_namespaces_relist_one_at_a_time_without_deletes_or_resends() {
    let Setup { dir, api, got, .. } = setup();
    // A project in argocd subscribes its Applications (which carry no annotation).
    api.apply(payments_project());
    for ns in ["team-a", "team-b"] {
        for i in 1..=3 {
            api.apply(app_in(ns, &format!("{ns}-{i}"), REV1));
        }
    }
    api.apply(payments_app("team-a-billing"));

    // team-b's list is slow: team-a is evaluated, but the daemon is not ready yet.
    api.hold_lists("team-b", true);
    let d = Daemon::spawn(dir.path(), &["-n", "team-a", "-n", "team-b"]);
    wait_for("team-a", Duration::from_secs(15), || (1..=3).all(|i| has(&got, &format!(r#""app": "team-a-{i}""#))));
    let (status, body) = get(&d.admin, "/readyz").unwrap();
    assert_eq!(status, 503, "ready before team-b was listed: {body}");
    api.hold_lists("team-b", false);
    wait_for("ready", Duration::from_secs(15), || get(&d.admin, "/readyz").is_some_and(|(s, _)| s == 200));
    wait_for("team-b", Duration::from_secs(15), || (1..=3).all(|i| has(&got, &format!(r#""app": "team-b-{i}""#))));
    wait_for("the project's subscription", Duration::from_secs(15), || has(&got, r#""app": "team-a-billing""#));
    let sent = bodies(&got).len();
    assert_eq!(sent, 7, "{:?}", bodies(&got));

    // etcd compacted under team-a's watch: 410 Gone, team-a relists.
    let lists = d.metric(r#"driftwatch_watch_events_total{type="application_list"}"#).unwrap();
    api.compact_namespace("team-a");
    api.drop_watches_in("team-a");
    wait_for("team-a's relist", Duration::from_secs(20), || {
        d.metric(r#"driftwatch_watch_events_total{type="application_list"}"#).is_some_and(|n| n > lists)
    });
    // Events after the relist arrive in order on both streams.
    api.apply(app_in("team-a", "team-a-4", REV1));
    api.apply(app_in("team-b", "team-b-1", REV2));
    wait_for("team-a-4", Duration::from_secs(15), || has(&got, r#""app": "team-a-4""#));
    wait_for("team-b-1's new revision", Duration::from_secs(15), || has(&got, &format!(r#""rev": "{REV2}""#)));
    let all = bodies(&got);
    assert_eq!(all.len(), sent + 2, "nothing deleted, nothing re-sent: {:?}", &all[sent..]);
    assert!(!all.iter().any(|b| b.contains("gone")), "{all:?}");
    assert_eq!(d.metric(r#"driftwatch_watch_events_total{type="application_delete"}"#), None, "no delete counted");
    assert!(d.stop().success());
}

/// At the start the Applications are listed once the AppProjects are: an Application
/// evaluated before its project is known is evaluated again when the project comes (its
/// subscriptions apply), a first pass thrown away per Application. With the AppProjects'
/// list slow, no Application is asked for meanwhile, and each is evaluated once.
#[test]
fn applications_are_listed_once_the_projects_are() {
    let Setup { dir, api, got, .. } = setup();
    api.apply(payments_project());
    for i in 1..=3 {
        api.apply(payments_app(&format!("billing-{i}")));
    }
    api.hold_lists("argocd", true);
    let d = Daemon::spawn(dir.path(), &["-n", "team-a", "--projects-namespace", "argocd"]);
    wait_for("the AppProjects' list held", Duration::from_secs(15), || api.holding() == 1);
    api.hold_lists("argocd", false);
    wait_for("ready", Duration::from_secs(15), || get(&d.admin, "/readyz").is_some_and(|(s, _)| s == 200));
    wait_for("the project's subscriptions", Duration::from_secs(15), || (1..=3).all(|i| has(&got, &format!(r#""app": "billing-{i}""#))));
    let arrivals = api.list_arrivals();
    assert_eq!(
        arrivals,
        [("appprojects".to_string(), false), ("applications".to_string(), false)],
        "the Applications asked for after the AppProjects' answer, not while it was held"
    );
    assert_eq!(d.metric("driftwatch_evaluations_total"), Some(3.0), "each Application evaluated once");
    assert_eq!(bodies(&got).len(), 3, "{:?}", bodies(&got));
    assert!(d.stop().success());
}

/// On a cluster with Flux, the daemon finds Kustomizations served (discovery, a list of
/// one) and watches them: ready ones send nothing; one turning `Ready=False` with
/// `BuildFailed` sends the catalog's `on-reconcile-failed` once, naming the unit, the
/// controller's reason and message and the revision attempted. A relist (the history
/// compacted while the watch was down) sends nothing again; a new failure after it, once.
#[test]
fn kustomizations_are_discovered_and_watched_and_a_build_failure_sent_once() {
    let Setup { dir, api, got, port } = setup();
    api.install(KUSTOMIZATIONS);
    let config = format!(
        "services:\n  hook:\n    type: webhook\n    url: http://127.0.0.1:{port}\n    retry: {{initialBackoff: 100ms, maxBackoff: 500ms}}\ntemplates:\n{}{}",
        common::RECONCILE_FAILED_TEMPLATE,
        common::FLUX_SUBSCRIPTION
    );
    std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
    const APPLIED: &str = "main@sha1:1111111111111111111111111111111111111111";
    const ATTEMPTED: &str = "main@sha1:2222222222222222222222222222222222222222";
    api.apply(common::kustomization("apps", APPLIED, 3));
    api.apply(common::kustomization("infra", APPLIED, 3));
    let d = Daemon::start(dir.path());
    wait_for("both Kustomizations evaluated", Duration::from_secs(15), || {
        d.metric("driftwatch_evaluations_total").is_some_and(|v| v >= 2.0)
    });
    assert!(api.list_arrivals().iter().any(|(r, _)| r == "kustomizations"), "{:?}", api.list_arrivals());
    assert_eq!(d.metric(r#"driftwatch_watch_events_total{type="kustomization_list"}"#), Some(1.0));
    std::thread::sleep(Duration::from_millis(300));
    assert!(bodies(&got).is_empty(), "ready units send nothing: {:?}", bodies(&got));

    let message = "kustomize build failed: accumulating resources: 'apps/missing.yaml' not found";
    api.apply(common::reconcile_failed(common::kustomization("apps", APPLIED, 3), "BuildFailed", message, ATTEMPTED));
    wait_for("the build failure", Duration::from_secs(15), || has(&got, "BuildFailed"));
    let sent: serde_json::Value = serde_json::from_str(&bodies(&got)[0]).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"unit": "apps", "kind": "Kustomization", "reason": "BuildFailed", "message": message, "rev": ATTEMPTED, "resolved": false})
    );

    // The watch dropped while the history was compacted: 410 Gone, the Kustomizations
    // are listed again; the failure is not sent again.
    let lists = d.metric(r#"driftwatch_watch_events_total{type="kustomization_list"}"#).unwrap();
    api.compact();
    api.drop_watches();
    wait_for("the Kustomizations' relist", Duration::from_secs(20), || {
        d.metric(r#"driftwatch_watch_events_total{type="kustomization_list"}"#).is_some_and(|n| n > lists)
    });
    // A failure after the relist arrives, once.
    api.apply(common::reconcile_failed(common::kustomization("infra", APPLIED, 3), "HealthCheckFailed", "timeout", ATTEMPTED));
    wait_for("infra's failure", Duration::from_secs(15), || has(&got, "HealthCheckFailed"));
    std::thread::sleep(Duration::from_millis(500));
    let all = bodies(&got);
    assert_eq!(all.iter().filter(|b| b.contains("BuildFailed")).count(), 1, "sent again after the relist: {all:?}");
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(d.stop().success());
}

/// Out of file descriptors (connections held open against the operations port until
/// accept fails), the operations server goes on: once they close, `/healthz` answers.
/// The accept loop used to end at the first accept error, taking `/healthz` with it.
#[test]
fn the_operations_server_survives_running_out_of_descriptors() {
    let Setup { dir, api, .. } = setup();
    api.apply(app("shop", "Synced", REV1));
    let d = Daemon::spawn_limited(dir.path(), &[], Some(96));
    wait_for("/readyz", Duration::from_secs(30), || get(&d.admin, "/readyz").is_some_and(|(s, _)| s == 200));
    // Hold connections open until the daemon has no descriptor left to accept with,
    // from several addresses (one address gets at most 32 on this port).
    let admin: std::net::SocketAddr = d.admin.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let held = rt.block_on(async {
        let mut held = Vec::new();
        for n in 0..200 {
            let Ok(s) = tokio::net::TcpSocket::new_v4() else { break };
            if s.bind(format!("127.0.0.{}:0", 2 + n % 8).parse().unwrap()).is_err() {
                break;
            }
            match s.connect(admin).await {
                Ok(c) => held.push(c),
                Err(_) => break,
            }
        }
        held
    });
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", d.child.id())).map_or(0, |e| e.count());
    wait_for("the descriptor table full", Duration::from_secs(10), || fds() >= 95);
    drop(held);
    wait_for("/healthz after the descriptors came back", Duration::from_secs(10), || {
        get(&d.admin, "/healthz").is_some_and(|(s, _)| s == 200)
    });
    assert!(!d.log_lines("accepting an operations connection failed").is_empty(), "the failure is logged");
}

/// A condition on an episode's duration (computed from the clock) is re-evaluated on
/// the resync schedule with no change from the API server. Time-dependence used to be
/// guessed from the text `now(`, so this one never fired.
#[test]
fn a_condition_on_the_episode_duration_fires_without_a_change() {
    let Setup { dir, api, got, port } = setup();
    let cfg = format!(
        r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:{port}
templates:
  long:
    message: "{{{{app.metadata.name}}}} drifted for long"
    webhook:
      hook:
        body: '{{"long": "{{{{app.metadata.name}}}}"}}'
triggers:
  on-long-drift:
    - when: episode.open && episode.durationSeconds >= 2
      oncePer: episode.id
      send: [long]
"#
    );
    std::fs::write(dir.path().join("driftwatch.yaml"), cfg).unwrap();
    api.apply(
        AppBuilder::new("slow")
            .sync("OutOfSync", REV1)
            .healthy()
            .annotate("notifications.argoproj.io/subscribe.on-long-drift.hook", "")
            .build(),
    );
    let d = Daemon::start_with(dir.path(), &["--resync", "1"]);
    wait_for("the long-drift notification", Duration::from_secs(15), || has(&got, r#""long": "slow""#));
    assert_eq!(bodies(&got).len(), 1, "{:?}", bodies(&got));
    assert!(d.stop().success());
}

/// A leader whose lease renewals hang (no answer, not an error) stops sending two
/// thirds of the lease duration after the `renewTime` of its last renewal — the moment
/// the others' expiry clock started — even when that renewal itself was slow. It used to
/// measure from the *end* of the last round and check only between rounds, so a slow
/// renewal followed by a hang kept it leading up to the lease's expiry or past it.
#[test]
fn a_leader_whose_renewals_hang_steps_down_before_its_lease_expires() {
    let Setup { dir, api, .. } = setup();
    let d = Daemon::start_with(dir.path(), &["--leader-election", "--lease-duration", "3", "--lease-namespace", "argocd"]);
    wait_for("leading", Duration::from_secs(10), || d.metric("driftwatch_leader") == Some(1.0));
    let renew_time = |api: &FakeApiServer| {
        let lease = api.lease("argocd", "driftwatch").unwrap();
        chrono::DateTime::parse_from_rfc3339(lease["spec"]["renewTime"].as_str().unwrap()).unwrap().with_timezone(&chrono::Utc)
    };
    // Renewals get slow (0.8 s of the 1 s round), then hang.
    api.lease_put_delay(Duration::from_millis(800));
    let first = renew_time(&api);
    wait_for("a slow renewal", Duration::from_secs(10), || renew_time(&api) != first);
    let second = renew_time(&api);
    wait_for("another slow renewal", Duration::from_secs(10), || renew_time(&api) != second);
    api.lease_hang(true);
    wait_for("stepping down", Duration::from_secs(10), || d.metric("driftwatch_leader") == Some(0.0));
    let stepped_down = chrono::Utc::now();
    // Read once stepped down: nothing changes the Lease while requests hang.
    let renewed = renew_time(&api);
    let after = (stepped_down - renewed).num_milliseconds() as f64 / 1000.0;
    // Aimed at 2 s (two thirds of 3 s) after renewTime; a standby may take over at 3 s.
    assert!(after < 2.5, "stepped down {after:.2} s after the last renewTime (the lease expires for others at 3 s)");
    api.lease_hang(false);
    api.lease_put_delay(Duration::ZERO);
    wait_for("leading again", Duration::from_secs(10), || d.metric("driftwatch_leader") == Some(1.0));
    assert!(d.stop().success());
}

/// A small tmpfs (the tests run as root, as CI does), unmounted when dropped.
struct SmallDisk {
    path: std::path::PathBuf,
}

impl SmallDisk {
    fn mount(path: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(path).unwrap();
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(path).status().unwrap().success();
        assert!(ok, "mounting a tmpfs at {} failed (the test needs root, as CI has)", path.display());
        SmallDisk { path: path.to_path_buf() }
    }

    /// Fills the disk to the last byte; returns the filler file.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).and_then(|_| f.flush()).is_ok() {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// The disk under the state file fills up: the pass that cannot write its outbox entry
/// is not marked as done (its fingerprint used to be recorded first, losing the
/// notification until the Application changed again). It is retried, the store is
/// reopened (redb refuses writes after an I/O error), and once there is room again the
/// notification is delivered, once, with no change from the API server.
#[test]
fn a_full_disk_delays_a_notification_and_loses_nothing() {
    let Setup { dir, api, got, .. } = setup();
    let disk = SmallDisk::mount(&dir.path().join("disk"), "4m");
    std::os::unix::fs::symlink(disk.path.join("state.redb"), dir.path().join("state.redb")).unwrap();
    api.apply(app("full", "Synced", REV1));
    let d = Daemon::start(dir.path());
    wait_for("the first evaluation", Duration::from_secs(10), || d.metric("driftwatch_evaluations_total") >= Some(1.0));

    let filler = disk.fill();
    api.apply(app("full", "OutOfSync", REV1));
    wait_for("a failed write", Duration::from_secs(15), || {
        !d.log_lines("(state store)").is_empty() || !d.log_lines("outbox failed").is_empty()
    });
    assert!(!has(&got, r#""app": "full""#), "nothing can have been queued");
    std::fs::remove_file(filler).unwrap();
    wait_for("the delivery once there is room", Duration::from_secs(20), || has(&got, r#""app": "full""#));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(bodies(&got).len(), 1, "{:?}", bodies(&got));
    assert!(d.stop().success());
    drop(disk);
}

/// The disk fills up while a delivery is in flight and nothing else changes: the
/// settle that would record it cannot be written. Its entry is held (not sent again at
/// once), the failure alone has the store reopened (no pass fails in a quiet cluster),
/// and once there is room the outbox drains; what the receiver got again is the same
/// delivery, under the same `Idempotency-Key`.
#[test]
fn a_settle_that_cannot_be_written_has_the_store_reopened() {
    use common::receiver::{Mode, Scripted};
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let hook = Scripted::start(Mode::Slow(1500));
    std::fs::write(dir.path().join("driftwatch.yaml"), config("app", hook.port)).unwrap();
    let disk = SmallDisk::mount(&dir.path().join("disk"), "4m");
    std::os::unix::fs::symlink(disk.path.join("state.redb"), dir.path().join("state.redb")).unwrap();
    let d = Daemon::start(dir.path());
    api.apply(app("quiet", "OutOfSync", REV1));
    // The receiver has the request and answers in 1.5 s: the disk fills meanwhile.
    wait_for("the delivery in flight", Duration::from_secs(10), || !hook.requests().is_empty());
    let filler = disk.fill();
    wait_for("the settle failing", Duration::from_secs(15), || !d.log_lines("recording delivery outcomes failed").is_empty());
    wait_for("the store reopened", Duration::from_secs(15), || !d.log_lines("reopening the state store").is_empty());
    std::fs::remove_file(filler).unwrap();
    wait_for("the outbox drained", Duration::from_secs(30), || d.metric(r#"driftwatch_queue_depth{service="hook"}"#) == Some(0.0));
    let keys: std::collections::BTreeSet<Option<String>> = hook.keyed().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), 1, "every attempt the same delivery: {keys:?}");
    assert!(keys.iter().all(Option::is_some));
    assert!(d.stop().success());
    drop(disk);
}

/// When `pattern` first appears in a daemon's log: the timestamp tracing writes first.
fn logged_at(d: &Daemon, pattern: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let line = d.log_lines(pattern).into_iter().next()?;
    let stamp = line.split_whitespace().next()?;
    chrono::DateTime::parse_from_rfc3339(stamp).ok().map(|t| t.with_timezone(&chrono::Utc))
}

/// Two replicas, the leader cut off from the API server (a partition: its requests get
/// no answer, its watches close). The old leader stops sending before the standby takes
/// over, the standby takes over within the lease duration (plus one renewal period)
/// and delivers what changed meanwhile, and nothing is sent twice.
#[test]
fn a_leader_cut_off_from_the_api_server_hands_over_without_duplicates() {
    let Setup { dir, api, got, port } = setup();
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    for (d, name) in [(&a_dir, "a"), (&b_dir, "b")] {
        std::fs::create_dir_all(d).unwrap();
        api.kubeconfig_as(&d.join("kubeconfig"), name);
        std::fs::write(d.join("driftwatch.yaml"), config("app", port)).unwrap();
        // One state file on the "shared volume".
        std::os::unix::fs::symlink(dir.path().join("state.redb"), d.join("state.redb")).unwrap();
    }
    let ha = ["--leader-election", "--lease-duration", "3", "--lease-namespace", "argocd"];
    api.apply(app("part-one", "OutOfSync", REV1));
    let a = Daemon::start_with(&a_dir, &ha);
    wait_for("a leads", Duration::from_secs(10), || a.metric("driftwatch_leader") == Some(1.0));
    wait_for("part-one", Duration::from_secs(10), || has(&got, r#""app": "part-one""#));
    let b = Daemon::start_with(&b_dir, &ha);

    let cut = chrono::Utc::now();
    api.cut_off("a", true);
    api.apply(app("part-two", "OutOfSync", REV1));
    wait_for("b takes over", Duration::from_secs(15), || b.metric("driftwatch_leader") == Some(1.0));
    wait_for("part-two, from b", Duration::from_secs(10), || has(&got, r#""app": "part-two""#));
    let stopped = logged_at(&a, "standing by").expect("a logged that it stopped sending");
    let took_over = logged_at(&b, "leading: sending notifications").expect("b logged that it leads");
    assert!(stopped < took_over, "a stopped at {stopped}, b took over at {took_over}");
    let handover = (took_over - cut).num_milliseconds();
    assert!(handover < 4_500, "b took over {handover} ms after the cut (lease 3 s, renewals every 1 s)");
    std::thread::sleep(Duration::from_millis(500));
    let all = bodies(&got);
    assert_eq!(all.len(), 2, "nothing sent twice: {all:?}");
    // Healed: a stays a standby while b renews.
    api.cut_off("a", false);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(a.metric("driftwatch_leader"), Some(0.0));
    assert!(b.stop().success());
}

/// A reload that would lose a secret is refused like any bad reload: the running
/// configuration stays, and `/readyz` (still ready) names the secret in the words of
/// `driftwatch check`.
#[test]
fn a_reload_with_a_missing_secret_is_refused_and_readyz_says_why() {
    let Setup { dir, api, got, port } = setup();
    api.apply(app("kept", "OutOfSync", REV1));
    let d = Daemon::start(dir.path());
    wait_for("kept", Duration::from_secs(15), || has(&got, r#""app": "kept""#));
    let cfg = config("app", port).replace("    retry:", "    bearerToken: $hook-token\n    retry:");
    std::fs::write(dir.path().join("driftwatch.yaml"), cfg).unwrap();
    d.signal("HUP");
    wait_for("the refused reload", Duration::from_secs(15), || d.metric("driftwatch_config_last_reload_successful") == Some(0.0));
    let (status, body) = get(&d.admin, "/readyz").unwrap();
    assert_eq!(status, 200, "the previous configuration runs: {body}");
    assert!(body.contains("error: services.hook: secret $hook-token is not set"), "{body}");
    // The old configuration still delivers.
    api.apply(app("after", "OutOfSync", REV1));
    wait_for("after, with the old configuration", Duration::from_secs(15), || has(&got, r#""app": "after""#));
    assert!(d.stop().success());
}

/// A replica that wins the Lease but cannot send (its state store does not open) gives
/// the Lease up instead of holding it while nothing is delivered: the other replica
/// takes over and delivers.
#[test]
fn a_leader_that_cannot_open_its_store_gives_the_lease_up() {
    let Setup { dir, api, got, .. } = setup();
    let ha = ["--leader-election", "--lease-duration", "2", "--lease-namespace", "argocd"];
    // Replica a: the same cluster and configuration, but a state path it cannot open.
    let broken = tempfile::tempdir().unwrap();
    for f in ["kubeconfig", "driftwatch.yaml"] {
        std::fs::copy(dir.path().join(f), broken.path().join(f)).unwrap();
    }
    std::fs::create_dir(broken.path().join("state.redb")).unwrap();
    api.apply(app("aside-one", "OutOfSync", REV1));
    let a = Daemon::spawn(broken.path(), &ha);
    wait_for("a holds the lease", Duration::from_secs(15), || {
        api.lease("argocd", "driftwatch").is_some_and(|l| l["spec"]["holderIdentity"].as_str().is_some_and(|h| !h.is_empty()))
    });
    let b = Daemon::start_with(dir.path(), &ha);
    wait_for("b takes over", Duration::from_secs(20), || b.metric("driftwatch_leader") == Some(1.0));
    wait_for("aside-one delivered", Duration::from_secs(10), || has(&got, r#""app": "aside-one""#));
    assert_eq!(a.metric("driftwatch_leader"), Some(0.0));
    let log = std::fs::read_to_string(&a.log).unwrap_or_default();
    assert!(log.contains("giving the lease up"), "{log}");
    assert!(b.stop().success());
    assert!(a.stop().success());
}

/// Review M5: with `operations.tls`, the operations endpoints speak only TLS (the token
/// and the history never cross in clear): a client trusting the CA reads `/history` with
/// the token, a plain HTTP request gets no answer, and a reload that would drop the TLS
/// is refused with the listener unchanged.
#[test]
fn the_operations_endpoints_can_be_served_over_tls() {
    driftwatch::tls::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let ca = common::tls::serving_tls(dir.path());
    std::fs::write(dir.path().join("secrets.yaml"), "ops-token: ops-token-0123456789abcdef\n").unwrap();
    let with_tls = "secretsFile: secrets.yaml\noperations:\n  token: $ops-token\n  tls: {certFile: tls.crt, keyFile: tls.key}\n";
    let cfg = dir.path().join("driftwatch.yaml");
    std::fs::write(&cfg, with_tls).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(common::daemon::run_args(dir.path()))
        .args(["--listen", &addr])
        .stderr(log)
        .spawn()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()).build().unwrap();
    let fetch = |path: &str, token: Option<&str>| -> Option<(u16, String)> {
        rt.block_on(async {
            let mut req = client.get(format!("https://{addr}{path}"));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let r = req.send().await.ok()?;
            Some((r.status().as_u16(), r.text().await.ok()?))
        })
    };
    wait_for("/readyz over TLS", Duration::from_secs(30), || fetch("/readyz", None).is_some_and(|(s, _)| s == 200));
    assert_eq!(fetch("/history", None).map(|(s, _)| s), Some(401));
    assert_eq!(fetch("/history", Some("ops-token-0123456789abcdef")).map(|(s, _)| s), Some(200));
    assert_eq!(get(&addr, "/healthz"), None, "a plain HTTP request is not answered");
    // A reload without the TLS: refused, the listener still speaks TLS only.
    std::fs::write(&cfg, "secretsFile: secrets.yaml\noperations:\n  token: $ops-token\n").unwrap();
    let refused = || {
        fetch("/metrics", None)
            .and_then(|(_, m)| m.lines().find(|l| l.starts_with("driftwatch_config_reloads_total{result=\"refused\"}")).map(String::from))
    };
    wait_for("the refused reload", Duration::from_secs(15), || refused().is_some_and(|l| l.ends_with(" 1")));
    let (_, ready) = fetch("/readyz", None).unwrap();
    assert!(ready.contains("operations.tls changed"), "{ready}");
    assert_eq!(get(&addr, "/healthz"), None);
    let _ = child.kill();
    let _ = child.wait();
}

/// A Lease deleted by hand (an on-call's remedy for a stuck one) is created again with
/// its count of holder changes at 0, below the count the state in PostgreSQL recorded.
/// Its holder takes the store over all the same (the Lease is newer) and delivers;
/// before, every replica was refused and stood aside until someone raised the Lease's
/// count by hand.
#[test]
fn a_lease_deleted_by_hand_is_taken_again_and_the_store_with_it() {
    let pg = driftwatch::state::pgtest::private_server().expect("a private PostgreSQL");
    let Setup { dir, api, got, port } = setup();
    let cfg = format!("{}secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg-url\n", config("app", port));
    std::fs::write(dir.path().join("driftwatch.yaml"), cfg).unwrap();
    std::fs::write(dir.path().join("secrets.yaml"), format!("pg-url: {:?}\n", pg.url())).unwrap();
    let ha = ["--leader-election", "--lease-duration", "2", "--lease-namespace", "argocd"];
    // A Lease of long standing: created a year ago, 41 changes of holder, expired.
    api.put_lease(serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "driftwatch", "namespace": "argocd", "uid": "old-lease", "creationTimestamp": "2025-12-01T00:00:00Z"},
        "spec": {"holderIdentity": "gone", "leaseDurationSeconds": 2, "renewTime": "2025-12-01T00:00:00.000000Z", "leaseTransitions": 41}}));
    api.apply(app("before", "OutOfSync", REV1));
    let a = Daemon::start_with(dir.path(), &ha);
    wait_for("a leads", Duration::from_secs(20), || a.metric("driftwatch_leader") == Some(1.0));
    wait_for("before delivered", Duration::from_secs(15), || has(&got, r#""app": "before""#));
    assert_eq!(api.lease("argocd", "driftwatch").unwrap()["spec"]["leaseTransitions"], 42);
    assert!(a.stop().success());
    api.delete("leases", "argocd", "driftwatch");

    api.apply(app("after", "OutOfSync", REV1));
    let b = Daemon::start_with(dir.path(), &ha);
    wait_for("b leads", Duration::from_secs(20), || b.metric("driftwatch_leader") == Some(1.0));
    wait_for("after delivered", Duration::from_secs(15), || has(&got, r#""app": "after""#));
    let lease = api.lease("argocd", "driftwatch").unwrap();
    assert_ne!(lease["metadata"]["uid"], "old-lease", "created again: {lease}");
    assert!(lease["spec"]["leaseTransitions"].as_u64().unwrap() < 42, "{lease}");
    assert!(b.log_lines("fenced").is_empty(), "{:?}", b.log_lines("fenced"));
    assert!(!b.log_lines("took the state store over").is_empty());
    assert_eq!(bodies(&got).iter().filter(|b| b.contains(r#""app": "before""#)).count(), 1, "nothing sent twice");
    assert!(b.stop().success());
}

/// The state in PostgreSQL, and PostgreSQL stopped (a fast shutdown cuts every
/// connection, as a failover does) while Applications keep drifting, then started
/// again: driftwatch fails its writes, waits, reopens and resumes. Every drift is
/// delivered; a second copy of one (a delivery whose settle could not be written) carries
/// the first one's `Idempotency-Key`, and no key is shared by two notifications.
#[test]
fn postgres_restarted_under_load_loses_nothing_and_repeats_only_under_the_same_key() {
    use common::receiver::{Mode, Scripted};
    let pg = driftwatch::state::pgtest::private_server().expect("a private PostgreSQL");
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let hook = Scripted::start(Mode::Up);
    let cfg = format!("{}secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg-url\n", config("app", hook.port));
    std::fs::write(dir.path().join("driftwatch.yaml"), cfg).unwrap();
    std::fs::write(dir.path().join("secrets.yaml"), format!("pg-url: {:?}\n", pg.url())).unwrap();
    const N: usize = 30;
    for i in 0..N {
        api.apply(app(&format!("pg-{i}"), "Synced", REV1));
    }
    let d = Daemon::start(dir.path());
    let delivered = |i: usize| hook.requests().iter().any(|(_, b)| b.contains(&format!(r#""app": "pg-{i}""#)));
    for i in 0..10 {
        api.apply(app(&format!("pg-{i}"), "OutOfSync", REV1));
    }
    wait_for("the first ten", Duration::from_secs(20), || (0..10).all(delivered));
    pg.stop().unwrap();
    for i in 10..20 {
        api.apply(app(&format!("pg-{i}"), "OutOfSync", REV1));
    }
    wait_for("a write failing", Duration::from_secs(20), || !d.log_lines("(state store)").is_empty());
    pg.start().unwrap();
    for i in 20..N {
        api.apply(app(&format!("pg-{i}"), "OutOfSync", REV1));
    }
    wait_for("every drift", Duration::from_secs(60), || (0..N).all(delivered));
    wait_for("the outbox drained", Duration::from_secs(30), || d.metric(r#"driftwatch_queue_depth{service="hook"}"#) == Some(0.0));
    let mut by_app: std::collections::BTreeMap<String, std::collections::BTreeSet<Option<String>>> = Default::default();
    for (key, body) in hook.keyed() {
        let app = body.split(r#""app": ""#).nth(1).and_then(|r| r.split('"').next()).unwrap_or_default().to_string();
        by_app.entry(app).or_default().insert(key);
    }
    assert_eq!(by_app.len(), N, "{by_app:?}");
    for (app, keys) in &by_app {
        assert_eq!(keys.len(), 1, "{app}: every copy under one key: {keys:?}");
        assert!(keys.iter().all(Option::is_some), "{app}");
    }
    let distinct: std::collections::BTreeSet<&Option<String>> = by_app.values().flatten().collect();
    assert_eq!(distinct.len(), N, "no key shared by two notifications");
    assert!(d.log_lines("took the state store over").len() >= 2, "reopened after the restart: {:?}", d.log_lines("state store"));
    assert!(d.stop().success());
    // The tools read the history, the delivered keys and the outbox from PostgreSQL
    // through the configuration.
    let tool = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_driftwatch"))
            .args(args)
            .arg("--config")
            .arg(dir.path().join("driftwatch.yaml"))
            .args(["-o", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let episodes = tool(&["history"]);
    assert_eq!(episodes.as_array().map(Vec::len), Some(N), "one drift episode per Application: {episodes}");
    let keys = tool(&["state", "list"]);
    let apps: std::collections::BTreeSet<&str> = keys.as_array().unwrap().iter().filter_map(|r| r["app"].as_str()).collect();
    assert_eq!(apps.len(), N, "{keys}");
    let queued = tool(&["deliveries"]);
    assert_eq!(queued["pending"].as_array().map(Vec::len), Some(0), "{queued}");
}
