//! The Pushover destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, maker};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "azGDORePK8gMaC0QOYAMyEEuzJnyUi";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Pushover, "pushover");
    n.destination.recipient = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG".into();
    n.payload = serde_json::json!({"message": "guestbook degraded\n", "title": "Argo CD", "priority": "1", "urlTitle": "Open", "url": "https://argocd.example.com"});
    n
}

#[test]
fn the_message_fields() {
    let m = message(&notification());
    assert_eq!(
        m,
        serde_json::json!({"user": "uQiRzpo4DXghDmr9QzzfQu27cmVRsG", "message": "guestbook degraded", "title": "Argo CD",
        "url": "https://argocd.example.com", "url_title": "Open", "priority": 1})
    );
    let mut emergency = notification();
    emergency.payload["priority"] = serde_json::json!("2");
    assert!(message(&emergency).get("priority").is_none(), "emergency needs retry/expire; not offered");
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, r#"{"status":1,"request":"r1"}"#)).await;
    let secrets = Secrets::from_map([("pushover-token", TOKEN)]);
    let make = maker::<super::Pushover>(serde_json::json!({"token": "$pushover-token", "apiUrl": rx.url()}));
    let r = &check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        TOKEN,
        Reply::new(200, "{}"),
        Reply::new(400, r#"{"user":"invalid","errors":["user identifier is invalid"],"status":0}"#),
    )
    .await;
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/1/messages.json"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["token"], TOKEN);
}
