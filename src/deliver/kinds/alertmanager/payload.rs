//! The alert for one notification: a pure function.

use serde_json::{Map, Value, json};

use crate::model::{Action, Notification};

/// The body: a list of one alert. Firing: `startsAt` now; resolving: `endsAt` now.
pub fn alerts(n: &Notification, argocd_url: &str, now: chrono::DateTime<chrono::Utc>) -> Value {
    let p = &n.payload;
    let mut labels = Map::new();
    labels.insert("alertname".into(), json!(n.trigger));
    labels.insert("application".into(), json!(n.meta.name));
    labels.insert("namespace".into(), json!(n.meta.namespace));
    // A Kustomization and a HelmRelease of one name are two alerts, not one.
    if !n.meta.kind.is_empty() {
        labels.insert("kind".into(), json!(n.meta.kind));
    }
    if !n.meta.project.is_empty() {
        labels.insert("project".into(), json!(n.meta.project));
    }
    labels.insert("severity".into(), json!(n.severity.as_str()));
    for (k, v) in p.get("labels").and_then(Value::as_object).into_iter().flatten() {
        let v = v.as_str().map(str::trim).unwrap_or_default();
        if !v.is_empty() {
            labels.insert(k.clone(), json!(v));
        }
    }
    let mut annotations = Map::new();
    if let Some(m) = p.get("message").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty()) {
        annotations.insert("summary".into(), json!(m.lines().next().unwrap_or_default()));
        annotations.insert("description".into(), json!(m));
    }
    for (k, v) in p.get("annotations").and_then(Value::as_object).into_iter().flatten() {
        annotations.insert(k.clone(), json!(v.as_str().unwrap_or_default()));
    }
    let generator =
        p.get("generatorURL").and_then(Value::as_str).map(str::trim).filter(|g| !g.is_empty()).map(str::to_string).or_else(|| {
            n.meta.argocd_link(argocd_url)
        });
    let ts = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut alert = Map::new();
    alert.insert("labels".into(), Value::Object(labels));
    alert.insert("annotations".into(), Value::Object(annotations));
    if let Some(g) = generator {
        alert.insert("generatorURL".into(), json!(g));
    }
    match n.action {
        Action::Fire => alert.insert("startsAt".into(), json!(ts)),
        Action::Resolve => alert.insert("endsAt".into(), json!(ts)),
    };
    json!([alert])
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    let mut out = serde_json::Map::new();
    out.insert("message".into(), f.message.clone().into());
    for group in ["labels", "annotations"] {
        let prefix = format!("alertmanager.{group}.");
        let mut m = serde_json::Map::new();
        for field in f.paths_under(&prefix) {
            let name = field.strip_prefix(&prefix).unwrap_or(field);
            m.insert(name.into(), f.text(field)?.unwrap_or_default().trim().into());
        }
        out.insert(group.into(), m.into());
    }
    if let Some(g) = f.text("alertmanager.generatorURL")? {
        out.insert("generatorURL".into(), g.trim().into());
    }
    Ok(out)
}
