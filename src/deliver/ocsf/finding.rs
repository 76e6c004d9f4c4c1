//! The Detection Finding (class 2004) of a drift episode's lifecycle step, or of a
//! trigger's condition: the Application and its drifted resources as affected
//! resources, their masked changes as evidence.

use serde_json::{Value, json};

use super::{DETECTION_FINDING, FINDINGS, MAX_RESOURCES, application, class_fields, list, metadata, millis, s, severity};
use crate::deliver::ecs::Origin;
use crate::model::{Action, Notification, Severity};

/// The finding of an episode's lifecycle step, or of a condition (`Fire` opens it,
/// `Resolve` closes it) for a notification without an episode.
pub(super) fn detection_finding(n: &Notification, ep: Option<&Value>, origin: &Origin, now: chrono::DateTime<chrono::Utc>) -> Value {
    let message = n.payload.get("message").and_then(Value::as_str).unwrap_or_default();
    let open = ep.map_or(n.action == Action::Fire, |e| e.get("open").and_then(Value::as_bool).unwrap_or(true));
    // A finding is created by its first record; once a notification of the episode
    // was delivered, or it escalated, a record updates it.
    let escalated = ep.is_some_and(|e| {
        e.get("escalations").and_then(Value::as_u64).unwrap_or(0) > 0 || e.get("notifiedAt").is_some_and(|t| !t.is_null())
    });
    let (activity, status) = match (open, escalated) {
        (false, _) => ((3, "Close"), (4, "Resolved")),
        (true, false) => ((1, "Create"), (1, "New")),
        (true, true) => ((2, "Update"), (2, "In Progress")),
    };
    // An episode's own severity (the highest it reached), else the template's.
    let (sev_id, sev) =
        severity(ep.and_then(|e| e.get("severity")).and_then(Value::as_str).and_then(Severity::parse).unwrap_or(n.severity));
    let now_ms = now.timestamp_millis();
    let opened = ep.and_then(|e| millis(e.get("openedAt")));
    let resolved = ep.and_then(|e| millis(e.get("resolvedAt")));
    // When the step happened (on the episode's clock: a replay's snapshots, or the
    // daemon's), not when the record was sent.
    let escalated_at = ep.and_then(|e| millis(e.get("escalatedAt")));
    let time = match activity.0 {
        1 => opened.unwrap_or(now_ms),
        3 => resolved.unwrap_or(now_ms),
        _ => escalated_at.unwrap_or(now_ms),
    };
    let uid = ep.map(|e| s(e, "id")).filter(|id| !id.is_empty()).map(str::to_string).unwrap_or_else(|| finding_uid(n));
    let title = match ep {
        Some(e) => {
            let classes: Vec<&str> = list(e, "classes").iter().filter_map(Value::as_str).collect();
            format!(
                "Drift of {}/{} from Git ({})",
                n.meta.namespace,
                n.meta.name,
                if classes.is_empty() { "unclassified".to_string() } else { classes.join(", ") }
            )
        }
        None => format!("{} on {}/{}", n.trigger, n.meta.namespace, n.meta.name),
    };
    let mut info =
        json!({"uid": uid, "title": title, "analytic": {"name": n.trigger, "uid": n.condition_key, "type_id": 1, "type": "Rule"}});
    if !message.is_empty() {
        info["desc"] = json!(message);
    }
    if let Some(t) = opened {
        info["created_time"] = json!(t);
        info["first_seen_time"] = json!(t);
    }
    info["last_seen_time"] = json!(resolved.unwrap_or(time));
    info["modified_time"] = json!(time);
    if let Some(e) = ep {
        let types: Vec<&str> = list(e, "classes").iter().filter_map(Value::as_str).collect();
        if !types.is_empty() {
            info["types"] = json!(types);
        }
        info["data_sources"] = json!(["Argo CD Application status", "Kubernetes managedFields", "Kubernetes audit log"]);
    }
    let mut v = class_fields(DETECTION_FINDING, FINDINGS, activity);
    v.insert("severity_id".into(), json!(sev_id));
    v.insert("severity".into(), json!(sev));
    v.insert("status_id".into(), json!(status.0));
    v.insert("status".into(), json!(status.1));
    v.insert("time".into(), json!(time));
    v.insert("is_alert".into(), json!(open));
    v.insert("message".into(), json!(if message.is_empty() { title.clone() } else { message.to_string() }));
    v.insert("metadata".into(), metadata(n.idempotency_key.as_deref().unwrap_or(&uid), ep.map(|e| s(e, "id")), origin));
    v.insert("finding_info".into(), info);
    let (resources, evidences) = ep.map(|e| affected(e, n, origin)).unwrap_or_else(|| (vec![application(n, origin)], vec![]));
    v.insert("resources".into(), Value::Array(resources));
    if !evidences.is_empty() {
        v.insert("evidences".into(), Value::Array(evidences));
    }
    if let Some(t) = opened {
        v.insert("start_time".into(), json!(t));
    }
    if let (Some(a), Some(b)) = (opened, resolved) {
        v.insert("end_time".into(), json!(b));
        v.insert("duration".into(), json!(b.saturating_sub(a).max(0)));
    }
    let mut unmapped = json!({"trigger": n.trigger, "template": n.template, "action": n.action.as_str(),
        "dedup_key": n.record.as_ref().map(|r| r.key.as_str()).unwrap_or_default(),
        "sync_status": n.meta.sync_status, "health_status": n.meta.health_status, "revision": n.meta.revision});
    if let Some(e) = ep {
        for k in ["direction", "resolution", "escalations", "detectionSeconds", "resolutionSeconds"] {
            if let Some(x) = e.get(k).filter(|x| !x.is_null()) {
                unmapped[k] = x.clone();
            }
        }
        if let Some(t) = e.pointer("/breakGlass/ticket") {
            unmapped["break_glass_ticket"] = t.clone();
        }
    }
    if let Some(url) = n.meta.argocd_link(&origin.argocd_url) {
        unmapped["url"] = json!(url);
    }
    v.insert("unmapped".into(), unmapped);
    Value::Object(v)
}

