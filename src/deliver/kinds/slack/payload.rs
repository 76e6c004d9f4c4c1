//! Slack message bodies and API answers: pure functions.

use serde_json::{Value, json};

use crate::deliver::outcome::Outcome;

/// The `chat.postMessage` / `chat.update` / webhook body for a rendered payload.
pub fn message(
    payload: &Value,
    channel: Option<&str>,
    thread_ts: Option<&str>,
    update_ts: Option<&str>,
    username: Option<&str>,
    icon: Option<&str>,
) -> Value {
    let mut m = serde_json::Map::new();
    if let Some(c) = channel {
        m.insert("channel".into(), json!(c));
    }
    m.insert("text".into(), payload.get("text").cloned().unwrap_or(json!("")));
    for k in ["attachments", "blocks"] {
        if let Some(v) = payload.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    if let Some(ts) = update_ts {
        m.insert("ts".into(), json!(ts));
    } else {
        if let Some(ts) = thread_ts {
            m.insert("thread_ts".into(), json!(ts));
        }
        if let Some(u) = username {
            m.insert("username".into(), json!(u));
        }
        match icon {
            Some(i) if i.starts_with(':') => {
                m.insert("icon_emoji".into(), json!(i));
            }
            Some(i) => {
                m.insert("icon_url".into(), json!(i));
            }
            None => {}
        }
    }
    Value::Object(m)
}

/// Errors worth retrying: Slack's own trouble, and the refusals a token rotation
/// explains (`invalid_auth`, `token_expired`, ...: HTTP's 401 in Slack's words); any
/// other `ok: false` error (`channel_not_found`, `not_in_channel`, `msg_too_long`, ...)
/// is permanent.
const RETRYABLE: &[&str] = &[
    "ratelimited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
    "team_added_to_org",
    "invalid_auth",
    "not_authed",
    "token_expired",
    "token_revoked",
];

/// A Web API answer (HTTP 200 with `{"ok": false}` is an error). On success returns the
/// message's channel and `ts`.
pub fn api_result(body: &str) -> Result<(String, String), Outcome> {
    let v: Value = serde_json::from_str(body)
        .map_err(|_| Outcome::retry(format!("slack answered with invalid JSON: {}", body.chars().take(200).collect::<String>())))?;
    if v.get("ok").and_then(Value::as_bool) == Some(true) {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        return Ok((s("channel"), s("ts")));
    }
    let error = v.get("error").and_then(Value::as_str).unwrap_or("unknown_error").to_string();
    if RETRYABLE.contains(&error.as_str()) {
        Err(Outcome::retry(format!("slack: {error}")))
    } else {
        Err(Outcome::Permanent(format!("slack: {error}")))
    }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    let mut out = serde_json::Map::new();
    out.insert("text".into(), f.text("slack.text")?.unwrap_or_else(|| f.message.clone()).into());
    for field in ["attachments", "blocks"] {
        if let Some(v) = f.json(&format!("slack.{field}"))? {
            out.insert(field.into(), v);
        }
    }
    if let Some(k) = f.text("slack.groupingKey")? {
        out.insert("groupingKey".into(), k.trim().into());
    }
    Ok(out)
}
