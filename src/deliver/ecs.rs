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
            // Unique per delivery and the same for every attempt at it (a SIEM drops
            // the copy a crash makes by it); the dedup key, shared by a fire and its
            // resolve, is `labels.dedup_key`.
            "id": n.idempotency_key.as_deref().or(n.record.as_ref().map(|r| r.key.as_str())).unwrap_or_default(),
        },
        "log": {"level": n.severity.as_str(), "syslog": {"severity": {"code": n.severity.syslog(), "name": n.severity.as_str()}}},
        "orchestrator": {
            "type": "kubernetes",
            "cluster": {"name": origin.cluster},
            "namespace": n.meta.namespace,
            "resource": {"type": n.meta.resource_type(), "name": n.meta.name, "id": n.meta.uid},
        },
        "rule": {"name": n.trigger, "id": n.condition_key, "ruleset": "driftwatch"},
        "labels": {
            "argocd_project": n.meta.project,
            "sync_status": n.meta.sync_status,
            "health_status": n.meta.health_status,
            "revision": n.meta.revision,
            "template": n.template,
            "action": n.action.as_str(),
            "dedup_key": n.record.as_ref().map(|r| r.key.as_str()).unwrap_or_default(),
        },
    });
    match (n.operation.as_ref().filter(|o| o.is_object()), n.episode.as_ref().filter(|e| e.is_object()), v.as_object_mut()) {
        (Some(op), ep, Some(map)) => add_operation(map, op, ep),
        (None, Some(ep), Some(map)) => add_episode(map, ep),
        _ => {}
    }
    if let Some(url) = n.meta.argocd_link(&origin.argocd_url)
        && let Some(map) = v.as_object_mut()
    {
        map.insert("url".into(), json!({"full": url}));
    }
    v
}

/// A sync operation in ECS terms: an event (not an alert) whose `event.action` is
/// `sync` or `rollback`, `event.outcome` by its phase, `event.start`/`end`/`duration`,
/// `user.name` who started it (`labels.initiated_by`: `user` or `automated`), the
/// revision, and the whole record under `driftwatch.operation` with the id of the
/// drift episode open at the time, if any.
fn add_operation(map: &mut serde_json::Map<String, Value>, op: &Value, ep: Option<&Value>) {
    let s = |k: &str| op.get(k).and_then(Value::as_str).unwrap_or_default();
    let action = if op.get("rollback").and_then(Value::as_bool).unwrap_or(false) { "rollback" } else { "sync" };
    if let Some(event) = map.get_mut("event").and_then(Value::as_object_mut) {
        event.insert("kind".into(), json!("event"));
        event.insert("type".into(), json!(["change"]));
        event.insert("action".into(), json!(action));
        event.insert("dataset".into(), json!("driftwatch.operation"));
        event.insert("outcome".into(), json!(if s("phase") == "Succeeded" { "success" } else { "failure" }));
        let time = |k: &str| op.get(k).and_then(Value::as_str).and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        if let Some(t) = op.get("startedAt").filter(|t| t.is_string()) {
            event.insert("start".into(), t.clone());
        }
        if let Some(t) = op.get("finishedAt").filter(|t| t.is_string()) {
            event.insert("end".into(), t.clone());
        }
        if let (Some(a), Some(b)) = (time("startedAt"), time("finishedAt")) {
            let nanos = b.signed_duration_since(a).num_nanoseconds().unwrap_or(0).max(0);
            event.insert("duration".into(), json!(nanos));
        }
    }
    let automated = s("username").is_empty();
    if !automated {
        map.insert("user".into(), json!({"name": s("username")}));
    }
    if let Some(labels) = map.get_mut("labels").and_then(Value::as_object_mut) {
        labels.insert("initiated_by".into(), json!(if automated { "automated" } else { "user" }));
        labels.insert("revision".into(), json!(s("revision")));
    }
    let mut record = op.clone();
    if let (Some(id), Some(m)) = (ep.and_then(|e| e.get("id")), record.as_object_mut()) {
        m.insert("episode".into(), id.clone());
    }
    map.insert("driftwatch".into(), json!({"operation": record}));
}

fn array<'a>(ep: &'a Value, k: &str) -> &'a [Value] {
    ep.get(k).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The drift episode in ECS terms: `event.start`/`end`/`duration` (nanoseconds),
