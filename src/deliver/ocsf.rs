//! The Open Cybersecurity Schema Framework records a SIEM destination with
//! `format: ocsf` receives, OCSF 1.7.0 (what AWS Security Lake takes from a custom
//! source, and Splunk and Datadog ingest natively): pure functions of the
//! notification, as [`super::ecs`] is for ECS.
//!
//! - A drift episode is a **Detection Finding** (class 2004): its first record is
//!   `Create`, one after a notification of it was delivered (an escalation, a new
//!   attempt) `Update`, resolved `Close`, each with the same
//!   `finding_info.uid` (the episode id); the drifted resources are its affected
//!   resources, their masked changes its evidence.
//! - Each audited request the episode holds — a change by a person or a refused
//!   attempt — is an **API Activity** (class 6003), sent with the finding and named in
//!   its `finding_info.related_events`.
//! - A sync or rollback is an API Activity too (`api.operation` `sync`/`rollback`).
//! - Any other notification is a finding about its trigger's condition.
//!
//! Enumerations carry their `*_id` and the caption beside it; times are epoch
//! milliseconds. `metadata.uid` is the delivery's idempotency key (an API Activity's
//! is driftwatch's identity of the request, the same in every record that carries it,
//! never the client's audit ID, which is `api.request.uid` and `unmapped.audit_id`),
//! so a copy a crash makes can be told from a new record. `src_endpoint.ip` is the
//! peer the API server saw (the last of the event's `sourceIPs`).

use serde_json::{Map, Value, json};

use super::ecs::Origin;
use crate::model::{Action, Notification, Severity};

/// The OCSF version the records follow.
pub const VERSION: &str = "1.7.0";

/// At most this many drifted resources and audited requests go into one finding (as
/// in an ECS record; the whole episode is in the history).
const MAX_RESOURCES: usize = 16;
const MAX_REQUESTS: usize = 8;

/// Every record of a notification: one finding or activity, and for an episode the
/// API Activity of each audited request it holds.
pub fn records(n: &Notification, origin: &Origin, now: chrono::DateTime<chrono::Utc>) -> Vec<Value> {
    let episode = n.episode.as_ref().filter(|e| e.is_object());
    if let Some(op) = n.operation.as_ref().filter(|o| o.is_object()) {
        return vec![operation_activity(n, op, episode, origin)];
    }
    let requests: Vec<Value> = episode.map(|ep| requests(ep, n, origin)).unwrap_or_default();
    let mut finding = detection_finding(n, episode, origin, now);
    let related: Vec<Value> = requests
        .iter()
        .map(|r| json!({"uid": r["metadata"]["uid"], "type_uid": r["type_uid"], "type_name": r["type_name"], "product": product()}))
        .collect();
    if !related.is_empty() {
        finding["finding_info"]["related_events"] = Value::Array(related);
        finding["finding_info"]["related_events_count"] = json!(requests.len());
    }
    std::iter::once(finding).chain(requests).collect()
}

fn product() -> Value {
    json!({"name": "driftwatch", "vendor_name": "driftwatch", "version": env!("CARGO_PKG_VERSION")})
}

fn metadata(uid: &str, correlation: Option<&str>, origin: &Origin) -> Value {
    let mut m = json!({"version": VERSION, "product": product(), "uid": uid, "log_name": "driftwatch", "log_provider": "driftwatch"});
    if let Some(c) = correlation.filter(|c| !c.is_empty()) {
        m["correlation_uid"] = json!(c);
    }
    if !origin.cluster.is_empty() {
        m["labels"] = json!([format!("cluster:{}", origin.cluster)]);
    }
    m
}

/// A severity as OCSF numbers and names it.
fn severity(s: Severity) -> (u8, &'static str) {
    match s {
        Severity::Critical => (5, "Critical"),
        Severity::Error => (4, "High"),
        Severity::Warning => (3, "Medium"),
        Severity::Info => (1, "Informational"),
    }
}

fn millis(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_str).and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map(|t| t.timestamp_millis())
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

