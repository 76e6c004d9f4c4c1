//! The message for one notification: a pure function (without the token, which the
//! client adds).

use serde_json::{Map, Value, json};

use crate::model::Notification;

/// Pushover's limit on a message (characters).
const MAX_MESSAGE: usize = 1024;

pub fn message(n: &Notification) -> Value {
    let p = &n.payload;
    let text: String = p.get("message").and_then(Value::as_str).unwrap_or_default().trim_end().chars().take(MAX_MESSAGE).collect();
    let mut m = Map::new();
    m.insert("user".into(), json!(n.destination.recipient));
    m.insert("message".into(), json!(text));
    for (from, to) in [("title", "title"), ("url", "url"), ("urlTitle", "url_title"), ("sound", "sound"), ("device", "device")] {
        if let Some(v) = p.get(from).and_then(Value::as_str).map(str::trim).filter(|v| !v.is_empty()) {
            m.insert(to.into(), json!(v));
        }
    }
    if let Some(pr) = p.get("priority").and_then(Value::as_str).and_then(|s| s.trim().parse::<i64>().ok()).filter(|p| (-2..=1).contains(p))
    {
        // Priority 2 (emergency) needs retry/expire parameters; it is not offered.
        m.insert("priority".into(), json!(pr));
    }
    Value::Object(m)
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("pushover")
}