/// `user.name` — with the audit input the person (`user.id`, `user.roles` their
/// groups, `user.effective` whom they impersonated, `source.ip` the peer the API server
/// saw and `related.ip` every address, `user_agent.original`, `event.outcome` failure
/// for a refused attempt, `labels.attempt_id` driftwatch's identity of the request and
/// `labels.audit_id` the client's, for correlation), else the field
/// manager other than Argo CD's that changed a security field, else the latest one —
/// and the whole episode
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
    // The person, from the audit input: the newest attempt, else an attributed write
    // with one; else the field manager as before.
    let actor_of = |a: &Value| a.get("actor").filter(|x| x.is_object()).map(|x| (a.clone(), x.clone()));
    let audited = array(ep, "attempts").iter().find_map(actor_of).or_else(|| array(ep, "attribution").iter().find_map(actor_of));
    match audited {
        Some((source, actor)) => {
            let s = |k: &str| actor.get(k).cloned().unwrap_or(Value::Null);
            let mut user = json!({"name": s("username"), "id": s("uid"), "roles": s("groups")});
            if let Some(imp) = actor.get("impersonatedUser").filter(|x| x.is_object()) {
                user["effective"] = json!({"name": imp.get("username"), "roles": imp.get("groups")});
            }
            map.insert("user".into(), user);
            // kube-apiserver lists the client's `X-Forwarded-For` entries first and the
            // peer it saw last (review N12): `source.ip` is that peer, never an entry the
            // client wrote; every address is in `related.ip`. Only addresses: an index
            // maps both as IPs, and refuses anything else.
            let ips = peer_last(&actor);
            if let Some(peer) = ips.last() {
                map.insert("source".into(), json!({"ip": peer}));
                map.insert("related".into(), json!({"ip": ips}));
            }
            if let Some(ua) = actor.get("userAgent").filter(|u| u.as_str().is_some_and(|u| !u.is_empty())) {
                map.insert("user_agent".into(), json!({"original": ua}));
            }
            if let Some(event) = map.get_mut("event").and_then(Value::as_object_mut) {
                // A refused request is a failed attempt; an allowed one a change made.
                if let Some(d) = source.get("decision").and_then(Value::as_str) {
                    event.insert("outcome".into(), json!(if d == "denied" { "failure" } else { "success" }));
                }
            }
            // The client's audit ID is a correlation field only (the client chooses it);
            // driftwatch's own identity of the request beside it (issue 52, item 2).
            if let Some(labels) = map.get_mut("labels").and_then(Value::as_object_mut) {
                if let Some(id) = source.get("auditId").and_then(Value::as_str) {
                    labels.insert("audit_id".into(), json!(id));
                }
                if let Some(id) = source.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
                    labels.insert("attempt_id".into(), json!(id));
                }
            }
        }
        None => {
            if let Some(m) = ep.pointer("/attribution/0/manager").and_then(Value::as_str) {
                map.insert("user".into(), json!({"name": m}));
            }
        }
    }
    // Recorded against a break-glass exception: its ticket, to join with the incident.
    if let (Some(ticket), Some(labels)) =
        (ep.pointer("/breakGlass/ticket").and_then(Value::as_str), map.get_mut("labels").and_then(Value::as_object_mut))
    {
        labels.insert("break_glass_ticket".into(), json!(ticket));
    }
    map.insert("driftwatch".into(), json!({"episode": compact_episode(ep, event_name)}));
}

/// The addresses of an audited request (`actor.sourceIps`) that parse as IPs, in the
/// API server's order: the client's `X-Forwarded-For` entries, then the peer the API
/// server saw, last. At most [`MAX_SOURCE_IPS`], the last always kept.
pub(crate) fn peer_last(actor: &Value) -> Vec<String> {
    let ips: Vec<&str> =
        array(actor, "sourceIps").iter().filter_map(Value::as_str).filter(|ip| ip.parse::<std::net::IpAddr>().is_ok()).collect();
    let skip = ips.len().saturating_sub(MAX_SOURCE_IPS);
    ips[skip..].iter().map(|ip| ip.to_string()).collect()
}

/// Addresses of one request a record lists.
const MAX_SOURCE_IPS: usize = 8;

/// At most this many resources and attribution entries (and fields per entry) go into
/// a SIEM record; the whole episode is in the history. ([`fit`] shrinks a record further
/// for a transport with a hard size limit, syslog over UDP.)
const MAX_RECORD_RESOURCES: usize = 16;
const MAX_RECORD_ATTRIBUTION: usize = 8;
const MAX_RECORD_FIELDS: usize = 8;