fn list<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The Application as an OCSF resource.
fn application(n: &Notification, origin: &Origin) -> Value {
    let mut r = json!({"type": "Application", "name": n.meta.name, "namespace": n.meta.namespace});
    if !n.meta.uid.is_empty() {
        r["uid"] = json!(n.meta.uid);
    }
    let mut labels = vec![format!("argocd_project:{}", n.meta.project)];
    if !origin.cluster.is_empty() {
        labels.push(format!("cluster:{}", origin.cluster));
    }
    r["labels"] = json!(labels);
    r
}

/// A class's fixed fields: its uid and name, its category's, the activity's and the
/// type's (`class_uid * 100 + activity_id`).
fn class_fields(class: (u32, &str), category: (u32, &str), activity: (u32, &str)) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("class_uid".into(), json!(class.0));
    m.insert("class_name".into(), json!(class.1));
    m.insert("category_uid".into(), json!(category.0));
    m.insert("category_name".into(), json!(category.1));
    m.insert("activity_id".into(), json!(activity.0));
    m.insert("activity_name".into(), json!(activity.1));
    m.insert("type_uid".into(), json!(class.0 * 100 + activity.0));
    m.insert("type_name".into(), json!(format!("{}: {}", class.1, activity.1)));
    m
}

const DETECTION_FINDING: (u32, &str) = (2004, "Detection Finding");
const FINDINGS: (u32, &str) = (2, "Findings");
const API_ACTIVITY: (u32, &str) = (6003, "API Activity");
const APPLICATION_ACTIVITY: (u32, &str) = (6, "Application Activity");

