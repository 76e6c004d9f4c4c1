//! The Loki destination: the push body (streams by a fixed label set, structured
//! metadata), and the compliance harness against a loopback receiver answering as Loki
//! does (`204`; `429` with `Retry-After`; `400` for an entry too far behind).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind};
use crate::model::{DestinationKind, Severity};
use crate::secret::Secrets;

const PASSWORD: &str = "glc_SECRET-loki-321";

#[test]
fn streams_are_few_and_entries_carry_their_identity() {
    let origin = crate::deliver::ecs::Origin::default();
    let now = chrono::Utc::now();
    let mut a = sample(DestinationKind::Loki, "loki");
    a.episode = Some(serde_json::json!({"id": "argocd/guestbook@1", "classes": ["rbac", "workload"]}));
    let mut b = a.clone();
    b.meta.name = "other".into();
    let mut c = a.clone();
    c.severity = Severity::Critical;
    let entries: Vec<_> = [&a, &b, &c]
        .iter()
        .flat_map(|n| payload::entries(n, crate::deliver::siem::Schema::Ecs.records(n, &origin, now), now))
        .collect();
    let body = payload::push_body(entries);
    let streams = body["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "two Applications of one namespace, project, class and severity share a stream: {body:#}");
    let labels: Vec<&String> = streams[0]["stream"].as_object().unwrap().keys().collect();
    assert_eq!(labels, ["class", "namespace", "project", "service_name", "severity"]);
    assert_eq!(streams[0]["stream"]["class"], "rbac");
    let entry = &streams[0]["values"][0];
    assert!(entry[0].as_str().unwrap().parse::<i128>().unwrap() > 1_700_000_000_000_000_000, "a nanosecond timestamp string");
    let line: serde_json::Value = serde_json::from_str(entry[1].as_str().unwrap()).unwrap();
    assert_eq!(line["ecs"]["version"], "8.11.0", "the line is the record");
    assert_eq!(entry[2]["episode"], "argocd/guestbook@1");
    assert!(entry[2]["app"].is_string() && entry[2].get("namespace").is_none(), "metadata is what the labels are not");
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(204, "")).await;
    let secrets = Secrets::from_map([("loki-password", PASSWORD)]);
    let spec = Spec::<super::Loki>::parse(serde_json::json!({"url": rx.url(), "tenant": "platform", "username": "123456",
        "password": "$loki-password", "format": "ocsf"}))
    .unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("loki", env).unwrap();
    let n = sample(DestinationKind::Loki, "loki");
    let refused = Reply::new(400, "entry for stream '{service_name=\"driftwatch\"}' has timestamp too old: 2026-11-01T00:00:00Z");
    let r = check_http_kind(&rx, &make, &n, &secrets, PASSWORD, Reply::new(204, ""), refused).await;
    assert_eq!(r.path, "/loki/api/v1/push");
    assert_eq!(r.headers["x-scope-orgid"], "platform");
    assert!(r.headers["authorization"].starts_with("Basic "));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let line: serde_json::Value = serde_json::from_str(body["streams"][0]["values"][0][1].as_str().unwrap()).unwrap();
    crate::deliver::ocsf::tests::assert_valid(&line);
}

#[test]
fn settings_are_checked() {
    let cfg = |v: serde_json::Value| crate::deliver::kind::config::<super::Loki>(v);
    assert!(cfg(serde_json::json!({"url": "https://loki:3100"})).is_ok());
    assert_eq!(
        cfg(serde_json::json!({"url": "u", "username": "1"})).unwrap_err().to_string(),
        "username and password go together"
    );
    assert_eq!(cfg(serde_json::json!({"url": "u", "batchSize": 501})).unwrap_err().to_string(), "batchSize must be from 1 to 500, not 501");
}
