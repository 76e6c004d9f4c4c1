//! Break-glass end to end, as an incident runs it: `driftwatch break-glass` with two
//! people's own credentials against the fake API server (SelfSubjectReview, a merge
//! patch of the Application on its resourceVersion), the API server's audit events of
//! those writes posted to the daemon's audit webhook, then a live RBAC change.
//!
//! - shop: opened by alice, approved by bob (verified against the audit log): the
//!   change pages nobody and reaches the break-glass route with the ticket; when the
//!   exception expires with shop still OutOfSync, on-break-glass-overdue pages.
//! - cart: opened by alice, who then writes bob's approval in by hand: the audit log
//!   shows who wrote it, the exception is refused as forged, and cart is paged as
//!   usual.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::AppBuilder;
use common::apiserver::FakeApiServer;
use common::daemon::{Daemon, bodies, wait_for};
use common::receiver::{get, receiver};

const TOKEN: &str = "audit-break-glass-token-0123456789";

fn config(pd: u16, incident: u16) -> String {
    format!("{}secretsFile: secrets\naudit:\n  listen: 127.0.0.1:0\n  token: $audit-token\n", common::break_glass_routes(pd, incident))
}

fn app(name: &str, drifted: bool) -> serde_json::Value {
    let status = if drifted { "OutOfSync" } else { "Synced" };
    AppBuilder::new(name)
        .sync(status, common::REV1)
        .healthy()
        .field("/spec/destination/namespace", "shop".into())
        .field("/status/history", serde_json::json!([{"id": 1, "revision": common::REV1}]))
        .field(
            "/status/resources",
            serde_json::json!([{"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "shop", "name": name, "status": status}]),
        )
        .build()
}

/// `driftwatch break-glass ARGS` as `user`: (exit code, stdout, stderr).
fn break_glass(dir: &Path, user: &str, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .arg("break-glass")
        .args(args)
        .arg("--kubeconfig")
        .arg(dir.join(format!("{user}.kubeconfig")))
        .output()
        .unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// The object as the API server holds it, with `status` replaced by that of `drifted`
/// (the annotations people wrote are kept).
fn with_status(api: &FakeApiServer, name: &str, drifted: bool) -> serde_json::Value {
    let mut obj = api.object("applications", "argocd", name).unwrap();
    obj["status"] = app(name, drifted)["status"].clone();
    obj
}

#[test]
fn an_approved_exception_holds_the_page_and_a_forged_one_does_not() {
    driftwatch::tls::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    for who in ["alice", "bob"] {
        api.kubeconfig_for(&dir.path().join(format!("{who}.kubeconfig")), who);
    }
    let (pd_listener, hook_listener) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
    let (pd_port, hook_port) = (pd_listener.local_addr().unwrap().port(), hook_listener.local_addr().unwrap().port());
    let (pages, incident) = (receiver(pd_listener), receiver(hook_listener));
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/audit-token"), TOKEN).unwrap();
    std::fs::write(dir.path().join("driftwatch.yaml"), config(pd_port, hook_port)).unwrap();
    api.apply(app("shop", false));
    api.apply(app("cart", false));
    let d = Daemon::start(dir.path());
    let mut audit = String::new();
    wait_for("the audit listener's address in the log", Duration::from_secs(10), || {
        let line = d.log_lines("audit webhook listening").into_iter().next().unwrap_or_default();
        audit = line.split("bound=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default().to_string();
        !audit.is_empty()
    });

    // shop: alice opens, alice cannot approve her own, bob approves.
    let open = ["open", "argocd/shop", "--ticket", "INC-1234", "--reason", "checkout down: widening the Role by hand", "--for", "30s"];
    let (code, out, err) = break_glass(dir.path(), "alice", &open);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("break-glass INC-1234 opened on argocd/shop by alice"), "{out}");
    let (code, _, err) = break_glass(dir.path(), "alice", &["approve", "argocd/shop"]);
    assert_eq!(code, 2);
    assert!(err.contains("you (alice) opened break-glass INC-1234: a second, different person must approve it"), "{err}");
    let (code, out, err) = break_glass(dir.path(), "bob", &["approve", "argocd/shop"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("approved by bob: in force until"), "{out}");
    let (code, _, err) = break_glass(dir.path(), "alice", &open);
    assert_eq!(code, 2, "a second exception while one is open");
    assert!(err.contains("already has break-glass INC-1234 open (by alice"), "{err}");
    let annotation: serde_json::Value = serde_json::from_str(
        api.object("applications", "argocd", "shop").unwrap()["metadata"]["annotations"]["driftwatch.io/break-glass"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!((annotation["openedBy"].as_str(), annotation["approvedBy"].as_str()), (Some("alice"), Some("bob")));

    // cart: alice opens, then writes bob's approval in by hand (kubectl, her token).
    let (code, _, err) =
        break_glass(dir.path(), "alice", &["open", "argocd/cart", "--ticket", "INC-1235", "--reason", "x", "--for", "30s"]);
    assert_eq!(code, 0, "{err}");
    let mut forged: serde_json::Value = serde_json::from_str(
        api.object("applications", "argocd", "cart").unwrap()["metadata"]["annotations"]["driftwatch.io/break-glass"].as_str().unwrap(),
    )
    .unwrap();
    forged["approvedBy"] = "bob".into();
    forged["approvedAt"] = forged["openedAt"].clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = reqwest::Client::new();
    let status = rt.block_on(async {
        client
            .patch(format!("{}/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/cart", api.url()))
            .bearer_auth("user-alice")
            .header("user-agent", "kubectl/v1.36.0")
            .header("content-type", "application/merge-patch+json")
            .body(serde_json::json!({"metadata": {"annotations": {"driftwatch.io/break-glass": forged.to_string()}}}).to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(status, 200);
    // The watch shows both approvals before the audit log does (the order a real API
    // server gives: its audit webhook batches, the watch does not wait): the forged one
    // is counted as approved, and refused once the audit log shows who wrote it.
    wait_for("both approvals seen on the watch", Duration::from_secs(15), || {
        d.metric("driftwatch_break_glass_total{event=\"approved\"}") == Some(2.0)
    });

    // The API server's audit webhook posts the writes.
    let events = api.take_audit_events();
    assert_eq!(events.len(), 4, "open, approve, open, the hand edit");
    let list = serde_json::json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": events});
    let posted = rt.block_on(async {
        client.post(format!("http://{audit}/audit")).bearer_auth(TOKEN).json(&list).send().await.unwrap().status().as_u16()
    });
    assert_eq!(posted, 200);
    wait_for("shop's exception verified and cart's refused", Duration::from_secs(15), || {
        !d.log_lines("approved_by=bob verification=verified effective=true").is_empty()
            && !d.log_lines("break-glass exception refused").is_empty()
    });
    let refused = d.log_lines("break-glass exception refused").join("\n");
    assert!(refused.contains("forged: the audit log shows alice wrote the approval that names bob"), "{refused}");
    assert!(refused.contains("INC-1235"), "{refused}");
    assert_eq!(d.metric("driftwatch_break_glass_total{event=\"refused\"}"), Some(1.0));
    assert_eq!(
        d.metric("driftwatch_break_glass_total{event=\"approved\"}"),
        Some(2.0),
        "bob's, and the one alice wrote in his name (seen before the audit log showed who wrote it, never in force): no more"
    );

    // The emergency change: both Roles drift live (kubectl-edit widened their rules).
    for name in ["shop", "cart"] {
        api.put_live(serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": "shop", "managedFields": [
                {"manager": "argocd-controller", "operation": "Apply", "time": "2026-12-04T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}},
                {"manager": "kubectl-edit", "operation": "Update", "time": "2026-12-04T10:04:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:rules": {}}}]},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}));
    }
    api.apply(with_status(&api, "shop", true));
    api.apply(with_status(&api, "cart", true));
    wait_for("cart paged and shop's record on the break-glass route", Duration::from_secs(20), || {
        bodies(&pages).iter().any(|b| b.contains("Security drift in cart")) && bodies(&incident).iter().any(|b| b.contains("shop"))
    });
    let record = bodies(&incident).into_iter().find(|b| b.contains("shop")).unwrap();
    assert!(record.contains("Under break-glass INC-1234: opened by alice, approved by bob (verified)."), "{record}");
    assert!(!bodies(&pages).iter().any(|b| b.contains("Security drift in shop")), "shop was paged: {:?}", bodies(&pages));
    assert!(!bodies(&incident).iter().any(|b| b.contains("cart")), "the forged exception changed cart's routes");

    // The exception expires with shop still off Git: the overdue page.
    wait_for("the overdue page", Duration::from_secs(60), || bodies(&pages).iter().any(|b| b.contains("Break-glass INC-1234 overdue")));
    assert!(!bodies(&pages).iter().any(|b| b.contains("Security drift in shop")), "the overdue page stands in for the security page");

    // The history: the episode was recorded against the ticket.
    let (status, history) = get(&d.admin, "/history?app=argocd/shop").unwrap();
    assert_eq!(status, 200);
    let episodes: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    let ep = episodes.last().unwrap();
    assert_eq!(ep["breakGlass"]["ticket"], "INC-1234", "{ep}");
    assert_eq!(ep["breakGlass"]["verification"], "verified");
    assert!(d.stop().success());
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["history", "--app", "argocd/shop", "--timeline", "--state"])
        .arg(dir.path().join("state.redb"))
        .output()
        .unwrap();
    let timeline = String::from_utf8_lossy(&o.stdout);
    for step in ["break-glass-opened", "break-glass-approved", "break-glass-active", "opened", "break-glass-expired", "break-glass-overdue"]
    {
        assert!(timeline.contains(step), "{step} missing:\n{timeline}");
    }
}
