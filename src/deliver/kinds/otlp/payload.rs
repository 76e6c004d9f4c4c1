//! OTLP/HTTP logs requests and answers: pure functions, tested without a network.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use prost::Message as _;
use serde_json::Value;

use super::proto::{
    AnyValue, ArrayValue, ExportLogsServiceRequest, ExportLogsServiceResponse, InstrumentationScope, KeyValue, KeyValueList, LogRecord,
    Resource, ResourceLogs, ScopeLogs, any_value,
};
use crate::deliver::ecs::Origin;
use crate::deliver::outcome::Outcome;
use crate::model::{Notification, Severity};

/// A JSON value as an OTLP `AnyValue`: objects as key-value lists, so a backend sees
/// the record's fields, not a string of JSON.
pub fn any(v: &Value) -> AnyValue {
    use any_value::Value as V;
    let value = match v {
        Value::Null => None,
        Value::Bool(b) => Some(V::Bool(*b)),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => V::Int(i),
            None => V::Double(n.as_f64().unwrap_or_default()),
        }),
        Value::String(s) => Some(V::String(s.clone())),
        Value::Array(a) => Some(V::Array(ArrayValue { values: a.iter().map(any).collect() })),
        Value::Object(m) => Some(V::Kvlist(KeyValueList { values: m.iter().map(|(k, v)| kv(k, any(v))).collect() })),
    };
    AnyValue { value }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue { key: key.to_string(), value: Some(value) }
}

fn string_attr(key: &str, value: &str) -> KeyValue {
    kv(key, AnyValue { value: Some(any_value::Value::String(value.to_string())) })
}

/// `SeverityNumber` and text: info INFO (9), warning WARN (13), error ERROR (17),
/// critical FATAL (21).
fn severity(s: Severity) -> (i32, &'static str) {
    match s {
        Severity::Info => (9, "INFO"),
        Severity::Warning => (13, "WARN"),
        Severity::Error => (17, "ERROR"),
        Severity::Critical => (21, "FATAL"),
    }
}

/// The workload kinds the Kubernetes semantic conventions name (`k8s.<kind>.name`).
const WORKLOADS: &[(&str, &str)] = &[
    ("Deployment", "k8s.deployment.name"),
    ("StatefulSet", "k8s.statefulset.name"),
    ("DaemonSet", "k8s.daemonset.name"),
    ("ReplicaSet", "k8s.replicaset.name"),
    ("Job", "k8s.job.name"),
    ("CronJob", "k8s.cronjob.name"),
    ("Pod", "k8s.pod.name"),
];

/// The resource a notification is about, in the Kubernetes semantic conventions: the
/// cluster (`context.clusterName`), and the first drifted workload of its episode with
/// its namespace, else the Application's namespace; `service.*` is driftwatch.
fn resource(n: &Notification, origin: &Origin, extra: &BTreeMap<String, String>) -> Resource {
    let mut attrs = vec![string_attr("service.name", "driftwatch"), string_attr("service.version", env!("CARGO_PKG_VERSION"))];
    if !origin.cluster.is_empty() {
        attrs.push(string_attr("k8s.cluster.name", &origin.cluster));
    }
    let resources = n.episode.as_ref().and_then(|e| e.get("resources")).and_then(Value::as_array);
    let workload = resources.into_iter().flatten().find_map(|r| {
        let kind = r.get("kind").and_then(Value::as_str)?;
        let key = WORKLOADS.iter().find(|(k, _)| *k == kind)?.1;
        Some((key, r.get("name").and_then(Value::as_str)?, r.get("namespace").and_then(Value::as_str).unwrap_or_default()))
    });
    match workload {
        Some((key, name, ns)) if !ns.is_empty() => attrs.extend([string_attr("k8s.namespace.name", ns), string_attr(key, name)]),
        _ => attrs.push(string_attr("k8s.namespace.name", &n.meta.namespace)),
    }
    attrs.extend(extra.iter().map(|(k, v)| string_attr(k, v)));
    Resource { attributes: attrs }
}

/// A record's time in Unix nanoseconds: OCSF `time` (ms), ECS `@timestamp`.
fn nanos(record: &Value) -> Option<u64> {
    let ms = record.get("time").and_then(Value::as_i64).or_else(|| {
        record.get("@timestamp").and_then(Value::as_str).and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map(|t| t.timestamp_millis())
    })?;
    u64::try_from(ms).ok()?.checked_mul(1_000_000)
}

