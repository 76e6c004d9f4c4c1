//! HEC envelopes and response codes: pure functions.

use std::time::Duration;

use serde_json::{Value, json};

use crate::deliver::outcome::Outcome;

/// Fields of the HEC envelope that do not come from the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeMeta {
    pub host: String,
    pub source: String,
    pub sourcetype: String,
    pub index: Option<String>,
}

/// One HEC envelope; `time` is epoch seconds with milliseconds.
pub fn envelope(meta: &EnvelopeMeta, event: Value, at: chrono::DateTime<chrono::Utc>) -> Value {
    let mut v = json!({
        "time": at.timestamp_millis() as f64 / 1000.0,
        "host": meta.host,
        "source": meta.source,
        "sourcetype": meta.sourcetype,
        "event": event,
    });
    if let (Some(index), Some(map)) = (&meta.index, v.as_object_mut()) {
        map.insert("index".into(), json!(index));
    }
    v
}

/// Several envelopes in one body: HEC takes them concatenated.
pub fn batch_body(envelopes: &[Value]) -> String {
    envelopes.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
}

/// HEC's answer -> outcome. HEC reports `{"text", "code"}`: 0 success; 9 server busy
/// (503) and any 5xx retried; token refusals (401, 403: a token being rotated) and 404
/// retried like every HTTP kind's ([`crate::deliver::outcome::REFUSALS_RETRIED`]);
/// format and size errors (400, 413) are permanent.
pub fn classify(status: u16, retry_after: Option<Duration>, body: &str) -> Outcome {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let code = parsed.as_ref().and_then(|v| v.get("code")).and_then(Value::as_i64);
    let text = parsed.as_ref().and_then(|v| v.get("text")).and_then(Value::as_str).unwrap_or(body).chars().take(200).collect::<String>();
    match (status, code) {
        (200..=299, None | Some(0)) => Outcome::Delivered,
        (_, Some(9)) | (503, _) | (500..=599, _) | (429, _) | (408, _) | (401 | 403 | 404, _) => {
            Outcome::Retry { reason: format!("HEC {status} code {}: {text}", code.unwrap_or(-1)), after: retry_after }
        }
        _ => Outcome::Permanent(format!("HEC {status} code {}: {text}", code.unwrap_or(-1))),
    }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}
