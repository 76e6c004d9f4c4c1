//! Alert API bodies: pure functions.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::model::{Notification, Severity};

/// Opsgenie's limits (characters).
const MAX_MESSAGE: usize = 130;
const MAX_ALIAS: usize = 512;
const MAX_DESCRIPTION: usize = 15_000;

/// The alert's alias: the template's `opsgenie.alias` when given, else stable per
/// Application, trigger and condition, or per run of a group
/// ([`Notification::incident_key`]).
pub fn alias(n: &Notification) -> String {
    if let Some(a) = n.payload.get("alias").and_then(Value::as_str).map(str::trim).filter(|a| !a.is_empty()) {
        return cut(a, MAX_ALIAS);
    }
    let key = n.incident_key();
    if key.chars().count() <= MAX_ALIAS {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    format!("driftwatch/{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Opsgenie's priority from the template's `opsgenie.priority`, else the severity.
fn priority(n: &Notification) -> String {
    if let Some(p) = n.payload.get("priority").and_then(Value::as_str).map(str::trim).filter(|p| p.len() == 2 && p.starts_with('P')) {
        return p.to_string();
    }
    match n.severity {
        Severity::Critical => "P1",
        Severity::Error => "P2",
        Severity::Warning => "P3",
        Severity::Info => "P5",
    }
    .to_string()
}

/// `POST /v2/alerts`: message (first line of the message, 130 characters),
/// description, alias, priority, and the template's `tags`, `actions`, `details`,
/// `note`, `entity`, `user`, `responders`, `visibleTo`.
pub fn create(n: &Notification, argocd_url: &str) -> Value {
    let p = &n.payload;
    let text = |k: &str| p.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    let message = text("message").unwrap_or_default();
    let first = message.lines().next().unwrap_or_default();
    let mut body = Map::new();
    body.insert("message".into(), json!(cut(first, MAX_MESSAGE)));
    body.insert("alias".into(), json!(alias(n)));
    body.insert("description".into(), json!(cut(&text("description").unwrap_or(message.clone()), MAX_DESCRIPTION)));
    body.insert("priority".into(), json!(priority(n)));
    body.insert("source".into(), json!("driftwatch"));
    body.insert("entity".into(), json!(text("entity").unwrap_or_else(|| n.app.clone())));
    for k in ["note", "user"] {
        if let Some(v) = text(k) {
            body.insert(k.into(), json!(v));
        }
    }
    let mut tags: Vec<Value> = p.get("tags").and_then(Value::as_array).cloned().unwrap_or_default();
    tags.push(json!(format!("trigger:{}", n.trigger)));
    body.insert("tags".into(), Value::Array(tags));
    for k in ["actions", "responders", "visibleTo"] {
        if let Some(v) = p.get(k).filter(|v| v.is_array()) {
            body.insert(k.into(), v.clone());
        }
    }
    let mut details = p.get("details").and_then(Value::as_object).cloned().unwrap_or_default();
    details.entry("application").or_insert_with(|| json!(n.app));
    if let Some(href) = n.meta.argocd_link(argocd_url) {
        details.entry("argocdUrl").or_insert_with(|| json!(href));
    }
    // Opsgenie takes string values only in details.
    let details: Map<String, Value> =
        details.into_iter().map(|(k, v)| (k, json!(v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))).collect();
    body.insert("details".into(), Value::Object(details));
    Value::Object(body)
}

/// `POST /v2/alerts/{alias}/close?identifierType=alias`: the path and the body.
pub fn close(n: &Notification) -> (String, Value) {
    let alias = alias(n);
    let path = format!("/v2/alerts/{}/close?identifierType=alias", form_urlencoded::byte_serialize(alias.as_bytes()).collect::<String>());
    (path, json!({"source": "driftwatch", "note": format!("{} no longer holds", n.trigger)}))
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_and_section("opsgenie")
}
