//! The webhook destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use std::collections::BTreeMap;

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "hook-token-SECRET-123";

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Webhook, "hook");
    n.payload = serde_json::json!({"method": "PUT", "path": "/events/guestbook", "headers": {"X-App": "guestbook"}, "body": "{\"app\":\"guestbook\"}"});
    n
}

#[test]
fn request_joins_url_and_template_fields() {
    let mut headers = BTreeMap::new();
    headers.insert("X-Team".to_string(), "platform".to_string());
    headers.insert("X-App".to_string(), "overridden".to_string());
    let r = request("https://hooks.example.com/base/", &headers, &notification());
    assert_eq!(r.method, "PUT");
    assert_eq!(r.url, "https://hooks.example.com/base/events/guestbook");
    assert_eq!(r.headers["X-App"], "guestbook", "the template's header wins");
    assert_eq!(r.headers["X-Team"], "platform");
    assert_eq!(r.body, "{\"app\":\"guestbook\"}");
    assert_eq!(payload_join("https://x/", ""), "https://x/");
}

fn payload_join(a: &str, b: &str) -> String {
    super::payload::join_url(a, b)
}

fn spec(url: &str) -> Spec<super::Webhook> {
    Spec::<super::Webhook>::parse(serde_json::json!({"url": url, "bearerToken": "$hook-token", "headers": {"X-Static": "1"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, "ok")).await;
    let secrets = Secrets::from_map([("hook-token", TOKEN)]);
    let s = spec(&rx.url());
    let make = |env: &crate::deliver::env::Env| s.build("hook", env).unwrap();
    let r = check_http_kind(&rx, &make, &notification(), &secrets, TOKEN, Reply::new(200, "ok"), Reply::new(400, "bad request")).await;
    // What the receiver saw: the templated request with the service's auth.
    assert_eq!((r.method.as_str(), r.path.as_str()), ("PUT", "/events/guestbook"));
    assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
    assert_eq!(r.headers["x-static"], "1");
    assert_eq!(r.headers["x-app"], "guestbook");
}

#[tokio::test]
async fn tls_is_verified_by_default_and_a_private_ca_can_be_trusted() {
    let (server, tls) = crate::deliver::testkit::https_server(Reply::new(200, "ok")).await;
    let secrets = Secrets::from_map([("hook-token", TOKEN)]);
    let url = format!("https://localhost:{}", server.port());
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state, secrets);
    let untrusting = spec(&url).build("hook", &env).unwrap();
    let outcome = untrusting.deliverer.deliver(std::slice::from_ref(&notification())).await;
    // Found by its type (rustls's invalid certificate), and retried: during a
    // rotation a receiver presents a certificate not yet trusted for a while.
    assert!(
        matches!(&outcome, crate::deliver::outcome::Outcome::Retry { reason, .. } if reason.contains("TLS certificate not accepted")),
        "{outcome:?}"
    );
    assert!(server.inner.requests().is_empty());
    let with_ca =
        Spec::<super::Webhook>::parse(serde_json::json!({"url": url, "caFile": tls.ca_file.path().to_str().unwrap()}))
            .unwrap();
    let trusting = with_ca.build("hook", &env).unwrap();
    assert_eq!(trusting.deliverer.deliver(std::slice::from_ref(&notification())).await, crate::deliver::outcome::Outcome::Delivered);
    assert_eq!(server.inner.requests().len(), 1);
}

/// A receiver whose token is being rotated answers 403 to its first five requests,
/// then 200: the notification is delivered (403 is retried, not recorded as handled),
/// and every attempt carries the same `Idempotency-Key`, so a receiver can tell a
/// repeat from a new notification.
#[tokio::test]
async fn a_refusal_during_a_token_rotation_is_retried_until_delivered() {
    use crate::deliver::Delivery;
    let rx = HttpReceiver::start(Reply::new(200, "ok")).await;
    rx.script(vec![Reply::new(403, "token not valid"); 5]);
    let secrets = Secrets::from_map([("hook-token", TOKEN)]);
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), secrets);
    let mut service = spec(&rx.url()).build("hook", &env).unwrap();
    service.settings = crate::deliver::testkit::fast_settings(service.settings);
    service.settings.retry.max_attempts = 10;
    let delivery = Delivery::start(vec![service], state.clone());
    delivery.submit(&[notification()]).unwrap();
    assert!(delivery.settle(std::time::Duration::from_secs(60), std::time::Duration::from_secs(20)).await);
    delivery.shutdown(std::time::Duration::from_secs(1)).await;
    let requests = rx.requests();
    assert_eq!(requests.len(), 6, "five refusals, then the delivery");
    assert!(requests[5].accepted);
    assert!(state.outbox().dead_letters().unwrap().is_empty(), "nothing dead-lettered");
    let record = notification().record.unwrap();
    assert!(state.pass().is_notified(&record.app_key, &record.key).unwrap(), "recorded once delivered");
    let keys: std::collections::BTreeSet<&str> = requests.iter().map(|r| r.headers["idempotency-key"].as_str()).collect();
    assert_eq!(keys.len(), 1, "one key for every attempt: {keys:?}");
    assert_eq!(keys.iter().next().map(|k| k.len()), Some(32));
}
