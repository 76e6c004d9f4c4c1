//! The Splunk HEC destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "hec-token-SECRET-789";
const OK: &str = r#"{"text":"Success","code":0}"#;

#[test]
fn envelopes_and_batches() {
    let meta = super::payload::EnvelopeMeta {
        host: "h".into(),
        source: "driftwatch".into(),
        sourcetype: "driftwatch:notification".into(),
        index: Some("gitops".into()),
    };
    let at = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:12:30.250Z").unwrap().with_timezone(&chrono::Utc);
    let e = envelope(&meta, serde_json::json!({"a": 1}), at);
    assert_eq!(
        e,
        serde_json::json!({"time": 1772421150.25, "host": "h", "source": "driftwatch", "sourcetype": "driftwatch:notification", "index": "gitops", "event": {"a": 1}})
    );
    assert_eq!(batch_body(&[e.clone(), e.clone()]).lines().count(), 2);
}

#[test]
fn hec_codes() {
    assert_eq!(classify(200, None, OK), Outcome::Delivered);
    assert!(matches!(classify(503, None, r#"{"text":"Server is busy","code":9}"#), Outcome::Retry { .. }));
    assert!(matches!(classify(500, None, r#"{"text":"Internal server error","code":8}"#), Outcome::Retry { .. }));
    // A token being rotated: retried, not recorded as handled.
    assert!(matches!(classify(403, None, r#"{"text":"Invalid token","code":4}"#), Outcome::Retry { .. }));
    assert!(matches!(classify(413, None, r#"{"text":"Content too large","code":27}"#), Outcome::Permanent(_)));
    assert!(matches!(classify(400, None, r#"{"text":"Invalid data format","code":6}"#), Outcome::Permanent(_)));
    assert!(matches!(classify(400, None, r#"{"text":"Server is busy","code":9}"#), Outcome::Retry { .. }));
}

fn spec(url: &str) -> Spec<super::Splunk> {
    Spec::<super::Splunk>::parse(serde_json::json!({"url": url, "token": "$hec", "index": "gitops", "host": "dw-1"}))
        .unwrap()
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, OK)).await;
    let secrets = Secrets::from_map([("hec", TOKEN)]);
    let s = spec(&rx.url());
    let make = |env: &crate::deliver::env::Env| s.build("splunk", env).unwrap();
    let n = sample(DestinationKind::Splunk, "splunk");
    let r = check_http_kind(
        &rx,
        &make,
        &n,
        &secrets,
        TOKEN,
        Reply::new(200, OK),
        Reply::new(400, r#"{"text":"Invalid data format","code":6}"#),
    )
    .await;
    assert_eq!(r.path, "/services/collector/event");
    assert_eq!(r.headers["authorization"], format!("Splunk {TOKEN}"));
    let env: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!((env["host"].as_str(), env["index"].as_str(), env["source"].as_str()), (Some("dw-1"), Some("gitops"), Some("driftwatch")));
    assert_eq!(env["event"]["orchestrator"]["resource"]["name"], "guestbook");
}

#[tokio::test]
async fn several_events_share_one_request() {
    let rx = HttpReceiver::start(Reply::new(200, OK)).await;
    let secrets = Secrets::from_map([("hec", TOKEN)]);
    let state = std::sync::Arc::new(crate::state::StateStore::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), secrets);
    let mut service = spec(&rx.url()).build("splunk", &env).unwrap();
    service.settings = crate::deliver::testkit::fast_settings(service.settings);
    let batch: Vec<_> = (0..3)
        .map(|i| {
            let mut n = sample(DestinationKind::Splunk, "splunk");
            if let Some(r) = n.record.as_mut() {
                r.key = format!("k{i}");
            }
            n
        })
        .collect();
    // Enqueued before the worker starts, so it finds all three due at once.
    state.enqueue(&batch, 0).unwrap();
    let delivery = crate::deliver::Delivery::start(vec![service], state.clone());
    assert!(delivery.settle(std::time::Duration::from_secs(60), std::time::Duration::from_secs(10)).await);
    delivery.shutdown(std::time::Duration::from_secs(1)).await;
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 1, "one request");
    assert_eq!(reqs[0].body.lines().count(), 3, "three envelopes");
}

#[test]
fn a_batch_size_out_of_range_is_refused() {
    let with = |n: usize| {
        crate::deliver::kind::config::<super::Splunk>(serde_json::json!({"url": "https://splunk:8088", "token": "$t", "batchSize": n}))
    };
    assert!(with(100).is_ok() && with(1).is_ok());
    for n in [0, 101] {
        assert_eq!(with(n).unwrap_err().to_string(), format!("batchSize must be from 1 to 100, not {n}"));
    }
}
