//! The Opsgenie destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::testkit::{HttpReceiver, Reply, Scenario, check_http_kind, check_scenario, maker};
use crate::model::{Action, DestinationKind, Severity};
use crate::secret::Secrets;

const KEY: &str = "og-key-SECRET-42";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Opsgenie, "opsgenie");
    n.destination.recipient = "platform".into();
    n.severity = Severity::Critical;
    n.payload = serde_json::json!({"message": "guestbook: privileged container added by kubectl-edit\nmore detail",
        "tags": ["argocd"], "details": {"revision": "a1b2c3d", "count": 3}});
    n
}

#[test]
fn alerts_are_created_and_closed_by_a_stable_alias() {
    let n = notification();
    let c = create(&n, "https://argocd.example.com/");
    assert_eq!(c["message"], "guestbook: privileged container added by kubectl-edit");
    assert_eq!(c["description"], "guestbook: privileged container added by kubectl-edit\nmore detail");
    assert_eq!(c["priority"], "P1", "critical");
    assert_eq!(c["alias"], "driftwatch/u-1/on-out-of-sync/[0].abc");
    assert_eq!(c["tags"], serde_json::json!(["argocd", "trigger:on-out-of-sync"]));
    assert_eq!(c["details"]["count"], "3", "details are strings");
    assert_eq!(c["details"]["argocdUrl"], "https://argocd.example.com/applications/argocd/guestbook");
    let mut long = n.clone();
    long.payload["message"] = serde_json::json!("x".repeat(500));
    assert_eq!(create(&long, "")["message"].as_str().unwrap().chars().count(), 130);
    let (path, body) = close(&n);
    assert_eq!(path, "/v2/alerts/driftwatch%2Fu-1%2Fon-out-of-sync%2F%5B0%5D.abc/close?identifierType=alias");
    assert_eq!(body["source"], "driftwatch");
    let mut custom = n.clone();
    custom.payload["alias"] = serde_json::json!("guestbook-drift");
    custom.payload["priority"] = serde_json::json!("P4");
    assert_eq!((alias(&custom).as_str(), create(&custom, "")["priority"].as_str()), ("guestbook-drift", Some("P4")));
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(202, r#"{"result":"Request will be processed","requestId":"r1"}"#)).await;
    let secrets = Secrets::from_map([("og-key", KEY)]);
    let make = maker::<super::Opsgenie>(serde_json::json!({"apiUrl": rx.url(), "apiKeys": {"platform": "$og-key"}}));
    check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        KEY,
        Reply::new(202, "{}"),
        Reply::new(422, r#"{"message":"Request body is not processable"}"#),
    )
    .await;
    let mut resolve = notification();
    resolve.action = Action::Resolve;
    check_scenario(Scenario::Success, &rx, &make, &resolve, &secrets, KEY).await;
    let reqs = rx.requests();
    assert_eq!((reqs[0].method.as_str(), reqs[0].path.as_str()), ("POST", "/v2/alerts"));
    assert_eq!(reqs[0].headers["authorization"], format!("GenieKey {KEY}"));
    assert!(
        reqs[1].path.starts_with("/v2/alerts/driftwatch%2Fu-1") && reqs[1].path.ends_with("/close?identifierType=alias"),
        "{}",
        reqs[1].path
    );
}
