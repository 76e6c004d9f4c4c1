//! Argo CD's last sync operation on an Application, as its status shows it
//! (`status.operationState`, `status.history`): the revision it deployed, who started
//! it (a person, or automated sync), how it ended, and whether it was a rollback — a
//! revision older than the one deployed before it (`argocd app rollback`, or a sync
//! back to an earlier commit). Pure; triggers and templates see it as
//! `drift.operation`, and a drift episode's resolution says how it ended from it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::Pointer;
use crate::model::ResourceRef;

/// The revision of a sync status, operation or history entry: `revision`, else the
/// `revisions` of a multi-source Application joined with `,`.
pub fn revisions(v: Option<&Value>) -> String {
    match v {
        Some(o) => match (o.get("revision").and_then(Value::as_str), o.get("revisions").and_then(Value::as_array)) {
            (Some(r), _) if !r.is_empty() => r.to_string(),
            (_, Some(list)) => list.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","),
            _ => String::new(),
        },
        None => String::new(),
    }
}

/// The last operation of an Application.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Operation {
    /// `Running`, `Succeeded`, `Failed`, `Error`, `Terminating`.
    pub phase: String,
    pub message: String,
    /// The revision(s) it deployed (`syncResult`), else the one it asked for.
    pub revision: String,
    /// Who started it: `initiatedBy.username`, empty for automated sync.
    pub username: String,
    pub automated: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// A succeeded sync to a revision older than the one deployed before it.
    pub rollback: bool,
    /// For a rollback: the revision deployed before it, and the one it went back to.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub from: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub to: String,
    /// `<finishedAt>/<revision>`: stable per operation (an `oncePer` value).
    pub id: String,
    /// What `initiatedBy` said when the audit input saw a person write the operation
    /// directly and `username` names that person instead (the field is the writer's to
    /// fill: "carol", or automated sync, is a claim).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub claimed: String,
}

impl Operation {
    /// The Application's last operation, when its status has one.
    pub fn of(app: &Value) -> Option<Operation> {
        let op = app.at("/status/operationState").filter(|v| v.is_object())?;
        let s = |p: &str| op.at(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let time =
            |p: &str| op.at(p).and_then(Value::as_str).and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.with_timezone(&Utc));
        let mut revision = revisions(op.at("/syncResult"));
        if revision.is_empty() {
            revision = revisions(op.at("/operation/sync"));
        }
        let phase = s("/phase");
        let finished_at = time("/finishedAt");
        // History, oldest first: the last entry is what was just deployed.
        let history: Vec<String> =
            app.at("/status/history").and_then(Value::as_array).map(|h| h.iter().map(|e| revisions(Some(e))).collect()).unwrap_or_default();
        let (mut rollback, mut from, mut to) = (false, String::new(), String::new());
        if phase == "Succeeded"
            && let [earlier @ .., before, last] = history.as_slice()
            && *last == revision
            && before != last
            && earlier.contains(last)
        {
            rollback = true;
            from = before.clone();
            to = last.clone();
        }
        Some(Operation {
            id: format!("{}/{revision}", finished_at.map(|t| t.to_rfc3339()).unwrap_or_default()),
            message: s("/message"),
            username: s("/operation/initiatedBy/username"),
            automated: op.at("/operation/initiatedBy/automated").and_then(Value::as_bool).unwrap_or(false),
            started_at: time("/startedAt"),
            finished_at,
            phase,
            revision,
            rollback,
            from,
            to,
            claimed: String::new(),
        })
    }

    /// Whether a write at `t` may be the one that asked for this operation: not after
    /// it started (within [`WRITE_SKEW`]).
    pub fn began_after(&self, t: DateTime<Utc>) -> bool {
        let started = self.started_at.or(self.finished_at);
        started.is_none_or(|s| s.checked_add_signed(WRITE_SKEW).is_none_or(|limit| t <= limit))
    }

    /// Names the person the audit input saw write this operation directly (an allowed
    /// write of the Application's `operation` by an identity that is not Argo CD's,
    /// made before the operation started): `initiatedBy` is what that person wrote,
    /// so it is kept as `claimed` and the writer becomes the initiator (review N10).
    pub fn written_by(&mut self, writer: &str) {
        if writer.is_empty() || self.username == writer {
            return;
        }
        let claimed = if self.username.is_empty() && self.automated { "automated sync".to_string() } else { self.username.clone() };
        self.claimed = claimed;
        self.username = writer.to_string();
        self.automated = false;
    }

