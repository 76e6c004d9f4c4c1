//! The deployment marker for one notification: a pure function.

use serde_json::{Map, Value, json};

use crate::model::Notification;

pub fn deployment(n: &Notification) -> Value {
    let p = &n.payload;
    let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    let mut d = Map::new();
    d.insert("revision".into(), json!(text("revision").unwrap_or_else(|| n.meta.revision.clone())));
    let message = text("message").unwrap_or_default();
    d.insert("description".into(), json!(text("description").unwrap_or(message)));
    for k in ["changelog", "user"] {
        if let Some(v) = text(k) {
            d.insert(k.into(), json!(v));
        }
    }
    json!({"deployment": d})
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("newrelic")
}
