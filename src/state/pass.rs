//! The face of an evaluation pass: what the store holds about one Application, read
//! from one snapshot ([`PassStore::view`] → [`crate::state::AppState`]), and the pass's
//! write — its episode, hold-downs, re-armed keys, sync operations, break-glass record,
//! note, its notifications and the dead letters of those it could not queue — in one
//! transaction ([`PassStore::write_pass_due`]).

use std::sync::Arc;

use super::store::{PendingOperations, Shared};
use super::tables::{apps, break_glass, dead, episodes, holds, notified, operations, outbox};
use super::{EnqueueReport, Retention, StateError, StateView, from_millis};
use crate::drift::operation::OperationRecord;
use crate::model::Notification;
use crate::state::kv::WriteTransaction;

/// At most this many passes' operations wait; the next writes them with its own. It
/// bounds that transaction too, which every other writer waits out (on PostgreSQL a
/// few statements per operation).
pub(crate) const MAX_PENDING_OPERATIONS: usize = 256;

/// A notification the pass dead-letters rather than queues (its service is not
/// configured), with why.
pub type Reject<'a> = (&'a Notification, String);

/// What one evaluation pass writes besides its notifications: its episode (when it
/// changed), hold-downs started or ended, dedup keys re-armed, sync operations seen
/// ended, a break-glass record, the Application's note, and whether it was deleted.
#[derive(Debug, Default)]
pub struct PassWrite<'a> {
    pub app_key: &'a str,
    /// The pass's instant (unix ms), the history's clock: a replay's passes run on the
    /// snapshots' clock while its deliveries, with `--deliver`, run on the system's.
    pub at_ms: u64,
    pub episode: Option<(&'a crate::drift::episode::Episode, Retention)>,
    /// Sync operations seen for the first time (oldest first).
    pub operations: &'a [OperationRecord],
    /// The Application's break-glass exception changed (a transition to record).
    pub break_glass: Option<&'a crate::drift::break_glass::Record>,
    /// The history's bounds, for operations and exceptions.
    pub retention: Retention,
    pub holds: &'a [(String, Option<u64>)],
    pub forgets: Vec<&'a str>,
    /// The Application's note changes (`Some(None)`: cleared).
    pub note: Option<Option<&'a str>>,
    /// The Application was deleted: its state goes once nothing of it is in the outbox.
    pub deleted: bool,
}

impl PassWrite<'_> {
    /// Nothing to write (most passes).
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty() && self.nothing_but_operations()
    }

    /// Sync operations and nothing else to write (an Application's first pass).
    fn only_operations(&self) -> bool {
        !self.operations.is_empty() && self.nothing_but_operations()
    }

    fn nothing_but_operations(&self) -> bool {
        self.episode.is_none()
            && self.break_glass.is_none()
            && self.holds.is_empty()
            && self.forgets.is_empty()
            && self.note.is_none()
            && !self.deleted
    }
}

/// The face of an evaluation pass (see the module's documentation).
#[derive(Clone)]
pub struct PassStore(Arc<Shared>);

impl PassStore {
    pub(super) fn new(shared: Arc<Shared>) -> PassStore {
        PassStore(shared)
    }

    /// A consistent snapshot of the store for one evaluation pass: every read of the
    /// pass sees the same committed state, so a settle that commits meanwhile is seen
    /// either entirely (its key recorded and its entry gone) or not at all. Cheap (a
    /// read transaction); the pass drops it before it writes.
    pub fn view(&self) -> Result<StateView, StateError> {
        Ok(StateView::new(self.0.read()?))
    }

    /// Writes one evaluation pass — episode, hold-downs, re-armed keys and the outbox
    /// entries of its notifications — in one transaction. With deferred durability it
    /// does not wait for the disk: a crash before the next flush loses the pass, which
    /// the re-evaluation at start-up decides again (no fingerprint survives a restart),
    /// and nothing of it can have been delivered (a delivery's record is durable and
    /// would have made the pass durable first). `now_ms` is the outbox's clock (when
    /// the entries are enqueued and first due).
    pub fn write_pass(&self, pass: &PassWrite, notifications: &[Notification], now_ms: u64) -> Result<EnqueueReport, StateError> {
        self.write_pass_due(pass, notifications, now_ms, None, &[])
    }