    /// Who started it, for humans: the username, else `automated sync`.
    pub fn by(&self) -> &str {
        if self.username.is_empty() { "automated sync" } else { &self.username }
    }

    /// Whether it is over (`Succeeded`, `Failed`, `Error`): what is recorded.
    pub fn is_done(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed" | "Error")
    }

    /// `sync` or `rollback` (the ECS `event.action` of its record).
    pub fn action(&self) -> &'static str {
        if self.rollback { "rollback" } else { "sync" }
    }

    /// When it started, else finished (unix ms): its place in the history. Argo CD
    /// writes the same instant as the history entry's `deployStartedAt`.
    pub fn started_ms(&self) -> u64 {
        self.started_at.or(self.finished_at).map_or(0, |t| u64::try_from(t.timestamp_millis()).unwrap_or(0))
    }
}

/// How much later than an operation's start the write of that operation may be dated
/// (the API server's and Argo CD's clocks apart).
const WRITE_SKEW: chrono::Duration = chrono::Duration::seconds(5);

/// At most this many resources are kept of what one operation synced.
pub const MAX_SYNCED_RESOURCES: usize = 50;
/// At most this many characters of an operation's or a resource's message are kept.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// One resource an operation synced (`syncResult.resources[]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncedResource {
    #[serde(flatten)]
    pub object: ResourceRef,
    /// `Synced`, `SyncFailed`, `Pruned`, `PruneSkipped`.
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A sync operation as the history keeps it and a SIEM receives it: the operation,
/// the Application, what it synced.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OperationRecord {
    pub app_key: String,
    pub namespace: String,
    pub name: String,
    pub project: String,
    /// `sync` or `rollback`.
    pub action: String,
    #[serde(flatten)]
    pub operation: Operation,
    pub resources: Vec<SyncedResource>,
    /// Resources synced beyond [`MAX_SYNCED_RESOURCES`].
    #[serde(skip_serializing_if = "is_zero")]
    pub resources_more: usize,
    /// `operationState` (seen as it ended), or `history` (a `status.history` entry
    /// found later: deployed while driftwatch was not watching; no phase or resources).
    pub source: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn clip(s: &str) -> String {
    crate::text::clip(s, MAX_MESSAGE_CHARS)
}

fn parse_time(v: Option<&Value>) -> Option<DateTime<Utc>> {
    v.and_then(Value::as_str).and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.with_timezone(&Utc))
}

