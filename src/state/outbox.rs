//! The face of the delivery workers (and of `driftwatch deliveries`): what is due, the
//! settle of each attempt, the release of what waited out a destination's outage, and
//! the dead letters.
//!
//! A settle is one transaction for a batch of completions: a delivered entry leaves
//! the outbox and its dedup key is recorded, a retried one moves in the due index, a
//! dead one goes to the dead letters, and each outcome is noted in its drift episode
//! (through the history's table function, in the same transaction). A worker makes two
//! round trips per batch: [`Outbox::due_and_next`] (what is due, and when the next is)
//! and [`Outbox::settle_releasing`].

use std::collections::BTreeSet;
use std::sync::Arc;

use super::store::Shared;
use super::tables::{self, apps, dead, episodes, files, groups, notified, outbox};
use super::{DeadLetter, Group, OutboxEntry, Quarantined, Requeued, Settle, StateError};
use crate::model::{Notification, RecordOp};
use crate::state::kv::WriteTransaction;

/// The face of the delivery workers (see the module's documentation).
#[derive(Clone)]
pub struct Outbox(Arc<Shared>);

/// What a worker takes from the outbox: the entries due now, and when the next entry
/// of its service is due (the first left in the due index; `None`: nothing left).
#[derive(Debug, Default)]
pub struct Due {
    pub entries: Vec<OutboxEntry>,
    pub next_due_ms: Option<u64>,
}

impl Outbox {
    pub(super) fn new(shared: Arc<Shared>) -> Outbox {
        Outbox(shared)
    }

    /// Up to `limit` entries of `service` due at `now_ms`, the earliest due first (among
    /// those, the oldest first): a range of the due index, decoding only what it returns.
    /// An entry that cannot be decoded (damaged, or written by a newer version) is
    /// quarantined ([`Outbox::quarantined`]) and the rest delivered: one bad entry must
    /// not stop its service's queue.
    pub fn due(&self, service: &str, now_ms: u64, limit: usize) -> Result<Vec<OutboxEntry>, StateError> {
        Ok(self.due_and_next(service, now_ms, limit)?.entries)
    }

    /// [`Outbox::due`], and in the same read when the service's next entry is due
    /// (what [`Outbox::next_due_ms`] says), so an idle worker knows how long to sleep
    /// without asking again.
    pub fn due_and_next(&self, service: &str, now_ms: u64, limit: usize) -> Result<Due, StateError> {
        // On PostgreSQL a deposed leader takes no batch (it would send what the new
        // leader sends): the fence is checked in the read's first round trip.
        let ((entries, bad), next_due_ms) = self.0.read_fenced_with(|tx| {
            let due = outbox::due(tx, service, now_ms, limit)?;
            Ok((due, outbox::next_due_ms(tx, service)?))
        })?;
        if !bad.is_empty() {
            self.0.write_with(|tx| dead::quarantine(tx, service, &bad, now_ms))?;
        }
        Ok(Due { entries, next_due_ms })
    }

    /// The earliest `next_attempt_ms` of `service`'s entries, if it has any: the first
    /// key of its range of the due index.
    pub fn next_due_ms(&self, service: &str) -> Result<Option<u64>, StateError> {
        self.0.read_with(|tx| outbox::next_due_ms(tx, service))
    }

    /// Settles the outcomes of several attempts in one transaction (group commit): one
    /// durable write for a batch of completions, whatever its size. A delivered entry is
    /// removed and its dedup key recorded; a retried one moves in the due index; a dead
    /// one moves to the dead letters (permanent failures recorded as handled: re-sending
    /// a 400 gets a 400 again; otherwise the next evaluation decides again).
    pub fn settle(&self, outcomes: &[(OutboxEntry, Settle)], now_ms: u64) -> Result<(), StateError> {
        if outcomes.is_empty() {
            return Ok(());
        }
        let max_keys = self.0.max_keys_per_app();
        self.0.write_with(|tx| settle_in(tx, outcomes, now_ms, max_keys))
    }

    /// [`Outbox::settle`], then in the same transaction [`Outbox::release`] of
    /// `release` (the destination answers again); returns how many were released.
    pub fn settle_releasing(
        &self,
        outcomes: &[(OutboxEntry, Settle)],
        now_ms: u64,
        service: &str,
        release: &[(u64, u64)],
    ) -> Result<usize, StateError> {
        if outcomes.is_empty() && release.is_empty() {
            return Ok(0);
        }
        let max_keys = self.0.max_keys_per_app();
        // The Applications' keys the settle reads and writes, read with its BEGIN.
        let apps: BTreeSet<&str> =
            outcomes.iter().filter_map(|(e, _)| e.notification.record.as_ref()).map(|r| r.app_key.as_str()).collect();
        // The passes committed before this transaction begins are durable once it
        // commits (it waits for the disk): the evaluation thread's flush then has
        // nothing to do.
        let passes = self.0.deferred_so_far();
        let tx = self.0.write_for(apps)?;
        if !outcomes.is_empty() {
            settle_in(&tx, outcomes, now_ms, max_keys)?;
        }
        let released = outbox::release(&tx, service, release, now_ms)?;
        tx.commit().map_err(super::storage)?;
        self.0.made_durable(passes);
        Ok(released)
    }

