//! Argo CD's last sync operation on an Application, as its status shows it
//! (`status.operationState`, `status.history`): the revision it deployed, who started
//! it (a person, or automated sync), how it ended, and whether it was a rollback — a
//! revision older than the one deployed before it (`argocd app rollback`, or a sync
//! back to an earlier commit). Pure; triggers and templates see it as
//! `drift.operation`, and a drift episode's resolution says how it ended from it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
}

impl Operation {
    /// The Application's last operation, when its status has one.
    pub fn of(app: &Value) -> Option<Operation> {
        let op = app.pointer("/status/operationState").filter(|v| v.is_object())?;
        let s = |p: &str| op.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let time = |p: &str| {
            op.pointer(p).and_then(Value::as_str).and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.with_timezone(&Utc))
        };
        let mut revision = revisions(op.pointer("/syncResult"));
        if revision.is_empty() {
            revision = revisions(op.pointer("/operation/sync"));
        }
        let phase = s("/phase");
        let finished_at = time("/finishedAt");
        // History, oldest first: the last entry is what was just deployed.
        let history: Vec<String> = app
            .pointer("/status/history")
            .and_then(Value::as_array)
            .map(|h| h.iter().map(|e| revisions(Some(e))).collect())
            .unwrap_or_default();
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
            automated: op.pointer("/operation/initiatedBy/automated").and_then(Value::as_bool).unwrap_or(false),
            started_at: time("/startedAt"),
            finished_at,
            phase,
            revision,
            rollback,
            from,
            to,
        })
    }

    /// Who started it, for humans: the username, else `automated sync`.
    pub fn by(&self) -> &str {
        if self.username.is_empty() { "automated sync" } else { &self.username }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
