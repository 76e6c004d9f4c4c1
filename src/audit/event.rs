//! `audit.k8s.io/v1` events: decoded borrowing from the request body (request and
//! response bodies kept as raw JSON, not parsed), dropped cheaply when they are not a
//! mutating request on a managed object by someone other than Argo CD, and turned into
//! [`Attempt`]s when they are.

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::index::ManagedIndex;

mod relevant;
use crate::drift::audit::{
    Actor, Attempt, Decision, Impersonated, MAX_GROUPS, MAX_REASON_CHARS, MAX_SET_FIELDS, OVER_LIMIT, SetField, clip, json_patch_fields,
    set_fields,
};
use crate::model::ResourceRef;
use relevant::{Hit, relevant};

/// The list, its events left undecoded: one event kube-apiserver would never write (a
/// field of the wrong type) is dropped and counted, not the batch around it.
#[derive(Deserialize)]
struct EventList<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct User<'a> {
    #[serde(borrow, default)]
    username: Cow<'a, str>,
    #[serde(borrow, default)]
    uid: Cow<'a, str>,
    #[serde(borrow, default)]
    groups: Vec<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ObjectRef<'a> {
    #[serde(borrow, default)]
    resource: Cow<'a, str>,
    #[serde(borrow, default)]
    namespace: Cow<'a, str>,
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    api_group: Cow<'a, str>,
    #[serde(borrow, default)]
    subresource: Cow<'a, str>,
}

#[derive(Deserialize, Default)]
struct Status<'a> {
    #[serde(default)]
    code: u16,
    #[serde(borrow, default)]
    message: Cow<'a, str>,
    #[serde(borrow, default)]
    reason: Cow<'a, str>,
}

/// One audit event, as much of it as the filter and an attempt need.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    #[serde(borrow, default, rename = "auditID")]
    audit_id: Cow<'a, str>,
    #[serde(borrow, default)]
    stage: Cow<'a, str>,
    #[serde(borrow, default, rename = "requestURI")]
    request_uri: Cow<'a, str>,
    #[serde(borrow, default)]
    verb: Cow<'a, str>,
    #[serde(borrow, default)]
    user: User<'a>,
    #[serde(borrow, default)]
    impersonated_user: Option<User<'a>>,
    #[serde(borrow, default, rename = "sourceIPs")]
    source_ips: Vec<Cow<'a, str>>,
    #[serde(borrow, default)]
    user_agent: Cow<'a, str>,
    #[serde(borrow, default)]
    object_ref: Option<ObjectRef<'a>>,
    #[serde(borrow, default)]
    response_status: Option<Status<'a>>,
    #[serde(borrow, default)]
    request_object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response_object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    request_received_timestamp: Cow<'a, str>,
    #[serde(borrow, default)]
    annotations: BTreeMap<Cow<'a, str>, Cow<'a, str>>,
}

/// Why an event was dropped (the metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dropped {
    /// Not the final stage (`RequestReceived`, `ResponseStarted`).
    Stage,
    /// get, list, watch.
    Read,
    /// Made by one of `argocdIdentities`, or by a Flux or Fleet controller on an object
    /// of its own engine's unit (`fluxIdentities`, `fleetIdentities`).
    ArgoCd,
    /// A status write, a dry run, a request on no object.
    NotAChange,
    /// On no object an Application manages.
    Unmanaged,
    /// Not an `audit.k8s.io/v1` event (an item of the list that does not decode).
    Malformed,
    /// Received by the API server longer ago than `audit.maxEventAge`, or later than
    /// `audit.maxEventAhead` from now: a replay or a forgery dated to win.
    OutOfTime,
}

impl Dropped {
    pub const ALL: [Dropped; 7] =
        [Dropped::Stage, Dropped::Read, Dropped::ArgoCd, Dropped::NotAChange, Dropped::Unmanaged, Dropped::Malformed, Dropped::OutOfTime];

    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::Stage => "stage",
            Dropped::Read => "read",
            Dropped::ArgoCd => "argocd",
            Dropped::NotAChange => "not-a-change",
            Dropped::Unmanaged => "unmanaged",
            Dropped::Malformed => "malformed",
            Dropped::OutOfTime => "out-of-time",
        }
    }
}

/// What one batch (or one log line) held.
#[derive(Debug, Default)]
pub struct Batch {
    pub attempts: Vec<Attempt>,
    /// Writes of the break-glass annotation on an Application.
    pub break_glass: Vec<crate::drift::break_glass::Write>,
    /// Dropped events by reason (indexed like [`Dropped::ALL`]).
    pub dropped: [u64; Dropped::ALL.len()],
}

/// A body that is not an `EventList` (or an `Event`, for a log line).
#[derive(Debug, thiserror::Error)]
#[error("not an audit.k8s.io/v1 {what}: {error}")]
pub struct Malformed {
    what: &'static str,
    error: serde_json::Error,
}

/// What decides relevance besides the index.
pub struct Filter<'a> {
    pub argocd_identities: &'a crate::config::ArgoIdentities,
    pub index: &'a ManagedIndex,
    /// When the request time is missing or unreadable.
    pub now: DateTime<Utc>,
    /// How credentials in what a request set are recognised (built-in and `diff.mask`).
    pub mask: &'a crate::drift::mask::Masker,
    /// How far from `now` a request's time may be (`None`: any; a file given to the
    /// CLI is read whenever it was written).
    pub times: Option<TimeBounds>,
    /// The cluster whose API server logged the events, as its credential said: empty
    /// for the cluster driftwatch runs in, else a spoke's label (`clusters[]`).
    pub cluster: &'a str,
}

pub use crate::drift::audit::TimeBounds;

/// An `EventList` body (what the webhook backend posts).
pub fn parse_list(body: &[u8], f: &Filter) -> Result<Batch, Malformed> {
    let body = utf8(body);
    let list: EventList = serde_json::from_slice(&body).map_err(|error| Malformed { what: "EventList", error })?;
    let mut out = Batch::default();
    for raw in list.items {
        match serde_json::from_str::<Event>(raw.get()) {
            Ok(e) => consider(&e, f, &mut out),
            Err(_) => out.dropped[Dropped::Malformed as usize] += 1,
        }
    }
    Ok(out)
}

/// One line of an audit log file (`--audit-log-path`: one `Event` per line).
pub fn parse_line(line: &[u8], f: &Filter, out: &mut Batch) -> Result<(), Malformed> {
    let line = utf8(line);
    let e: Event = serde_json::from_slice(&line).map_err(|error| Malformed { what: "Event", error })?;
    consider(&e, f, out);
    Ok(())
}

/// `bytes` as valid UTF-8: the API server logs a request body as it came, and a
/// string holding bytes that are not UTF-8 (an annotation ending in 0xFF) would make
/// the whole event undecodable, and so unseen; each such byte is read as U+FFFD and
/// the event is judged like any other.
fn utf8(bytes: &[u8]) -> Cow<'_, [u8]> {
    match std::str::from_utf8(bytes) {
        Ok(_) => Cow::Borrowed(bytes),
        Err(_) => Cow::Owned(String::from_utf8_lossy(bytes).into_owned().into_bytes()),
    }
}

/// What the receiving replica keeps of one event for the audit inbox: `None` when no
/// unit can be concerned whatever the index holds ([`relevant::admitted`]: why, in
/// `Err`), else the event as valid UTF-8, without its request and response objects
/// when its resource's bodies carry credentials (never stored).
pub fn admit_line(line: &[u8], times: Option<TimeBounds>, now: DateTime<Utc>) -> Result<Result<Vec<u8>, Dropped>, Malformed> {
    let line = utf8(line);
    let e: Event = serde_json::from_slice(&line).map_err(|error| Malformed { what: "Event", error })?;
    if let Err(d) = relevant::admitted(&e, times, now) {
        return Ok(Err(d));
    }
    let secret = e.object_ref.as_ref().is_some_and(|o| body_is_secret(&o.resource, &o.subresource));
    if !secret {
        return Ok(Ok(line.into_owned()));
    }
    let mut v: serde_json::Value = serde_json::from_slice(&line).map_err(|error| Malformed { what: "Event", error })?;
    if let Some(o) = v.as_object_mut() {
        o.remove("requestObject");
        o.remove("responseObject");
    }
    serde_json::to_vec(&v).map(Ok).map_err(|error| Malformed { what: "Event", error })
}

const MUTATING: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// Resources whose request bodies carry secret data or fresh credentials at
/// RequestResponse level: never parsed, never kept.
fn body_is_secret(resource: &str, subresource: &str) -> bool {
    matches!(resource, "secrets" | "tokenreviews" | "tokenrequests" | "certificatesigningrequests") || subresource == "token"
}

