//! The Elastic Common Schema record every SIEM destination (Splunk HEC, signed webhook,
//! syslog) receives: a pure function of the notification.

use serde_json::{Value, json};

use crate::model::{Action, Notification};

/// Where the record says it came from.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// `orchestrator.cluster.name` (the config's `context.clusterName`).
    pub cluster: String,
    /// Argo CD's URL, for `url.full`.
    pub argocd_url: String,
}

/// Builds the ECS record of a notification at `now`.
pub fn record(n: &Notification, origin: &Origin, now: chrono::DateTime<chrono::Utc>) -> Value {
    let message = n.payload.get("message").and_then(Value::as_str).unwrap_or_default();
    let (event_type, outcome) = match n.action {
        Action::Fire => ("start", "failure"),
        Action::Resolve => ("end", "success"),
    };
    let mut v = json!({
        "@timestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "ecs": {"version": "8.11.0"},
        "message": message,
        "event": {
            "kind": "alert",
            "category": ["configuration"],
            "type": ["change", event_type],
            "action": n.trigger,
            "outcome": outcome,
            "severity": n.severity.syslog(),
            "provider": "driftwatch",
            "dataset": "driftwatch.notification",
            "id": n.record.as_ref().map(|r| r.key.as_str()).unwrap_or_default(),
        },
        "log": {"level": n.severity.as_str(), "syslog": {"severity": {"code": n.severity.syslog(), "name": n.severity.as_str()}}},
        "orchestrator": {
            "type": "kubernetes",
            "cluster": {"name": origin.cluster},
            "namespace": n.meta.namespace,
            "resource": {"type": "applications.argoproj.io", "name": n.meta.name, "id": n.meta.uid},
        },
        "rule": {"name": n.trigger, "id": n.condition_key, "ruleset": "driftwatch"},
        "labels": {
            "argocd_project": n.meta.project,
            "sync_status": n.meta.sync_status,
            "health_status": n.meta.health_status,
            "revision": n.meta.revision,
            "template": n.template,
            "action": match n.action { Action::Fire => "fire", Action::Resolve => "resolve" },
        },
    });
    if let (Some(ep), Some(map)) = (n.episode.as_ref().filter(|e| e.is_object()), v.as_object_mut()) {
        add_episode(map, ep);
    }
    if !origin.argocd_url.is_empty()
        && let Some(map) = v.as_object_mut()
    {
        let url = format!("{}/applications/{}/{}", origin.argocd_url.trim_end_matches('/'), n.meta.namespace, n.meta.name);
        map.insert("url".into(), json!({"full": url}));
    }
    v
}