/// The episode as a SIEM record carries it: scalar fields whole, resources as
/// `{kind, namespace, name, class}` with their diff (`changes`, `changesMore`,
/// `desiredSource`, `cluster`, already bounded by `diff.maxFields`), attribution without repeated detail, each list
/// bounded, with how many were left out.
fn compact_episode(ep: &Value, event_name: &str) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(m) = ep.as_object() {
        for (k, v) in m {
            if !matches!(k.as_str(), "resources" | "attribution" | "attempts") {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out.insert("event".into(), json!(event_name));
    let list = |k: &str| array(ep, k);
    let pick = |v: &Value, keys: &[&str]| -> Value {
        Value::Object(keys.iter().filter_map(|k| v.get(*k).map(|x| (k.to_string(), x.clone()))).collect())
    };
    let resources = list("resources");
    out.insert(
        "resources".into(),
        Value::Array(
            resources
                .iter()
                .take(MAX_RECORD_RESOURCES)
                .map(|r| pick(r, &["kind", "namespace", "name", "class", "cluster", "desiredSource", "changes", "changesMore"]))
                .collect(),
        ),
    );
    let attribution = list("attribution");
    out.insert(
        "attribution".into(),
        Value::Array(
            attribution
                .iter()
                .take(MAX_RECORD_ATTRIBUTION)
                .map(|a| {
                    let mut c = pick(a, &["resource", "manager", "operation", "time", "actor", "auditId"]);
                    for k in ["fields", "securityFields"] {
                        let f: Vec<Value> = a
                            .get(k)
                            .and_then(Value::as_array)
                            .map(|f| f.iter().take(MAX_RECORD_FIELDS).cloned().collect())
                            .unwrap_or_default();
                        if let Some(m) = c.as_object_mut() {
                            m.insert(k.into(), Value::Array(f));
                        }
                    }
                    c
                })
                .collect(),
        ),
    );
    let attempts = list("attempts");
    if !attempts.is_empty() {
        let keys = [
            "id", "resource", "cluster", "class", "security", "verb", "decision", "code", "reason", "manager", "auditId", "time", "count",
            "actor",
        ];
        out.insert(
            "attempts".into(),
            Value::Array(
                attempts
                    .iter()
                    .take(MAX_RECORD_ATTRIBUTION)
                    .map(|a| {
                        let mut c = pick(a, &keys);
                        let set: Vec<Value> = array(a, "set").iter().take(MAX_RECORD_FIELDS).cloned().collect();
                        if let Some(m) = c.as_object_mut() {
                            m.insert("set".into(), Value::Array(set));
                        }
                        c
                    })
                    .collect(),
            ),
        );
    }
    let omitted = resources.len().saturating_sub(MAX_RECORD_RESOURCES)
        + attribution.len().saturating_sub(MAX_RECORD_ATTRIBUTION)
        + attempts.len().saturating_sub(MAX_RECORD_ATTRIBUTION);
    if omitted > 0 {
        out.insert("omitted".into(), json!(omitted));
    }
    Value::Object(out)
}

/// Shrinks a record to at most `max` bytes of JSON for a transport that cannot carry
/// more (one syslog datagram): first the episode's resource and attribution lists go
/// (counted in `omitted`), then the message is cut. Never produces invalid JSON, unlike
/// cutting the serialized bytes.
pub fn fit(mut record: Value, max: usize) -> Value {
    let size = |r: &Value| r.to_string().len();
    if size(&record) <= max {
        return record;
    }
    if let Some(ep) = record.pointer_mut("/driftwatch/episode").and_then(Value::as_object_mut) {
        let n = |ep: &serde_json::Map<String, Value>, k: &str| ep.get(k).and_then(Value::as_array).map_or(0, Vec::len);
        let dropped = n(ep, "resources") + n(ep, "attribution") + n(ep, "attempts");
        let before = ep.get("omitted").and_then(Value::as_u64).unwrap_or(0);
        ep.remove("resources");
        ep.remove("attribution");
        ep.remove("attempts");
        ep.insert("omitted".into(), json!(before + dropped as u64));
    }
    const MARK: &str = " [truncated]";
    // JSON escaping can make a character longer than one byte: cut, measure, repeat.
    for _ in 0..8 {
        let over = size(&record).saturating_sub(max);
        let Some(Value::String(m)) = record.get_mut("message").filter(|_| over > 0) else { break };
        let base = m.strip_suffix(MARK).map_or(m.len(), str::len);
        let cut = crate::text::prefix(m, base.saturating_sub(over + MARK.len())).len();
        m.truncate(cut);
        m.push_str(MARK);
    }
    record
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{AppMeta, Destination, DestinationKind, RecordOp, Severity, StateRecord};

    /// A SIEM-bound notification for tests of every SIEM kind.
    pub(crate) fn sample(kind: DestinationKind, service: &str) -> Notification {
        Notification {
            received_ms: None,
            app: "argocd/guestbook".into(),
            meta: AppMeta {
                name: "guestbook".into(),
                namespace: "argocd".into(),
                uid: "u-1".into(),
                project: "default".into(),
                sync_status: "OutOfSync".into(),
                health_status: "Healthy".into(),
                revision: "a1b2c3d".into(),
                ..AppMeta::default()
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
                seen: None,
            }),
            episode: None,
            operation: None,
            idempotency_key: None,
            group: None,
        }
    }

    /// With the audit input, the record names the person: ECS `user.*`, `source.ip`,
    /// `user_agent.original`, the outcome of the request and its audit ID.
    #[test]
    fn the_person_from_the_audit_input_is_the_user() {
        let mut n = sample(DestinationKind::Splunk, "siem");
        let actor = json!({"username": "mallory", "uid": "m-1", "groups": ["system:authenticated"], "sourceIps": ["10.1.2.3"],
            "userAgent": "kubectl/v1.36.2", "impersonatedUser": {"username": "ops-admin", "groups": ["ops"]}});
        n.episode = Some(json!({"id": "argocd/guestbook@1", "open": false, "resolution": "refused",
            "attempts": [{"id": "a1", "resource": "Deployment payments/api", "decision": "denied", "code": 403, "auditId": "a1",
                          "actor": actor, "set": [], "reason": "forbidden"}],
            "attribution": [{"resource": "Deployment payments/api", "manager": "kubectl-patch"}]}));
        let r = record(&n, &Origin::default(), chrono::Utc::now());
        assert_eq!(r["user"]["name"], "mallory");
        assert_eq!(r["user"]["id"], "m-1");
        assert_eq!(r["user"]["roles"], json!(["system:authenticated"]));
        assert_eq!(r["user"]["effective"]["name"], "ops-admin");
        assert_eq!(r["source"]["ip"], "10.1.2.3");
        assert_eq!(r["user_agent"]["original"], "kubectl/v1.36.2");
        assert_eq!(r["event"]["outcome"], "failure");
        assert_eq!(r["labels"]["audit_id"], "a1");
        assert_eq!(r["driftwatch"]["episode"]["attempts"][0]["actor"]["username"], "mallory");
    }

    /// Review N12: kube-apiserver puts the client's `X-Forwarded-For` entries first and
    /// the peer it saw last: `source.ip` is the last, every address in `related.ip`;
    /// the record's identity is driftwatch's (the attempt's id), the client's audit ID
    /// only a label.
    #[test]
    fn the_source_is_the_peer_the_api_server_saw() {
        let mut n = sample(DestinationKind::Splunk, "siem");
        n.idempotency_key = Some("idem-9".into());
        let actor = json!({"username": "alice", "sourceIps": ["10.0.0.7", "not-an-ip", "127.0.0.1"]});
        n.episode = Some(json!({"id": "argocd/guestbook@1", "open": true,
            "attempts": [{"id": "dw-1", "auditId": "chosen", "resource": "Deployment payments/api", "decision": "allowed",
                          "actor": actor}]}));
        let r = record(&n, &Origin::default(), chrono::Utc::now());
        assert_eq!(r["source"]["ip"], "127.0.0.1");
        assert_eq!(r["related"]["ip"], json!(["10.0.0.7", "127.0.0.1"]));
        assert_eq!(r["event"]["id"], "idem-9");
        assert_eq!((r["labels"]["attempt_id"].as_str(), r["labels"]["audit_id"].as_str()), (Some("dw-1"), Some("chosen")));
    }

    /// A notification about a sync operation is an operation record: `event.action`
    /// rollback, who, when, how long, the revision and the record itself.
    #[test]
    fn an_operation_record_says_sync_or_rollback_and_who() {
        let mut n = sample(DestinationKind::Splunk, "siem");
        n.operation =
            Some(json!({"phase": "Succeeded", "revision": "aaa", "username": "alice", "rollback": true, "from": "bbb", "to": "aaa",
            "startedAt": "2026-12-04T10:00:00Z", "finishedAt": "2026-12-04T10:00:05Z", "action": "rollback",
            "resources": [{"kind": "Deployment", "name": "api", "status": "Synced"}]}));
        n.episode = Some(json!({"id": "argocd/guestbook@1", "open": true}));
        let r = record(&n, &Origin::default(), chrono::Utc::now());
        assert_eq!(r["event"]["action"], "rollback");
        assert_eq!(r["event"]["kind"], "event");
        assert_eq!(r["event"]["dataset"], "driftwatch.operation");
        assert_eq!(r["event"]["outcome"], "success");
        assert_eq!(r["event"]["duration"], 5_000_000_000i64);
        assert_eq!(r["user"]["name"], "alice");
        assert_eq!(r["labels"]["initiated_by"], "user");
        assert_eq!(r["labels"]["revision"], "aaa");
        assert_eq!(r["driftwatch"]["operation"]["from"], "bbb");
        assert_eq!(r["driftwatch"]["operation"]["episode"], "argocd/guestbook@1");
        assert_eq!(r["driftwatch"]["operation"]["resources"][0]["name"], "api");
        assert!(r["driftwatch"].get("episode").is_none(), "an operation record, not an episode record");
        n.operation = Some(json!({"phase": "Failed", "revision": "ccc", "username": ""}));
        let r = record(&n, &Origin::default(), chrono::Utc::now());
        assert_eq!((r["event"]["action"].as_str(), r["event"]["outcome"].as_str()), (Some("sync"), Some("failure")));
        assert_eq!(r["labels"]["initiated_by"], "automated");
        assert!(r.get("user").is_none());
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
        assert!(r["labels"].get("break_glass_ticket").is_none());
        n.episode.as_mut().unwrap()["breakGlass"] = json!({"id": "INC-7@1", "ticket": "INC-7", "openedBy": "alice", "approvedBy": "bob"});
        let r = record(&n, &Origin::default(), now);
        assert_eq!(r["labels"]["break_glass_ticket"], "INC-7", "a change made under break-glass carries the ticket");
        assert_eq!(r["driftwatch"]["episode"]["breakGlass"]["approvedBy"], "bob");
        n.episode.as_mut().unwrap()["open"] = json!(true);
        let r = record(&n, &Origin::default(), now);
        assert_eq!(r["driftwatch"]["episode"]["event"], "escalated");
        assert!(r["event"].get("duration").is_none());

        // The largest episode an Application can have still fits one syslog datagram.
        let fields: Vec<String> =
            (0..32).map(|i| format!("spec.template.spec.containers[app-{i}].securityContext.capabilities.add")).collect();
        let resources: Vec<Value> = (0..64)
            .map(|i| json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "payments-production", "name": format!("service-{i}"),
                            "class": "security-context", "kindClass": "workload", "attribution": {"managers": [{"manager": "kubectl-edit", "fields": fields}]}}))
            .collect();
        let attribution: Vec<Value> = (0..32)
            .map(|i| {
                json!({"resource": format!("Deployment payments-production/service-{i}"), "manager": "kubectl-edit", "operation": "Update",
                            "time": "2026-03-02T03:12:00Z", "fields": fields, "securityFields": fields})
            })
            .collect();
        let big = n.episode.as_mut().unwrap();
        big["resources"] = json!(resources);
        big["attribution"] = json!(attribution);
        let r = record(&n, &Origin::default(), now);
        assert_eq!(r["driftwatch"]["episode"]["omitted"], 48 + 24, "lists are bounded");
        assert_eq!(
            r["driftwatch"]["episode"]["resources"][0],
            json!({"kind": "Deployment", "namespace": "payments-production", "name": "service-0", "class": "security-context"})
        );
        assert_eq!(r["user"]["name"], "kubectl-edit");
        // For one syslog datagram: still valid JSON with the episode's identity.
        n.payload["message"] = json!("x".repeat(20_000));
        let small = fit(record(&n, &Origin::default(), now), 7_168);
        let len = small.to_string().len();
        assert!((6_000..=7_168).contains(&len), "{len} bytes: fits, without cutting more than needed");
        assert_eq!(small["driftwatch"]["episode"]["id"], "argocd/guestbook@1");
        assert_eq!(small["driftwatch"]["episode"]["omitted"], 64 + 32);
        assert!(small["message"].as_str().unwrap().ends_with(" [truncated]"));
        let already_small = record(&sample(DestinationKind::Syslog, "siem"), &Origin::default(), now);
        assert_eq!(fit(already_small.clone(), 7_168), already_small);
    }
}
