//! Events API v2 bodies: pure functions.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::model::{Action, Notification};

/// PagerDuty rejects bodies over 512 KB.
pub const MAX_BODY_BYTES: usize = 512 * 1024;
/// PagerDuty's limit on `dedup_key`.
const MAX_DEDUP_KEY: usize = 255;

/// Stable across restarts and replicas: the same Application, trigger and condition
/// (or the same run of a group: one incident for the group) always give the same key,
/// so a re-send after a crash updates the same incident.
pub fn dedup_key(n: &Notification) -> String {
    let key = n.incident_key();
    if key.len() <= MAX_DEDUP_KEY {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    format!("driftwatch/{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The event for a notification: `trigger` with the rendered payload, or `resolve`.
/// `custom_details` is shrunk first when the body would pass 512 KB.
pub fn event(n: &Notification, routing_key: &str, argocd_url: &str, now: chrono::DateTime<chrono::Utc>) -> Value {
    let dedup = dedup_key(n);
    if n.action == Action::Resolve {
        return json!({"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup});
    }
    let p = &n.payload;
    let get = |k: &str| p.get(k).cloned().unwrap_or(Value::Null);
    let mut payload = json!({
        "summary": get("summary"),
        "source": get("source"),
        "severity": get("severity"),
        "timestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    });
    for k in ["component", "group", "class", "custom_details"] {
        if let (Some(v), Some(map)) = (p.get(k), payload.as_object_mut()) {
            map.insert(k.into(), v.clone());
        }
    }
    let mut body = json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup,
        "payload": payload,
        "client": "driftwatch",
    });
    if let Some(href) = n.meta.argocd_link(argocd_url)
        && let Some(map) = body.as_object_mut()
    {
        map.insert("client_url".into(), json!(href));
        map.insert("links".into(), json!([{"href": href, "text": format!("{} in Argo CD", n.app)}]));
    }
    if body.to_string().len() > MAX_BODY_BYTES
        && let Some(details) = body.pointer_mut("/payload/custom_details")
    {
        let text = details.to_string();
        let keep: String = text.chars().take(MAX_BODY_BYTES / 4).collect();
        *details = json!({"truncated": true, "original_bytes": text.len(), "head": keep});
        if body.to_string().len() > MAX_BODY_BYTES
            && let Some(map) = body.pointer_mut("/payload").and_then(Value::as_object_mut)
        {
            map.remove("custom_details");
        }
    }
    body
}

/// PagerDuty's limit on `payload.summary` (longer is cut).
pub const SUMMARY_MAX: usize = 1024;

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, app: &crate::model::App) -> crate::template::Payload {
    let mut out = serde_json::Map::new();
    let summary = f.text("pagerduty.summary")?.unwrap_or_else(|| f.message.clone());
    out.insert("summary".into(), crate::template::helpers::truncate(summary.trim(), SUMMARY_MAX).into());
    let severity = f.severity_of("pagerduty.severity")?.or(f.severity).unwrap_or(crate::model::Severity::Error);
    out.insert("severity".into(), severity.as_str().into());
    out.insert("source".into(), f.text("pagerduty.source")?.unwrap_or_else(|| app.qualified_name()).into());
    for field in ["component", "group", "class"] {
        if let Some(v) = f.text(&format!("pagerduty.{field}"))? {
            out.insert(field.into(), v.into());
        }
    }
    if let Some(v) = f.json("pagerduty.customDetails")? {
        out.insert("custom_details".into(), v);
    }
    Ok(out)
}
