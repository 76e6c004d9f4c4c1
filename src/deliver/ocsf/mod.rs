//! The Open Cybersecurity Schema Framework records a SIEM destination with
//! `format: ocsf` receives, OCSF 1.8.0 (`format: ocsf-1.7.0`: 1.7.0, for a receiver
//! that has not moved on; the two differ only in what 1.8.0 added, and no record uses
//! it), what AWS Security Lake takes from a custom source and Splunk and Datadog ingest
//! natively: pure functions of the notification, as [`super::ecs`] is for ECS.
//!
//! - A drift episode is a **Detection Finding** (class 2004): its first record is
//!   `Create`, one after a notification of it was delivered (an escalation, a new
//!   attempt) `Update`, resolved `Close`, each with the same
//!   `finding_info.uid` (the episode id); the drifted resources are its affected
//!   resources, their masked changes its evidence.
//! - Each audited request the episode holds — a change by a person or a refused
//!   attempt — is an **API Activity** (class 6003), sent with the finding and named in
//!   its `finding_info.related_events`.
//! - A sync or rollback is an API Activity too (`api.operation` `sync`/`rollback`).
//! - Any other notification is a finding about its trigger's condition.
//!
//! Enumerations carry their `*_id` and the caption beside it; times are epoch
//! milliseconds. `metadata.uid` is the delivery's idempotency key (an API Activity's
//! is driftwatch's identity of the request, the same in every record that carries it,
//! never the client's audit ID, which is `api.request.uid` and `unmapped.audit_id`),
//! so a copy a crash makes can be told from a new record. `src_endpoint.ip` is the
//! peer the API server saw (the last of the event's `sourceIPs`).

use serde_json::{Map, Value, json};

mod activity;
mod finding;

use super::ecs::Origin;
use crate::model::{Notification, Severity};
use activity::{operation_activity, requests};
use finding::detection_finding;

/// The OCSF version the records follow by default (`format: ocsf`).
pub const VERSION: &str = "1.8.0";
/// The earlier version a destination may ask for (`format: ocsf-1.7.0`).
pub const VERSION_1_7: &str = "1.7.0";

/// At most this many drifted resources and audited requests go into one finding (as
/// in an ECS record; the whole episode is in the history).
const MAX_RESOURCES: usize = 16;
const MAX_REQUESTS: usize = 8;

/// Every record of a notification in OCSF `version` ([`VERSION`] or [`VERSION_1_7`]):
/// one finding or activity, and for an episode the API Activity of each audited
/// request it holds. Each says its version in `metadata.version`.
pub fn records(n: &Notification, origin: &Origin, now: chrono::DateTime<chrono::Utc>, version: &'static str) -> Vec<Value> {
    let mut out = records_of(n, origin, now);
    for r in &mut out {
        r["metadata"]["version"] = json!(version);
    }
    out
}

fn records_of(n: &Notification, origin: &Origin, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
    let episode = n.episode.as_ref().filter(|e| e.is_object());
    if let Some(op) = n.operation.as_ref().filter(|o| o.is_object()) {
        return vec![operation_activity(n, op, episode, origin)];
    }
    let requests: Vec<Value> = episode.map(|ep| requests(ep, n, origin)).unwrap_or_default();
    let mut finding = detection_finding(n, episode, origin, now);
    let related: Vec<Value> = requests
        .iter()
        .map(|r| json!({"uid": r["metadata"]["uid"], "type_uid": r["type_uid"], "type_name": r["type_name"], "product": product()}))
        .collect();
    if !related.is_empty() {
        finding["finding_info"]["related_events"] = Value::Array(related);
        finding["finding_info"]["related_events_count"] = json!(requests.len());
    }
    std::iter::once(finding).chain(requests).collect()
}

fn product() -> Value {
    json!({"name": "driftwatch", "vendor_name": "driftwatch", "version": env!("CARGO_PKG_VERSION")})
}

