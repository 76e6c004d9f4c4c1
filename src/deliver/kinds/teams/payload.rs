//! The MessageCard for one notification: a pure function.

use serde_json::{Map, Value, json};

use crate::model::Notification;

/// The card: the template's `teams.template` as it is when given, else a MessageCard
/// from the other fields; `facts` go into the first section, as Argo CD does.
pub fn card(n: &Notification) -> Value {
    let p = &n.payload;
    if let Some(t) = p.get("template").filter(|t| t.is_object()) {
        return t.clone();
    }
    let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let message = text("message").unwrap_or_default();
    let mut card = Map::new();
    card.insert("@type".into(), json!("MessageCard"));
    card.insert("@context".into(), json!("https://schema.org/extensions"));
    card.insert("title".into(), json!(text("title").unwrap_or(message.lines().next().unwrap_or_default())));
    card.insert("summary".into(), json!(text("summary").or(text("title")).unwrap_or(message.lines().next().unwrap_or_default())));
    card.insert("text".into(), json!(text("text").unwrap_or(message)));
    if let Some(c) = text("themeColor") {
        card.insert("themeColor".into(), json!(c.trim_start_matches('#')));
    }
    let mut sections: Vec<Value> = p.get("sections").and_then(Value::as_array).cloned().unwrap_or_default();
    if let Some(facts) = p.get("facts").filter(|f| f.is_array()) {
        match sections.first_mut().and_then(Value::as_object_mut) {
            Some(first) => {
                first.insert("facts".into(), facts.clone());
            }
            None => sections.push(json!({"facts": facts})),
        }
    }
    if !sections.is_empty() {
        card.insert("sections".into(), Value::Array(sections));
    }
    if let Some(a) = p.get("potentialAction").filter(|a| a.is_array()) {
        card.insert("potentialAction".into(), a.clone());
    }
    Value::Object(card)
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("teams")
}
