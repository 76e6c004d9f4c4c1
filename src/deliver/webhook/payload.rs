//! The request for one notification: a pure function, tested without a network.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::Notification;

/// An HTTP request, before any client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub url: String,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

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
    let method = match s("method") {
        m if m.is_empty() => "POST".to_string(),
        m => m,
    };
    HttpRequest { method, url: join_url(base_url, &s("path")), headers, body: s("body") }
}
