//! The request for one notification: a pure function, tested without a network.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::deliver::http::{HttpRequest, add_idempotency_key};
use crate::model::Notification;

/// Joins the service URL and the template's path without doubling or losing a `/`.
pub fn join_url(base: &str, path: &str) -> String {
    if path.is_empty() {
        return base.to_string();
    }
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

/// The request for a rendered webhook payload (`{method, path, headers, body}`).
/// Configured headers come first; the template's override them.
pub fn request(base_url: &str, config_headers: &BTreeMap<String, String>, n: &Notification) -> HttpRequest {
    let p = &n.payload;
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let mut headers = config_headers.clone();
    if let Some(h) = p.get("headers").and_then(Value::as_object) {
        for (k, v) in h {
            headers.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
    }
    add_idempotency_key(&mut headers, n);
    let method = match s("method") {
        m if m.is_empty() => "POST".to_string(),
        m => m,
    };
    HttpRequest { method, url: join_url(base_url, &s("path")), headers, body: s("body") }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, t: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    let mut out = serde_json::Map::new();
    let prefix = format!("webhook.{}", t.service);
    if f.paths_under(&format!("{prefix}.")).is_empty() {
        return Err(crate::template::RenderError::NoWebhookField { template: f.template().into(), service: t.service.into() });
    }
    let method = f.text(&format!("{prefix}.method"))?.map(|m| m.trim().to_uppercase()).unwrap_or_else(|| "POST".into());
    out.insert("method".into(), method.into());
    out.insert("path".into(), f.text(&format!("{prefix}.path"))?.unwrap_or_default().trim().into());
    let mut headers = serde_json::Map::new();
    let header_prefix = format!("{prefix}.headers.");
    for field in f.paths_under(&header_prefix) {
        headers.insert(field.strip_prefix(&header_prefix).unwrap_or(field).into(), f.text(field)?.unwrap_or_default().into());
    }
    out.insert("headers".into(), headers.into());
    out.insert("body".into(), f.text(&format!("{prefix}.body"))?.unwrap_or_default().into());
    Ok(out)
}