/// One log record per SIEM record: its body the record, its attributes what
/// identifies it, its event name the schema's class.
fn log_record(n: &Notification, record: &Value, now_ns: u64) -> LogRecord {
    let (number, text_) = severity(n.severity);
    let id = crate::deliver::siem::record_id(record);
    let event_name = match record.get("class_name").and_then(Value::as_str) {
        Some(class) => format!("ocsf.{}", class.to_ascii_lowercase().replace(' ', "_")),
        None => "driftwatch.notification".to_string(),
    };
    let mut attributes = vec![
        string_attr("argocd.application.name", &n.meta.name),
        string_attr("argocd.application.namespace", &n.meta.namespace),
        string_attr("argocd.project", &n.meta.project),
        string_attr("driftwatch.unit.kind", n.meta.kind()),
        string_attr("driftwatch.trigger", &n.trigger),
        string_attr("driftwatch.action", n.action.as_str()),
    ];
    if !id.is_empty() {
        attributes.push(string_attr("driftwatch.record_id", id));
    }
    if let Some(ep) = n.episode.as_ref().and_then(|e| e.get("id")).and_then(Value::as_str) {
        attributes.push(string_attr("driftwatch.episode_id", ep));
    }
    LogRecord {
        time_unix_nano: nanos(record).unwrap_or(now_ns),
        observed_time_unix_nano: now_ns,
        severity_number: number,
        severity_text: text_.to_string(),
        body: Some(any(record)),
        attributes,
        event_name,
    }
}

/// The export request of a batch: a resource per notification, its records as log
/// records of driftwatch's scope.
pub fn request(
    batch: &[(&Notification, Vec<Value>)],
    origin: &Origin,
    extra: &BTreeMap<String, String>,
    now: chrono::DateTime<chrono::Utc>,
) -> ExportLogsServiceRequest {
    let now_ns = u64::try_from(now.timestamp_nanos_opt().unwrap_or_default()).unwrap_or_default();
    let resource_logs = batch
        .iter()
        .map(|(n, records)| ResourceLogs {
            resource: Some(resource(n, origin, extra)),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope { name: "driftwatch".into(), version: env!("CARGO_PKG_VERSION").into() }),
                log_records: records.iter().map(|r| log_record(n, r, now_ns)).collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        })
        .collect();
    ExportLogsServiceRequest { resource_logs }
}

/// The request's protobuf, gzip-compressed when `gzip`.
pub fn body(req: &ExportLogsServiceRequest, gzip: bool) -> Vec<u8> {
    let bytes = req.encode_to_vec();
    if !gzip {
        return bytes;
    }
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec does not fail.
    match z.write_all(&bytes).and_then(|_| z.finish()) {
        Ok(out) => out,
        Err(_) => bytes,
    }
}

/// The collector's answer, as the OTLP/HTTP specification says to take it: `2xx`
/// delivered — a partial success (some records rejected) is not retried, and its
/// message is returned for the log; `429`, `502`, `503`, `504` retried honouring
/// `Retry-After`, as are the refusals a token rotation explains (`401`, `403`, `404`)
/// and `408`; any other status is permanent.
pub fn classify(status: u16, retry_after: Option<Duration>, body: &[u8]) -> (Outcome, Option<String>) {
    let snippet = || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    match status {
        200..=299 => {
            let partial = ExportLogsServiceResponse::decode(body).ok().and_then(|r| r.partial_success).filter(|p| p.rejected_log_records > 0);
            let note = partial.map(|p| format!("the collector rejected {} log record(s): {}", p.rejected_log_records, p.error_message));
            (Outcome::Delivered, note)
        }
        408 | 429 | 502..=504 => (Outcome::Retry { reason: format!("OTLP {status}: {}", snippet()), after: retry_after }, None),
        s if crate::deliver::outcome::REFUSALS_RETRIED.contains(&s) => {
            (Outcome::Retry { reason: format!("OTLP {status}: {}", snippet()), after: retry_after }, None)
        }
        _ => (Outcome::Permanent(format!("OTLP {status}: {}", snippet())), None),
    }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}
