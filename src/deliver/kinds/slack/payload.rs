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

/// Slack truncates a message's `text` past 40,000 characters and refuses blocks past
/// 50, or a block's text past 3,000 (`msg_too_long`, `invalid_blocks`: permanent, so a
/// group message listing many members would never arrive). Cut here, saying so.
const MAX_TEXT_CHARS: usize = 40_000;
const MAX_BLOCKS: usize = 50;
const MAX_BLOCK_TEXT_CHARS: usize = 3_000;

/// At most `max` characters, the cut said at the end.
fn cut(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let note = format!("… ({} more characters cut)", n - max);
    let keep = max.saturating_sub(note.chars().count());
    format!("{}{note}", s.chars().take(keep).collect::<String>())
}

/// A block's `text.text` (sections, headers, context elements) within Slack's bound.
fn cut_block_texts(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                match child {
                    serde_json::Value::String(s) if k == "text" && s.chars().count() > MAX_BLOCK_TEXT_CHARS => {
                        *s = cut(s, MAX_BLOCK_TEXT_CHARS)
                    }
                    _ => cut_block_texts(child),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(cut_block_texts),
        _ => {}
    }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    let mut out = serde_json::Map::new();
    let text = f.text("slack.text")?.unwrap_or_else(|| f.message.clone());
    out.insert("text".into(), cut(&text, MAX_TEXT_CHARS).into());
    for field in ["attachments", "blocks"] {
        if let Some(mut v) = f.json(&format!("slack.{field}"))? {
            if field == "blocks"
                && let Some(blocks) = v.as_array_mut()
            {
                blocks.truncate(MAX_BLOCKS);
                blocks.iter_mut().for_each(cut_block_texts);
            }
            out.insert(field.into(), v);
        }
    }
    if let Some(k) = f.text("slack.groupingKey")? {
        out.insert("groupingKey".into(), k.trim().into());
    }
    Ok(out)
}

#[cfg(test)]
mod cut_tests {
    use super::*;

    /// Review L4: text and block texts past Slack's bounds are cut, saying so; blocks
    /// past 50 are dropped; what fits is left as it is.
    #[test]
    fn text_and_blocks_are_cut_to_slacks_bounds() {
        let long = "x".repeat(50_000);
        let cut_text = cut(&long, MAX_TEXT_CHARS);
        assert_eq!(cut_text.chars().count(), MAX_TEXT_CHARS);
        assert!(cut_text.ends_with("(10000 more characters cut)"), "{}", &cut_text[cut_text.len() - 40..]);
        assert_eq!(cut("short", MAX_TEXT_CHARS), "short");
        let mut block = serde_json::json!({"type": "section", "text": {"type": "mrkdwn", "text": "y".repeat(5_000)},
            "fields": [{"type": "mrkdwn", "text": "z".repeat(4_000)}, {"type": "mrkdwn", "text": "ok"}]});
        cut_block_texts(&mut block);
        assert_eq!(block["text"]["text"].as_str().map(|s| s.chars().count()), Some(MAX_BLOCK_TEXT_CHARS));
        assert_eq!(block["fields"][0]["text"].as_str().map(|s| s.chars().count()), Some(MAX_BLOCK_TEXT_CHARS));
        assert_eq!(block["fields"][1]["text"], "ok");
    }
}
