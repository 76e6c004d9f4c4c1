//! Loki's push body and answers: pure functions, tested without a network.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::model::Notification;

/// Label or structured-metadata names and values.
pub type Labels = BTreeMap<&'static str, String>;

/// One log entry: its stream's labels, its time (Unix ns), the line and its
/// structured metadata.
#[derive(Debug, Clone)]
pub struct Entry {
    pub labels: Labels,
    pub ns: i128,
    pub line: String,
    pub metadata: Labels,
}

/// The longest label value sent, in bytes. Loki refuses a whole push (`400`, "label
/// value too long") when a stream has a label value longer than its
/// `max_label_value_length`: 2,048 bytes by default, counted in bytes, and an
/// operator may set it lower. A Kubernetes name (a namespace, an AppProject) is at
/// most 253 bytes, so every real value is sent unchanged; an Application's
/// `spec.project` is text its tenant writes, and past this bound it is cut by
/// [`label_value`].
pub const MAX_LABEL_VALUE_BYTES: usize = 256;

/// A label value Loki takes whatever a tenant wrote. Unchanged when it is at most
/// [`MAX_LABEL_VALUE_BYTES`] and holds no control character; otherwise its control
/// characters become `_` and it is cut, with `#` and 32 hex digits of the SHA-256 of
/// the value as written ([`crate::text::with_digest`]), to at most the bound, so two
/// values that differ stay two streams. Loki refuses a label value for its length
/// only (an empty one it drops, and a control character survives its quoting); a
/// control character is replaced all the same, since nobody can type it into a
/// stream selector. Label names are driftwatch's own, five of them (Loki's limit is 15).
pub fn label_value(v: &str) -> Cow<'_, str> {
    if v.len() <= MAX_LABEL_VALUE_BYTES && !v.chars().any(char::is_control) {
        return Cow::Borrowed(v);
    }
    let shown: String = v.chars().map(|c| if c.is_control() { '_' } else { c }).collect();
    Cow::Owned(crate::text::with_digest(&shown, v, MAX_LABEL_VALUE_BYTES))
}

/// The labels of a record's stream: a fixed, small set whose values are bounded by
/// the fleet (the Application's namespace and project, the drift class, the
/// severity), so a stream per Application or per episode never appears; each value
/// one Loki takes ([`label_value`]). Everything else goes into the entry's structured
/// metadata.
pub fn labels(n: &Notification) -> Labels {
    let class = n
        .episode
        .as_ref()
        .and_then(|e| e.get("classes"))
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(Value::as_str)
        .unwrap_or("none");
    BTreeMap::from([
        ("service_name", "driftwatch".to_string()),
        ("namespace", label_value(&n.meta.namespace).into_owned()),
        ("project", label_value(&n.meta.project).into_owned()),
        ("class", label_value(class).into_owned()),
        ("severity", n.severity.as_str().to_string()),
    ])
}

/// The longest structured-metadata value sent, in bytes. Loki refuses an entry whose
/// structured metadata passes `max_structured_metadata_size` (64 KB by default); the
/// values are Kubernetes names, the trigger's configured name and driftwatch's own
/// identities, except the revision, which a person who writes the Application's
/// status chooses. Six values of at most this stay far under Loki's limit.
pub const MAX_METADATA_VALUE_BYTES: usize = 1024;

/// An entry's structured metadata: what identifies it, never a label. A value past
/// [`MAX_METADATA_VALUE_BYTES`] is cut with a digest of the whole
/// ([`crate::text::with_digest`]).
pub fn metadata(n: &Notification, record: &Value) -> Labels {
    let mut m = BTreeMap::from([("app", n.meta.name.clone()), ("trigger", n.trigger.clone()), ("action", n.action.as_str().to_string())]);
    let id = crate::deliver::siem::record_id(record);
    if !id.is_empty() {
        m.insert("record_id", id.to_string());
    }
    if let Some(ep) = n.episode.as_ref().and_then(|e| e.get("id")).and_then(Value::as_str) {
        m.insert("episode", ep.to_string());
    }
    if !n.meta.revision.is_empty() {
        m.insert("revision", n.meta.revision.clone());
    }
    for v in m.values_mut().filter(|v| v.len() > MAX_METADATA_VALUE_BYTES) {
        *v = crate::text::with_digest(v, v, MAX_METADATA_VALUE_BYTES);
    }
    m
}

/// A record's time in Unix nanoseconds (Loki's timestamp): OCSF `time` (ms), ECS
/// `@timestamp`, else `now`.
pub fn timestamp_ns(record: &Value, now: chrono::DateTime<chrono::Utc>) -> i128 {
    let ms = record
        .get("time")
        .and_then(Value::as_i64)
        .or_else(|| {
            record.get("@timestamp").and_then(Value::as_str).and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map(|t| t.timestamp_millis())
        })
        .unwrap_or_else(|| now.timestamp_millis());
    i128::from(ms) * 1_000_000
}

/// A notification's records as entries of its stream.
pub fn entries(n: &Notification, records: Vec<Value>, now: chrono::DateTime<chrono::Utc>) -> impl Iterator<Item = Entry> + '_ {
    let labels = labels(n);
    records.into_iter().map(move |r| Entry { labels: labels.clone(), ns: timestamp_ns(&r, now), line: r.to_string(), metadata: metadata(n, &r) })
}

/// The push body: one stream per label set, its entries `[ns, line, metadata]` in
/// time order (a retry sends the same lines at the same times: Loki keeps one).
pub fn push_body(entries: Vec<Entry>) -> Value {
    let mut streams: BTreeMap<Labels, Vec<(i128, String, Labels)>> = BTreeMap::new();
    for e in entries {
        streams.entry(e.labels).or_default().push((e.ns, e.line, e.metadata));
    }
    let streams: Vec<Value> = streams
        .into_iter()
        .map(|(labels, mut values)| {
            values.sort_by_key(|(ts, _, _)| *ts);
            let values: Vec<Value> = values.into_iter().map(|(ts, line, meta)| json!([ts.to_string(), line, meta])).collect();
            json!({"stream": labels, "values": values})
        })
        .collect();
    json!({"streams": streams})
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}