/// driftwatch's identity of an audit event: a digest of what the API server itself
/// decides — its audit ID, when it received the request, who made it, the verb, the
/// request URI, the object and the stage. The audit ID alone is not an identity: the
/// API server keeps a client's `Audit-ID` header as it is, so one client can give a
/// harmless write and a privileged one the same ID (review N4). A batch the API server
/// sends again carries the same event, and so the same digest.
pub fn event_id(e_audit_id: &str, received: &str, user: (&str, &str), verb: &str, uri: &str, object: [&str; 5], stage: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [e_audit_id, received, user.0, user.1, verb, uri].into_iter().chain(object).chain([stage]) {
        // Each part with its length, so no two different events hash the same text.
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl Event<'_> {
    /// See [`event_id`].
    fn id(&self) -> String {
        let empty = ObjectRef::default();
        let o = self.object_ref.as_ref().unwrap_or(&empty);
        event_id(
            &self.audit_id,
            &self.request_received_timestamp,
            (&self.user.username, &self.user.uid),
            &self.verb,
            &self.request_uri,
            [&o.api_group, &o.resource, &o.namespace, &o.name, &o.subresource],
            &self.stage,
        )
    }
}

fn consider(e: &Event, f: &Filter, out: &mut Batch) {
    match relevant(e, f) {
        Ok(targets) => {
            for t in targets {
                // The break-glass annotation is an Application's (never read from a
                // Secret a Flux unit reads, or any other unit's input).
                let wrote_break_glass = match (t.2 && t.1 == "Application").then(|| break_glass_write(e, &t.0, f.now)).flatten() {
                    Some(w) => {
                        out.break_glass.push(w);
                        true
                    }
                    None => false,
                };
                let mut a = attempt(e, t, f);
                if a.app_spec {
                    with_status_fields(e, &mut a);
                }
                // An Application's own (what is harmless of a Flux or Fleet unit, or of
                // what it reads, is `drift::classify`'s allow-list).
                let application = a.app_spec && a.object.group == "argoproj.io";
                // Argo CD's API server starting a sync or a refresh for a signed-in user
                // (its RBAC decided; `initiatedBy` names them). Anything else it writes
                // is an attempt under its identity.
                if f.argocd_identities.api(&e.user.username)
                    && application
                    && !a.truncated
                    && !a.fields.is_empty()
                    && a.fields.iter().all(|p| p == "operation" || p.starts_with("operation.") || HARMLESS_APP_FIELDS.contains(&p.as_str()))
                {
                    out.dropped[Dropped::ArgoCd as usize] += 1;
                    continue;
                }
                // A patch of an Application by a person counts unless all it set is a
                // refresh request or the break-glass annotation (judged on its own): its
                // `operation` (a sync of any revision), its notification annotations
                // (where alerts go), its `status` (what driftwatch reads: the CRD has no
                // status subresource) are writes like its spec (review N10).
                let readable_app_patch = application && a.verb == "patch" && a.subresource.is_empty() && a.body.is_empty();
                // Not when fields were left out (padding past what is shown).
                if readable_app_patch && !a.truncated && a.fields.iter().all(|p| HARMLESS_APP_FIELDS.contains(&p.as_str())) {
                    if !wrote_break_glass {
                        out.dropped[Dropped::NotAChange as usize] += 1;
                    }
                    continue;
                }
                // An allowed patch whose body was read and set nothing (`-p '{}'`) changed
                // nothing: no episode for it (review M2).
                if a.verb == "patch" && a.decision == Decision::Allowed && a.body.is_empty() && a.set.is_empty() && !wrote_break_glass {
                    out.dropped[Dropped::NotAChange as usize] += 1;
                    continue;
                }
                out.attempts.push(a);
            }
        }
        Err(d) => out.dropped[d as usize] += 1,
    }
}

/// What the audit listener writes in place of an event's request and response objects
/// when the event is over `audit.maxBodyBytes` (a JSON string).
pub const ELIDED: &str = "\"driftwatch:over-limit\"";

/// What a person may set on an Application without it being an attempt: a refresh
/// request (what `argocd app get --refresh` and the UI's refresh write), and the
/// break-glass annotation, which `driftwatch break-glass` writes and the break-glass
/// judgement checks on its own.
const HARMLESS_APP_FIELDS: &[&str] = &["metadata.annotations.argocd.argoproj.io/refresh", "metadata.annotations.driftwatch.io/break-glass"];

/// At most this many of the `status` fields an Application write set are named.
const MAX_STATUS_FIELDS: usize = 8;

/// Adds to an Application write's fields the parts of `status` it wrote (the value is
/// not shown: it is Argo CD's to write, and a person writing it is the finding).
/// [`set_fields`] leaves `status` out, as no change of an object's own; an Application's
/// status is what driftwatch reads, and anyone who may patch it may write it.
fn with_status_fields(e: &Event, a: &mut Attempt) {
    let Some(body) = e.request_object.and_then(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok()) else {
        return;
    };
    let mut paths: Vec<String> = match &body {
        serde_json::Value::Object(m) => match m.get("status") {
            Some(serde_json::Value::Object(s)) if !s.is_empty() => s.keys().map(|k| format!("status.{}", clip(k, 64))).collect(),
            Some(_) => vec!["status".to_string()],
            None => Vec::new(),
        },
        serde_json::Value::Array(ops) => ops
            .iter()
            .filter_map(|op| op.get("path").and_then(serde_json::Value::as_str))
            .filter(|p| *p == "/status" || p.starts_with("/status/"))
            .map(|p| p.trim_start_matches('/').splitn(3, '/').take(2).collect::<Vec<_>>().join("."))
            .map(|p| clip(&p, 72))
            .collect(),
        _ => Vec::new(),
    };
    paths.dedup();
    for p in paths.into_iter().take(MAX_STATUS_FIELDS) {
        // Past what is shown only fields that may be security fields are kept (see
        // `drift::audit::set_fields`); a status field is one.
        if a.set.len() >= MAX_SET_FIELDS {
            a.truncated = true;
        }
        if a.set.len() >= 2 * MAX_SET_FIELDS {
            break;
        }
        a.fields.push(p.clone());
        a.set.push(SetField { path: p, value: "(written)".to_string() });
    }
}

/// The largest break-glass annotation kept from an audit event (an exception is a few
/// hundred bytes; a larger value is kept as unreadable, which verifies nothing).
const MAX_BREAK_GLASS_VALUE: usize = 8 << 10;

/// An allowed write on an Application whose request names the break-glass annotation:
/// who made it, through which client, and the annotation it left (from the response,
/// the object after the write; else the request body of a merge patch or an update).
fn break_glass_write(e: &Event, app_key: &str, now: DateTime<Utc>) -> Option<crate::drift::break_glass::Write> {
    use crate::drift::break_glass::{ANNOTATION, Write};
    let raw = e.request_object?.get();
    // Decoded, not searched as text: a key spelled with JSON escapes
    // (`driftwatch\u002eio/break-glass`) is the same key to the API server.
    let body: serde_json::Value = serde_json::from_str(raw).ok()?;
    let names_it = match &body {
        serde_json::Value::Array(ops) => ops.iter().any(|op| {
            let path = op.get("path").and_then(serde_json::Value::as_str).unwrap_or_default();
            path.contains("driftwatch.io~1break-glass")
                || ((path == "/metadata/annotations" || path == "/metadata")
                    && op
                        .get("value")
                        .is_some_and(|v| v.get(ANNOTATION).or_else(|| v.pointer("/annotations").and_then(|a| a.get(ANNOTATION))).is_some()))
        }),
        other => other.pointer("/metadata/annotations").and_then(|a| a.get(ANNOTATION)).is_some(),
    };
    if !names_it {
        return None;
    }
    if e.response_status.as_ref().is_some_and(|r| r.code >= 400) {
        return None;
    }
    let annotation = |body: &str| {
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        let a = v.pointer("/metadata/annotations")?;
        Some(
            a.get(ANNOTATION)
                .and_then(serde_json::Value::as_str)
                .map(|s| if s.len() > MAX_BREAK_GLASS_VALUE { String::new() } else { s.to_string() }),
        )
    };
    let value = e.response_object.and_then(|r| annotation(r.get())).or_else(|| annotation(raw)).flatten();
    Some(Write {
        app_key: app_key.to_string(),
        username: clip(&e.user.username, 256),
        uid: clip(&e.user.uid, 128),
        groups: e.user.groups.iter().take(MAX_GROUPS).map(|g| clip(g, 256)).collect(),
        user_agent: clip(&e.user_agent, 256),
        audit_id: clip(&e.audit_id, 64),
        id: e.id(),
        time: DateTime::parse_from_rfc3339(&e.request_received_timestamp).map(|t| t.with_timezone(&Utc)).unwrap_or(now),
        value,
    })
}

fn strings(list: &[Cow<str>]) -> Vec<String> {
    list.iter().take(MAX_GROUPS).map(|g| clip(g, 256)).collect()
}

fn attempt(e: &Event, (app_key, kind, app_spec): Hit, f: &Filter) -> Attempt {
    let now = f.now;
    let empty = ObjectRef::default();
    let o = e.object_ref.as_ref().unwrap_or(&empty);
    let (resource, subresource) = (o.resource.to_string(), o.subresource.to_string());
    let code = e.response_status.as_ref().map_or(0, |r| r.code);
    let decision = if code >= 400 { Decision::Denied } else { Decision::Allowed };
    let reason = match (&e.response_status, decision) {
        (Some(r), Decision::Denied) => {
            let decided = e.annotations.get("authorization.k8s.io/decision").map(|d| format!(" (authorization: {d})")).unwrap_or_default();
            let why = if r.message.is_empty() { r.reason.to_string() } else { r.message.to_string() };
            clip(&format!("{why}{decided}"), MAX_REASON_CHARS)
        }
        _ => String::new(),
    };
    let manager = e
        .request_uri
        .split_once('?')
        .and_then(|(_, q)| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "fieldManager").map(|(_, v)| clip(&v, 128)))
        .unwrap_or_default();
    let time = DateTime::parse_from_rfc3339(&e.request_received_timestamp).map(|t| t.with_timezone(&Utc)).unwrap_or(now);
    let (set, truncated, body) = match e.request_object {
        _ if body_is_secret(&resource, &subresource) => (Vec::new(), false, "dropped"),
        // What the request set is not known: an attacker can pad a write past the
        // bound. Taken as a security write (see `drift::classify`).
        Some(raw) if raw.get() == ELIDED => {
            let unknown = SetField { path: "(request)".into(), value: "(over audit.maxBodyBytes: not read)".into() };
            (vec![unknown], false, OVER_LIMIT)
        }
        Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(serde_json::Value::Array(ops)) => {
                // A JSON patch: its ops' paths are the fields; the object the write left
                // names the list items they index.
                let after = e.response_object.and_then(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok());
                let (set, truncated) = json_patch_fields(&ops, after.as_ref(), f.mask);
                (set, truncated, "")
            }
            Ok(v) => {
                let (set, truncated) = set_fields(&v, f.mask);
                (set, truncated, "")
            }
            Err(_) => (Vec::new(), false, "not-sent"),
        },
        None => (Vec::new(), false, "not-sent"),
    };
    let fields = set.iter().map(|f| f.path.clone()).collect();
    let (namespace, name) = (o.namespace.to_string(), o.name.to_string());
    Attempt {
        id: e.id(),
        app_key,
        resource: format!("{kind} {namespace}/{name}"),
        object: ResourceRef { group: o.api_group.to_string(), kind, namespace, name },
        cluster: f.cluster.to_string(),
        class: String::new(),
        security: false,
        app_spec,
        verb: e.verb.to_string(),
        subresource,
        decision,
        code,
        reason,
        argocd_manager: crate::drift::classes::ARGOCD_MANAGERS.contains(&manager.as_str()),
        manager,
        audit_id: clip(&e.audit_id, 64),
        time,
        count: 1,
        last_at: time,
        actor: Actor {
            username: clip(&e.user.username, 256),
            uid: clip(&e.user.uid, 128),
            groups: strings(&e.user.groups),
            impersonated_user: e
                .impersonated_user
                .as_ref()
                .map(|u| Impersonated { username: clip(&u.username, 256), groups: strings(&u.groups) }),
            source_ips: strings(&e.source_ips),
            user_agent: clip(&e.user_agent, 256),
        },
        set,
        fields,
        security_fields: Vec::new(),
        body: body.to_string(),
        truncated,
        received: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::App;
    use serde_json::json;

    pub(crate) fn data(name: &str) -> Vec<u8> {
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-audit").join(name)).unwrap()
    }

    pub(crate) fn index() -> ManagedIndex {
        let mut idx = ManagedIndex::default();
        idx.update(
            &App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "payments-api", "namespace": "argocd", "uid": "u1"},
                "spec": {"project": "default", "destination": {"namespace": "payments"}},
                "status": {"resources": [
                    {"group": "apps", "kind": "Deployment", "namespace": "payments", "name": "api"},
                    {"kind": "Secret", "namespace": "payments", "name": "db"}]}}))
            .unwrap(),
            &crate::project::Scope::unrestricted(),
        );
        idx
    }

    pub(crate) fn ids() -> crate::config::ArgoIdentities {
        crate::config::ArgoIdentities {
            controllers: vec![crate::config::ARGOCD_CONTROLLER_IDENTITY.to_string()],
            api: vec!["system:serviceaccount:argocd:argocd-server".to_string()],
            ..Default::default()
        }
    }

    fn filter<'a>(ids: &'a crate::config::ArgoIdentities, index: &'a ManagedIndex) -> Filter<'a> {
        Filter { argocd_identities: ids, index, now: chrono::Utc::now(), mask: &crate::drift::mask::BUILT_IN, times: None, cluster: "" }
    }

    /// Review M2: an allowed patch that set nothing (`kubectl patch -p '{}'`) is no
    /// change and makes no attempt; refused, it is still an attempt.
    #[test]
    fn an_allowed_empty_patch_is_no_change() {
        let (ids, index) = (ids(), index());
        let list: serde_json::Value = serde_json::from_slice(&data("eventlist-changes-1.json")).unwrap();
        let mut empty = list["items"][6].clone();
        empty["requestObject"] = json!({});
        let mut refused = empty.clone();
        refused["auditID"] = "refused-empty".into();
        refused["responseStatus"] = json!({"code": 403, "message": "forbidden"});
        let body = serde_json::to_vec(&json!({"items": [empty, refused]})).unwrap();
        let batch = parse_list(&body, &filter(&ids, &index)).unwrap();
        assert_eq!(batch.dropped[Dropped::NotAChange as usize], 1);
        assert_eq!(batch.attempts.len(), 1);
        assert_eq!(batch.attempts[0].decision, Decision::Denied);
    }

    /// Review M4: with bounds, an event received before `now - maxAge` or after
    /// `now + maxAhead` is dropped as out of time; one inside them is read.
    #[test]
    fn events_outside_the_time_bounds_are_dropped() {
        let (ids, index) = (ids(), index());
        let list: serde_json::Value = serde_json::from_slice(&data("eventlist-changes-1.json")).unwrap();
        let alice = list["items"][6].clone();
        let received = DateTime::parse_from_rfc3339(alice["requestReceivedTimestamp"].as_str().unwrap()).unwrap().with_timezone(&Utc);
        let bounds = TimeBounds { max_age: chrono::Duration::hours(1), max_ahead: chrono::Duration::minutes(5) };
        let body = serde_json::to_vec(&serde_json::json!({"items": [alice]})).unwrap();
        for (now, read) in [
            (received, true),
            (received + chrono::Duration::minutes(59), true),
            (received + chrono::Duration::minutes(61), false),
            (received - chrono::Duration::minutes(4), true),
            (received - chrono::Duration::minutes(6), false),
        ] {
            let f = Filter { now, times: Some(bounds), ..filter(&ids, &index) };
            let batch = parse_list(&body, &f).unwrap();
            assert_eq!((batch.attempts.len(), batch.dropped[Dropped::OutOfTime as usize]), (usize::from(read), u64::from(!read)), "{now}");
        }
        assert!(!bounds.admit(received, DateTime::<Utc>::MIN_UTC), "an overflow is outside");
    }

    /// The batch kube-apiserver v1.36 sent: alice's allowed patch and mallory's refused
    /// one are the two attempts; the controller's server-side applies and the admin's
    /// set-up of unmanaged objects are dropped.
    #[test]
    fn the_real_batch_yields_alice_and_mallory() {
        let (ids, index) = (ids(), index());
        let batch = parse_list(&data("eventlist-changes-1.json"), &filter(&ids, &index)).unwrap();
        let who: Vec<(&str, Decision)> = batch.attempts.iter().map(|a| (a.actor.username.as_str(), a.decision)).collect();
        assert_eq!(who, [("alice", Decision::Allowed), ("mallory", Decision::Denied)]);
        let alice = &batch.attempts[0];
        assert_eq!(
            (alice.app_key.as_str(), alice.object.kind.as_str(), alice.resource.as_str()),
            ("argocd/payments-api@u1", "Deployment", "Deployment payments/api")
        );
        assert_eq!(alice.actor.groups, ["sre", "system:authenticated"]);
        assert_eq!(alice.actor.source_ips, ["127.0.0.1"]);
        assert_eq!(alice.actor.user_agent, "Python-urllib/3.11");
        assert_eq!((alice.verb.as_str(), alice.manager.as_str(), alice.code), ("patch", "kubectl-patch", 200));
        assert_eq!(alice.audit_id, "5ddf588a-6c91-45b2-9309-f88bdb0e3b39");
        assert_eq!(
            alice.set,
            [crate::drift::audit::SetField {
                path: "spec.template.spec.containers[app].securityContext.privileged".into(),
                value: "true".into()
            }]
        );
        let mallory = &batch.attempts[1];
        assert_eq!(mallory.code, 403);
        assert!(
            mallory.reason.contains("cannot patch resource \"deployments\"") && mallory.reason.contains("forbid"),
            "{}",
            mallory.reason
        );
        assert_eq!(mallory.body, "not-sent");
        assert_eq!(batch.dropped[Dropped::ArgoCd as usize], 2, "the controller's applies");
        assert_eq!(batch.dropped[Dropped::Unmanaged as usize], 5, "the admin's set-up");
        assert_eq!(batch.dropped[Dropped::Read as usize], 1);
    }

    #[test]
    fn the_noise_batch_is_all_dropped() {
        let (ids, index) = (ids(), index());
        let batch = parse_list(&data("eventlist-noise.json"), &filter(&ids, &index)).unwrap();
        assert!(batch.attempts.is_empty());
        assert_eq!(batch.dropped.iter().sum::<u64>(), 64);
        assert_eq!(batch.dropped[Dropped::Stage as usize], 38, "watches only start");
    }

    fn event(v: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": [v]})).unwrap()
    }

    fn patch(user: &str, resource: &str, ns: &str, name: &str, body: serde_json::Value) -> serde_json::Value {
        json!({"auditID": "x1", "stage": "ResponseComplete", "verb": "patch", "user": {"username": user},
               "objectRef": {"resource": resource, "namespace": ns, "name": name, "apiVersion": "v1"},
               "responseStatus": {"code": 200}, "requestObject": body, "requestReceivedTimestamp": "2026-12-03T10:31:10.623397Z"})
    }

    /// A string of the request body holding bytes that are not UTF-8 (an annotation
    /// ending in 0xFF beside a privileged container) does not hide the event: it is
    /// read with U+FFFD in their place and judged, here and by the audit inbox's keep;
    /// a token request's bodies are not kept for the inbox.
    #[test]
    fn bytes_that_are_not_utf8_do_not_hide_a_write_and_credentials_are_not_kept() {
        let (ids, index) = (ids(), index());
        let body = json!({"metadata": {"annotations": {"note": "MARK"}},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}});
        let mut v = patch("alice", "deployments", "payments", "api", body);
        v["objectRef"]["apiGroup"] = json!("apps");
        let mut with_group = serde_json::to_vec(&v).unwrap();
        let at = with_group.windows(4).position(|w| w == b"MARK").unwrap();
        with_group.splice(at..at + 4, [0xffu8, 0xfe]);
        assert!(std::str::from_utf8(&with_group).is_err());
        let mut out = Batch::default();
        parse_line(&with_group, &filter(&ids, &index), &mut out).unwrap();
        assert_eq!(out.attempts.len(), 1, "{:?}", out.dropped);
        assert!(out.attempts[0].set.iter().any(|f| f.path.ends_with("securityContext.privileged")), "{:?}", out.attempts[0].set);
        let kept = admit_line(&with_group, None, chrono::Utc::now()).unwrap().unwrap();
        assert!(std::str::from_utf8(&kept).is_ok(), "kept as UTF-8");
        let token = json!({"auditID": "t1", "stage": "ResponseComplete", "verb": "create", "user": {"username": "alice"},
            "objectRef": {"resource": "serviceaccounts", "subresource": "token", "namespace": "payments", "name": "api", "apiVersion": "v1"},
            "responseStatus": {"code": 201}, "responseObject": {"status": {"token": "eyJ-fresh-token"}},
            "requestReceivedTimestamp": "2026-12-03T10:31:10.623397Z"});
        let kept = admit_line(&serde_json::to_vec(&token).unwrap(), None, chrono::Utc::now()).unwrap().unwrap();
        let kept = String::from_utf8(kept).unwrap();
        assert!(!kept.contains("eyJ-fresh-token") && kept.contains("\"t1\""), "{kept}");
    }

    /// A spoke's feed: its events match the objects of the Applications deploying
    /// there (not a same-named object of the hub's, nor the hub's events its objects),
    /// the person named with the spoke; its own engines' identities are the desired
    /// state there, the hub's controller identity is anyone; a unit kind written in a
    /// spoke is no unit of driftwatch's.
    #[test]
    fn a_spokes_events_match_the_units_deploying_there() {
        let mut idx = ManagedIndex::default();
        let app = App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "edge-web", "namespace": "argocd", "uid": "u9"},
            "spec": {"project": "default", "destination": {"server": "https://edge-1.example:6443", "namespace": "edge"}},
            "status": {"resources": [{"group": "apps", "kind": "Deployment", "namespace": "edge", "name": "web"}]}}))
        .unwrap();
        idx.update_in(&app, "edge-1", &crate::project::Scope::unrestricted(), &crate::project::Scope::unrestricted());
        let privileged =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "securityContext": {"privileged": true}}]}}}});
        let mut write = patch("alice", "deployments", "edge", "web", privileged);
        write["objectRef"]["apiGroup"] = json!("apps");
        let spoke_ids = crate::config::ArgoIdentities {
            controllers: vec!["system:serviceaccount:kube-system:argocd-manager".into()],
            flux: vec!["system:serviceaccount:kube-system:argocd-manager".into()],
            fleet: vec!["system:serviceaccount:kube-system:argocd-manager".into()],
            api: Vec::new(),
        };
        let hub_ids = ids();
        let in_spoke = Filter { cluster: "edge-1", ..filter(&spoke_ids, &idx) };
        let batch = parse_list(&event(write.clone()), &in_spoke).unwrap();
        assert_eq!(batch.attempts.len(), 1, "{:?}", batch.dropped);
        assert_eq!((batch.attempts[0].cluster.as_str(), batch.attempts[0].app_key.as_str()), ("edge-1", "argocd/edge-web@u9"));
        let from_hub = parse_list(&event(write.clone()), &filter(&hub_ids, &idx)).unwrap();
        assert_eq!(
            (from_hub.attempts.len(), from_hub.dropped[Dropped::Unmanaged as usize]),
            (0, 1),
            "the hub's own payments/web is not the spoke's"
        );
        let mut by_argo = write.clone();
        by_argo["user"]["username"] = json!("system:serviceaccount:kube-system:argocd-manager");
        assert_eq!(parse_list(&event(by_argo), &in_spoke).unwrap().dropped[Dropped::ArgoCd as usize], 1);
        let mut by_hub_controller = write;
        by_hub_controller["user"]["username"] = json!(crate::config::ARGOCD_CONTROLLER_IDENTITY);
        assert_eq!(parse_list(&event(by_hub_controller), &in_spoke).unwrap().attempts.len(), 1, "the hub's account is anyone in the spoke");
        let ks = json!({"auditID": "k1", "stage": "ResponseComplete", "verb": "create", "user": {"username": "alice"},
            "objectRef": {"apiGroup": "kustomize.toolkit.fluxcd.io", "resource": "kustomizations", "namespace": "edge", "name": "x", "apiVersion": "v1"},
            "responseStatus": {"code": 201}, "requestReceivedTimestamp": "2026-12-03T10:31:10.623397Z"});
        assert_eq!(parse_list(&event(ks), &in_spoke).unwrap().dropped[Dropped::Unmanaged as usize], 1);
        // Argo CD's cluster account creating what a sync adds there, labelled: Argo CD's.
        let created = json!({"auditID": "c1", "stage": "ResponseComplete", "verb": "create",
            "user": {"username": "system:serviceaccount:kube-system:argocd-manager"},
            "objectRef": {"resource": "configmaps", "namespace": "edge", "name": "new", "apiVersion": "v1"},
            "responseStatus": {"code": 201}, "requestReceivedTimestamp": "2026-12-03T10:31:10.623397Z",
            "requestObject": {"kind": "ConfigMap", "metadata": {"labels": {"app.kubernetes.io/instance": "edge-web"}}}});
        assert_eq!(parse_list(&event(created.clone()), &in_spoke).unwrap().dropped[Dropped::ArgoCd as usize], 1);
        let mut by_alice = created;
        by_alice["user"]["username"] = json!("alice");
        assert_eq!(parse_list(&event(by_alice), &in_spoke).unwrap().attempts.len(), 1, "a person's labelled object is the Application's");
        // A hub Application claiming a group holding the key separator is not the spoke's.
        let mut claim = ManagedIndex::default();
        let forged = App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "mine", "namespace": "argocd", "uid": "u8"},
            "spec": {"project": "default", "destination": {"namespace": "edge"}},
            "status": {"resources": [{"group": "edge-1\u{1}apps", "kind": "Deployment", "namespace": "edge", "name": "web"}]}}))
        .unwrap();
        claim.update(&forged, &crate::project::Scope::unrestricted());
        assert!(claim.lookup_in("edge-1", "apps", "deployments", "edge", "web").is_empty());
    }

    /// Secret data never survives the ingest: the body is not even parsed.
    #[test]
    fn a_secret_body_is_dropped_on_arrival() {
        let (ids, index) = (ids(), index());
        let body = event(patch(
            "alice",
            "secrets",
            "payments",
            "db",
            json!({"data": {"password": "aHVudGVyMg=="}, "stringData": {"k": "hunter2"}}),
        ));
        let batch = parse_list(&body, &filter(&ids, &index)).unwrap();
        let a = &batch.attempts[0];
        assert_eq!((a.object.kind.as_str(), a.body.as_str()), ("Secret", "dropped"));
        assert!(a.set.is_empty() && a.fields.is_empty());
        let shown = format!("{a:?}{}", serde_json::to_string(a).unwrap());
        assert!(!shown.contains("hunter2") && !shown.contains("aHVudGVyMg=="), "{shown}");
    }

    /// Another tenant: the same name in another namespace, or an object carrying the
    /// tracking label of an Application that does not deploy to its namespace.
    #[test]
    fn objects_of_other_tenants_do_not_match() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let other_ns = event(patch("eve", "deployments", "tenant-b", "api", json!({})));
        assert!(parse_list(&other_ns, &f).unwrap().attempts.is_empty());
        let mut create = patch("eve", "configmaps", "tenant-b", "x", json!({}));
        create["verb"] = json!("create");
        create["responseObject"] = json!({"kind": "ConfigMap", "metadata": {"labels": {"app.kubernetes.io/instance": "payments-api"}}});
        let batch = parse_list(&event(create.clone()), &f).unwrap();
        assert!(batch.attempts.is_empty(), "a label claiming payments-api outside its namespace");
        create["objectRef"]["namespace"] = json!("payments");
        let batch = parse_list(&event(create), &f).unwrap();
        assert_eq!(batch.attempts.len(), 1, "created in its destination with its label: not listed yet, still its");
        assert_eq!(batch.attempts[0].object.kind, "ConfigMap");
    }

    /// Flux's controllers write what a Flux unit lists: their writes there are Flux's,
    /// not attempts; the same identity on an object only an Application lists is an
    /// attempt like anyone's. A unit's status subresource written by anyone but its
    /// controller (its inventory: what the audit index reads) is an attempt of class
    /// `application`; the controller's own status write is not a change.
    #[test]
    fn flux_controllers_are_desired_state_only_on_flux_objects_and_a_units_status_is_theirs() {
        let mut index = index();
        index.update(
            &App::from_value(json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": "apps", "namespace": "flux-system", "uid": "k1"},
                "status": {"inventory": {"entries": [{"id": "shop_web_apps_Deployment", "v": "v1"}]}}}))
            .unwrap(),
            &crate::project::Scope::unrestricted(),
        );
        let mut ids = ids();
        ids.flux = crate::config::FLUX_IDENTITIES.map(String::from).to_vec();
        let f = filter(&ids, &index);
        let kustomize = "system:serviceaccount:flux-system:kustomize-controller";
        let deploy = |user: &str, ns: &str, name: &str| {
            let mut ev = patch(user, "deployments", ns, name, json!({"spec": {"replicas": 3}}));
            ev["objectRef"]["apiGroup"] = json!("apps");
            event(ev)
        };
        let batch = parse_list(&deploy(kustomize, "shop", "web"), &f).unwrap();
        assert!(batch.attempts.is_empty(), "kustomize-controller on its own object");
        assert_eq!(batch.dropped[Dropped::ArgoCd as usize], 1);
        let batch = parse_list(&deploy(kustomize, "payments", "api"), &f).unwrap();
        assert_eq!(batch.attempts.len(), 1, "kustomize-controller on an object only an Application lists");
        let batch = parse_list(&deploy("alice", "shop", "web"), &f).unwrap();
        assert_eq!((batch.attempts.len(), batch.attempts[0].app_key.as_str()), (1, "Kustomization:flux-system/apps@k1"));
        let status = |user: &str| {
            let mut ev = patch(user, "kustomizations", "flux-system", "apps", json!({"status": {"inventory": {"entries": []}}}));
            ev["objectRef"]["apiGroup"] = json!("kustomize.toolkit.fluxcd.io");
            ev["objectRef"]["subresource"] = json!("status");
            event(ev)
        };
        let batch = parse_list(&status(kustomize), &f).unwrap();
        assert!(batch.attempts.is_empty(), "the controller's own status");
        let classified = |body: Vec<u8>| {
            let mut a = parse_list(&body, &f).unwrap().attempts.remove(0);
            crate::drift::classify(&mut a, &crate::drift::classes::ClassMap::default());
            a
        };
        let a = classified(status("mallory"));
        assert!(a.app_spec && a.security && a.class == "application", "a status written by someone else: {a:?}");
        let mut suspend = patch("bob", "kustomizations", "flux-system", "apps", json!({"spec": {"suspend": true}}));
        suspend["objectRef"]["apiGroup"] = json!("kustomize.toolkit.fluxcd.io");
        let a = classified(event(suspend));
        assert!(a.security && a.class == "application", "flux suspend by a person: {a:?}");
        let mut opt_out = patch(
            "bob",
            "deployments",
            "shop",
            "web",
            json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}}),
        );
        opt_out["objectRef"]["apiGroup"] = json!("apps");
        let a = classified(event(opt_out));
        assert!(a.security, "an annotation that makes Flux leave the object alone: {a:?}");
    }

    /// The second review of the Flux and Fleet rules: a unit created by a person is an
    /// attempt before the watch has indexed it (H1); any field of a unit but a reconcile
    /// request is a security write (H2: `postRenderers`, `images`, `interval`); what a
    /// unit reads (its GitRepository, its values ConfigMap) is the unit's (H3), its
    /// status its own controller's; Fleet's agent writes a BundleDeployment's status
    /// with an account of the BundleDeployment's namespace (M4).
    #[test]
    fn units_created_their_fields_and_their_inputs_are_the_units() {
        let mut index = ManagedIndex::default();
        let flux = App::from_value(json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "flux-system", "uid": "h1"},
            "spec": {"chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
                     "valuesFrom": [{"kind": "ConfigMap", "name": "podinfo-values"}]}}))
        .unwrap();
        index.update(&flux, &crate::project::Scope::unrestricted());
        let fleet = App::from_value(json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "shop", "namespace": "cluster-fleet-default-prod-1", "uid": "b1",
                "labels": {"fleet.cattle.io/bundle-namespace": "fleet-default", "fleet.cattle.io/bundle-name": "shop",
                           "fleet.cattle.io/repo-name": "apps"}}}))
        .unwrap();
        index.update(&fleet, &crate::project::Scope::unrestricted());
        let mut ids = ids();
        ids.flux = crate::config::FLUX_IDENTITIES.map(String::from).to_vec();
        ids.fleet = crate::config::FLEET_IDENTITIES.map(String::from).to_vec();
        let f = filter(&ids, &index);
        let write = |user: &str, group: &str, resource: &str, ns: &str, name: &str, body: serde_json::Value| {
            let mut ev = patch(user, resource, ns, name, body);
            ev["objectRef"]["apiGroup"] = json!(group);
            event(ev)
        };
        let classified = |body: Vec<u8>| {
            let mut a = parse_list(&body, &f).unwrap().attempts.remove(0);
            crate::drift::classify(&mut a, &crate::drift::classes::ClassMap::default());
            a
        };
        // H1: created by a person, not indexed yet: an attempt on the unit it is.
        let mut create = serde_json::from_slice::<serde_json::Value>(&write(
            "mallory",
            "kustomize.toolkit.fluxcd.io",
            "kustomizations",
            "team-a",
            "x",
            json!({"spec": {"path": "./", "sourceRef": {"kind": "GitRepository", "name": "evil"}}}),
        ))
        .unwrap()["items"][0]
            .clone();
        create["verb"] = json!("create");
        create["responseObject"] = json!({"kind": "Kustomization", "metadata": {"name": "x", "namespace": "team-a", "uid": "new-1"}});
        let a = classified(event(create));
        assert_eq!(a.app_key, "Kustomization:team-a/x@new-1");
        assert!(a.security && a.class == "application", "{a:?}");
        let helm = |body| write("bob", "helm.toolkit.fluxcd.io", "helmreleases", "flux-system", "podinfo", body);
        // H2: a HelmRelease's post-renderer, by a person.
        let a = classified(helm(json!({"spec": {"postRenderers": [{"kustomize": {"patches": []}}]}})));
        assert!(a.security && a.class == "application", "{a:?}");
        let a = classified(helm(json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": "2026-12-07T10:00:00Z"}}})));
        assert!(!a.security, "flux reconcile asks for nothing to change: {a:?}");
        // H3: its chart's source and its values are the unit's.
        let a = classified(write(
            "bob",
            "source.toolkit.fluxcd.io",
            "helmrepositories",
            "flux-system",
            "podinfo",
            json!({"spec": {"url": "https://charts.example.net/fork"}}),
        ));
        assert_eq!((a.app_key.as_str(), a.class.as_str(), a.security), ("HelmRelease:flux-system/podinfo@h1", "application", true));
        let a =
            classified(write("bob", "", "configmaps", "flux-system", "podinfo-values", json!({"data": {"values.yaml": "replicas: 3"}})));
        assert!(a.security && a.app_key == "HelmRelease:flux-system/podinfo@h1", "{a:?}");
        let mut status = serde_json::from_slice::<serde_json::Value>(&write(
            "system:serviceaccount:flux-system:source-controller",
            "source.toolkit.fluxcd.io",
            "helmrepositories",
            "flux-system",
            "podinfo",
            json!({"status": {}}),
        ))
        .unwrap()["items"][0]
            .clone();
        status["objectRef"]["subresource"] = json!("status");
        assert!(parse_list(&event(status), &f).unwrap().attempts.is_empty(), "source-controller's status");
        // Fleet: its Bundle is the bundle's; the agent's registration account writes the status.
        let a = classified(write(
            "bob",
            "fleet.cattle.io",
            "bundles",
            "fleet-default",
            "shop",
            json!({"spec": {"helm": {"values": {"x": 1}}}}),
        ));
        assert_eq!((a.app_key.as_str(), a.security), ("BundleDeployment:cluster-fleet-default-prod-1/shop@b1", true));
        let mut agent = serde_json::from_slice::<serde_json::Value>(&write(
            "system:serviceaccount:cluster-fleet-default-prod-1:request-abc",
            "fleet.cattle.io",
            "bundledeployments",
            "cluster-fleet-default-prod-1",
            "shop",
            json!({"status": {"ready": true}}),
        ))
        .unwrap()["items"][0]
            .clone();
        agent["objectRef"]["subresource"] = json!("status");
        assert!(parse_list(&event(agent.clone()), &f).unwrap().attempts.is_empty(), "the agent's registration account");
        agent["user"]["username"] = json!("system:serviceaccount:other-ns:request-abc");
        assert_eq!(parse_list(&event(agent), &f).unwrap().attempts.len(), 1, "another namespace's account");
    }

    /// The second review: padding with the one harmless field hides nothing (1); what a
    /// unit deploying elsewhere reads is indexed (2); a person's status write of an
    /// input (a GitRepository's artifact) is an attempt (3); an object a unit both lists
    /// and reads is kept as read (4); a body the audit policy did not log is not known,
    /// so a security write (5); Argo CD's controller writing an object only a Flux unit
    /// lists is an attempt (10).
    #[test]
    fn padding_remote_units_input_statuses_and_argo_cds_controller_on_flux_objects() {
        let mut index = ManagedIndex::default();
        let remote = App::from_value(json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "flux-system", "namespace": "flux-system", "uid": "k1"},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "flux-system"}, "kubeConfig": {"secretRef": {"name": "prod"}}},
            "status": {"inventory": {"entries": [{"id": "flux-system_flux-system_source.toolkit.fluxcd.io_GitRepository", "v": "v1"},
                                                 {"id": "shop_web_apps_Deployment", "v": "v1"}]}}}))
        .unwrap();
        index.update_with(&remote, &crate::project::Scope::refusing("elsewhere"), &crate::project::Scope::unrestricted());
        let mut ids = ids();
        ids.flux = crate::config::FLUX_IDENTITIES.map(String::from).to_vec();
        let f = filter(&ids, &index);
        let ev = |user: &str, group: &str, resource: &str, name: &str, body: serde_json::Value| {
            let mut ev = patch(user, resource, "flux-system", name, body);
            ev["objectRef"]["apiGroup"] = json!(group);
            ev
        };
        let classified = |v: serde_json::Value| {
            let mut a = parse_list(&event(v), &f).unwrap().attempts.remove(0);
            crate::drift::classify(&mut a, &crate::drift::classes::ClassMap::default());
            a
        };
        // (2) and (4): the kubeconfig Secret and the GitRepository it lists and reads.
        let a = classified(ev("bob", "", "secrets", "prod", json!({"data": {"value": "eA=="}})));
        assert!(a.security && a.class == "application", "{a:?}");
        let a = classified(ev(
            "bob",
            "source.toolkit.fluxcd.io",
            "gitrepositories",
            "flux-system",
            json!({"spec": {"url": "https://evil/repo"}}),
        ));
        assert!(a.app_spec && a.security && a.class == "application", "{a:?}");
        assert!(
            parse_list(&event(ev("alice", "apps", "deployments", "web", json!({"spec": {"replicas": 3}}))), &f)
                .unwrap()
                .attempts
                .is_empty(),
            "what a unit deploying elsewhere lists is not this cluster's"
        );
        // (1): 32 reconcile requests, then the real change.
        let mut ops: Vec<serde_json::Value> = (0..32)
            .map(|i| json!({"op": "add", "path": "/metadata/annotations/reconcile.fluxcd.io~1requestedAt", "value": format!("{i}")}))
            .collect();
        ops.push(json!({"op": "replace", "path": "/spec/url", "value": "https://evil/repo"}));
        let a = classified(ev("bob", "source.toolkit.fluxcd.io", "gitrepositories", "flux-system", json!(ops)));
        assert!(a.security, "padded: {a:?}");
        // (3): the artifact the controllers download, written through /status by a person.
        let mut status = ev(
            "bob",
            "source.toolkit.fluxcd.io",
            "gitrepositories",
            "flux-system",
            json!({"status": {"artifact": {"url": "http://evil/x.tgz", "digest": "sha256:00"}}}),
        );
        status["objectRef"]["subresource"] = json!("status");
        let a = classified(status.clone());
        assert!(a.security && a.class == "application", "{a:?}");
        status["user"]["username"] = json!("system:serviceaccount:flux-system:source-controller");
        assert!(parse_list(&event(status), &f).unwrap().attempts.is_empty(), "source-controller's own");
        // (5): a ConfigMap the unit reads, logged at Metadata (no body).
        let mut local = ManagedIndex::default();
        let k = App::from_value(json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "uid": "k2"},
            "spec": {"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}},
            "status": {"inventory": {"entries": [{"id": "shop_web_apps_Deployment", "v": "v1"}]}}}))
        .unwrap();
        local.update(&k, &crate::project::Scope::unrestricted());
        let f = filter(&ids, &local);
        let mut metadata_only = patch("bob", "configmaps", "flux-system", "vars", json!({}));
        metadata_only.as_object_mut().unwrap().remove("requestObject");
        let mut a = parse_list(&event(metadata_only), &f).unwrap().attempts.remove(0);
        crate::drift::classify(&mut a, &crate::drift::classes::ClassMap::default());
        assert!(a.security, "a body not logged: {a:?}");
        // (9): the break-glass annotation is an Application's: written on what a Flux
        // unit reads, it is no exception of that unit (and the write is an attempt).
        let bg =
            patch("bob", "configmaps", "flux-system", "vars", json!({"metadata": {"annotations": {"driftwatch.io/break-glass": "{}"}}}));
        let batch = parse_list(&event(bg), &f).unwrap();
        assert!(batch.break_glass.is_empty() && batch.attempts.len() == 1, "{:?}", batch.attempts);
        // (10): Argo CD's controller on an object only the Kustomization lists.
        let mut argo = patch(crate::config::ARGOCD_CONTROLLER_IDENTITY, "deployments", "shop", "web", json!({"spec": {"replicas": 3}}));
        argo["objectRef"]["apiGroup"] = json!("apps");
        assert_eq!(parse_list(&event(argo), &f).unwrap().attempts.len(), 1);
    }

    #[test]
    fn an_application_spec_change_counts_a_refresh_does_not() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let mut ev =
            patch("bob", "applications", "argocd", "payments-api", json!({"spec": {"syncPolicy": {"automated": {"selfHeal": false}}}}));
        ev["objectRef"]["apiGroup"] = json!("argoproj.io");
        let batch = parse_list(&event(ev.clone()), &f).unwrap();
        assert!(batch.attempts[0].app_spec);
        assert_eq!(batch.attempts[0].fields, ["spec.syncPolicy.automated.selfHeal"]);
        ev["requestObject"] = json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}});
        assert!(parse_list(&event(ev), &f).unwrap().attempts.is_empty());
    }

    /// Writes outside `spec` are writes too (review N10): a sync written directly, where
    /// the notifications go, the status driftwatch reads (merge patch and JSON patch).
    #[test]
    fn application_writes_outside_the_spec_are_attempts() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let app_patch = |body: serde_json::Value| {
            let mut ev = patch("bob", "applications", "argocd", "payments-api", body);
            ev["objectRef"]["apiGroup"] = json!("argoproj.io");
            parse_list(&event(ev), &f).unwrap().attempts
        };
        let op = app_patch(json!({"operation": {"initiatedBy": {"username": "carol"}, "sync": {"revision": "bad"}}}));
        assert_eq!(op[0].fields, ["operation.initiatedBy.username", "operation.sync.revision"]);
        let notes = app_patch(json!({"metadata": {"annotations": {"notifications.argoproj.io/subscribe.on-sync-succeeded.slack": "x"}}}));
        assert_eq!(notes[0].fields, ["metadata.annotations.notifications.argoproj.io/subscribe.on-sync-succeeded.slack"]);
        let status = app_patch(json!({"status": {"resources": [], "sync": {"status": "Synced"}}}));
        assert_eq!(status[0].fields, ["status.resources", "status.sync"]);
        assert!(status[0].set.iter().all(|s| s.value == "(written)"), "{:?}", status[0].set);
        let ops = app_patch(json!([{"op": "replace", "path": "/status/operationState/finishedAt", "value": "2099-01-01T00:00:00Z"}]));
        assert_eq!(ops[0].fields, ["status.operationState"]);
        assert!(app_patch(json!({})).is_empty(), "nothing set");
    }

    /// The fresh review's findings 1, 2, 4, 5, 11: padding, a look-alike `dryRun`, a
    /// `move` away, a map set whole, `$patch: delete` and an escaped break-glass key each
    /// hid a write. Each is an attempt now, and a security one where it touched a
    /// security field.
    #[test]
    fn padding_and_patch_forms_do_not_hide_a_write() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let classes = crate::drift::classes::ClassMap::default();
        let on = |resource: &str, name: &str, body: serde_json::Value, uri: &str| {
            let (group, ns) = if resource == "applications" { ("argoproj.io", "argocd") } else { ("apps", "payments") };
            let mut ev = patch("alice", resource, ns, name, body);
            ev["objectRef"]["apiGroup"] = json!(group);
            ev["requestURI"] = json!(uri);
            let mut got = parse_list(&event(ev), &f).unwrap().attempts;
            for a in &mut got {
                crate::drift::classify(a, &classes);
            }
            got
        };
        let deploy = |body| on("deployments", "api", body, "/apis/apps/v1/namespaces/payments/deployments/api");
        let app = |body| on("applications", "payments-api", body, "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/payments-api");
        // 1. 32 labels first, then privileged: still a security write naming the field.
        let labels: serde_json::Map<String, serde_json::Value> = (0..40).map(|i| (format!("f{i}"), json!("x"))).collect();
        let padded = deploy(json!({"metadata": {"labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}}));
        assert!(padded[0].security && padded[0].class == "security-context", "{:?}", padded[0].security_fields);
        assert!(padded[0].set.iter().any(|s| s.path.ends_with("securityContext.privileged") && s.value == "true"), "{:?}", padded[0].set);
        // 1. 32 refreshes, then self-heal removed: an attempt of the application class.
        let mut ops: Vec<serde_json::Value> =
            (0..32).map(|_| json!({"op": "add", "path": "/metadata/annotations/argocd.argoproj.io~1refresh", "value": "normal"})).collect();
        ops.push(json!({"op": "remove", "path": "/spec/syncPolicy/automated"}));
        let hidden = app(json!(ops));
        assert_eq!(hidden.len(), 1, "not dropped as a refresh");
        assert!(hidden[0].security && hidden[0].class == "application", "{:?}", hidden[0]);
        // 2. `dryRun=` inside another parameter is no dry run; a real one is.
        let privileged =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"privileged": true}}]}}}});
        for uri in [
            "/apis/apps/v1/namespaces/payments/deployments/api?x=dryRun=1",
            "/apis/apps/v1/namespaces/payments/deployments/api?nodryRun=All",
        ] {
            assert_eq!(on("deployments", "api", privileged.clone(), uri).len(), 1, "{uri}");
        }
        assert!(on("deployments", "api", privileged, "/apis/apps/v1/namespaces/payments/deployments/api?dryRun=All").is_empty());
        // 4. Annotations set whole (every notification annotation dropped): security.
        let whole = app(json!([{"op": "add", "path": "/metadata/annotations", "value": {"argocd.argoproj.io/refresh": "normal"}}]));
        assert!(whole[0].fields.contains(&"metadata.annotations".to_string()) && whole[0].security, "{:?}", whole[0]);
        // 4. A revision pin moved away into a refresh annotation: security.
        let moved = app(
            json!([{"op": "move", "from": "/spec/source/targetRevision", "path": "/metadata/annotations/argocd.argoproj.io~1refresh"}]),
        );
        assert!(moved[0].fields.contains(&"spec.source.targetRevision".to_string()) && moved[0].security, "{:?}", moved[0]);
        // A second review: padding with look-alike security paths past every bound
        // still leaves the write a security one (not all read).
        let lookalikes: serde_json::Map<String, serde_json::Value> =
            (0..70).map(|i| (format!("p{i}.privileged"), serde_json::Value::Null)).collect();
        let buried = app(json!({"metadata": {"annotations": lookalikes}, "spec": {"source": {"targetRevision": "evil"}}}));
        assert!(buried[0].security, "{:?}", buried[0].fields.last());
        // Argo CD told to stop reconciling, and `status.resources` moved away: security.
        let skip = app(json!({"metadata": {"annotations": {"argocd.argoproj.io/skip-reconcile": "true"}}}));
        assert!(skip[0].security && skip[0].class == "application", "{:?}", skip[0]);
        let emptied = app(json!([{"op": "move", "from": "/status/resources", "path": "/x"}]));
        assert!(emptied[0].fields.contains(&"status.resources".to_string()) && emptied[0].security, "{:?}", emptied[0]);
        // Every Deployment of the namespace deleted at once (`deletecollection`), and
        // the Application deleted: attempts, the latter a security one.
        let mut all = patch("alice", "deployments", "payments", "", json!(null));
        all["verb"] = json!("deletecollection");
        all["objectRef"]["apiGroup"] = json!("apps");
        let got = parse_list(&event(all), &f).unwrap();
        assert_eq!(got.attempts.len(), 1, "{:?}", got.dropped);
        let mut gone = patch("alice", "applications", "argocd", "payments-api", json!(null));
        gone["verb"] = json!("delete");
        gone["objectRef"]["apiGroup"] = json!("argoproj.io");
        let mut deleted = parse_list(&event(gone), &f).unwrap().attempts;
        crate::drift::classify(&mut deleted[0], &classes);
        assert!(deleted[0].security && deleted[0].class == "application", "{:?}", deleted[0]);
        // 5. `$patch: delete` of a container's securityContext: a security write.
        let deleted =
            deploy(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "securityContext": {"$patch": "delete"}}]}}}}));
        assert!(deleted[0].security, "{:?}", deleted[0]);
        assert!(deleted[0].set.iter().any(|s| s.path.ends_with("securityContext") && s.value == "(removed)"), "{:?}", deleted[0].set);
    }

    /// Finding 11: the break-glass key spelled with a JSON escape is the same key: the
    /// write is recorded (and judged) like any write of the annotation.
    #[test]
    fn an_escaped_break_glass_key_is_the_break_glass_annotation() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let body = json!({"metadata": {"annotations": {"driftwatch.io/break-glass": "{}"}}});
        let mut ev = patch("alice", "applications", "argocd", "payments-api", body);
        ev["objectRef"]["apiGroup"] = json!("argoproj.io");
        // The request object as the API server logs it: the text the client sent.
        let text =
            serde_json::to_string(&json!({"items": [ev]})).unwrap().replace("driftwatch.io/break-glass", r"driftwatch\u002eio/break-glass");
        assert!(!text.contains("driftwatch.io/break-glass"), "{text}");
        let batch = parse_list(text.as_bytes(), &f).unwrap();
        assert_eq!(batch.break_glass.len(), 1, "the write is recorded");
    }

    /// Finding 6: Argo CD's API server starting a sync is Argo CD's; the same identity
    /// patching a resource or an Application's sync policy is an attempt.
    #[test]
    fn argo_cds_api_server_starts_syncs_and_anything_else_it_writes_is_an_attempt() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let server = "system:serviceaccount:argocd:argocd-server";
        let write = |resource: &str, name: &str, body: serde_json::Value| {
            let (group, ns) = if resource == "applications" { ("argoproj.io", "argocd") } else { ("apps", "payments") };
            let mut ev = patch(server, resource, ns, name, body);
            ev["objectRef"]["apiGroup"] = json!(group);
            parse_list(&event(ev), &f).unwrap()
        };
        let sync = write(
            "applications",
            "payments-api",
            json!({"operation": {"initiatedBy": {"username": "carol"}, "sync": {"revision": "abc"}}}),
        );
        assert_eq!((sync.attempts.len(), sync.dropped[Dropped::ArgoCd as usize]), (0, 1));
        let set = write("applications", "payments-api", json!({"spec": {"syncPolicy": {"automated": null}}}));
        assert_eq!(set.attempts.len(), 1);
        let patched = write("deployments", "api", json!({"spec": {"replicas": 3}}));
        assert_eq!(patched.attempts.len(), 1);
        assert_eq!(patched.attempts[0].actor.username, server);
    }

    /// An event the listener kept without its objects (over `audit.maxBodyBytes`): what
    /// it set is not known, and an attacker can pad a privileged write past the bound,
    /// so it is a security write.
    #[test]
    fn a_write_whose_body_was_left_out_for_size_is_a_security_write() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let mut ev = patch("alice", "deployments", "payments", "api", json!("driftwatch:over-limit"));
        ev["objectRef"]["apiGroup"] = json!("apps");
        let mut a = parse_list(&event(ev), &f).unwrap().attempts.remove(0);
        assert_eq!(a.body, OVER_LIMIT);
        crate::drift::classify(&mut a, &crate::drift::classes::ClassMap::default());
        assert!(a.security && a.class == "security-context", "{a:?}");
    }

    /// An event's identity is driftwatch's digest of it, not the client's audit ID
    /// (review N4): two writes under one `Audit-ID` are two events; the same event sent
    /// again is the same.
    #[test]
    fn events_are_identified_by_a_digest_not_by_the_clients_audit_id() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        let mut first = patch("alice", "deployments", "payments", "api", json!({"metadata": {"labels": {"x": "1"}}}));
        first["objectRef"]["apiGroup"] = json!("apps");
        let mut second = first.clone();
        second["requestObject"] = json!({"spec": {"template": {"spec": {"hostPID": true}}}});
        second["requestReceivedTimestamp"] = json!("2026-12-03T10:31:11.000001Z");
        let a = parse_list(&event(first.clone()), &f).unwrap().attempts;
        let b = parse_list(&event(second), &f).unwrap().attempts;
        let again = parse_list(&event(first), &f).unwrap().attempts;
        assert_eq!((a[0].audit_id.as_str(), b[0].audit_id.as_str()), ("x1", "x1"));
        assert_ne!(a[0].id, b[0].id);
        assert_eq!(a[0].id, again[0].id);
        assert_eq!(a[0].id.len(), 32);
    }

    /// Hostile bodies: a clear error, never a panic or a stack overflow.
    #[test]
    fn hostile_bodies_are_refused_cleanly() {
        let (ids, index) = (ids(), index());
        let f = filter(&ids, &index);
        // An item nested 100,000 deep: no stack overflow; that item is dropped and counted.
        let deep = format!("{{\"items\": [{}{}]}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(parse_list(deep.as_bytes(), &f).unwrap().dropped[Dropped::Malformed as usize], 1);
        // A field nobody reads nested as deep is skipped; the event (no stage) is dropped.
        let deep = format!("{{\"items\": [{{\"user\": {{\"x\": {}{}}}}}]}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(parse_list(deep.as_bytes(), &f).unwrap().dropped[Dropped::Stage as usize], 1);
        // A relevant event whose body nests past the decoder's depth: kept, without it.
        let mut ev = patch("alice", "deployments", "payments", "api", json!(null));
        ev["objectRef"]["apiGroup"] = json!("apps");
        let text = serde_json::to_string(&json!({"items": [ev]})).unwrap();
        let deep = format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
        let text = text.replace("\"requestObject\":null", &format!("\"requestObject\":{deep}"));
        let batch = parse_list(text.as_bytes(), &f).unwrap();
        assert_eq!(batch.attempts[0].body, "not-sent");
        for bad in ["", "null", "[]", "{}", "{\"items\": 7}", "\u{0}garbage"] {
            assert!(parse_list(bad.as_bytes(), &f).is_err(), "{bad:?}");
        }
        // An event that does not decode is dropped and counted; the others are read.
        let mut good = patch("alice", "deployments", "payments", "api", json!({"spec": {"replicas": 3}}));
        good["objectRef"]["apiGroup"] = json!("apps");
        let mut odd = good.clone();
        odd["user"]["username"] = json!(7);
        let text = serde_json::to_string(&json!({"items": [7, odd, good]})).unwrap();
        let batch = parse_list(text.as_bytes(), &f).unwrap();
        assert_eq!((batch.attempts.len(), batch.dropped[Dropped::Malformed as usize]), (1, 2));
        assert!(parse_list(b"{\"items\": []}", &f).unwrap().attempts.is_empty(), "an empty list is a list");
    }

    /// A write of the break-glass annotation on an Application is kept with who made
    /// it, through which client, and the value it left; a refused one is not, nor a
    /// write of another annotation.
    #[test]
    fn break_glass_annotation_writes_are_kept() {
        let (ids, index) = (ids(), index());
        let value = "{\"ticket\":\"INC-1\"}";
        let write = |user: &str, agent: &str, code: u16, request: serde_json::Value, response: serde_json::Value| {
            event(json!({"auditID": format!("id-{user}-{code}"), "stage": "ResponseComplete", "verb": "patch",
                "requestURI": "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/payments-api",
                "user": {"username": user}, "userAgent": agent,
                "objectRef": {"resource": "applications", "namespace": "argocd", "name": "payments-api", "apiGroup": "argoproj.io"},
                "responseStatus": {"code": code}, "requestObject": request, "responseObject": response,
                "requestReceivedTimestamp": "2026-12-04T10:01:00.000000Z"}))
        };
        let merge = json!({"metadata": {"annotations": {"driftwatch.io/break-glass": value}}});
        let after = json!({"metadata": {"name": "payments-api", "annotations": {"driftwatch.io/break-glass": value}}});
        let batch = parse_list(&write("bob", "driftwatch-break-glass/0.1.0", 200, merge.clone(), after), &filter(&ids, &index)).unwrap();
        assert_eq!(batch.break_glass.len(), 1);
        let w = &batch.break_glass[0];
        assert_eq!(
            (w.app_key.as_str(), w.username.as_str(), w.user_agent.as_str()),
            ("argocd/payments-api@u1", "bob", "driftwatch-break-glass/0.1.0")
        );
        assert_eq!(w.value.as_deref(), Some(value));
        assert!(batch.attempts.is_empty() && batch.dropped.iter().all(|d| *d == 0), "relevant, not dropped: {:?}", batch.dropped);
        // Closed with a JSON patch: the object after it has no annotation.
        let remove = json!([{"op": "remove", "path": "/metadata/annotations/driftwatch.io~1break-glass"}]);
        let batch =
            parse_list(&write("carol", "kubectl/v1.36.0", 200, remove, json!({"metadata": {"annotations": {}}})), &filter(&ids, &index))
                .unwrap();
        assert_eq!(batch.break_glass[0].value, None);
        let refused = parse_list(&write("mallory", "kubectl/v1.36.0", 403, merge, serde_json::Value::Null), &filter(&ids, &index)).unwrap();
        assert!(refused.break_glass.is_empty());
        let other = json!({"metadata": {"annotations": {"team": "x"}}});
        assert!(
            parse_list(&write("dave", "kubectl", 200, other, serde_json::Value::Null), &filter(&ids, &index))
                .unwrap()
                .break_glass
                .is_empty()
        );
    }
}
