//! A notification's records as the Chronicle API's `logs:import` takes them (pure,
//! tested without a network): each record one log entry — `data` the record's JSON in
//! base64, `logEntryTime` the time the record says, `collectionTime` the time it is
//! sent — and a call's body, `{"inlineSource": {"logs": […], "forwarder": …}}`.
//!
//! The shape is the API reference's (`projects.locations.instances.logTypes.logs`
//! `import` method, `LogsInlineSource`, and the `Log` resource, v1alpha): `data` is
//! bytes, base64 in JSON; `logEntryTime` and `collectionTime` are required RFC 3339
//! timestamps, the collection after the entry's time; `forwarder` is optional. Field
//! names are the reference's JSON names (lowerCamelCase; proto3's JSON mapping accepts
//! the proto names, `inline_source`, `log_entry_time`, as well).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::deliver::calls::CallSize;
use crate::deliver::ecs::Origin;
use crate::deliver::siem::{Schema, record_time};
use crate::model::Notification;

/// This kind's encoder: the rendered message (the records are built from the
/// notification, not from a template).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}

/// A call's body is kept within this many bytes. The `logs:import` reference states
/// no request size; Google's documentation of the Ingestion API the Chronicle API
/// replaces says a log of more than 1 MB is not ingested, and clients of this API
/// keep a request within 1 MB (Tenzir's `to_google_secops` lowered its default
/// request size from 4 MB to 1 MB to match the API's).
pub const MAX_CALL_BYTES: usize = 1_000_000;

/// The size of a call with this forwarder: its body without entries is the envelope.
pub fn call_size(forwarder: Option<&str>) -> CallSize {
    CallSize { max: MAX_CALL_BYTES, envelope: body(&[], forwarder).len() }
}

/// A call's body holding `entries` (each an [`entry`]'s JSON).
pub fn body(entries: &[String], forwarder: Option<&str>) -> String {
    let forwarder = forwarder.map(|f| format!(",\"forwarder\":{}", Value::from(f))).unwrap_or_default();
    format!("{{\"inlineSource\":{{\"logs\":[{}]{forwarder}}}}}", entries.join(","))
}

/// The log entries of `n`'s records at `now`, each within `room` bytes.
pub fn entries(schema: Schema, n: &Notification, origin: &Origin, now: DateTime<Utc>, room: usize) -> Vec<String> {
    schema.records(n, origin, now).into_iter().map(|r| entry(schema, r, now, room)).collect()
}

/// One record's log entry, collected at `now`, its JSON within `room` bytes.
pub fn entry(schema: Schema, record: Value, now: DateTime<Utc>, room: usize) -> String {
    // The API wants the collection after the entry's time, both written to the
    // millisecond: a record that says a time at or past `now` (or none) is taken as
    // logged a moment before.
    let now = DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
    let logged = record_time(&record).filter(|t| *t < now).unwrap_or(now - chrono::Duration::milliseconds(1));
    let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let entry = |data: &str| json!({"data": data, "logEntryTime": stamp(logged), "collectionTime": stamp(now)}).to_string();
    let data = STANDARD.encode(record.to_string());
    let whole = entry(&data);
    if whole.len() <= room {
        return whole;
    }
    // Too large for a call even alone: shrunk as a syslog datagram is (evidence, then
    // free text) to what base64 (4 bytes for 3) leaves room for.
    let most = room.saturating_sub(whole.len() - data.len()) / 4 * 3;
    entry(&STANDARD.encode(schema.fit(record, most).to_string()))
}
