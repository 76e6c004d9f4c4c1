//! The message for one notification: a pure function.

use serde_json::{Value, json};

use crate::model::Notification;

pub fn message(n: &Notification) -> Value {
    let text = n.payload.get("message").and_then(Value::as_str).unwrap_or_default().trim_end();
    let r = n.destination.recipient.trim();
    if r.contains('@') { json!({"toPersonEmail": r, "markdown": text}) } else { json!({"roomId": r, "markdown": text}) }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    // Argo CD's Webex service has no template fields: the message is the markdown.
    f.message_only()
}
