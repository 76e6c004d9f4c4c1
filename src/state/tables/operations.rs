//! Argo CD's sync operations in the state store, the deployments and rollbacks of an
//! Application's story (`driftwatch history --timeline`), by when each started
//! ([`super::timed`]); `latest_operation` holds, per Application, when its newest
//! recorded operation started and its id, which the pipeline reads to tell a new
//! operation (or a retry that ended otherwise) from one already recorded.

use chrono::{DateTime, Utc};

use super::SEP;
use super::timed::Timed;
use crate::drift::operation::OperationRecord;
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{HistoryQuery, Retention, StateError, storage};

/// At most this many operations are kept per Application (the oldest go first).
pub const MAX_OPERATIONS_PER_APP: usize = 100;

pub(in crate::state) const OPERATIONS: Timed = Timed {
    records: TableDefinition::new("operations"),
    by_time: TableDefinition::new("operations_by_time"),
    latest: TableDefinition::new("latest_operation"),
    per_app: MAX_OPERATIONS_PER_APP,
    what: "sync operation",
};

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    OPERATIONS.create(tx)
}

fn parse_latest(v: &str) -> Option<(u64, String)> {
    let (ms, id) = v.split_once(SEP)?;
    Some((ms.parse().ok()?, id.to_string()))
}

/// Records operations of one Application (oldest first) inside a pass's
/// transaction; one already recorded (same start) is replaced. Prunes to the bounds.
pub(in crate::state) fn save(
    tx: &WriteTransaction,
    app: &str,
    ops: &[OperationRecord],
    retention: Retention,
    now: DateTime<Utc>,
) -> Result<(), StateError> {
    let Some(newest) = ops.iter().max_by_key(|o| o.operation.started_ms()) else { return Ok(()) };
    let items = ops
        .iter()
        .map(|o| Ok((o.operation.started_ms(), serde_json::to_string(o).map_err(storage)?)))
        .collect::<Result<Vec<_>, StateError>>()?;
    let latest = format!("{}{SEP}{}", newest.operation.started_ms(), newest.operation.id);
    // An older operation found later (history) does not move the latest back.
    let keep = match OPERATIONS.latest_in(tx, app)?.and_then(|v| parse_latest(&v)) {
        Some((ms, _)) if ms > newest.operation.started_ms() => None,
        _ => Some(latest.as_str()),
    };
    OPERATIONS.save_in(tx, app, &items, keep, retention, now)
}

/// Operations of the Applications matching `app` (`namespace/name`, or a name),
/// oldest first, at most `limit` (the newest).
pub(in crate::state) fn list(tx: &ReadTransaction, q: &HistoryQuery, limit: usize) -> Result<Vec<OperationRecord>, StateError> {
    OPERATIONS.list(tx, q, limit, |o: &OperationRecord| o.name.as_str())
}

/// A deleted Application: its latest-operation pointer goes; its operations stay
/// in the history.
pub(in crate::state) fn forget_latest(tx: &WriteTransaction, app: &str) -> Result<(), StateError> {
    OPERATIONS.forget_latest_in(tx, app)
}