fn metadata(uid: &str, correlation: Option<&str>, origin: &Origin) -> Value {
    let mut m = json!({"version": VERSION, "product": product(), "uid": uid, "log_name": "driftwatch", "log_provider": "driftwatch"});
    if let Some(c) = correlation.filter(|c| !c.is_empty()) {
        m["correlation_uid"] = json!(c);
    }
    if !origin.cluster.is_empty() {
        m["labels"] = json!([format!("cluster:{}", origin.cluster)]);
    }
    m
}

/// A severity as OCSF numbers and names it.
fn severity(s: Severity) -> (u8, &'static str) {
    match s {
        Severity::Critical => (5, "Critical"),
        Severity::Error => (4, "High"),
        Severity::Warning => (3, "Medium"),
        Severity::Info => (1, "Informational"),
    }
}

fn millis(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_str).and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map(|t| t.timestamp_millis())
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn list<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The Application as an OCSF resource.
fn application(n: &Notification, origin: &Origin) -> Value {
    let mut r = json!({"type": n.meta.kind(), "name": n.meta.name, "namespace": n.meta.namespace});
    if !n.meta.uid.is_empty() {
        r["uid"] = json!(n.meta.uid);
    }
    let mut labels = match n.meta.engine.as_str() {
        "" => vec![format!("argocd_project:{}", n.meta.project)],
        engine => vec![format!("engine:{engine}")],
    };
    if !origin.cluster.is_empty() {
        labels.push(format!("cluster:{}", origin.cluster));
    }
    r["labels"] = json!(labels);
    r
}

/// A class's fixed fields: its uid and name, its category's, the activity's and the
/// type's (`class_uid * 100 + activity_id`).
fn class_fields(class: (u32, &str), category: (u32, &str), activity: (u32, &str)) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("class_uid".into(), json!(class.0));
    m.insert("class_name".into(), json!(class.1));
    m.insert("category_uid".into(), json!(category.0));
    m.insert("category_name".into(), json!(category.1));
    m.insert("activity_id".into(), json!(activity.0));
    m.insert("activity_name".into(), json!(activity.1));
    m.insert("type_uid".into(), json!(class.0 * 100 + activity.0));
    m.insert("type_name".into(), json!(format!("{}: {}", class.1, activity.1)));
    m
}

const DETECTION_FINDING: (u32, &str) = (2004, "Detection Finding");
const FINDINGS: (u32, &str) = (2, "Findings");
const API_ACTIVITY: (u32, &str) = (6003, "API Activity");
const APPLICATION_ACTIVITY: (u32, &str) = (6, "Application Activity");

/// Shrinks a record to at most `max` bytes of JSON for one syslog datagram: the
/// evidence, the resources but the first, the related events and what is unmapped go
/// first (counted in `unmapped.omitted`), then the message is cut.
pub fn fit(mut record: Value, max: usize) -> Value {
    let size = |r: &Value| r.to_string().len();
    if size(&record) <= max {
        return record;
    }
    let mut omitted = 0;
    if let Some(m) = record.as_object_mut() {
        omitted += m.remove("evidences").and_then(|e| e.as_array().map(Vec::len)).unwrap_or(0);
        if let Some(r) = m.get_mut("resources").and_then(Value::as_array_mut) {
            omitted += r.len().saturating_sub(1);
            r.truncate(1);
        }
        m.insert("unmapped".into(), json!({"omitted": omitted}));
    }
    if let Some(info) = record.get_mut("finding_info").and_then(Value::as_object_mut) {
        info.remove("related_events");
        info.remove("related_events_count");
        // The message says it again.
        info.remove("desc");
    }
    // Then the message, halved until the record fits (at most a few dozen rounds).
    while size(&record) > max
        && let Some(Value::String(msg)) = record.get_mut("message")
        && !msg.is_empty()
    {
        let half = msg.chars().count() / 2;
        *msg = if half <= 2 { String::new() } else { crate::text::clip(msg, half) };
    }
    record
}

#[cfg(test)]
pub(crate) mod tests;
