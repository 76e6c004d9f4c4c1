//! The Rocket.Chat destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_all_scenarios, deliver, maker, resolve_of, service};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "rc-SECRET-pat-4";
const PASSWORD: &str = "rc-SECRET-password-1";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Rocketchat, "rocketchat");
    n.destination.recipient = "argocd".into();
    n.payload = serde_json::json!({"message": "guestbook drifted\n", "emoji": ":warning:", "attachments": [{"title": "guestbook"}]});
    n
}

#[test]
fn channels_and_messages() {
    assert_eq!((channel("argocd"), channel("#argocd"), channel("@oncall")), ("#argocd".into(), "#argocd".into(), "@oncall".into()));
    assert_eq!(
        message(&notification()),
        serde_json::json!({"channel": "#argocd", "text": "guestbook drifted", "emoji": ":warning:", "attachments": [{"title": "guestbook"}]})
    );
    assert!(
        Spec::<super::Rocketchat>::parse(serde_json::json!({"serverUrl": "https://x", "email": "a"})).is_err(),
        "no password"
    );
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, r#"{"success":true,"message":{"_id":"m1","rid":"r1"}}"#)).await;
    let secrets = Secrets::from_map([("rc-token", TOKEN)]);
    let make = maker::<super::Rocketchat>(serde_json::json!({"serverUrl": rx.url(), "userId": "u1", "token": "$rc-token"}));
    check_all_scenarios(
        &rx,
        &make,
        &notification(),
        &secrets,
        TOKEN,
        Reply::new(200, "{}"),
        Reply::new(400, r#"{"success":false,"error":"error-invalid-channel"}"#),
    )
    .await;
}

/// Argo CD's way: log in, post, reuse the session, edit on resolve, log in again
/// after the session expired.
#[tokio::test]
async fn login_post_edit_and_a_new_session() {
    let rx = HttpReceiver::start(Reply::new(200, "{}")).await;
    let login = Reply::new(200, r#"{"status":"success","data":{"userId":"u7","authToken":"session-SECRET-1"}}"#);
    rx.script(vec![
        login.clone(),
        Reply::new(200, r#"{"success":true,"message":{"_id":"m1","rid":"room-1"}}"#),
        Reply::new(200, r#"{"success":true}"#),
        Reply::new(401, r#"{"status":"error","message":"You must be logged in to do this."}"#),
        login,
        Reply::new(200, r#"{"success":true,"message":{"_id":"m2","rid":"room-1"}}"#),
    ]);
    let svc = service(
        &maker::<super::Rocketchat>(serde_json::json!({"serverUrl": rx.url(), "email": "argocd@example.com", "password": "$rc-password"}),
        ),
        &Secrets::from_map([("rc-password", PASSWORD)]),
    );
    assert_eq!(deliver(&svc, &notification()).await, Outcome::Delivered);
    let resolve = resolve_of(&notification());
    assert_eq!(deliver(&svc, &resolve).await, Outcome::Delivered);
    let mut other = notification();
    other.record.as_mut().unwrap().key = "another".into();
    assert!(matches!(deliver(&svc, &other).await, Outcome::Retry { .. }), "a 401 drops the session and retries");
    assert_eq!(deliver(&svc, &other).await, Outcome::Delivered);
    let reqs = rx.requests();
    let seen: Vec<&str> = reqs.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        seen,
        [
            "/api/v1/login",
            "/api/v1/chat.postMessage",
            "/api/v1/chat.update",
            "/api/v1/chat.postMessage",
            "/api/v1/login",
            "/api/v1/chat.postMessage"
        ]
    );
    assert_eq!(reqs[1].headers["x-auth-token"], "session-SECRET-1");
    assert_eq!(reqs[1].headers["x-user-id"], "u7");
    let update: serde_json::Value = serde_json::from_str(&reqs[2].body).unwrap();
    assert_eq!((update["roomId"].as_str(), update["msgId"].as_str()), (Some("room-1"), Some("m1")));
}
