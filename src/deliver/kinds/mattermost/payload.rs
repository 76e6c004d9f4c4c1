//! The post for one notification: a pure function.

use serde_json::{Value, json};

use crate::model::Notification;

pub fn post(n: &Notification) -> Value {
    let message = n.payload.get("message").and_then(Value::as_str).unwrap_or_default().trim_end();
    let mut body = json!({"channel_id": n.destination.recipient, "message": message});
    if let Some(a) = n.payload.get("attachments").filter(|a| a.is_array()) {
        body["props"] = json!({"attachments": a});
    }
    body
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("mattermost")
}
