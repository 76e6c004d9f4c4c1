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
    if !origin.argocd_url.is_empty()
        && let Some(map) = v.as_object_mut()
    {
        let url = format!("{}/applications/{}/{}", origin.argocd_url.trim_end_matches('/'), n.meta.namespace, n.meta.name);
        map.insert("url".into(), json!({"full": url}));
    }
    v
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
}
