//! The message for one notification: pure functions.

use serde_json::{Map, Value, json};

use crate::model::Notification;

/// `{text, cardsV2 | cards}`; the thread key goes in the URL and in `thread.threadKey`.
pub fn message(n: &Notification) -> Value {
    let p = &n.payload;
    let mut m = Map::new();
    let text = p.get("message").and_then(Value::as_str).unwrap_or_default().trim_end();
    if !text.is_empty() {
        m.insert("text".into(), json!(text));
    }
    for k in ["cardsV2", "cards"] {
        if let Some(v) = p.get(k).filter(|v| v.is_array()) {
            m.insert(k.into(), v.clone());
        }
    }
    if let Some(key) = thread_key(n) {
        m.insert("thread".into(), json!({"threadKey": key}));
    }
    Value::Object(m)
}

fn thread_key(n: &Notification) -> Option<&str> {
    n.payload.get("threadKey").and_then(Value::as_str).map(str::trim).filter(|k| !k.is_empty())
}

/// The webhook URL, with the reply option when the message has a thread key.
pub fn url_with_thread(webhook: &str, n: &Notification) -> String {
    match thread_key(n) {
        Some(_) => {
            let sep = if webhook.contains('?') { '&' } else { '?' };
            format!("{webhook}{sep}messageReplyOption=REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD")
        }
        None => webhook.to_string(),
    }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("googlechat")
}