    /// [`PassStore::write_pass`] with when each notification is first due (by index):
    /// the delivery side's fair share between Applications; and `rejects`,
    /// dead-lettered in the same transaction.
    pub fn write_pass_due(
        &self,
        pass: &PassWrite,
        notifications: &[Notification],
        now_ms: u64,
        due: Option<&[u64]>,
        rejects: &[Reject<'_>],
    ) -> Result<EnqueueReport, StateError> {
        if pass.is_empty() && notifications.is_empty() && rejects.is_empty() {
            // Most passes decide nothing to write: no transaction at all.
            return Ok(EnqueueReport::default());
        }
        let deferred = self.0.deferred();
        let operations_only = notifications.is_empty() && rejects.is_empty() && pass.only_operations();
        if deferred && operations_only {
            // Recorded by the next pass's transaction or flush: one transaction for a
            // start's first passes, not one each. A full list is written with this pass.
            let mut pending = self.0.pending();
            if pending.len() < MAX_PENDING_OPERATIONS {
                pending.push(PendingOperations {
                    app: pass.app_key.to_string(),
                    operations: pass.operations.to_vec(),
                    retention: pass.retention,
                    at_ms: pass.at_ms,
                });
                return Ok(EnqueueReport::default());
            }
        }
        let mut tx = self.0.write_for([pass.app_key])?;
        if deferred {
            tx.defer_durability().map_err(super::storage)?;
        }
        // What waits goes first, in the order the passes decided it.
        let report = self.0.commit_with_pending(tx, |tx| write_pass_in(tx, pass, notifications, now_ms, due, rejects))?;
        if deferred {
            self.0.deferred_commit();
        }
        Ok(report)
    }

    /// Forgets an Application's latest episode when it cannot be read (damaged, or
    /// written by a newer version): the unreadable copy is removed and the next
    /// observation starts afresh. Returns whether there was one.
    pub fn reset_episode(&self, app: &str) -> Result<bool, StateError> {
        self.0.write_with(|tx| episodes::reset(tx, app))
    }

    /// An Application that now belongs to another shard (its destination cluster
    /// changed): its state here is retired as a deleted one's is — purged once nothing
    /// of it is left in the outbox — but without a last pass: it was not deleted, and
    /// its new shard tells what it does next. Its episodes stay in this shard's history.
    pub fn retire_moved(&self, app: &str) -> Result<(), StateError> {
        let tx = self.0.write()?;
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        // Its operations still waiting go first, as they would have.
        self.0.commit_with_pending(tx, |tx| apps::retire(tx, app, now_ms))
    }

    /// Whether a dedup key of `app` is recorded as delivered.
    pub fn is_notified(&self, app: &str, key: &str) -> Result<bool, StateError> {
        Ok(self.0.read_with(|tx| notified::notified_at(tx, app, key))?.is_some())
    }

    /// Every key of one Application with its delivery time.
    pub fn keys(&self, app: &str) -> Result<Vec<(String, u64)>, StateError> {
        self.0.read_with(|tx| notified::keys(tx, app))
    }

    /// Every Application key with a delivered key in the store.
    pub fn apps(&self) -> Result<Vec<String>, StateError> {
        self.0.read_with(notified::apps)
    }

    /// Every Application with a note, and the note.
    pub fn notes(&self) -> Result<Vec<(String, String)>, StateError> {
        self.0.read_with(apps::notes)
    }

    /// Deleted Applications still waiting for their outbox entries to settle.
    pub fn deleted_waiting(&self) -> Result<u64, StateError> {
        self.0.read_with(apps::deleted_waiting)
    }
}

/// The pass's write, inside its transaction: each table's part, by name.
fn write_pass_in(
    tx: &WriteTransaction,
    pass: &PassWrite,
    notifications: &[Notification],
    now_ms: u64,
    due: Option<&[u64]>,
    rejects: &[Reject<'_>],
) -> Result<EnqueueReport, StateError> {
    if let Some((ep, retention)) = pass.episode {
        episodes::save(tx, ep, retention, from_millis(pass.at_ms))?;
    }
    operations::save(tx, pass.app_key, pass.operations, pass.retention, from_millis(pass.at_ms))?;
    if let Some(r) = pass.break_glass {
        break_glass::save(tx, r, pass.retention, from_millis(pass.at_ms))?;
    }
    for (key, since) in pass.holds {
        holds::set_hold(tx, pass.app_key, key, *since)?;
    }
    for key in &pass.forgets {
        notified::forget(tx, pass.app_key, key)?;
    }
    if let Some(note) = pass.note {
        apps::set_note(tx, pass.app_key, note)?;
    }
    let report = if notifications.is_empty() { EnqueueReport::default() } else { outbox::enqueue(tx, notifications, now_ms, due)? };
    for (n, error) in rejects {
        dead::reject(tx, n, error, now_ms)?;
    }
    if pass.deleted {
        apps::retire(tx, pass.app_key, now_ms)?;
    } else {
        // Seen again (a replay that deletes and re-creates one object): whatever was
        // waiting to purge it no longer applies.
        apps::seen(tx, [pass.app_key])?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Store;
    use crate::state::tables::outbox::test_notification as n;

    /// The notifications of a pass for a service not configured are dead-lettered by
    /// the pass's own write, with the note and the queued ones; a pass with nothing
    /// else to write still writes them.
    #[test]
    fn a_passs_rejects_are_dead_lettered_in_its_transaction() {
        let s = Store::in_memory().unwrap();
        let (queued, unknown) = (n("hook", "k1"), n("nowhere", "k2"));
        let pass = PassWrite { app_key: "ns/a@u", note: Some(Some("dropped 1")), ..Default::default() };
        let why = "service \"nowhere\" is not configured".to_string();
        let report = s.pass().write_pass_due(&pass, std::slice::from_ref(&queued), 10, None, &[(&unknown, why.clone())]).unwrap();
        assert_eq!(report.queued, 1);
        let dead = s.outbox().dead_letters().unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            (&dead[0].notification, dead[0].error.as_str(), dead[0].attempts, dead[0].permanent),
            (&unknown, why.as_str(), 0, false)
        );
        assert_eq!(s.pass().notes().unwrap(), [("ns/a@u".to_string(), "dropped 1".to_string())]);
        assert_eq!(s.outbox().due("hook", 10, 10).unwrap().len(), 1);

        let nothing_else = PassWrite { app_key: "ns/b@u", ..Default::default() };
        s.pass().write_pass_due(&nothing_else, &[], 11, None, &[(&unknown, why)]).unwrap();
        assert_eq!(s.outbox().dead_letter_count().unwrap(), 2, "a pass of rejects only is written too");
    }
}