/// The uid of a finding without an episode: its dedup key without the `oncePer`
/// value, so a fire and its resolve share it.
fn finding_uid(n: &Notification) -> String {
    format!("{}/{}:{}:{}:{}", n.meta.namespace, n.meta.name, n.trigger, n.condition_key, n.destination)
}

/// The Application and its drifted resources (bounded), and as evidence each one's
/// masked changes and who made them.
fn affected(ep: &Value, n: &Notification, origin: &Origin) -> (Vec<Value>, Vec<Value>) {
    let mut resources = vec![application(n, origin)];
    let mut evidences = Vec::new();
    for r in list(ep, "resources").iter().take(MAX_RESOURCES) {
        let mut res = json!({"type": s(r, "kind"), "name": s(r, "name")});
        if !s(r, "namespace").is_empty() {
            res["namespace"] = json!(s(r, "namespace"));
        }
        let mut labels = vec![format!("class:{}", s(r, "class"))];
        if !s(r, "group").is_empty() {
            labels.push(format!("api_group:{}", s(r, "group")));
        }
        if !s(r, "cluster").is_empty() {
            labels.push(format!("cluster:{}", s(r, "cluster")));
        }
        res["labels"] = json!(labels);
        resources.push(res.clone());
        let changes = list(r, "changes");
        if !changes.is_empty() {
            let mut data = json!({"changes": changes});
            for k in ["changesMore", "desiredSource"] {
                if let Some(x) = r.get(k) {
                    data[k] = x.clone();
                }
            }
            let name = format!("{} {}/{}", s(r, "kind"), s(r, "namespace"), s(r, "name"));
            let mut evidence = json!({"name": name, "data": data, "resources": [res]});
            // Who wrote the live values: the person when the audit input named one, else
            // the field manager (the client program: `kubectl-edit`).
            let user = changes.iter().map(|c| s(c, "user")).find(|u| !u.is_empty());
            let manager = changes.iter().map(|c| s(c, "manager")).find(|m| !m.is_empty());
            match (user, manager) {
                (Some(u), m) => {
                    evidence["actor"] = json!({"user": {"name": u, "type_id": 1, "type": "User"}, "app_name": m.unwrap_or_default()})
                }
                (None, Some(m)) => evidence["actor"] = json!({"app_name": m}),
                (None, None) => {}
            }
            evidences.push(evidence);
        }
    }
    (resources, evidences)
}