impl OperationRecord {
    /// The record of `op`, the last operation of `app` (`Operation::of`), with the
    /// resources it synced.
    pub fn of(app: &crate::model::App, op: &Operation) -> OperationRecord {
        let list = app.object.at("/status/operationState/syncResult/resources").and_then(Value::as_array);
        let resources = list
            .map(|l| {
                l.iter()
                    .take(MAX_SYNCED_RESOURCES)
                    .map(|r| {
                        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                        SyncedResource {
                            object: ResourceRef { group: s("group"), kind: s("kind"), namespace: s("namespace"), name: s("name") },
                            status: s("status"),
                            message: clip(&s("message")),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        OperationRecord {
            app_key: app.state_key(),
            namespace: app.namespace.clone(),
            name: app.name.clone(),
            project: app.project.clone(),
            action: op.action().to_string(),
            operation: Operation { message: clip(&op.message), ..op.clone() },
            resources,
            resources_more: list.map_or(0, |l| l.len().saturating_sub(MAX_SYNCED_RESOURCES)),
            source: "operationState".into(),
        }
    }

    /// Deployments in `status.history` that started after `after_ms` and are neither
    /// `current` (the operation seen now) nor `recorded` (the id of the newest recorded
    /// one): what was deployed while driftwatch was not watching, oldest first. Each
    /// history entry is a succeeded sync; a revision older than the one deployed before
    /// it is a rollback.
    pub fn from_history(
        app: &crate::model::App,
        after_ms: u64,
        recorded: Option<&str>,
        current: Option<&Operation>,
    ) -> Vec<OperationRecord> {
        let Some(history) = app.object.at("/status/history").and_then(Value::as_array) else { return Vec::new() };
        let revs: Vec<String> = history.iter().map(|e| revisions(Some(e))).collect();
        let current_ms = current.map(Operation::started_ms);
        // An entry without `deployStartedAt` (written before Argo CD kept it) starts when
        // it was deployed, not when its operation started; it is still that operation
        // (the one seen now, or the newest recorded) when its deployment time and
        // revision are that operation's end and revision.
        let known: Vec<&str> = [current.map(|c| c.id.as_str()), recorded].into_iter().flatten().filter(|id| !id.is_empty()).collect();
        let mut out = Vec::new();
        for (i, e) in history.iter().enumerate() {
            let started_at = parse_time(e.get("deployStartedAt"));
            let finished_at = parse_time(e.get("deployedAt"));
            let op = Operation {
                phase: "Succeeded".into(),
                revision: revs[i].clone(),
                username: e.at("/initiatedBy/username").and_then(Value::as_str).unwrap_or_default().to_string(),
                automated: e.at("/initiatedBy/automated").and_then(Value::as_bool).unwrap_or(false),
                started_at,
                finished_at,
                rollback: i >= 1 && revs[i] != revs[i - 1] && revs[..i - 1].contains(&revs[i]),
                from: if i >= 1 { revs[i - 1].clone() } else { String::new() },
                to: revs[i].clone(),
                id: format!("{}/{}", finished_at.map(|t| t.to_rfc3339()).unwrap_or_default(), revs[i]),
                claimed: String::new(),
                message: String::new(),
            };
            let ms = op.started_ms();
            if ms <= after_ms || Some(ms) == current_ms || known.contains(&op.id.as_str()) || ms == 0 {
                continue;
            }
            let op = if op.rollback { op } else { Operation { from: String::new(), to: String::new(), ..op } };
            out.push(OperationRecord {
                app_key: app.state_key(),
                namespace: app.namespace.clone(),
                name: app.name.clone(),
                project: app.project.clone(),
                action: op.action().to_string(),
                operation: op,
                resources: Vec::new(),
                resources_more: 0,
                source: "history".into(),
            });
        }
        out
    }
}

/// A sync operation an episode refers to: the revision it deployed, who, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpRef {
    pub revision: String,
    /// A username, or `automated sync`.
    pub by: String,
    /// When it finished.
    pub at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
    /// The operation's id (`drift.operation.id`, the history's and the SIEM's record
    /// of it), when it started, and whether automated sync started it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub automated: bool,
}

impl OpRef {
    pub(crate) fn of(op: &Operation) -> OpRef {
        OpRef {
            revision: op.revision.clone(),
            by: op.by().to_string(),
            at: op.finished_at,
            rollback: op.rollback,
            id: op.id.clone(),
            started_at: op.started_at,
            automated: op.automated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Review N10: `initiatedBy` is the writer's to fill; the audit input's writer of
    /// the operation is its initiator, the claim kept beside.
    #[test]
    fn a_person_who_wrote_the_operation_is_its_initiator() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let mut op = Operation { username: "carol".into(), started_at: Some(t("2026-12-04T09:30:00Z")), ..Operation::default() };
        assert!(op.began_after(t("2026-12-04T09:29:59Z")) && op.began_after(t("2026-12-04T09:30:04Z")));
        assert!(!op.began_after(t("2026-12-04T09:30:06Z")), "written after it started: another write");
        op.written_by("bob");
        assert_eq!((op.username.as_str(), op.claimed.as_str(), op.by()), ("bob", "carol", "bob"));
        let mut automated = Operation { automated: true, ..Operation::default() };
        automated.written_by("bob");
        assert_eq!((automated.username.as_str(), automated.claimed.as_str(), automated.automated), ("bob", "automated sync", false));
    }

    fn app(history: &[&str], op: Value) -> Value {
        let h: Vec<Value> = history.iter().enumerate().map(|(i, r)| json!({"id": i, "revision": r})).collect();
        json!({"status": {"history": h, "operationState": op}})
    }

    fn op(revision: &str, by: Value) -> Value {
        json!({"phase": "Succeeded", "message": "successfully synced", "startedAt": "2026-12-04T10:00:00Z", "finishedAt": "2026-12-04T10:00:05Z",
               "operation": {"initiatedBy": by, "sync": {"revision": revision}}, "syncResult": {"revision": revision}})
    }

    #[test]
    fn a_sync_back_to_an_older_revision_is_a_rollback_with_who() {
        let o = Operation::of(&app(&["aaa", "bbb", "aaa"], op("aaa", json!({"username": "alice"})))).unwrap();
        assert!(o.rollback);
        assert_eq!((o.from.as_str(), o.to.as_str(), o.by()), ("bbb", "aaa", "alice"));
        assert_eq!(o.id, "2026-12-04T10:00:05+00:00/aaa");
        let forward = Operation::of(&app(&["aaa", "bbb"], op("bbb", json!({"automated": true})))).unwrap();
        assert!(!forward.rollback && forward.automated);
        assert_eq!(forward.by(), "automated sync");
        let resync = Operation::of(&app(&["aaa", "bbb", "bbb"], op("bbb", json!({"automated": true})))).unwrap();
        assert!(!resync.rollback, "the same revision again (self-heal) is not a rollback");
        let mut failed = op("aaa", json!({"username": "alice"}));
        failed["phase"] = json!("Failed");
        assert!(!Operation::of(&app(&["aaa", "bbb", "aaa"], failed)).unwrap().rollback);
        assert_eq!(Operation::of(&json!({"status": {}})), None);
    }

    /// Deployments made while driftwatch was not watching are found in
    /// `status.history` (with who, from `initiatedBy`), after the last recorded and
    /// without the operation seen now; a sync back to an earlier revision is a rollback.
    #[test]
    fn history_entries_not_recorded_become_operations() {
        let entry = |id: u32, rev: &str, start: &str, by: Value| json!({"id": id, "revision": rev, "deployStartedAt": start, "deployedAt": start, "initiatedBy": by});
        let app = crate::model::App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd", "uid": "u"},
            "status": {"history": [
                entry(0, "aaa", "2026-12-04T09:00:00Z", json!({"automated": true})),
                entry(1, "bbb", "2026-12-04T09:10:00Z", json!({"username": "bob"})),
                entry(2, "aaa", "2026-12-04T09:20:00Z", json!({"username": "alice"})),
                entry(3, "ccc", "2026-12-04T09:30:00Z", json!({"automated": true}))],
                "operationState": op("ccc", json!({"automated": true}))}}))
        .unwrap();
        let current = Operation { started_at: Some("2026-12-04T09:30:00Z".parse().unwrap()), ..Operation::default() };
        let after = u64::try_from(DateTime::parse_from_rfc3339("2026-12-04T09:05:00Z").unwrap().timestamp_millis()).unwrap();
        let found = OperationRecord::from_history(&app, after, None, Some(&current));
        let seen: Vec<(&str, &str, &str, &str)> =
            found.iter().map(|r| (r.action.as_str(), r.operation.revision.as_str(), r.operation.by(), r.source.as_str())).collect();
        assert_eq!(seen, [("sync", "bbb", "bob", "history"), ("rollback", "aaa", "alice", "history")]);
        assert_eq!(found[1].operation.from, "bbb");
        assert_eq!(OperationRecord::from_history(&app, 0, None, Some(&current)).len(), 3, "the first time: all but the current one");
        let record = OperationRecord::of(&app, &Operation::of(&app.object).unwrap());
        assert_eq!((record.action.as_str(), record.source.as_str()), ("sync", "operationState"));
    }

    /// A history entry without `deployStartedAt` is the operation seen now when its
    /// `deployedAt` and revision are that operation's end and revision: one deployment,
    /// not two (the story showed examples/production's first sync twice).
    #[test]
    fn a_history_entry_without_its_start_is_matched_to_the_current_operation_by_its_end() {
        let app = crate::model::App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd", "uid": "u"},
            "status": {"history": [
                {"id": 1, "revision": "aaa", "deployedAt": "2026-12-04T08:00:00Z"},
                {"id": 2, "revision": "bbb", "deployedAt": "2026-12-04T09:00:00Z"}],
                "operationState": {"phase": "Succeeded", "startedAt": "2026-12-04T08:59:30Z", "finishedAt": "2026-12-04T09:00:00Z",
                                   "syncResult": {"revision": "bbb"}, "operation": {"initiatedBy": {"automated": true}}}}}))
        .unwrap();
        let current = Operation::of(&app.object).unwrap();
        let found = OperationRecord::from_history(&app, 0, None, Some(&current));
        let seen: Vec<&str> = found.iter().map(|r| r.operation.revision.as_str()).collect();
        assert_eq!(seen, ["aaa"], "bbb is the current operation");
        // The next operation: bbb is the newest recorded (by its start, 08:59:30), and
        // its entry (09:00:00) is still not a deployment of its own.
        let next = Operation {
            id: "2026-12-04T10:00:00+00:00/ccc".into(),
            started_at: Some("2026-12-04T09:59:30Z".parse().unwrap()),
            ..Operation::default()
        };
        let after = u64::try_from(current.started_at.unwrap().timestamp_millis()).unwrap();
        assert!(OperationRecord::from_history(&app, after, Some(&current.id), Some(&next)).is_empty());
        assert_eq!(OperationRecord::from_history(&app, after, None, Some(&next)).len(), 1, "without the recorded id: the duplicate");
    }
}
