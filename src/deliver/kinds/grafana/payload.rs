//! The annotation for one notification: a pure function.

use serde_json::{Value, json};

use crate::model::Notification;

pub fn annotation(n: &Notification, now: chrono::DateTime<chrono::Utc>) -> Value {
    let mut tags: Vec<String> = n.destination.recipient.split('|').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect();
    for t in ["argocd".to_string(), format!("app:{}", n.meta.name), format!("trigger:{}", n.trigger)] {
        if !tags.contains(&t) {
            tags.push(t);
        }
    }
    let text = n.payload.get("message").and_then(Value::as_str).unwrap_or_default().trim_end();
    json!({"time": now.timestamp_millis(), "isRegion": false, "tags": tags, "text": text})
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    // Argo CD's Grafana service has no template fields: the annotation is the message.
    f.message_only()
}
