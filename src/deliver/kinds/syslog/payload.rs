//! RFC 5424 lines, CEF and framing: pure functions.

use serde_json::Value;

use crate::model::{Notification, Severity};

/// Header fields of an RFC 5424 line that do not come from the notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub facility: u8,
    pub hostname: String,
    pub app_name: String,
    pub procid: String,
}

/// A PRINTUSASCII token of at most `max` characters (`-` when empty).
fn token(s: &str, max: usize) -> String {
    let t: String = s.chars().filter(|c| c.is_ascii_graphic()).take(max).collect();
    if t.is_empty() { "-".into() } else { t }
}

/// PARAM-VALUE escaping: `"`, `\` and `]`.
fn sd_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace(']', "\\]")
}

/// `<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID [SD] MSG`, MSGID being the trigger.
pub fn rfc5424(h: &Header, n: &Notification, msg: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let pri = u16::from(h.facility.min(23)) * 8 + u16::from(n.severity.syslog());
    let action = n.action.as_str();
    let sd = format!(
        "[driftwatch@32473 app=\"{}\" namespace=\"{}\" project=\"{}\" trigger=\"{}\" action=\"{action}\"]",
        sd_escape(&n.meta.name),
        sd_escape(&n.meta.namespace),
        sd_escape(&n.meta.project),
        sd_escape(&n.trigger),
    );
    format!(
        "<{pri}>1 {} {} {} {} {} {sd} {msg}",
        now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        token(&h.hostname, 255),
        token(&h.app_name, 48),
        token(&h.procid, 128),
        token(&n.trigger, 32),
    )
}

fn cef_header(s: &str) -> String {
    s.replace('\\', "\\\\").replace('|', "\\|").replace(['\r', '\n'], " ")
}

fn cef_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace('=', "\\=").replace('\r', "\\r").replace('\n', "\\n")
}

/// CEF severity 0-10.
fn cef_severity(s: Severity) -> u8 {
    match s {
        Severity::Critical => 10,
        Severity::Error => 8,
        Severity::Warning => 5,
        Severity::Info => 3,
    }
}

/// `CEF:0|driftwatch|driftwatch|<version>|<trigger>|<name>|<severity>|<extension>` with
/// CEF's escaping (header: `\` and `|`; extension values: `\`, `=`, newlines). The
/// extension carries CEF keys and the record's Elastic Common Schema names.
pub fn cef(n: &Notification, record: &Value) -> String {
    let message = n.payload.get("message").and_then(Value::as_str).unwrap_or_default();
    let name: String = message.lines().next().unwrap_or(&n.trigger).chars().take(512).collect();
    let s = |p: &str| record.pointer(p).map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).unwrap_or_default();
    let mut ext = vec![
        ("rt", s("/@timestamp")),
        ("act", n.trigger.clone()),
        ("msg", message.to_string()),
        ("deviceExternalId", n.meta.uid.clone()),
        ("cs1Label", "application".into()),
        ("cs1", n.app.clone()),
        ("cs2Label", "project".into()),
        ("cs2", n.meta.project.clone()),
        ("cs3Label", "revision".into()),
        ("cs3", n.meta.revision.clone()),
    ];
    for (k, p) in [
        ("event.kind", "/event/kind"),
        ("event.action", "/event/action"),
        ("event.severity", "/event/severity"),
        ("orchestrator.cluster.name", "/orchestrator/cluster/name"),
        ("orchestrator.namespace", "/orchestrator/namespace"),
        ("orchestrator.resource.type", "/orchestrator/resource/type"),
        ("orchestrator.resource.name", "/orchestrator/resource/name"),
        ("rule.name", "/rule/name"),
    ] {
        ext.push((k, s(p)));
    }
    let ext: Vec<String> = ext.into_iter().map(|(k, v)| format!("{k}={}", cef_value(&v))).collect();
    format!(
        "CEF:0|driftwatch|driftwatch|{}|{}|{}|{}|{}",
        cef_header(env!("CARGO_PKG_VERSION")),
        cef_header(&n.trigger),
        cef_header(&name),
        cef_severity(n.severity),
        ext.join(" ")
    )
}

/// Octet-counting framing for TCP and TLS: `<length> <message>`.
pub fn frame(msg: &str) -> Vec<u8> {
    format!("{} {msg}", msg.len()).into_bytes()
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}
