//! The `_bulk` bodies and the reading of its answers, without a network (the protocol
//! against a loopback Elasticsearch, and a crash during a drain, are in
//! `tests/elasticsearch.rs`).

use serde_json::json;

use super::payload::{Doc, bad_data_stream, bodies, classify, docs, per_notification};
use crate::deliver::outcome::Outcome;

#[test]
fn each_record_is_a_create_with_its_identity_as_id() {
    let ecs = json!({"@timestamp": "2026-12-06T09:00:00.000Z", "event": {"id": "idem-1"}});
    let finding = json!({"class_uid": 2004, "time": 1_765_011_600_000i64, "metadata": {"uid": "idem-2"}});
    let long = json!({"@timestamp": "t", "event": {"id": "x".repeat(600)}});
    let d = docs(3, vec![ecs, finding, long]);
    assert_eq!(d.iter().map(|d| d.of).collect::<Vec<_>>(), [3, 3, 3]);
    assert_eq!((d[0].id.as_str(), d[1].id.as_str()), ("idem-1", "idem-2"));
    assert_eq!(d[1].doc["@timestamp"], "2025-12-06T09:00:00.000Z", "an OCSF record gets its time as @timestamp");
    assert_eq!(d[2].id.len(), 64, "an _id over 512 bytes is hashed");
    let b = bodies(&d, 1 << 20);
    assert_eq!(b.len(), 1);
    let lines: Vec<serde_json::Value> = b[0].0.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[0], json!({"create": {"_id": "idem-1"}}));
    assert_eq!(lines.len(), 6);
    assert!(b[0].0.ends_with('\n'), "NDJSON ends with a newline");
}

#[test]
fn bodies_are_bounded_by_bytes() {
    let d: Vec<Doc> = (0..10).map(|i| Doc { of: i, id: format!("id-{i}"), doc: json!({"message": "x".repeat(100)}) }).collect();
    let one = bodies(&d[..1], usize::MAX).remove(0).0.len();
    let b = bodies(&d, one * 3);
    assert_eq!(b.iter().map(|(_, held)| held.len()).collect::<Vec<_>>(), [3, 3, 3, 1]);
    assert!(b.iter().all(|(body, _)| body.len() <= one * 3));
    assert_eq!(b.iter().flat_map(|(_, held)| held.clone()).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>(), "in order, none lost");
    // A document larger than the bound goes alone.
    assert_eq!(bodies(&d, 10).len(), 10);
}

#[test]
fn a_200_answer_is_read_item_by_item() {
    let answer = json!({"errors": true, "items": [
        {"create": {"status": 201}},
        {"create": {"status": 409, "error": {"type": "version_conflict_engine_exception", "reason": "document already exists"}}},
        {"create": {"status": 429, "error": {"type": "es_rejected_execution_exception", "reason": "rejected execution"}}},
        {"create": {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": "failed to parse field [x]"}}},
        {"create": {"status": 503, "error": {"type": "unavailable_shards_exception", "reason": "primary shard is not active"}}},
    ]});
    let o = classify(200, None, &answer.to_string(), 5);
    assert_eq!(o[..2], [Outcome::Delivered, Outcome::Delivered], "created, or already there");
    assert!(matches!(&o[2], Outcome::Retry { reason, .. } if reason.contains("es_rejected_execution_exception")));
    assert!(matches!(&o[3], Outcome::Permanent(r) if r.contains("mapper_parsing_exception: failed to parse field [x]")));
    assert!(matches!(&o[4], Outcome::Retry { .. }));
    // An answer that does not match the request retries every document.
    assert!(classify(200, None, r#"{"errors":false,"items":[]}"#, 2).iter().all(|o| matches!(o, Outcome::Retry { .. })));
    assert!(classify(200, None, "<html>proxy", 2).iter().all(|o| matches!(o, Outcome::Retry { .. })));
    // A refused request: each document as for any HTTP answer.
    assert!(classify(429, None, "", 2).iter().all(|o| matches!(o, Outcome::Retry { .. })));
    assert!(classify(401, None, "", 1).iter().all(|o| matches!(o, Outcome::Retry { .. })), "a key being rotated");
    assert!(classify(400, None, "bad", 1).iter().all(|o| matches!(o, Outcome::Permanent(_))));
}

#[test]
fn a_notification_is_delivered_when_each_of_its_documents_is() {
    let d = |of| Doc { of, id: String::new(), doc: json!({}) };
    let docs = [d(0), d(0), d(1), d(1), d(2), d(2)];
    let refused = Outcome::Permanent("mapping".into());
    let outcomes = [
        Outcome::Delivered,
        Outcome::Delivered,
        refused.clone(),
        Outcome::retry("429"),
        refused.clone(),
        Outcome::Delivered,
    ];
    let per = per_notification(&docs, &outcomes, 3);
    assert_eq!(per[0], Outcome::Delivered);
    assert!(matches!(per[1], Outcome::Retry { .. }), "a retryable document wins: the refused one is refused again next time");
    assert_eq!(per[2], refused);
}

#[test]
fn data_stream_names_follow_elasticsearchs_rules() {
    assert_eq!(bad_data_stream("logs-driftwatch-default"), None);
    for bad in ["", "Logs-x", "logs x", "_logs", "logs/x", "a:b"] {
        assert!(bad_data_stream(bad).is_some(), "{bad:?}");
    }
    let cfg = |extra: serde_json::Value| {
        let mut v = json!({"url": "https://es:9200", "apiKey": "$k"});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        crate::deliver::kind::config::<super::Elasticsearch>(v)
    };
    assert!(cfg(json!({})).is_ok());
    assert_eq!(cfg(json!({"batchSize": 0})).unwrap_err().to_string(), "batchSize must be from 1 to 500, not 0");
    assert_eq!(cfg(json!({"username": "$u", "password": "$p"})).unwrap_err().to_string(), "set apiKey or username and password, not both");
    assert!(cfg(json!({"dataStream": "Logs"})).unwrap_err().to_string().contains("holds 'L'"));
}

/// The index templates and lifecycle policies under `deploy/elasticsearch/` are JSON,
/// match the default data stream, and name the policy that is shipped.
#[test]
fn the_shipped_templates_fit_the_default_data_stream() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/elasticsearch");
    let read = |f: &str| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap() };
    let stream = super::config::DEFAULT_DATA_STREAM;
    for t in ["index-template.json", "opensearch-index-template.json"] {
        let t = read(t);
        let pattern = t["index_patterns"][0].as_str().unwrap();
        assert!(stream.starts_with(pattern.trim_end_matches('*')), "{pattern} does not match {stream}");
        assert!(t["data_stream"].is_object() && t["priority"].as_u64() > Some(100), "a data stream template over the built-in logs one");
        assert_eq!(t["template"]["mappings"]["properties"]["time"]["format"], "epoch_millis", "OCSF times are epoch milliseconds");
    }
    assert_eq!(read("index-template.json")["template"]["settings"]["index.lifecycle.name"], "driftwatch");
    assert!(read("ilm-policy.json")["policy"]["phases"]["delete"].is_object());
    let os = read("opensearch-index-template.json")["template"]["mappings"].to_string();
    assert!(!os.contains(r#""type":"flattened""#) && !os.contains("match_only_text") && os.contains(r#""type":"flat_object""#), "OpenSearch has flat_object and text");
    assert!(read("opensearch-ism-policy.json")["policy"]["states"].is_array());
}
