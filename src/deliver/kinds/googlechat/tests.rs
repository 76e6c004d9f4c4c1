//! The Google Chat destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, maker};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const KEY: &str = "SECRET-chat-key-9";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Googlechat, "googlechat");
    n.destination.recipient = "platform".into();
    n.payload = serde_json::json!({"message": "guestbook drifted\n", "threadKey": "argocd/guestbook",
        "cardsV2": [{"cardId": "drift", "card": {"header": {"title": "guestbook"}}}]});
    n
}

#[test]
fn cards_and_threads() {
    let m = message(&notification());
    assert_eq!(m["text"], "guestbook drifted");
    assert_eq!(m["cardsV2"][0]["cardId"], "drift");
    assert_eq!(m["thread"]["threadKey"], "argocd/guestbook");
    assert_eq!(
        url_with_thread("https://chat.example/v1/spaces/A/messages?key=k&token=t", &notification()),
        "https://chat.example/v1/spaces/A/messages?key=k&token=t&messageReplyOption=REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"
    );
    let mut plain = notification();
    plain.payload = serde_json::json!({"message": "hi"});
    assert_eq!(url_with_thread("https://x/y?key=k", &plain), "https://x/y?key=k");
    assert!(message(&plain).get("thread").is_none());
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, r#"{"name":"spaces/A/messages/1"}"#)).await;
    let url = format!("{}/v1/spaces/AAA/messages?key={KEY}&token=t", rx.url());
    let secrets = Secrets::from_map([("chat-url", url.as_str())]);
    let make = maker::<super::Googlechat>(serde_json::json!({"webhooks": {"platform": "$chat-url"}}));
    let r = &check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        KEY,
        Reply::new(200, "{}"),
        Reply::new(400, r#"{"error":{"code":400,"message":"Invalid JSON payload"}}"#),
    )
    .await;
    assert!(
        r.path.starts_with("/v1/spaces/AAA/messages?key=") && r.path.ends_with("&messageReplyOption=REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"),
        "{}",
        r.path
    );
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["thread"]["threadKey"], "argocd/guestbook");
}
