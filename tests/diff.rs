//! The summarized diff, end to end: `driftwatch run` against a hub API server (the
//! Applications, and the live objects of those deploying to it) and a spoke API server
//! (the live objects of an Application whose destination is the spoke), both speaking
//! the real protocol through the real kube client. A Deployment applied the way Argo
//! CD applies it by default (client-side: the last-applied annotation), then patched
//! by someone else — replicas 2 -> 5, the container made privileged, the image moved
//! (a field the Application's `ignoreDifferences` lists): the alerts show Git value ->
//! live value with who and when and a link to the resource, never the ignored field;
//! a spoke that does not answer is reported per cluster and holds nobody up; and
//! `driftwatch diff` prints the same.

mod common;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use common::apiserver::FakeApiServer;
use common::daemon::{Daemon, records, wait_for};
use common::receiver::{get, receiver};
use common::{AppBuilder, REV1};
use serde_json::{Value, json};

/// The SIEM and the security page, live drift to `siem:chat`, a spoke (`SPOKE`, by
/// kubeconfig) and one that does not answer.
fn config(port: u16, spoke: &str) -> String {
    let rest = format!(
        "  - name: chat\n    triggers: [on-live-drift]\n    recipients: [siem:chat]\n\
         clusters:\n  - name: spoke-1\n    server: {spoke}\n    kubeconfig: spoke.kubeconfig\n\
         \x20 - name: spoke-down\n    server: http://127.0.0.1:9\n    token: $spoke-down-token\n"
    );
    format!(
        "secretsFile: secrets.yaml\ncontext: {{argocdUrl: \"https://argocd.example.com\"}}\n{}{rest}",
        common::SIEM_AND_SECURITY_PAGE.replace("PORT", &port.to_string())
    )
}

/// A Deployment as Argo CD's client-side apply left it (replicas 2, image 1.0, no
/// securityContext), then patched by `kubectl-patch`: replicas 5, image 1.1, privileged.
fn patched_deployment(ns: &str) -> Value {
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "shop:1.0"}]}}}});
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied.to_string()},
            "managedFields": [
                {"manager": "argocd-controller", "operation": "Update", "time": "2026-12-03T09:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                              "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:name": {}}}}}}}},
                {"manager": "kubectl-patch", "operation": "Update", "time": "2026-12-03T10:04:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                     "f:image": {}, "f:securityContext": {".": {}, "f:privileged": {}}}}}}}}}]},
        "spec": {"replicas": 5, "progressDeadlineSeconds": 600, "template": {"spec": {"containers": [
            {"name": "web", "image": "shop:1.1", "terminationMessagePath": "/dev/termination-log", "securityContext": {"privileged": true}}]}}},
        "status": {"replicas": 5}})
}