/// When the newest recorded operation of an Application started (unix ms), and its
/// id (an operation retried to another end is recorded again).
pub(in crate::state) fn latest(tx: &ReadTransaction, app: &str) -> Result<Option<(u64, String)>, StateError> {
    Ok(OPERATIONS.latest(tx, app)?.and_then(|v| parse_latest(&v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::operation::Operation;
    use crate::state::Store;
    use crate::state::{HistoryQuery, MAX_PENDING_OPERATIONS, PassWrite, StateError};

    fn op(app: &str, name: &str, ms: i64) -> OperationRecord {
        OperationRecord {
            app_key: app.into(),
            name: name.into(),
            namespace: "argocd".into(),
            operation: Operation { phase: "Succeeded".into(), started_at: DateTime::from_timestamp_millis(ms), ..Default::default() },
            ..Default::default()
        }
    }

    fn save(s: &Store, app: &str, ops: &[OperationRecord], retention: Retention, now_ms: i64) {
        let tx = s.db().begin_write().unwrap();
        super::save(&tx, app, ops, retention, DateTime::from_timestamp_millis(now_ms).unwrap()).unwrap();
        tx.commit().unwrap();
    }

    /// Operations are kept per Application, oldest first, within the per-Application
    /// bound and the history's count and age; the latest start is what the pass reads.
    #[test]
    fn operations_are_kept_in_order_and_bounded() {
        let s = Store::in_memory().unwrap();
        let r = Retention { max_episodes: 1000, max_age: chrono::Duration::days(1) };
        let day = 86_400_000;
        let many: Vec<OperationRecord> = (1..=(MAX_OPERATIONS_PER_APP as i64 + 5)).map(|i| op("argocd/a@1", "a", day + i)).collect();
        save(&s, "argocd/a@1", &many, r, day + 10);
        save(&s, "argocd/b@2", &[op("argocd/b@2", "b", day + 3)], r, day + 10);
        let app = |a: Option<&str>| HistoryQuery { app: a.map(Into::into), ..Default::default() };
        let a = s.history().operations(&app(Some("argocd/a")), usize::MAX).unwrap();
        assert_eq!(a.len(), MAX_OPERATIONS_PER_APP);
        assert_eq!(a[0].operation.started_ms(), day as u64 + 6, "the oldest five went");
        assert_eq!(s.history().operations(&app(Some("b")), usize::MAX).unwrap().len(), 1, "by name");
        assert_eq!(s.history().operations(&app(None), 3).unwrap().len(), 3, "the newest three");
        let window = HistoryQuery {
            since: DateTime::from_timestamp_millis(day + 8),
            until: DateTime::from_timestamp_millis(day + 10),
            ..app(Some("argocd/a"))
        };
        let between: Vec<u64> = s.history().operations(&window, usize::MAX).unwrap().iter().map(|o| o.operation.started_ms()).collect();
        assert_eq!(between, [day as u64 + 8, day as u64 + 9, day as u64 + 10], "since and until, both included");
        assert_eq!(s.pass().view().unwrap().app_state("argocd/a@1").unwrap().operation.map(|l| l.0), Some(day as u64 + 105));
        // A day later, everything older than a day goes.
        save(&s, "argocd/b@2", &[op("argocd/b@2", "b", 2 * day + 50)], r, 2 * day + 200);
        let all = s.history().operations(&app(None), usize::MAX).unwrap();
        assert_eq!(all.iter().map(|o| o.operation.started_ms()).collect::<Vec<_>>(), [2 * day as u64 + 50]);
        // The count bound drops the oldest of all Applications.
        let small = Retention { max_episodes: 2, ..r };
        save(&s, "argocd/a@1", &[op("argocd/a@1", "a", 2 * day + 51), op("argocd/a@1", "a", 2 * day + 52)], small, 2 * day + 60);
        let all = s.history().operations(&app(None), usize::MAX).unwrap();
        assert_eq!(all.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["a", "a"]);
    }

    /// With deferred durability (the daemon), a pass that writes only operations takes
    /// no transaction: its operations go with the next pass's write or the flush, in
    /// order; without it (tools, replays), at once.
    #[test]
    fn passes_writing_only_operations_are_written_together() {
        let s = Store::in_memory().unwrap();
        let r = Retention { max_episodes: 1000, max_age: chrono::Duration::days(1) };
        let day = 86_400_000;
        let latest = |app: &str| s.pass().view().unwrap().app_state(app).unwrap().operation.map(|l| l.0);
        fn pass<'a>(app: &'a str, operations: &'a [OperationRecord], note: Option<Option<&'a str>>, retention: Retention) -> PassWrite<'a> {
            PassWrite { app_key: app, at_ms: 86_400_010, operations, retention, note, ..Default::default() }
        }
        let (a, b, c) = ([op("argocd/a@1", "a", day + 1)], [op("argocd/b@2", "b", day + 2)], [op("argocd/c@3", "c", day + 3)]);
        s.pass().write_pass(&pass("argocd/a@1", &a, None, r), &[], 0).unwrap();
        assert_eq!(latest("argocd/a@1"), Some(day as u64 + 1), "not deferred: written at once");
        s.defer_durability(true);
        s.pass().write_pass(&pass("argocd/b@2", &b, None, r), &[], 0).unwrap();
        assert_eq!(latest("argocd/b@2"), None, "waits");
        // A pass that writes more takes the waiting operations into its transaction.
        s.pass().write_pass(&pass("argocd/c@3", &[], Some(Some("a note")), r), &[], 0).unwrap();
        assert_eq!(latest("argocd/b@2"), Some(day as u64 + 2), "written with the next pass");
        s.pass().write_pass(&pass("argocd/c@3", &c, None, r), &[], 0).unwrap();
        assert_eq!(latest("argocd/c@3"), None);
        s.flush().unwrap();
        assert_eq!(latest("argocd/c@3"), Some(day as u64 + 3), "written by the flush");
        let all = s.history().operations(&HistoryQuery::default(), usize::MAX).unwrap();
        assert_eq!(all.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        // A full list goes with the pass that finds it full.
        for i in 0..=MAX_PENDING_OPERATIONS {
            let app = format!("argocd/n{i}@{i}");
            s.pass().write_pass(&pass(&app, &[op(&app, "n", day + 4)], None, r), &[], 0).unwrap();
        }
        assert_eq!(latest("argocd/n0@0"), Some(day as u64 + 4));
        assert_eq!(latest(&format!("argocd/n{MAX_PENDING_OPERATIONS}@{MAX_PENDING_OPERATIONS}")), Some(day as u64 + 4));
    }

    /// A transaction that takes the waiting operations and then fails (a full disk, a
    /// refused statement) leaves them waiting and writes none of them; the next commit
    /// writes them.
    #[test]
    fn waiting_operations_survive_a_failed_transaction() {
        let s = Store::in_memory().unwrap();
        let r = Retention { max_episodes: 1000, max_age: chrono::Duration::days(1) };
        let day = 86_400_000;
        s.defer_durability(true);
        let ops = [op("argocd/a@1", "a", day + 1)];
        s.pass()
            .write_pass(
                &PassWrite { app_key: "argocd/a@1", at_ms: day as u64 + 10, operations: &ops, retention: r, ..Default::default() },
                &[],
                0,
            )
            .unwrap();
        let tx = s.db().begin_write().unwrap();
        let failed = s.shared().commit_with_pending(tx, |_| -> Result<(), StateError> { Err(StateError::Fenced("taken over".into())) });
        assert!(failed.is_err());
        assert_eq!(s.shared().pending().iter().map(|p| p.app.as_str()).collect::<Vec<_>>(), ["argocd/a@1"], "waiting again");
        assert_eq!(s.pass().view().unwrap().app_state("argocd/a@1").unwrap().operation, None, "nothing of the failed transaction landed");
        s.flush().unwrap();
        assert!(s.shared().pending().is_empty());
        assert_eq!(s.pass().view().unwrap().app_state("argocd/a@1").unwrap().operation.map(|l| l.0), Some(day as u64 + 1));
    }
}
