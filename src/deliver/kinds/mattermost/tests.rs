//! The Mattermost destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind, deliver, maker, resolve_of, service};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "mm-SECRET-token-5";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Mattermost, "mattermost");
    n.destination.recipient = "4xp9fdt77pncbef59f4k1qe83o".into();
    n.payload = serde_json::json!({"message": "guestbook drifted\n", "attachments": [{"title": "guestbook", "color": "#E96D76"}]});
    n
}

#[test]
fn the_post_carries_the_attachments() {
    let p = post(&notification());
    assert_eq!(p["channel_id"], "4xp9fdt77pncbef59f4k1qe83o");
    assert_eq!(p["message"], "guestbook drifted");
    assert_eq!(p["props"]["attachments"][0]["title"], "guestbook");
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(201, r#"{"id":"p1"}"#)).await;
    let secrets = Secrets::from_map([("mm-token", TOKEN)]);
    let make = maker::<super::Mattermost>(serde_json::json!({"apiURL": rx.url(), "token": "$mm-token"}));
    let r = &check_http_kind(
        &rx,
        &make,
        &notification(),
        &secrets,
        TOKEN,
        Reply::new(201, "{}"),
        Reply::new(400, r#"{"id":"api.post.create_post.channel_id.app_error"}"#),
    )
    .await;
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/api/v4/posts"));
    assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
}

/// A resolve edits the original post, found in the state store.
#[tokio::test]
async fn a_resolve_edits_the_original_post() {
    let rx = HttpReceiver::start(Reply::new(200, "{}")).await;
    rx.script(vec![Reply::new(201, r#"{"id":"post-1","channel_id":"4xp9fdt77pncbef59f4k1qe83o"}"#)]);
    let svc = service(
        &maker::<super::Mattermost>(serde_json::json!({"apiURL": rx.url(), "token": "$mm-token"})),
        &Secrets::from_map([("mm-token", TOKEN)]),
    );
    assert_eq!(deliver(&svc, &notification()).await, Outcome::Delivered);
    let mut resolve = resolve_of(&notification());
    resolve.payload["message"] = serde_json::json!("guestbook is back in sync");
    assert_eq!(deliver(&svc, &resolve).await, Outcome::Delivered);
    let reqs = rx.requests();
    assert_eq!((reqs[1].method.as_str(), reqs[1].path.as_str()), ("PUT", "/api/v4/posts/post-1"));
    let body: serde_json::Value = serde_json::from_str(&reqs[1].body).unwrap();
    assert_eq!((body["id"].as_str(), body["message"].as_str()), (Some("post-1"), Some("guestbook is back in sync")));
}