    /// For a service that writes files: its first `limit` entries in queueing order
    /// (oldest first, due or not), and the last id of the file it marked
    /// ([`Outbox::mark_file`]). An entry that cannot be decoded is quarantined, as
    /// [`Outbox::due`] does.
    pub fn file_head(&self, service: &str, now_ms: u64, limit: usize) -> Result<(Vec<OutboxEntry>, Option<u64>), StateError> {
        // On PostgreSQL a deposed leader takes no file (it would write what the new
        // leader writes).
        let (entries, bad, marked) = self.0.read_fenced_with(|tx| files::head(tx, service, limit))?;
        if !bad.is_empty() {
            self.0.write_with(|tx| dead::quarantine(tx, service, &bad, now_ms))?;
        }
        Ok((entries, marked))
    }

    /// Marks, durably, the file `service` is about to send: its entries up to
    /// `last_id`. Written before the file goes out, so a restart retakes the same
    /// entries (and writes the same object) rather than a larger set.
    pub fn mark_file(&self, service: &str, last_id: u64) -> Result<(), StateError> {
        self.0.write_with(|tx| files::mark(tx, service, last_id))
    }

    /// Makes entries of `service` that wait out a backoff due at `now_ms` again: a
    /// destination that was down is back, and what failed against it while it was down
    /// goes with the rest of the queue rather than after its own backoff. `entries`
    /// are (id, the next attempt its last settle gave it); one that settled or was
    /// attempted since is left alone. Reads only those entries.
    pub fn release(&self, service: &str, entries: &[(u64, u64)], now_ms: u64) -> Result<usize, StateError> {
        if entries.is_empty() {
            return Ok(0);
        }
        self.0.write_with(|tx| outbox::release(tx, service, entries, now_ms))
    }

    /// Every outbox entry (of one service, or all), in due order per service. Reads the
    /// whole outbox: for `driftwatch deliveries`, not for a running daemon's loops.
    pub fn entries(&self, service: Option<&str>) -> Result<Vec<OutboxEntry>, StateError> {
        self.0.read_with(|tx| outbox::entries(tx, service))
    }

    /// How many entries each service has in the outbox (counters, not a scan).
    pub fn queue_depths(&self) -> Result<Vec<(String, u64)>, StateError> {
        self.0.read_with(outbox::queue_depths)
    }

    /// When the oldest entry still in the outbox was queued (unix ms). One read.
    pub fn oldest_enqueued_ms(&self) -> Result<Option<u64>, StateError> {
        self.0.read_with(outbox::oldest_enqueued_ms)
    }

    /// Every group with a run in progress.
    pub fn groups(&self) -> Result<Vec<Group>, StateError> {
        self.0.read_with(groups::all)
    }

    /// Every dead letter, oldest first.
    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>, StateError> {
        self.0.read_with(|tx| tables::all_of(tx, dead::DEAD))
    }

    /// How many dead letters the store keeps (its length, not a scan).
    pub fn dead_letter_count(&self) -> Result<u64, StateError> {
        self.0.read_with(dead::count)
    }

    /// Outbox entries that could not be read, oldest first.
    pub fn quarantined(&self) -> Result<Vec<Quarantined>, StateError> {
        self.0.read_with(|tx| tables::all_of(tx, dead::QUARANTINE))
    }

    /// Puts dead letters back in the outbox (`ids`, or every one), due at `now_ms`
    /// with their attempts reset, keeping their idempotency key (a receiver that did
    /// get a delivery the sender gave up on drops the copy). One whose notification is
    /// in flight again (decided anew meanwhile) just leaves the dead letters; one whose
    /// service's outbox is full stays where it is. Operator's action: no re-check of
    /// the dedup key, so a permanent failure fixed at the receiver is sent.
    pub fn requeue_dead(&self, ids: Option<&[u64]>, now_ms: u64) -> Result<Requeued, StateError> {
        self.0.write_with(|tx| dead::requeue(tx, ids, now_ms))
    }
}

/// A delivered (or permanently refused) notification: its episode notes the outcome,
/// and its dedup key is recorded (or forgotten, for a resolve that re-arms).
fn apply_record(tx: &WriteTransaction, n: &Notification, now_ms: u64, failed: Option<&str>, max_keys: usize) -> Result<(), StateError> {
    episodes::note_sent(tx, n, now_ms, failed)?;
    match &n.record {
        Some(r) if r.op == RecordOp::Set => notified::record(tx, &r.app_key, &r.key, now_ms, max_keys),
        Some(r) => notified::forget(tx, &r.app_key, &r.key).map(drop),
        None => Ok(()),
    }
}

