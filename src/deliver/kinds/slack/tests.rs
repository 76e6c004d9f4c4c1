//! The Slack destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use std::sync::Arc;

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, Scenario, check_scenario, env};
use crate::model::{Action, DestinationKind};
use crate::secret::Secrets;
use crate::state::Store;

const TOKEN: &str = "xoxb-SECRET-TOKEN-1";

fn posted(ts: &str) -> String {
    format!(r#"{{"ok":true,"channel":"C123","ts":"{ts}"}}"#)
}

fn notification(key: &str) -> crate::model::Notification {
    let mut n = sample(DestinationKind::Slack, "slack");
    n.destination.recipient = "drift".into();
    n.payload = serde_json::json!({"text": "guestbook drifted <https://cd.example.com|open>", "attachments": [{"color": "#f4c030"}]});
    if let Some(r) = n.record.as_mut() {
        r.key = key.into();
    }
    n
}

#[test]
fn message_bodies() {
    let p = serde_json::json!({"text": "t", "blocks": [{"type": "section"}]});
    assert_eq!(
        message(&p, Some("C1"), Some("1.0"), None, Some("dw"), Some(":robot_face:")),
        serde_json::json!({"channel": "C1", "text": "t", "blocks": [{"type": "section"}], "thread_ts": "1.0", "username": "dw", "icon_emoji": ":robot_face:"})
    );
    assert_eq!(
        message(&p, Some("C1"), None, Some("2.0"), Some("dw"), None),
        serde_json::json!({"channel": "C1", "text": "t", "blocks": [{"type": "section"}], "ts": "2.0"})
    );
    assert_eq!(message(&p, None, None, None, None, Some("https://x/i.png"))["icon_url"], "https://x/i.png");
}

#[test]
fn ok_false_is_an_error() {
    assert_eq!(api_result(&posted("1.1")), Ok(("C123".to_string(), "1.1".to_string())));
    assert!(
        matches!(api_result(r#"{"ok":false,"error":"channel_not_found"}"#), Err(Outcome::Permanent(m)) if m.contains("channel_not_found"))
    );
    assert!(matches!(api_result(r#"{"ok":false,"error":"ratelimited"}"#), Err(Outcome::Retry { .. })));
    assert!(matches!(api_result("<html>"), Err(Outcome::Retry { .. })));
}

fn api_spec(url: &str) -> Spec<super::Slack> {
    Spec::<super::Slack>::parse(serde_json::json!({"token": "$slack-token", "apiUrl": url, "username": "driftwatch"}))
        .unwrap()
}

#[tokio::test]
async fn compliance_web_api() {
    let rx = HttpReceiver::start(Reply::new(200, &posted("1.1"))).await;
    let secrets = Secrets::from_map([("slack-token", TOKEN)]);
    let s = api_spec(&rx.url());
    let make = |env: &crate::deliver::env::Env| s.build("slack", env).unwrap();
    for (scenario, replies) in [
        (Scenario::Success, vec![]),
        (Scenario::RetryableThenSuccess, vec![Reply::new(200, r#"{"ok":false,"error":"internal_error"}"#).rejected()]),
        (Scenario::Permanent, vec![Reply::new(200, r#"{"ok":false,"error":"channel_not_found"}"#).rejected()]),
        (Scenario::TimeoutThenSuccess, vec![Reply::new(200, &posted("1.1")).delayed(std::time::Duration::from_millis(1500))]),
        (Scenario::RateLimitedThenSuccess, vec![Reply::new(429, "").header("Retry-After", "1")]),
    ] {
        rx.clear();
        rx.script(replies);
        check_scenario(scenario, &rx, &make, &notification("k"), &secrets, TOKEN).await;
    }
    let r = rx.requests().pop().unwrap();
    assert_eq!(r.path, "/chat.postMessage");
    assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["channel"], "drift");
    assert_eq!(body["text"], "guestbook drifted <https://cd.example.com|open>", "no HTML escaping");
}

#[tokio::test]
async fn resolve_updates_the_original_message_even_after_a_restart() {
    let rx = HttpReceiver::start(Reply::new(200, &posted("1700000000.000100"))).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let secrets = Secrets::from_map([("slack-token", TOKEN)]);
    {
        let state = Arc::new(Store::open(&path).unwrap());
        let client = api_spec(&rx.url()).build("slack", &env(state, secrets.clone())).unwrap();
        assert_eq!(client.deliverer.deliver(&[notification("k1")]).await, Outcome::Delivered);
    }
    // A new process: the message reference comes back from the store.
    let state = Arc::new(Store::open(&path).unwrap());
    let client = api_spec(&rx.url()).build("slack", &env(state, secrets)).unwrap();
    let mut resolve = notification("k1");
    resolve.action = Action::Resolve;
    resolve.payload["text"] = serde_json::json!("resolved: guestbook is in sync again");
    assert_eq!(client.deliverer.deliver(&[resolve]).await, Outcome::Delivered);
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].path, "/chat.update");
    let body: serde_json::Value = serde_json::from_str(&reqs[1].body).unwrap();
    assert_eq!((body["channel"].as_str(), body["ts"].as_str()), (Some("C123"), Some("1700000000.000100")));
    assert_eq!(body["text"], "resolved: guestbook is in sync again");
}

#[tokio::test]
async fn a_grouping_key_threads_replies_under_the_first_message() {
    let rx = HttpReceiver::start(Reply::new(200, &posted("5.5"))).await;
    let state = Arc::new(Store::in_memory().unwrap());
    let client = api_spec(&rx.url()).build("slack", &env(state, Secrets::from_map([("slack-token", TOKEN)]))).unwrap();
    for key in ["k1", "k2"] {
        let mut n = notification(key);
        n.payload["groupingKey"] = serde_json::json!("guestbook");
        assert_eq!(client.deliverer.deliver(&[n]).await, Outcome::Delivered);
    }
    let bodies: Vec<serde_json::Value> = rx.requests().iter().map(|r| serde_json::from_str(&r.body).unwrap()).collect();
    assert!(bodies[0].get("thread_ts").is_none());
    assert_eq!(bodies[1]["thread_ts"], "5.5");
}

#[tokio::test]
async fn incoming_webhook_mode() {
    let rx = HttpReceiver::start(Reply::new(200, "ok")).await;
    let secrets = Secrets::from_map([("hook", format!("{}/services/T0/B0/SECRETPART", rx.url()))]);
    let s = Spec::<super::Slack>::parse(serde_json::json!({"webhookUrl": "$hook"})).unwrap();
    let make = |env: &crate::deliver::env::Env| s.build("slack", env).unwrap();
    for (scenario, replies) in [
        (Scenario::Success, vec![]),
        (Scenario::RetryableThenSuccess, vec![Reply::new(500, "server_error")]),
        (Scenario::Permanent, vec![Reply::new(400, "invalid_payload")]),
    ] {
        rx.clear();
        rx.script(replies);
        check_scenario(scenario, &rx, &make, &notification("k"), &secrets, "SECRETPART").await;
    }
    assert_eq!(rx.requests()[0].path, "/services/T0/B0/SECRETPART");
    assert!(Spec::<super::Slack>::parse(serde_json::json!({})).is_err(), "a token or a webhook URL is required");
}
