//! The Telegram destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::testkit::{HttpReceiver, Reply, Scenario, check_scenario, deliver, maker, resolve_of, service};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "123456:SECRET-bot-token";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Telegram, "telegram");
    n.destination.recipient = "-1001234567890".into();
    n.payload = serde_json::json!({"message": "*guestbook* drifted\n", "parseMode": "Markdown"});
    n
}

#[test]
fn chats_and_messages() {
    assert_eq!(chat_id("-1001234567890"), serde_json::json!(-1001234567890i64));
    assert_eq!(chat_id("argocd_alerts"), serde_json::json!("@argocd_alerts"));
    assert_eq!(chat_id("@argocd_alerts"), serde_json::json!("@argocd_alerts"));
    let m = message(&notification());
    assert_eq!((m["text"].as_str(), m["parse_mode"].as_str()), (Some("*guestbook* drifted"), Some("Markdown")));
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, r#"{"ok":true,"result":{"message_id":1}}"#)).await;
    let secrets = Secrets::from_map([("telegram-token", TOKEN)]);
    let make = maker::<super::Telegram>(serde_json::json!({"token": "$telegram-token", "apiUrl": rx.url()}));
    for (scenario, replies) in [
        (Scenario::Success, vec![]),
        (Scenario::RetryableThenSuccess, vec![Reply::new(502, "bad gateway")]),
        (Scenario::Permanent, vec![Reply::new(400, r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}"#)]),
        (Scenario::TimeoutThenSuccess, vec![Reply::new(200, r#"{"ok":true}"#).delayed(std::time::Duration::from_millis(1500))]),
        // Telegram says when to retry in the body, not in a header.
        (
            Scenario::RateLimitedThenSuccess,
            vec![Reply::new(
                429,
                r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 1","parameters":{"retry_after":1}}"#,
            )],
        ),
    ] {
        rx.clear();
        rx.script(replies);
        check_scenario(scenario, &rx, &make, &notification(), &secrets, TOKEN).await;
    }
    rx.clear();
    check_scenario(Scenario::Success, &rx, &make, &notification(), &secrets, TOKEN.split(':').nth(1).unwrap()).await;
    let r = &rx.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", format!("/bot{TOKEN}/sendMessage").as_str()));
}

/// A resolve edits the original message, found in the state store.
#[tokio::test]
async fn a_resolve_edits_the_original_message() {
    let rx = HttpReceiver::start(Reply::new(200, r#"{"ok":true}"#)).await;
    rx.script(vec![Reply::new(200, r#"{"ok":true,"result":{"message_id":321,"chat":{"id":-1001234567890}}}"#)]);
    let svc = service(
        &maker::<super::Telegram>(serde_json::json!({"token": "$telegram-token", "apiUrl": rx.url()})),
        &Secrets::from_map([("telegram-token", TOKEN)]),
    );
    assert_eq!(deliver(&svc, &notification()).await, Outcome::Delivered);
    let resolve = resolve_of(&notification());
    assert_eq!(deliver(&svc, &resolve).await, Outcome::Delivered);
    let reqs = rx.requests();
    assert_eq!(reqs[1].path, format!("/bot{TOKEN}/editMessageText"));
    let body: serde_json::Value = serde_json::from_str(&reqs[1].body).unwrap();
    assert_eq!((body["message_id"].as_i64(), body["chat_id"].as_i64()), (Some(321), Some(-1001234567890)));
}
