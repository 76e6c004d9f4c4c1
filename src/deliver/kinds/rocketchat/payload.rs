//! The message for one notification: pure functions.

use serde_json::{Map, Value, json};

use crate::model::Notification;

/// `#name` for a bare channel name; `#…` and `@user` as they are.
pub fn channel(recipient: &str) -> String {
    let r = recipient.trim();
    if r.starts_with('#') || r.starts_with('@') { r.to_string() } else { format!("#{r}") }
}

pub fn message(n: &Notification) -> Value {
    let p = &n.payload;
    let mut m = Map::new();
    m.insert("channel".into(), json!(channel(&n.destination.recipient)));
    m.insert("text".into(), json!(p.get("message").and_then(Value::as_str).unwrap_or_default().trim_end()));
    for k in ["alias", "emoji", "avatar"] {
        if let Some(v) = p.get(k).and_then(Value::as_str).map(str::trim).filter(|v| !v.is_empty()) {
            m.insert(k.into(), json!(v));
        }
    }
    if let Some(a) = p.get("attachments").filter(|a| a.is_array()) {
        m.insert("attachments".into(), a.clone());
    }
    Value::Object(m)
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("rocketchat")
}
