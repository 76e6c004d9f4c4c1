//! The Webex destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, deliver, maker, resolve_of, service};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "webex-SECRET-bot-8";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Webex, "webex");
    n.destination.recipient = "oncall@example.com".into();
    n.payload = serde_json::json!({"message": "**guestbook** drifted\n"});
    n
}

#[test]
fn to_a_person_or_a_room() {
    assert_eq!(message(&notification()), serde_json::json!({"toPersonEmail": "oncall@example.com", "markdown": "**guestbook** drifted"}));
    let mut room = notification();
    room.destination.recipient = "Y2lzY29zcGFyazovL3VzL1JPT00v".into();
    assert_eq!(message(&room)["roomId"], "Y2lzY29zcGFyazovL3VzL1JPT00v");
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, r#"{"id":"m1"}"#)).await;
    let secrets = Secrets::from_map([("webex-token", TOKEN)]);
    let make = maker::<super::Webex>(serde_json::json!({"token": "$webex-token", "apiUrl": rx.url()}));
    let r = &check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        TOKEN,
        Reply::new(200, "{}"),
        Reply::new(400, r#"{"message":"Unable to post message to room"}"#),
    )
    .await;
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/messages"));
    assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
}

/// A resolve edits the original message in its room, found in the state store.
#[tokio::test]
async fn a_resolve_edits_the_original_message() {
    let rx = HttpReceiver::start(Reply::new(200, "{}")).await;
    rx.script(vec![Reply::new(200, r#"{"id":"msg-9","roomId":"room-1"}"#)]);
    let svc = service(
        &maker::<super::Webex>(serde_json::json!({"token": "$webex-token", "apiUrl": rx.url()})),
        &Secrets::from_map([("webex-token", TOKEN)]),
    );
    assert_eq!(deliver(&svc, &notification()).await, Outcome::Delivered);
    let resolve = resolve_of(&notification());
    assert_eq!(deliver(&svc, &resolve).await, Outcome::Delivered);
    let reqs = rx.requests();
    assert_eq!((reqs[1].method.as_str(), reqs[1].path.as_str()), ("PUT", "/v1/messages/msg-9"));
    let body: serde_json::Value = serde_json::from_str(&reqs[1].body).unwrap();
    assert_eq!(body["roomId"], "room-1");
}
