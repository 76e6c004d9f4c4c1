//! The PagerDuty destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, Scenario, check_scenario};
use crate::model::{Action, DestinationKind};
use crate::secret::Secrets;

const KEY: &str = "R0UTINGKEY-SECRET-0001";
const OK: &str = r#"{"status":"success","message":"Event processed","dedup_key":"x"}"#;

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Pagerduty, "pagerduty");
    n.destination.recipient = "platform".into();
    n.payload = serde_json::json!({"summary": "guestbook drifted", "severity": "critical", "source": "argocd/guestbook", "component": "guestbook", "custom_details": {"revision": "a1b2c3d"}});
    n
}

#[test]
fn dedup_keys_are_stable_and_bounded() {
    let n = notification();
    assert_eq!(dedup_key(&n), "driftwatch/u-1/on-out-of-sync/[0].abc");
    assert_eq!(dedup_key(&n), dedup_key(&n.clone()));
    let mut long = n.clone();
    long.trigger = "x".repeat(300);
    let k = dedup_key(&long);
    assert!(k.len() <= 255 && k.starts_with("driftwatch/"), "{k}");
}

/// A `oncePer` value and a recipient past the key bound (a writable
/// `status.sync.revision`, a tenant's recipient): the state store's key fits
/// PostgreSQL's index, and each value is still an incident of its own (the incident
/// key reads the value back from the bounded key).
#[test]
fn once_per_values_past_the_key_bound_fit_the_store_and_stay_incidents_of_their_own() {
    let mut n = notification();
    n.destination.recipient = "r".repeat(2_100);
    let with = |once: &str| {
        let mut m = n.clone();
        let key = crate::state::dedup_key(Some(once), &m.trigger, &m.condition_key, &m.destination.service, &m.destination.recipient);
        if let Some(r) = m.record.as_mut() {
            r.key = key;
        }
        m
    };
    let (a, b) = (with(&format!("{}a", "v".repeat(2_100))), with(&format!("{}b", "v".repeat(2_100))));
    let stored = a.record.as_ref().map(|r| r.key.len()).unwrap_or(usize::MAX);
    assert!(stored <= 5 * crate::text::MAX_KEY_PART_BYTES + 4, "a key of {stored} bytes");
    assert_ne!(dedup_key(&a), dedup_key(&b), "two values, two incidents");
    assert_eq!(dedup_key(&a), dedup_key(&with(&format!("{}a", "v".repeat(2_100)))), "stable");
    assert_ne!(dedup_key(&a), dedup_key(&n), "not the incident of the trigger without oncePer");
}

#[test]
fn trigger_and_resolve_events() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:12:30Z").unwrap().with_timezone(&chrono::Utc);
    let e = event(&notification(), "rk", "https://cd.example.com", now);
    assert_eq!(e["event_action"], "trigger");
    assert_eq!(e["routing_key"], "rk");
    assert_eq!(e["dedup_key"], "driftwatch/u-1/on-out-of-sync/[0].abc");
    assert_eq!(e["payload"]["summary"], "guestbook drifted");
    assert_eq!(e["payload"]["severity"], "critical");
    assert_eq!(e["payload"]["source"], "argocd/guestbook");
    assert_eq!(e["payload"]["custom_details"]["revision"], "a1b2c3d");
    assert_eq!(e["payload"]["timestamp"], "2026-03-02T03:12:30Z");
    assert_eq!(e["links"][0]["href"], "https://cd.example.com/applications/argocd/guestbook");
    let mut r = notification();
    r.action = Action::Resolve;
    assert_eq!(
        event(&r, "rk", "", now),
        serde_json::json!({"routing_key": "rk", "event_action": "resolve", "dedup_key": "driftwatch/u-1/on-out-of-sync/[0].abc"})
    );
}

#[test]
fn oversized_bodies_shrink_custom_details_first() {
    let mut n = notification();
    n.payload["custom_details"] = serde_json::json!({"blob": "x".repeat(MAX_BODY_BYTES)});
    let e = event(&n, "rk", "", chrono::Utc::now());
    assert!(e.to_string().len() <= MAX_BODY_BYTES);
    assert_eq!(e["payload"]["custom_details"]["truncated"], true);
    assert_eq!(e["payload"]["summary"], "guestbook drifted", "the summary is kept");
}

fn spec(url: &str) -> Spec<super::Pagerduty> {
    Spec::<super::Pagerduty>::parse(serde_json::json!({"apiUrl": url, "routingKeys": {"platform": "$pd-key"}})).unwrap()
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(202, OK)).await;
    let secrets = Secrets::from_map([("pd-key", KEY)]);
    let s = spec(&rx.url());
    let make = |env: &crate::deliver::env::Env| s.build("pagerduty", env).unwrap();
    for (scenario, replies) in [
        (Scenario::Success, vec![]),
        (Scenario::RetryableThenSuccess, vec![Reply::new(500, "oops")]),
        (Scenario::Permanent, vec![Reply::new(400, r#"{"status":"invalid event","errors":["'payload.summary' is missing"]}"#)]),
        (Scenario::TimeoutThenSuccess, vec![Reply::new(202, OK).delayed(std::time::Duration::from_millis(1500))]),
        (Scenario::RateLimitedThenSuccess, vec![Reply::new(429, "").header("Retry-After", "1")]),
    ] {
        rx.clear();
        rx.script(replies);
        check_scenario(scenario, &rx, &make, &notification(), &secrets, KEY).await;
    }
    let reqs = rx.requests();
    let r = reqs.last().unwrap();
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v2/enqueue"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["routing_key"], KEY, "the routing key reaches PagerDuty, and only PagerDuty");
    // A retry after a timeout sends the same dedup_key, so PagerDuty collapses it.
    let keys: std::collections::BTreeSet<String> =
        reqs.iter().map(|r| serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["dedup_key"].to_string()).collect();
    assert_eq!(keys.len(), 1);
}

#[tokio::test]
async fn unknown_recipient_is_permanent() {
    let rx = HttpReceiver::start(Reply::new(202, OK)).await;
    let env = crate::deliver::testkit::env(
        std::sync::Arc::new(crate::state::Store::in_memory().unwrap()),
        Secrets::from_map([("pd-key", KEY)]),
    );
    let client = spec(&rx.url()).build("pagerduty", &env).unwrap();
    let mut n = notification();
    n.destination.recipient = "nobody".into();
    assert!(matches!(client.deliverer.deliver(std::slice::from_ref(&n)).await, Outcome::Permanent(m) if m.contains("nobody")));
    assert!(rx.requests().is_empty());
}