/// The finding of an episode's lifecycle step, or of a condition (`Fire` opens it,
/// `Resolve` closes it) for a notification without an episode.
fn detection_finding(n: &Notification, ep: Option<&Value>, origin: &Origin, now: chrono::DateTime<chrono::Utc>) -> Value {
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
    if !origin.argocd_url.is_empty() {
        unmapped["url"] = json!(format!("{}/applications/{}/{}", origin.argocd_url.trim_end_matches('/'), n.meta.namespace, n.meta.name));
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

/// The audited requests an episode holds (attempts, then attributed changes with a
/// person), each an API Activity, bounded; one per request. An attributed change made
/// from an attempt (same audit ID, person and resource) is that attempt's request.
fn requests(ep: &Value, n: &Notification, origin: &Origin) -> Vec<Value> {
    let mut seen = std::collections::BTreeSet::new();
    let same_request = |a: &Value| {
        let user = a.pointer("/actor/username").and_then(Value::as_str).unwrap_or_default().to_string();
        (s(a, "auditId").to_string(), user, s(a, "resource").to_string())
    };
    let attempts: Vec<(&Value, bool)> = list(ep, "attempts").iter().map(|a| (a, true)).collect();
    let attempted: std::collections::BTreeSet<_> = attempts.iter().map(|(a, _)| same_request(a)).collect();
    let changes = list(ep, "attribution")
        .iter()
        .filter(|a| a.get("actor").is_some_and(Value::is_object) && !attempted.contains(&same_request(a)))
        .map(|a| (a, false));
    attempts
        .into_iter()
        .chain(changes)
        .filter(|(a, _)| !s(a, "auditId").is_empty() || !s(a, "id").is_empty())
        .map(|(a, attempt)| (a, attempt, request_uid(a, attempt)))
        .filter(|(_, _, uid)| seen.insert(uid.clone()))
        .take(MAX_REQUESTS)
        .map(|(a, attempt, uid)| request_activity(a, attempt, &uid, s(ep, "id"), n, origin))
        .collect()
}

/// An audited request's record identity (`metadata.uid`, and so the `_id` of an index),
/// made by driftwatch, never the client's audit ID alone (issue 52, item 2: a client
/// chooses its `Audit-ID`, and two writes under one must be two records): an attempt's
/// `id`; for an attributed change, a digest of what the write was (its audit ID, time,
/// person, operation and resource). The same request gives the same identity in every
/// record that carries it, so a SIEM keeps one copy.
fn request_uid(a: &Value, attempt: bool) -> String {
    use sha2::{Digest, Sha256};
    if attempt && !s(a, "id").is_empty() {
        return s(a, "id").to_string();
    }
    let user = a.pointer("/actor/username").and_then(Value::as_str).unwrap_or_default();
    let parts = [s(a, "auditId"), s(a, "time"), user, s(a, "operation"), s(a, "resource")];
    let mut h = Sha256::new();
    for p in parts {
        // Length-prefixed, so no two different lists of parts give the same bytes.
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("dw-{hex}")
}

/// One audited request as an API Activity: who (`actor.user`, from where), what
/// (`api.operation` the verb, the resource), and whether the API server allowed it.
fn request_activity(a: &Value, attempt: bool, uid: &str, episode: &str, n: &Notification, origin: &Origin) -> Value {
    let verb = if attempt { s(a, "verb") } else { s(a, "operation") };
    let activity = match verb.to_ascii_lowercase().as_str() {
        "create" | "apply" => (1, "Create"),
        "get" | "list" | "watch" => (2, "Read"),
        "update" | "patch" => (3, "Update"),
        "delete" | "deletecollection" => (4, "Delete"),
        _ => (99, "Other"),
    };
    let actor = a.get("actor").cloned().unwrap_or(Value::Null);
    let mut user = json!({"name": s(&actor, "username"), "type_id": 1, "type": "User"});
    if !s(&actor, "uid").is_empty() {
        user["uid"] = json!(s(&actor, "uid"));
    }
    let groups: Vec<Value> = list(&actor, "groups").iter().filter_map(Value::as_str).map(|g| json!({"name": g})).collect();
    if !groups.is_empty() {
        user["groups"] = Value::Array(groups);
    }
    // kube-apiserver lists the client's `X-Forwarded-For` entries first and the peer it
    // saw last (review N12): the source is that peer; the entries before it, which the
    // client wrote, are `http_request.x_forwarded_for`.
    let ips = super::ecs::peer_last(&actor);
    let (forwarded, src) = match ips.split_last() {
        Some((peer, forwarded)) => (forwarded.to_vec(), json!({"ip": peer})),
        None => (Vec::new(), json!({"name": "unknown"})),
    };
    let denied = s(a, "decision") == "denied";
    let (sev_id, sev) = match (a.get("security").and_then(Value::as_bool).unwrap_or(false), denied) {
        (true, _) => (4, "High"),
        (false, true) => (3, "Medium"),
        (false, false) => (1, "Informational"),
    };
    let audit_id = s(a, "auditId");
    let mut api = json!({"operation": verb, "service": {"name": "kube-apiserver"}, "request": {"uid": audit_id}});
    if let Some(code) = a.get("code").and_then(Value::as_u64).filter(|c| *c > 0) {
        api["response"] = json!({"code": code});
        if !s(a, "reason").is_empty() {
            api["response"]["error_message"] = json!(s(a, "reason"));
        }
    }
    let resource = {
        let mut r = json!({"type": s(a, "kind"), "name": s(a, "name")});
        if !s(a, "namespace").is_empty() {
            r["namespace"] = json!(s(a, "namespace"));
        }
        if !s(a, "class").is_empty() {
            r["labels"] = json!([format!("class:{}", s(a, "class"))]);
        }
        r
    };
    let mut v = class_fields(API_ACTIVITY, APPLICATION_ACTIVITY, activity);
    v.insert("severity_id".into(), json!(sev_id));
    v.insert("severity".into(), json!(sev));
    v.insert("status_id".into(), json!(if denied { 2 } else { 1 }));
    v.insert("status".into(), json!(if denied { "Failure" } else { "Success" }));
    if denied && !s(a, "reason").is_empty() {
        v.insert("status_detail".into(), json!(s(a, "reason")));
    }
    v.insert("time".into(), json!(millis(a.get("time")).unwrap_or(0)));
    v.insert("actor".into(), json!({"user": user}));
    v.insert("api".into(), api);
    v.insert("src_endpoint".into(), src);
    let mut http = Map::new();
    if !s(&actor, "userAgent").is_empty() {
        http.insert("user_agent".into(), json!(s(&actor, "userAgent")));
    }
    if !forwarded.is_empty() {
        http.insert("x_forwarded_for".into(), json!(forwarded));
    }
    if !http.is_empty() {
        v.insert("http_request".into(), Value::Object(http));
    }
    v.insert("resources".into(), json!([resource, application(n, origin)]));
    let what = if denied { "tried to" } else { "did" };
    v.insert("message".into(), json!(format!("{} {what} {verb} {}", s(&actor, "username"), s(a, "resource"))));
    v.insert("metadata".into(), metadata(uid, Some(episode), origin));
    // The client's audit ID correlates with the API server's log (`api.request.uid`
    // and here); it identifies nothing.
    let mut unmapped = json!({"episode": episode, "manager": s(a, "manager"), "audit_id": audit_id});
    if let Some(imp) = actor.get("impersonatedUser").filter(|x| x.is_object()) {
        unmapped["impersonated_user"] = imp.clone();
    }
    for k in ["set", "fields", "securityFields", "count"] {
        if let Some(x) = a.get(k).filter(|x| !x.is_null()) {
            unmapped[k] = x.clone();
        }
    }
    v.insert("unmapped".into(), unmapped);
    Value::Object(v)
}

/// A sync or rollback as an API Activity on the Application: who started it (or Argo
/// CD's controller, automated), its phase as the status, when it ran.
fn operation_activity(n: &Notification, op: &Value, ep: Option<&Value>, origin: &Origin) -> Value {
    let rollback = op.get("rollback").and_then(Value::as_bool).unwrap_or(false);
    let operation = if rollback { "rollback" } else { "sync" };
    let username = s(op, "username");
    let (actor, src) = match username {
        "" => (json!({"app_name": "argocd-application-controller"}), json!({"svc_name": "argocd-application-controller"})),
        u => (json!({"user": {"name": u, "type_id": 1, "type": "User"}}), json!({"svc_name": "argocd-server"})),
    };
    let phase = s(op, "phase");
    let succeeded = phase == "Succeeded";
    let started = millis(op.get("startedAt"));
    let finished = millis(op.get("finishedAt"));
    let mut v = class_fields(API_ACTIVITY, APPLICATION_ACTIVITY, (3, "Update"));
    let (sev_id, sev) = severity(n.severity);
    v.insert("severity_id".into(), json!(sev_id));
    v.insert("severity".into(), json!(sev));
    v.insert("status_id".into(), json!(if succeeded { 1 } else { 2 }));
    v.insert("status".into(), json!(if succeeded { "Success" } else { "Failure" }));
    v.insert("status_code".into(), json!(phase));
    if !succeeded && !s(op, "message").is_empty() {
        v.insert("status_detail".into(), json!(s(op, "message")));
    }
    v.insert("time".into(), json!(finished.or(started).unwrap_or(0)));
    if let Some(t) = started {
        v.insert("start_time".into(), json!(t));
    }
    if let Some(t) = finished {
        v.insert("end_time".into(), json!(t));
    }
    if let (Some(a), Some(b)) = (started, finished) {
        v.insert("duration".into(), json!(b.saturating_sub(a).max(0)));
    }
    v.insert("actor".into(), actor);
    v.insert("api".into(), json!({"operation": operation, "service": {"name": "argocd"}, "request": {"uid": s(op, "id")}}));
    v.insert("src_endpoint".into(), src);
    v.insert("resources".into(), json!([application(n, origin)]));
    let who = if username.is_empty() { "automated" } else { username };
    v.insert(
        "message".into(),
        json!(format!("{operation} of {}/{} to {} {phase} ({who})", n.meta.namespace, n.meta.name, s(op, "revision"))),
    );
    let episode = ep.map(|e| s(e, "id"));
    v.insert("metadata".into(), metadata(n.idempotency_key.as_deref().unwrap_or(s(op, "id")), episode, origin));
    let mut unmapped = json!({"revision": s(op, "revision"), "initiated_by": if username.is_empty() { "automated" } else { "user" }});
    for k in ["from", "to", "action", "resources", "resourcesMore"] {
        if let Some(x) = op.get(k).filter(|x| !x.is_null()) {
            unmapped[k] = x.clone();
        }
    }
    if let Some(e) = episode.filter(|e| !e.is_empty()) {
        unmapped["episode"] = json!(e);
    }
    v.insert("unmapped".into(), unmapped);
    Value::Object(v)
}

/// Shrinks a record to at most `max` bytes of JSON for one syslog datagram: the
/// evidence, the resources but the first, the related events and what is unmapped go
/// first (counted in `unmapped.omitted`), then the message is cut.
pub fn fit(mut record: Value, max: usize) -> Value {
    let size = |r: &Value| r.to_string().len();
    if size(&record) <= max {
        return record;
    }
    let mut omitted = 0;
    if let Some(m) = record.as_object_mut() {
        omitted += m.remove("evidences").and_then(|e| e.as_array().map(Vec::len)).unwrap_or(0);
        if let Some(r) = m.get_mut("resources").and_then(Value::as_array_mut) {
            omitted += r.len().saturating_sub(1);
            r.truncate(1);
        }
        m.insert("unmapped".into(), json!({"omitted": omitted}));
    }
    if let Some(info) = record.get_mut("finding_info").and_then(Value::as_object_mut) {
        info.remove("related_events");
        info.remove("related_events_count");
        // The message says it again.
        info.remove("desc");
    }
    // Then the message, halved until the record fits (at most a few dozen rounds).
    while size(&record) > max
        && let Some(Value::String(msg)) = record.get_mut("message")
        && !msg.is_empty()
    {
        let half = msg.chars().count() / 2;
        *msg = if half <= 2 { String::new() } else { crate::text::clip(msg, half) };
    }
    record
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::drift::audit::{Actor, Attempt, Decision};
    use crate::drift::diff::FieldChange;
    use crate::drift::episode::Episode;
    use crate::drift::{AttributedChange, DriftResource};
    use crate::model::DestinationKind;

    /// The OCSF 1.7.0 JSON Schema of a class, from `tests/data/ocsf` (generated by
    /// `scripts/ocsf-schemas.py`).
    fn schema(class_uid: u64) -> Value {
        let name = match class_uid {
            2004 => "detection_finding",
            6003 => "api_activity",
            other => panic!("no schema for class {other}"),
        };
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/ocsf/{name}.json"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
    }

    /// Panics with every schema error when `record` does not validate against the
    /// OCSF schema of its class.
    pub(crate) fn assert_valid(record: &Value) {
        thread_local! {
            static VALIDATORS: std::cell::RefCell<std::collections::HashMap<u64, jsonschema::Validator>> = Default::default();
        }
        let class = record["class_uid"].as_u64().unwrap_or_else(|| panic!("no class_uid: {record:#}"));
        VALIDATORS.with(|v| {
            let mut v = v.borrow_mut();
            let validator = v.entry(class).or_insert_with(|| jsonschema::validator_for(&schema(class)).unwrap());
            let errors: Vec<String> = validator.iter_errors(record).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "not valid OCSF {class}:\n{}\n{record:#}", errors.join("\n"));
        });
    }

    fn actor(user: &str, ip: &str) -> Actor {
        Actor {
            username: user.into(),
            uid: format!("{user}-uid"),
            groups: vec!["system:authenticated".into()],
            source_ips: vec![ip.into()],
            user_agent: "kubectl/v1.36.0 (linux/amd64)".into(),
            ..Actor::default()
        }
    }

    /// An episode as a notification carries it (`Episode::view`): a privileged patch
    /// by alice (self-healed) and mallory's refused attempt on a RoleBinding.
    fn episode(open: bool, escalations: u32, notified: bool) -> Value {
        let now = chrono::Utc::now();
        let alice = Attempt {
            id: "a-1".into(),
            object: crate::model::ResourceRef {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: "shop".into(),
                name: "web".into(),
            },
            resource: "Deployment shop/web".into(),
            class: "security-context".into(),
            security: true,
            verb: "patch".into(),
            code: 200,
            audit_id: "a-1".into(),
            time: now - chrono::Duration::minutes(3),
            count: 1,
            actor: actor("alice", "10.0.0.7"),
            fields: vec!["spec.template.spec.containers[web].securityContext.privileged".into()],
            ..Attempt::default()
        };
        let mallory = Attempt {
            id: "m-1".into(),
            object: crate::model::ResourceRef {
                group: "rbac.authorization.k8s.io".into(),
                kind: "RoleBinding".into(),
                namespace: "shop".into(),
                name: "admins".into(),
            },
            resource: "RoleBinding shop/admins".into(),
            class: "rbac".into(),
            security: true,
            verb: "update".into(),
            decision: Decision::Denied,
            code: 403,
            reason: "rolebindings.rbac.authorization.k8s.io \"admins\" is forbidden".into(),
            audit_id: "m-1".into(),
            time: now - chrono::Duration::minutes(2),
            count: 3,
            actor: actor("mallory", "not-an-ip"),
            ..Attempt::default()
        };
        let resource = DriftResource {
            object: crate::model::ResourceRef {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: "shop".into(),
                name: "web".into(),
            },
            version: "v1".into(),
            class: "security-context".into(),
            changes: vec![FieldChange {
                path: "spec.template.spec.containers[web].securityContext.privileged".into(),
                desired: "(not set)".into(),
                live: "true".into(),
                manager: "kubectl-patch".into(),
                user: "alice".into(),
                time: "2026-12-06T09:00:00Z".into(),
                ..FieldChange::default()
            }],
            ..DriftResource::default()
        };
        let change = AttributedChange {
            resource: "Deployment shop/web".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "web".into(),
            manager: "kubectl-patch".into(),
            operation: "Update".into(),
            actor: Some(actor("alice", "10.0.0.7")),
            audit_id: "a-1".into(),
            ..AttributedChange::default()
        };
        let opened = now - chrono::Duration::minutes(5);
        let mut v = json!({"id": "argocd/web@1", "appKey": "argocd/web@u", "namespace": "argocd", "name": "web", "project": "shop",
            "cluster": "in-cluster", "openedAt": opened, "severity": "critical", "direction": "live", "revision": "abc",
            "outOfSync": true, "degraded": false, "classes": ["rbac", "security-context"], "resources": [resource],
            "attribution": [change], "attempts": [mallory, alice], "escalations": escalations});
        if !open {
            v["resolvedAt"] = json!(now);
            v["resolution"] = json!("self-heal");
        }
        if notified {
            v["notifiedAt"] = json!(opened);
        }
        let ep: Episode = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"));
        ep.view(now)
    }

    fn sample() -> Notification {
        let mut n = crate::deliver::ecs::tests::sample(DestinationKind::Splunk, "siem");
        n.idempotency_key = Some("idem-1".into());
        n
    }

    fn origin() -> Origin {
        Origin { cluster: "prod-eu".into(), argocd_url: "https://argocd.example.com".into() }
    }

    /// The lifecycle of one episode: Create, Update, Close on one `finding_info.uid`,
    /// each finding followed by the API Activity of each audited request and naming
    /// them; every record valid OCSF 1.7.0.
    #[test]
    fn an_episode_is_a_detection_finding_with_its_requests_as_api_activity() {
        let now = chrono::Utc::now();
        let mut n = sample();
        n.severity = Severity::Critical;
        let steps =
            [(episode(true, 0, false), 1, "Create", 1), (episode(true, 1, true), 2, "Update", 2), (episode(false, 1, true), 3, "Close", 4)];
        for (ep, activity, name, status) in steps {
            n.episode = Some(ep);
            let records = records(&n, &origin(), now);
            records.iter().for_each(assert_valid);
            let [finding, mallory, alice] = &records[..] else { panic!("{records:#?}") };
            assert_eq!((finding["class_uid"].as_u64(), finding["activity_id"].as_u64()), (Some(2004), Some(activity)));
            assert_eq!(finding["activity_name"], name);
            assert_eq!(finding["type_uid"], 200400 + activity);
            assert_eq!(finding["status_id"], status);
            assert_eq!((finding["severity_id"].as_u64(), finding["severity"].as_str()), (Some(5), Some("Critical")));
            assert_eq!(finding["finding_info"]["uid"], "argocd/web@1");
            assert_eq!(finding["metadata"]["uid"], "idem-1");
            assert_eq!(finding["metadata"]["version"], VERSION);
            assert_eq!(finding["finding_info"]["types"], json!(["rbac", "security-context"]));
            assert_eq!(finding["resources"][1]["type"], "Deployment");
            assert_eq!(finding["evidences"][0]["data"]["changes"][0]["live"], "true");
            assert_eq!(finding["evidences"][0]["actor"]["user"]["name"], "alice", "the person behind the change");
            assert_eq!(finding["evidences"][0]["actor"]["app_name"], "kubectl-patch");
            let related: Vec<&str> =
                finding["finding_info"]["related_events"].as_array().unwrap().iter().map(|e| e["uid"].as_str().unwrap()).collect();
            assert_eq!(related, ["m-1", "a-1"], "the finding names its requests");
            // mallory was refused: a failed Update with the API server's reason.
            assert_eq!((mallory["class_uid"].as_u64(), mallory["activity_id"].as_u64()), (Some(6003), Some(3)));
            assert_eq!(mallory["actor"]["user"]["name"], "mallory");
            assert_eq!((mallory["status_id"].as_u64(), mallory["status"].as_str()), (Some(2), Some("Failure")));
            assert_eq!(mallory["api"]["response"]["code"], 403);
            assert_eq!(mallory["src_endpoint"], json!({"name": "unknown"}), "a source that is not an IP is not passed as one");
            assert_eq!(mallory["metadata"]["uid"], "m-1");
            assert_eq!(mallory["metadata"]["correlation_uid"], "argocd/web@1");
            // alice's patch went through (the attribution entry with the same audit ID
            // is the same request: one record).
            assert_eq!((alice["activity_id"].as_u64(), alice["status_id"].as_u64()), (Some(3), Some(1)));
            assert_eq!(alice["src_endpoint"]["ip"], "10.0.0.7");
            assert_eq!(alice["http_request"]["user_agent"], "kubectl/v1.36.0 (linux/amd64)");
        }
        let closed = &records(&n, &origin(), now)[0];
        assert_eq!(closed["duration"].as_i64(), Some(closed["end_time"].as_i64().unwrap() - closed["start_time"].as_i64().unwrap()));
        assert_eq!(closed["is_alert"], false);
    }

    /// Issue 52 item 2 and review N12: two writes under one client-chosen audit ID
    /// (distinct attempts, distinct `id`) are two API Activities with two identities,
    /// hence two Elasticsearch documents; the client's audit ID is only a correlation
    /// field. The source is the last of `sourceIPs` (the peer the API server saw), the
    /// `X-Forwarded-For` entries before it `http_request.x_forwarded_for`.
    #[test]
    fn two_writes_under_one_audit_id_are_two_records_from_the_peer() {
        let now = chrono::Utc::now();
        let write = |id: &str, name: &str| Attempt {
            id: id.into(),
            object: crate::model::ResourceRef {
                kind: "ConfigMap".into(),
                namespace: "shop".into(),
                name: name.into(),
                ..Default::default()
            },
            resource: format!("ConfigMap shop/{name}"),
            verb: "patch".into(),
            code: 200,
            audit_id: "X".into(),
            time: now,
            count: 1,
            actor: Actor { source_ips: vec!["10.0.0.7".into(), "127.0.0.1".into()], ..actor("alice", "") },
            ..Attempt::default()
        };
        let mut harmless = write("dw-harmless", "web");
        harmless.actor.source_ips = vec!["127.0.0.1".into()];
        let mut privileged = write("dw-privileged", "web");
        privileged.object.kind = "Deployment".into();
        privileged.resource = "Deployment shop/web".into();
        privileged.security = true;
        let ep: Episode = serde_json::from_value(json!({"id": "argocd/web@1", "appKey": "argocd/web@u", "namespace": "argocd",
            "name": "web", "project": "shop", "cluster": "in-cluster", "openedAt": now, "severity": "critical", "direction": "live",
            "revision": "abc", "outOfSync": false, "degraded": false, "classes": [], "resources": [], "attribution": [],
            "attempts": [privileged, harmless]}))
        .unwrap();
        let mut n = sample();
        n.episode = Some(ep.view(now));
        let records = records(&n, &origin(), now);
        records.iter().for_each(assert_valid);
        let [_, privileged, harmless] = &records[..] else { panic!("{records:#?}") };
        assert_eq!(
            (privileged["metadata"]["uid"].as_str(), harmless["metadata"]["uid"].as_str()),
            (Some("dw-privileged"), Some("dw-harmless"))
        );
        assert_eq!((privileged["api"]["request"]["uid"].as_str(), privileged["unmapped"]["audit_id"].as_str()), (Some("X"), Some("X")));
        assert_eq!(privileged["src_endpoint"]["ip"], "127.0.0.1", "the peer, not the client's X-Forwarded-For");
        assert_eq!(privileged["http_request"]["x_forwarded_for"], json!(["10.0.0.7"]));
        assert_eq!(harmless["src_endpoint"]["ip"], "127.0.0.1");
        assert!(harmless["http_request"].get("x_forwarded_for").is_none());
        // Each its own identity (what a SIEM's `_id` is made from).
        let ids: std::collections::BTreeSet<String> =
            records.iter().filter_map(|r| r["metadata"]["uid"].as_str().map(str::to_string)).collect();
        assert_eq!(ids.len(), 3, "the finding and two requests, each its own uid: {ids:?}");
    }

    /// A sync by a person and an automated one: API Activity on the Application.
    #[test]
    fn a_sync_is_an_api_activity_by_its_initiator() {
        let now = chrono::Utc::now();
        let mut n = sample();
        n.operation = Some(json!({"id": "op-7", "phase": "Succeeded", "revision": "aaa", "username": "alice", "rollback": true,
            "from": "bbb", "to": "aaa", "startedAt": "2026-12-06T09:00:00Z", "finishedAt": "2026-12-06T09:00:04Z"}));
        let [r] = &records(&n, &origin(), now)[..] else { panic!() };
        assert_valid(r);
        assert_eq!((r["class_uid"].as_u64(), r["api"]["operation"].as_str()), (Some(6003), Some("rollback")));
        assert_eq!(r["actor"]["user"]["name"], "alice");
        assert_eq!((r["status_id"].as_u64(), r["duration"].as_u64()), (Some(1), Some(4000)));
        n.operation = Some(json!({"id": "op-8", "phase": "Failed", "message": "one or more objects failed to apply", "username": ""}));
        let [r] = &records(&n, &origin(), now)[..] else { panic!() };
        assert_valid(r);
        assert_eq!(r["actor"]["app_name"], "argocd-application-controller");
        assert_eq!((r["status_id"].as_u64(), r["status_detail"].as_str()), (Some(2), Some("one or more objects failed to apply")));
    }

    /// A notification about neither: a finding about its condition, opened by a fire
    /// and closed by its resolve, on one uid.
    #[test]
    fn a_condition_without_an_episode_is_a_finding_on_its_condition() {
        let now = chrono::Utc::now();
        let mut n = sample();
        let fire = records(&n, &origin(), now).remove(0);
        n.action = Action::Resolve;
        let resolve = records(&n, &origin(), now).remove(0);
        for r in [&fire, &resolve] {
            assert_valid(r);
        }
        assert_eq!((fire["activity_id"].as_u64(), resolve["activity_id"].as_u64()), (Some(1), Some(3)));
        assert_eq!(fire["finding_info"]["uid"], resolve["finding_info"]["uid"]);
        assert_eq!((fire["severity_id"].as_u64(), fire["severity"].as_str()), (Some(3), Some("Medium")));
    }

    /// Shrunk for one datagram, a record stays valid OCSF and keeps its identity.
    #[test]
    fn a_fitted_record_is_still_valid() {
        let now = chrono::Utc::now();
        let mut n = sample();
        n.payload["message"] = json!("x".repeat(20_000));
        n.episode = Some(episode(true, 0, false));
        let big = records(&n, &origin(), now).remove(0);
        let small = fit(big, 4096);
        assert!(small.to_string().len() <= 4096, "{}", small.to_string().len());
        assert_valid(&small);
        assert_eq!(small["finding_info"]["uid"], "argocd/web@1");
    }

    /// The schema check is not vacuous: a record missing what the class requires, or
    /// with a field the class does not have, fails it.
    #[test]
    fn the_schema_check_fails_an_invalid_record() {
        let mut n = sample();
        n.episode = Some(episode(true, 0, false));
        let good = records(&n, &origin(), chrono::Utc::now()).remove(0);
        assert_valid(&good);
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("finding_info");
        let mut extra = good.clone();
        extra["driftwatch"] = json!({"not": "ocsf"});
        let mut wrong = good;
        wrong["severity_id"] = json!(7);
        for bad in [missing, extra, wrong] {
            assert!(std::panic::catch_unwind(|| assert_valid(&bad)).is_err(), "{bad:#}");
        }
    }
}
