//! API Activities (class 6003): each audited request a drift episode holds (a change
//! by a person, a refused attempt), and a sync or rollback of the Application.

use serde_json::{Map, Value, json};

use super::{API_ACTIVITY, APPLICATION_ACTIVITY, MAX_REQUESTS, application, class_fields, list, metadata, millis, s, severity};
use crate::deliver::ecs::Origin;
use crate::model::Notification;

/// The audited requests an episode holds (attempts, then attributed changes with a
/// person), each an API Activity, bounded; one per request. An attributed change made
/// from an attempt (same audit ID, person and resource) is that attempt's request.
pub(super) fn requests(ep: &Value, n: &Notification, origin: &Origin) -> Vec<Value> {
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
    let ips = crate::deliver::ecs::peer_last(&actor);
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
    // The spoke whose API server logged it (absent: the hub).
    for k in ["cluster", "set", "fields", "securityFields", "count"] {
        if let Some(x) = a.get(k).filter(|x| !x.is_null()) {
            unmapped[k] = x.clone();
        }
    }
    v.insert("unmapped".into(), unmapped);
    Value::Object(v)
}

/// A sync or rollback as an API Activity on the Application: who started it (or Argo
/// CD's controller, automated), its phase as the status, when it ran.
pub(super) fn operation_activity(n: &Notification, op: &Value, ep: Option<&Value>, origin: &Origin) -> Value {
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