/// The drift episode in ECS terms: `event.start`/`end`/`duration` (nanoseconds),
/// `user.name` (the field manager other than Argo CD's that changed a security field,
/// else the latest one), and the whole episode
/// under `driftwatch.episode` with `event`: `opened`, `escalated` or `resolved`.
fn add_episode(map: &mut serde_json::Map<String, Value>, ep: &Value) {
    let open = ep.get("open").and_then(Value::as_bool).unwrap_or(true);
    let escalations = ep.get("escalations").and_then(Value::as_u64).unwrap_or(0);
    let event_name = match (open, escalations) {
        (false, _) => "resolved",
        (true, 0) => "opened",
        (true, _) => "escalated",
    };
    if let Some(event) = map.get_mut("event").and_then(Value::as_object_mut) {
        if let Some(t) = ep.get("openedAt") {
            event.insert("start".into(), t.clone());
        }
        if !open {
            if let Some(t) = ep.get("resolvedAt") {
                event.insert("end".into(), t.clone());
            }
            let secs = ep.get("durationSeconds").and_then(Value::as_u64).unwrap_or(0);
            event.insert("duration".into(), json!(secs.saturating_mul(1_000_000_000)));
            event.insert("type".into(), json!(["change", "end"]));
            event.insert("outcome".into(), json!("success"));
        }
    }
    let manager = ep.pointer("/attribution/0/manager").and_then(Value::as_str);
    if let Some(m) = manager {
        map.insert("user".into(), json!({"name": m}));
    }
    let mut episode = ep.clone();
    if let Some(e) = episode.as_object_mut() {
        e.insert("event".into(), json!(event_name));
    }
    map.insert("driftwatch".into(), json!({"episode": episode}));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{AppMeta, Destination, DestinationKind, RecordOp, Severity, StateRecord};

    /// A SIEM-bound notification for tests of every SIEM kind.
    pub(crate) fn sample(kind: DestinationKind, service: &str) -> Notification {
        Notification {
            app: "argocd/guestbook".into(),
            meta: AppMeta {
                name: "guestbook".into(),
                namespace: "argocd".into(),
                uid: "u-1".into(),
                project: "default".into(),
                sync_status: "OutOfSync".into(),
                health_status: "Healthy".into(),
                revision: "a1b2c3d".into(),
            },
            trigger: "on-out-of-sync".into(),
            condition: 0,
            condition_key: "[0].abc".into(),
            template: "app-out-of-sync".into(),
            destination: Destination::new(service, ""),
            kind,
            action: Action::Fire,
            severity: Severity::Warning,
            payload: json!({"message": "guestbook drifted | a=b \\ c\nline two"}),
            record: Some(StateRecord {
                app_key: "argocd/guestbook@u-1".into(),
                key: "a1b2c3d:on-out-of-sync:[0].abc:siem:".into(),
                op: RecordOp::Set,
            }),
            episode: None,
        }
    }

    #[test]
    fn record_carries_ecs_names() {
        let n = sample(DestinationKind::Splunk, "siem");
        let now = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:12:30Z").unwrap().with_timezone(&chrono::Utc);
        let r = record(&n, &Origin { cluster: "prod".into(), argocd_url: "https://cd.example.com/".into() }, now);
        assert_eq!(r["@timestamp"], "2026-03-02T03:12:30.000Z");
        assert_eq!(r["event"]["kind"], "alert");
        assert_eq!(r["event"]["category"], json!(["configuration"]));
        assert_eq!(r["event"]["type"], json!(["change", "start"]));
        assert_eq!(r["event"]["action"], "on-out-of-sync");
        assert_eq!(r["event"]["severity"], 4);
        assert_eq!(r["orchestrator"]["cluster"]["name"], "prod");
        assert_eq!(r["orchestrator"]["namespace"], "argocd");
        assert_eq!(r["orchestrator"]["resource"]["type"], "applications.argoproj.io");
        assert_eq!(r["orchestrator"]["resource"]["name"], "guestbook");
        assert_eq!(r["rule"]["name"], "on-out-of-sync");
        assert_eq!(r["message"], "guestbook drifted | a=b \\ c\nline two");
        assert_eq!(r["url"]["full"], "https://cd.example.com/applications/argocd/guestbook");
        let mut resolved = n.clone();
        resolved.action = Action::Resolve;
        assert_eq!(record(&resolved, &Origin::default(), now)["event"]["type"], json!(["change", "end"]));
    }

    #[test]
    fn episode_records_carry_duration_and_who_changed_what() {
        let mut n = sample(DestinationKind::Syslog, "siem");
        n.episode = Some(json!({"id": "argocd/guestbook@1", "open": false, "escalations": 1, "openedAt": "2026-03-02T03:12:30Z",
            "resolvedAt": "2026-03-02T03:26:30Z", "durationSeconds": 840, "severity": "critical", "classes": ["security-context"],
            "attribution": [{"manager": "kubectl-edit", "fields": ["spec.template.spec.containers[app].securityContext.privileged"]}]}));
        let now = chrono::Utc::now();
        let r = record(&n, &Origin::default(), now);
        assert_eq!(r["event"]["start"], "2026-03-02T03:12:30Z");
        assert_eq!(r["event"]["end"], "2026-03-02T03:26:30Z");
        assert_eq!(r["event"]["duration"], 840_000_000_000u64);
        assert_eq!(r["event"]["type"], json!(["change", "end"]));
        assert_eq!(r["user"]["name"], "kubectl-edit");
        assert_eq!(r["driftwatch"]["episode"]["event"], "resolved");
        assert_eq!(r["driftwatch"]["episode"]["classes"], json!(["security-context"]));
        n.episode.as_mut().unwrap()["open"] = json!(true);
        let r = record(&n, &Origin::default(), now);
        assert_eq!(r["driftwatch"]["episode"]["event"], "escalated");
        assert!(r["event"].get("duration").is_none());
    }
}
