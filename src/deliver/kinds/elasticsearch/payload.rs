//! `_bulk` bodies and answers: pure functions, tested without a network.

use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::deliver::outcome::{Outcome, classify_status};

/// One document to create: which notification of the batch it belongs to, its `_id`
/// and its body.
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    pub of: usize,
    pub id: String,
    pub doc: Value,
}

/// Elasticsearch refuses an `_id` longer than this many bytes.
const MAX_ID_BYTES: usize = 512;

/// The documents of the `of`th notification of a batch, one per record. The `_id` is
/// the record's identity — the delivery's idempotency key (ECS `event.id`, OCSF
/// `metadata.uid`), an API Activity's request identity (driftwatch's, never the
/// client's audit ID alone) — so a copy an earlier attempt or a
/// crash made is answered 409 and is simply already there. A data stream needs
/// `@timestamp`: an ECS record has it, an OCSF record gets its `time` (epoch ms) as
/// RFC 3339.
pub fn docs(of: usize, records: Vec<Value>) -> Vec<Doc> {
    records
        .into_iter()
        .map(|mut doc| {
            let id = crate::deliver::siem::record_id(&doc);
            let id = if id.len() > MAX_ID_BYTES {
                Sha256::digest(id.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
            } else {
                id.to_string()
            };
            if doc.get("@timestamp").is_none()
                && let Some(ms) = doc.get("time").and_then(Value::as_i64)
                && let Some(t) = chrono::DateTime::from_timestamp_millis(ms)
                && let Some(m) = doc.as_object_mut()
            {
                m.insert("@timestamp".into(), json!(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)));
            }
            Doc { of, id, doc }
        })
        .collect()
}

/// The NDJSON `_bulk` bodies for `docs`, each at most `max_bytes` (a document larger
/// than that goes alone), with the indexes of the documents each holds, in order.
/// Every action is a `create` — the only one a data stream accepts — with the
/// document's `_id`.
pub fn bodies(docs: &[Doc], max_bytes: usize) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        // A record without an identity (none reaches here from the outbox, which gives
        // each delivery a key) gets one from Elasticsearch rather than an empty `_id`,
        // which it refuses.
        let action = if d.id.is_empty() { json!({"create": {}}) } else { json!({"create": {"_id": d.id}}) };
        let item = format!("{action}\n{}\n", d.doc);
        match out.last_mut() {
            Some((body, held)) if body.len() + item.len() <= max_bytes => {
                body.push_str(&item);
                held.push(i);
            }
            _ => out.push((item, vec![i])),
        }
    }
    out
}

/// A `_bulk` answer as one outcome per document of the request (`count` of them). A
/// refused request (not 2xx) is each document's outcome as for any HTTP answer. A
/// `200` can still carry failures per item: `201` created and `409` (a document with
/// this `_id` exists: an earlier attempt's) are delivered; `429`, `5xx` and the
/// refusals a rotation explains are retried; a mapping or parsing error is
/// permanent, with Elasticsearch's reason. An answer that cannot be matched to the
/// documents (cut, not JSON, another count) retries them all: the `_id`s make that
/// safe.
pub fn classify(status: u16, retry_after: Option<Duration>, body: &str, count: usize) -> Vec<Outcome> {
    if !(200..=299).contains(&status) {
        return vec![classify_status(status, retry_after, body); count];
    }
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let items = parsed.as_ref().and_then(|v| v.get("items")).and_then(Value::as_array);
    let Some(items) = items.filter(|i| i.len() == count) else {
        let got = items.map_or("no items".to_string(), |i| format!("{} items", i.len()));
        return vec![Outcome::Retry { reason: format!("the _bulk answer has {got} for {count} documents"), after: retry_after }; count];
    };
    items
        .iter()
        .map(|item| {
            let result = item.get("create").or_else(|| item.as_object().and_then(|m| m.values().next())).unwrap_or(&Value::Null);
            let st = result.get("status").and_then(Value::as_u64).and_then(|s| u16::try_from(s).ok()).unwrap_or(0);
            let error = result.get("error");
            let kind = error.and_then(|e| e.get("type")).and_then(Value::as_str).unwrap_or_default();
            let reason: String = error.and_then(|e| e.get("reason")).and_then(Value::as_str).unwrap_or_default().chars().take(300).collect();
            match st {
                200..=299 | 409 => Outcome::Delivered,
                0 => Outcome::retry("a _bulk item without a status"),
                408 | 429 | 500..=599 => Outcome::Retry { reason: format!("_bulk item {st} {kind}: {reason}"), after: retry_after },
                s if crate::deliver::outcome::REFUSALS_RETRIED.contains(&s) => {
                    Outcome::Retry { reason: format!("_bulk item {st} {kind}: {reason}"), after: retry_after }
                }
                _ => Outcome::Permanent(format!("_bulk item {st} {kind}: {reason}")),
            }
        })
        .collect()
}

/// The outcome of each of `notifications` from its documents': delivered when every
/// one is; retried when any can be (the others, already created, answer 409 next
/// time); else the first refusal.
pub fn per_notification(docs: &[Doc], outcomes: &[Outcome], notifications: usize) -> Vec<Outcome> {
    let mut out = vec![Outcome::Delivered; notifications];
    for (d, o) in docs.iter().zip(outcomes) {
        let Some(slot) = out.get_mut(d.of) else { continue };
        *slot = match (&*slot, o) {
            (_, Outcome::Delivered) => slot.clone(),
            (Outcome::Retry { .. }, _) => slot.clone(),
            (_, Outcome::Retry { .. }) => o.clone(),
            (Outcome::Permanent(_), _) => slot.clone(),
            (_, other) => other.clone(),
        };
    }
    out
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}

/// Why a data stream name cannot be used (Elasticsearch's rules for index names), if
/// it cannot.
pub fn bad_data_stream(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("dataStream is empty".into());
    }
    if name.len() > 255 {
        return Some("dataStream is longer than 255 bytes".into());
    }
    if let Some(c) = name.chars().next().filter(|c| "-_+.".contains(*c)) {
        return Some(format!("dataStream {name:?} starts with {c:?}"));
    }
    let bad = name.chars().find(|c| c.is_ascii_uppercase() || " \\/*?\"<>|,#:".contains(*c))?;
    Some(format!("dataStream {name:?} holds {bad:?}, which an index name cannot"))
}
