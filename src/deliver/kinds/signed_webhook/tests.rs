//! The signed webhook destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const KEY: &str = "hmac-key-SECRET-456";

#[test]
fn hmac_sha256_matches_the_rfc_4231_vector() {
    assert_eq!(
        signature(b"Jefe", b"what do ya want for nothing?"),
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert!(verify(b"Jefe", b"what do ya want for nothing?", "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
    assert!(!verify(b"Jefe", b"tampered", "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
    assert!(!verify(b"Jefe", b"x", "md5=00"));
}

#[test]
fn signed_request_headers() {
    let record = serde_json::json!({"event": {"action": "on-out-of-sync"}, "@timestamp": "2026-03-02T03:12:30.000Z"});
    let r = signed_request("https://siem.example.com/in", b"k", &record, 1_772_421_150);
    assert_eq!(r.headers["X-Signature"], signature(b"k", r.body.as_bytes()));
    assert_eq!(r.headers["X-Signature-Timestamp"], "1772421150");
    assert_eq!(r.headers["X-Driftwatch-Event"], "on-out-of-sync");
    assert_eq!(r.headers["Content-Type"], "application/json");
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(204, "")).await;
    let secrets = Secrets::from_map([("siem-key", KEY)]);
    let spec = Spec::<super::SignedWebhook>::parse(serde_json::json!({"url": format!("{}/ingest", rx.url()), "secret": "$siem-key"}),
    )
    .unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("siem", env).unwrap();
    let n = sample(DestinationKind::SignedWebhook, "siem");
    let r = check_http_kind(&rx, &make, &n, &secrets, KEY, Reply::new(204, ""), Reply::new(400, "bad signature")).await;
    // A receiver can check the signature and the timestamp.
    assert_eq!(r.path, "/ingest");
    assert!(verify(KEY.as_bytes(), r.body.as_bytes(), &r.headers["x-signature"]));
    let record: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(record["event"]["kind"], "alert");
    assert_eq!(record["rule"]["name"], "on-out-of-sync");
    let ts = chrono::DateTime::parse_from_rfc3339(record["@timestamp"].as_str().unwrap()).unwrap().timestamp();
    assert_eq!(r.headers["x-signature-timestamp"], ts.to_string());
}

/// `format: ocsf`: the notification's records as one signed JSON array, each valid
/// OCSF.
#[tokio::test]
async fn ocsf_records_are_one_signed_array() {
    let rx = HttpReceiver::start(Reply::new(204, "")).await;
    let secrets = Secrets::from_map([("siem-key", KEY)]);
    let spec = Spec::<super::SignedWebhook>::parse(serde_json::json!({"url": rx.url(), "secret": "$siem-key", "format": "ocsf"})).unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("siem", env).unwrap();
    let mut n = sample(DestinationKind::SignedWebhook, "siem");
    n.operation = Some(serde_json::json!({"id": "op-1", "phase": "Succeeded", "revision": "abc", "username": "alice"}));
    let outcome = crate::deliver::testkit::deliver(&crate::deliver::testkit::service(&make, &secrets), &n).await;
    assert_eq!(outcome, crate::deliver::outcome::Outcome::Delivered);
    let r = &rx.requests()[0];
    assert!(verify(KEY.as_bytes(), r.body.as_bytes(), &r.headers["x-signature"]));
    assert_eq!(r.headers["x-driftwatch-event"], "API Activity: Update");
    let records: Vec<serde_json::Value> = serde_json::from_str(&r.body).unwrap();
    assert_eq!(records.len(), 1);
    records.iter().for_each(crate::deliver::ocsf::tests::assert_valid);
    assert_eq!(records[0]["api"]["operation"], "sync");
}
