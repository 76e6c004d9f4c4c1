//! The OTLP destination: what is sent, decoded with the official protobuf definitions
//! (Python's `opentelemetry-proto`, which `scripts/test.sh` installs), the reading of
//! the collector's answers, and the compliance harness against a loopback receiver.

use std::collections::BTreeMap;

use prost::Message as _;
use serde_json::json;

use super::payload::{body, classify, request};
use super::proto::{ExportLogsPartialSuccess, ExportLogsServiceResponse};
use crate::deliver::ecs::Origin;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::outcome::Outcome;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind};
use crate::model::{DestinationKind, Severity};
use crate::secret::Secrets;

const KEY: &str = "hcaik_SECRET-otlp-654";

/// Decodes a gzip'd `ExportLogsServiceRequest` with the official generated
/// definitions, as JSON (protobuf's JSON mapping).
fn decode_officially(gzipped: &[u8]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("request.bin");
    std::fs::write(&path, gzipped).unwrap();
    let script = "import gzip, json, sys\n\
        from google.protobuf.json_format import MessageToDict\n\
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest\n\
        req = ExportLogsServiceRequest()\n\
        req.ParseFromString(gzip.decompress(open(sys.argv[1], 'rb').read()))\n\
        print(json.dumps(MessageToDict(req)))\n";
    let out = std::process::Command::new("python3").args(["-c", script, path.to_str().unwrap()]).output().expect("python3");
    assert!(
        out.status.success(),
        "decoding with opentelemetry-proto failed (scripts/test.sh installs it: pip install opentelemetry-proto): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An `AnyValue` in protobuf's JSON mapping back as the JSON it encodes.
fn plain(v: &serde_json::Value) -> serde_json::Value {
    if let Some(s) = v.get("stringValue") {
        return s.clone();
    }
    if let Some(b) = v.get("boolValue") {
        return b.clone();
    }
    if let Some(i) = v.get("intValue") {
        return json!(i.as_str().and_then(|i| i.parse::<i64>().ok()).unwrap_or_default());
    }
    if let Some(d) = v.get("doubleValue") {
        return d.clone();
    }
    if let Some(a) = v.get("arrayValue") {
        return a["values"].as_array().map_or(json!([]), |a| a.iter().map(plain).collect());
    }
    if let Some(kv) = v.get("kvlistValue") {
        let m: serde_json::Map<String, serde_json::Value> =
            kv["values"].as_array().into_iter().flatten().map(|e| (e["key"].as_str().unwrap_or_default().to_string(), plain(&e["value"]))).collect();
        return serde_json::Value::Object(m);
    }
    // An empty array or list has no field in the JSON mapping.
    json!(null)
}

fn attr<'a>(list: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    list.as_array().into_iter().flatten().find(|a| a["key"] == key).map_or(&serde_json::Value::Null, |a| &a["value"])
}

#[test]
fn the_request_decodes_with_the_official_definitions() {
    let origin = Origin { cluster: "prod-eu".into(), argocd_url: String::new() };
    let mut n = sample(DestinationKind::Otlp, "otel");
    n.severity = Severity::Critical;
    n.idempotency_key = Some("idem-9".into());
    n.episode = Some(json!({"id": "argocd/guestbook@1", "open": true, "openedAt": "2026-12-06T09:00:00Z", "classes": ["security-context"],
        "resources": [{"kind": "ConfigMap", "namespace": "shop", "name": "cfg"}, {"kind": "Deployment", "namespace": "shop", "name": "web"}]}));
    let now = chrono::Utc::now();
    let records = crate::deliver::siem::Schema::Ocsf.records(&n, &origin, now);
    let extra = BTreeMap::from([("deployment.environment.name".to_string(), "production".to_string())]);
    let req = request(&[(&n, records)], &origin, &extra, now);
    let v = decode_officially(&body(&req, true));
    let rl = &v["resourceLogs"][0];
    let res = &rl["resource"]["attributes"];
    assert_eq!(attr(res, "service.name")["stringValue"], "driftwatch");
    assert_eq!(attr(res, "k8s.cluster.name")["stringValue"], "prod-eu");
    assert_eq!(attr(res, "k8s.namespace.name")["stringValue"], "shop", "the drifted workload's namespace");
    assert_eq!(attr(res, "k8s.deployment.name")["stringValue"], "web");
    assert_eq!(attr(res, "deployment.environment.name")["stringValue"], "production");
    let scope = &rl["scopeLogs"][0];
    assert_eq!(scope["scope"]["name"], "driftwatch");
    let log = &scope["logRecords"][0];
    assert_eq!((log["severityNumber"].as_str(), log["severityText"].as_str()), (Some("SEVERITY_NUMBER_FATAL"), Some("FATAL")));
    assert_eq!(log["eventName"], "ocsf.detection_finding");
    assert_eq!(log["timeUnixNano"], "1796547600000000000", "the episode's opening, in nanoseconds");
    assert_eq!(attr(&log["attributes"], "driftwatch.record_id")["stringValue"], "idem-9");
    // The body is the OCSF record as a key-value list.
    let body = &log["body"]["kvlistValue"]["values"];
    assert_eq!(attr(body, "class_uid")["intValue"], "2004");
    assert_eq!(attr(&attr(body, "finding_info")["kvlistValue"]["values"], "uid")["stringValue"], "argocd/guestbook@1");
    // Decoded back to JSON, the body is the OCSF record, valid against its schema.
    let record = plain(&log["body"]);
    crate::deliver::ocsf::tests::assert_valid(&record);
    assert_eq!(record, crate::deliver::siem::Schema::Ocsf.records(&n, &origin, now)[0]);
}

#[test]
fn answers_follow_the_specification() {
    assert_eq!(classify(200, None, b""), (Outcome::Delivered, None));
    let partial = ExportLogsServiceResponse {
        partial_success: Some(ExportLogsPartialSuccess { rejected_log_records: 2, error_message: "attribute too long".into() }),
    };
    let (o, note) = classify(200, None, &partial.encode_to_vec());
    assert_eq!(o, Outcome::Delivered, "a partial success is not retried");
    assert_eq!(note.as_deref(), Some("the collector rejected 2 log record(s): attribute too long"));
    for s in [429, 502, 503, 504, 401] {
        assert!(matches!(classify(s, Some(std::time::Duration::from_secs(3)), b"").0, Outcome::Retry { after: Some(_), .. }), "{s}");
    }
    for s in [400, 413, 500] {
        assert!(matches!(classify(s, None, b"").0, Outcome::Permanent(_)), "{s}");
    }
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, "")).await;
    let secrets = Secrets::from_map([("otlp-key", KEY)]);
    let spec = Spec::<super::Otlp>::parse(json!({"url": rx.url(), "headers": {"x-honeycomb-team": "$otlp-key"}})).unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("otel", env).unwrap();
    let n = sample(DestinationKind::Otlp, "otel");
    let r = check_http_kind(&rx, &make, &n, &secrets, KEY, Reply::new(200, ""), Reply::new(400, "invalid request")).await;
    assert_eq!(r.path, "/v1/logs");
    assert_eq!(r.headers["content-type"], "application/x-protobuf");
    assert_eq!(r.headers["content-encoding"], "gzip");
    assert_eq!(r.headers["x-honeycomb-team"], KEY);
}

#[test]
fn settings_are_checked() {
    let cfg = |v: serde_json::Value| crate::deliver::kind::config::<super::Otlp>(v);
    assert!(cfg(json!({"url": "https://otel:4318"})).is_ok());
    assert_eq!(cfg(json!({"url": "u", "compression": "zstd"})).unwrap_err().to_string(), "compression must be gzip or none, not \"zstd\"");
    assert_eq!(cfg(json!({"url": "u", "batchSize": 0})).unwrap_err().to_string(), "batchSize must be from 1 to 1000, not 0");
}