/// An OutOfSync Application whose Deployment drifted live, deploying to `dest`, which
/// ignores the container image (as a team with an image updater would).
fn drifted(name: &str, ns: &str, dest: Value) -> Value {
    AppBuilder::new(name)
        .sync("OutOfSync", REV1)
        .healthy()
        .field("/status/history", json!([{"id": 1, "revision": REV1}]))
        .field("/spec/destination", dest)
        .field(
            "/spec/ignoreDifferences",
            json!([{"group": "apps", "kind": "Deployment", "jqPathExpressions": [".spec.template.spec.containers[] | select(.name == \"web\") | .image"]}]),
        )
        .field("/status/resources", json!([{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": ns, "name": "web", "status": "OutOfSync"}]))
        .build()
}

fn alert(got: &std::sync::Arc<std::sync::Mutex<Vec<String>>>, trigger: &str, app: &str) -> Option<Value> {
    records(got).into_iter().find(|r| r["rule"]["name"] == trigger && r["orchestrator"]["resource"]["name"] == app)
}

#[test]
fn the_alert_shows_git_value_to_live_value_on_the_hub_and_on_a_spoke() {
    let dir = tempfile::tempdir().unwrap();
    let hub = FakeApiServer::start();
    let spoke = FakeApiServer::start();
    hub.kubeconfig(&dir.path().join("kubeconfig"));
    spoke.kubeconfig(&dir.path().join("spoke.kubeconfig"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    std::fs::write(dir.path().join("secrets.yaml"), "spoke-down-token: not-a-real-token\n").unwrap();
    let config = config(port, &spoke.url());
    std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();

    hub.put_live(patched_deployment("shop"));
    spoke.put_live(patched_deployment("edge"));
    hub.apply(drifted("shop", "shop", json!({"server": "https://kubernetes.default.svc", "namespace": "shop"})));
    hub.apply(drifted("edge", "edge", json!({"name": "spoke-1", "namespace": "edge"})));
    hub.apply(drifted("lost", "lost", json!({"name": "spoke-down", "namespace": "lost"})));
    let d = Daemon::start(dir.path());

    for app in ["shop", "edge"] {
        // The chat alert (live drift, warning) waited for the read: it has the diff.
        wait_for("the live-drift alert", Duration::from_secs(20), || alert(&got, "on-live-drift", app).is_some());
        wait_for("the page", Duration::from_secs(20), || alert(&got, "on-security-drift", app).is_some());
        for trigger in ["on-live-drift", "on-security-drift"] {
            let r = alert(&got, trigger, app).unwrap();
            let msg = r["message"].as_str().unwrap();
            assert!(msg.contains("spec.replicas: 2 → 5 by kubectl-patch at 10:04 UTC"), "{trigger} {app}: {msg}");
            assert!(
                msg.contains("spec.template.spec.containers[web].securityContext.privileged: (not set) → true by kubectl-patch"),
                "{msg}"
            );
            assert!(!msg.contains("image"), "an ignored field is not shown: {msg}");
            assert!(!msg.contains("terminationMessagePath") && !msg.contains("progressDeadlineSeconds"), "defaults are not drift: {msg}");
            let link = format!("https://argocd.example.com/applications/argocd/{app}?resource=&node=apps%2FDeployment%2F{app}%2Fweb%2F0");
            assert!(msg.contains(&link), "{msg}");
            // The SIEM record carries the changes structured.
            let res = &r["driftwatch"]["episode"]["resources"][0];
            assert_eq!(res["desiredSource"], "last-applied", "{res}");
            assert_eq!(res["changes"][0]["security"], true, "security first: {res}");
            assert_eq!(res["changes"].as_array().map(Vec::len), Some(2), "{res}");
        }
    }
    // Each cluster's object was read from that cluster, in full, once per TTL.
    assert!(hub.live_gets().iter().all(|(p, _)| !p.contains("/namespaces/edge/")), "{:?}", hub.live_gets());
    assert!(
        spoke.live_gets().iter().any(|(p, a)| p == "/apis/apps/v1/namespaces/edge/deployments/web" && !a.contains("PartialObjectMetadata"))
    );
    assert_eq!(d.metric(r#"driftwatch_cluster_up{cluster="spoke-1"}"#), Some(1.0));

    // The spoke that does not answer: reported per cluster, logged once, in the history.
    wait_for("the unreachable spoke", Duration::from_secs(30), || d.metric(r#"driftwatch_cluster_up{cluster="spoke-down"}"#) == Some(0.0));
    wait_for("why, in the history", Duration::from_secs(30), || {
        get(&d.admin, "/history?app=argocd%2Flost")
            .is_some_and(|(_, b)| b.contains("\"reason\":\"unreachable\"") && b.contains("cluster spoke-down"))
    });
    assert!(d.metric(r#"driftwatch_cluster_reads_total{result="failed",cluster="spoke-down"}"#) >= Some(1.0));
    assert!(d.metric(r#"driftwatch_cluster_reads_total{result="ok",cluster="spoke-1"}"#) >= Some(1.0));
    assert_eq!(d.log_lines("a cluster does not answer live reads").len(), 1);
    assert!(d.log_lines("a cluster does not answer live reads")[0].contains("spoke-down"));
    // Its drift is still reported, once the wait for the read is over.
    wait_for("the lost Application's alert", Duration::from_secs(30), || alert(&got, "on-live-drift", "lost").is_some());
    assert!(d.stop().success());
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["history", "--app", "argocd/lost", "--state"])
        .arg(dir.path().join("state.redb"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("(not read: unreachable)"), "{}", String::from_utf8_lossy(&o.stdout));

    // `driftwatch diff` prints the same from the clusters, as text and as JSON.
    let diff = |app: &str, json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_driftwatch"));
        cmd.args(["diff", app, "--kubeconfig"]).arg(dir.path().join("kubeconfig")).arg("--config").arg(dir.path().join("driftwatch.yaml"));
        if json {
            cmd.args(["-o", "json"]);
        }
        cmd.output().unwrap()
    };
    let o = diff("argocd/edge", false);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "drift found exits 1, like argocd app diff: {text} {}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("Deployment edge/web (spoke-1, desired from last-applied)"), "{text}");
    assert!(text.contains("spec.replicas: 2 → 5"), "{text}");
    assert!(!text.contains("image"), "{text}");
    let o = diff("argocd/shop", true);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["resources"][0]["changes"][1]["path"], "spec.replicas", "{v}");
    assert_eq!(v["resources"][0]["changes"][1]["live"], "5", "{v}");
    let o = diff("argocd/nothere", false);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("argocd/nothere"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The opt-in: a spoke's credentials from Argo CD's own cluster Secret on the hub
/// (`argocdSecret`), read by name under the opt-in Role; the spoke's drift is diffed
/// as with a kubeconfig. Without the Role the read is refused and the spoke is
/// reported as not answering, never fatal.
#[test]
fn a_spoke_from_argo_cds_cluster_secret() {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // The third run: the Secret names a server off loopback over plain HTTP (review L2):
    // Argo CD's credential would cross the network in clear, so no client is built.
    for (opted_in, in_clear) in [(true, false), (false, false), (true, true)] {
        let dir = tempfile::tempdir().unwrap();
        let hub = FakeApiServer::start();
        let spoke = FakeApiServer::start();
        let server = if in_clear { "http://spoke-1.example.com:8080".to_string() } else { spoke.url() };
        hub.kubeconfig(&dir.path().join("kubeconfig"));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = receiver(listener);
        let config = config(port, &spoke.url());
        let config = &config[..config.find("clusters:").unwrap()];
        std::fs::write(dir.path().join("secrets.yaml"), "unused: x\n").unwrap();
        std::fs::write(
            dir.path().join("driftwatch.yaml"),
            format!("{config}clusters:\n  - name: spoke-1\n    argocdSecret: cluster-spoke-1\n"),
        )
        .unwrap();
        hub.put_live(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cluster-spoke-1", "namespace": "argocd", "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
            "data": {"name": b64("spoke-1"), "server": b64(&server),
                     "config": b64(r#"{"bearerToken": "argocd-manager-token", "tlsClientConfig": {"insecure": false}}"#)}}));
        if opted_in {
            hub.set_rbac(Some(common::rbac::service_account_rules(true)));
        }
        spoke.put_live(patched_deployment("edge"));
        hub.apply(drifted("edge", "edge", json!({"name": "spoke-1", "namespace": "edge"})));
        let d = Daemon::start(dir.path());
        wait_for("the live-drift alert", Duration::from_secs(30), || alert(&got, "on-live-drift", "edge").is_some());
        let msg = alert(&got, "on-live-drift", "edge").unwrap()["message"].as_str().unwrap().to_string();
        if in_clear {
            assert!(!msg.contains("spec.replicas: 2 → 5"), "{msg}");
            let refused = d.log_lines("a spoke cluster's client could not be built").join("\n");
            assert!(refused.contains("must be https://"), "{refused}");
            assert_eq!(d.metric(r#"driftwatch_cluster_up{cluster="spoke-1"}"#), Some(0.0));
        } else if opted_in {
            assert!(msg.contains("spec.replicas: 2 → 5"), "{msg}");
            assert!(spoke.live_gets().iter().any(|(p, _)| p == "/apis/apps/v1/namespaces/edge/deployments/web"));
        } else {
            assert!(!msg.contains("spec.replicas: 2 → 5"), "{msg}");
            assert_eq!(hub.refused(), vec![("get".to_string(), "/api/v1/namespaces/argocd/secrets/cluster-spoke-1".to_string())]);
            assert_eq!(d.log_lines("a spoke cluster's client could not be built").len(), 1);
            assert_eq!(d.metric(r#"driftwatch_cluster_up{cluster="spoke-1"}"#), Some(0.0));
        }
        assert!(d.stop().success());
    }
}
