//! The workflow message for one notification: a pure function.

use serde_json::{Value, json};

use crate::model::Notification;

/// `{type: message, attachments: [{contentType: adaptive, content: card}]}`.
pub fn message(n: &Notification) -> Value {
    let p = &n.payload;
    let card = match p.get("template").filter(|t| t.is_object()) {
        Some(t) => t.clone(),
        None => card(p),
    };
    json!({"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": card}]})
}

fn card(p: &Value) -> Value {
    let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let message = text("message").unwrap_or_default();
    let mut body = vec![];
    if let Some(t) = text("title").or_else(|| message.lines().next()) {
        body.push(json!({"type": "TextBlock", "text": t, "weight": "Bolder", "size": "Medium", "wrap": true}));
    }
    body.push(json!({"type": "TextBlock", "text": text("text").unwrap_or(message), "wrap": true}));
    let facts: Vec<Value> = p
        .get("facts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|f| json!({"title": f.get("name").cloned().unwrap_or(Value::Null), "value": f.get("value").cloned().unwrap_or(Value::Null)}))
        .collect();
    if !facts.is_empty() {
        body.push(json!({"type": "FactSet", "facts": facts}));
    }
    // MessageCard OpenUri actions become Action.OpenUrl.
    let actions: Vec<Value> = p
        .get("potentialAction")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let url = a.pointer("/targets/0/uri").or_else(|| a.get("url")).and_then(Value::as_str)?;
            Some(json!({"type": "Action.OpenUrl", "title": a.get("name").and_then(Value::as_str).unwrap_or("Open"), "url": url}))
        })
        .collect();
    let mut card =
        json!({"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard", "version": "1.4", "body": body});
    if !actions.is_empty() {
        card["actions"] = Value::Array(actions);
    }
    card
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    // A workflow's Adaptive Card is built from the same `teams.*` fields as a MessageCard.
    f.message_and_section("teams")
}