/// The settle's writes (see [`Outbox::settle`]), inside its transaction.
fn settle_in(tx: &WriteTransaction, outcomes: &[(OutboxEntry, Settle)], now_ms: u64, max_keys: usize) -> Result<(), StateError> {
    // Applications whose entries left the outbox here (a deleted one may be purged).
    let mut settled = BTreeSet::new();
    // The same, for the members of groups whose message settled.
    let mut members: Vec<String> = Vec::new();
    // Entries delivered or dead: taken out of the outbox together, before the purge
    // below looks at what is still pending.
    let mut gone: Vec<&OutboxEntry> = Vec::new();
    for (e, how) in outcomes {
        if !matches!(how, Settle::Retry { .. })
            && let Some(r) = &e.notification.record
        {
            settled.insert(r.app_key.as_str());
        }
        match how {
            Settle::Delivered => {
                gone.push(e);
                apply_record(tx, &e.notification, now_ms, None, max_keys)?;
                members.extend(groups::settle(tx, e, None, true, now_ms, max_keys)?);
            }
            Settle::Retry { next_ms, error } => outbox::reschedule(tx, e, *next_ms, error)?,
            Settle::Dead { error, permanent } => {
                gone.push(e);
                if *permanent {
                    apply_record(tx, &e.notification, now_ms, Some(error), max_keys)?;
                } else {
                    // Not recorded (the next pass decides again), but the episode says
                    // it failed.
                    episodes::note_sent(tx, &e.notification, now_ms, Some(error))?;
                }
                members.extend(groups::settle(tx, e, Some(error), *permanent, now_ms, max_keys)?);
                let letter = DeadLetter {
                    id: e.id,
                    failed_ms: now_ms,
                    attempts: e.attempts + 1,
                    error: error.clone(),
                    permanent: *permanent,
                    notification: e.notification.clone(),
                };
                dead::insert(tx, &letter)?;
            }
        }
    }
    outbox::remove_entries(tx, &gone)?;
    settled.extend(members.iter().map(String::as_str));
    apps::purge_settled(tx, &settled)
}

/// The tests' shortcuts.
#[cfg(test)]
impl Outbox {
    /// Whether this notification (key, template, action) is waiting in the outbox.
    pub(crate) fn is_pending(&self, app: &str, key: &str, template: &str, action: crate::model::Action) -> Result<bool, StateError> {
        self.0.read_with(|tx| outbox::is_pending(tx, app, key, template, action))
    }
}

#[cfg(test)]
mod tests {
    use crate::state::tables::outbox::test_notification as n;
    use crate::state::{Settle, Store};

    /// A worker's two round trips: what is due comes with when the next is, and a
    /// settle carries the release of what waited out an outage (one that settled or
    /// was attempted since is left alone).
    #[test]
    fn due_gives_the_next_due_time_and_a_settle_carries_its_release() {
        let s = Store::in_memory().unwrap();
        s.enqueue(&[n("hook", "k1"), n("hook", "k2"), n("hook", "k3")], 10).unwrap();
        let o = s.outbox();
        let due = o.due_and_next("hook", 10, 10).unwrap();
        assert_eq!((due.entries.len(), due.next_due_ms), (3, Some(10)));
        let [a, b, c] = <[_; 3]>::try_from(due.entries).unwrap();
        let retry = |next_ms| Settle::Retry { next_ms, error: "503".into() };
        o.settle(&[(a.clone(), retry(5_000)), (b.clone(), retry(6_000))], 11).unwrap();
        let due = o.due_and_next("hook", 12, 10).unwrap();
        assert_eq!((due.entries.len(), due.next_due_ms), (1, Some(10)), "c is still due");
        // The destination answers again: c delivered and a released in one transaction;
        // b is left alone (the next attempt given for it is not the one its settle gave).
        let released = o.settle_releasing(&[(c, Settle::Delivered)], 20, "hook", &[(a.id, 5_000), (b.id, 1)]).unwrap();
        assert_eq!(released, 1);
        let due = o.due_and_next("hook", 20, 10).unwrap();
        assert_eq!(due.entries.iter().map(|e| e.id).collect::<Vec<_>>(), [a.id]);
        assert_eq!(due.next_due_ms, Some(20), "a is due now; b still waits for 6,000");
        assert_eq!(o.next_due_ms("hook").unwrap(), Some(20));
        assert!(s.pass().is_notified("ns/a@u", "k3").unwrap(), "the settle in the same transaction recorded c");
    }
}
