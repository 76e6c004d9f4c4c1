//! The `sendMessage` body: pure functions.

use serde_json::{Value, json};

use crate::model::Notification;

/// Telegram's limit on a message's text (characters).
const MAX_TEXT: usize = 4096;

/// The chat: a number (`-1001234567890`) as it is, a channel name with its `@`.
pub fn chat_id(recipient: &str) -> Value {
    let r = recipient.trim();
    match r.parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) if r.starts_with('@') => json!(r),
        Err(_) => json!(format!("@{r}")),
    }
}

pub fn message(n: &Notification) -> Value {
    let text: String = n.payload.get("message").and_then(Value::as_str).unwrap_or_default().trim_end().chars().take(MAX_TEXT).collect();
    let mut body = json!({"chat_id": chat_id(&n.destination.recipient), "text": text, "disable_web_page_preview": true});
    if let Some(mode) = n.payload.get("parseMode").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty()) {
        body["parse_mode"] = json!(mode);
    }
    body
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("telegram")
}
