//! A shard's leader reading the audit inbox (`audit::inbox`): the batches any replica
//! received after this shard's place, judged against this shard's own index, one pass
//! per new attempt as for a batch of its own listener; then the passes made durable and
//! the place recorded (fenced: a deposed leader cannot move it), and what every shard
//! has taken forgotten. Not before the shard's Applications are all indexed since it
//! took the shard: an event read earlier would find no unit and be lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::EvalThread;
use crate::cluster::watch::Stream;
use crate::state::AuditInbox;

/// Batches read per turn at most, each alone (the loop then looks at the flush, the
/// watch and the wake-ups again; the next poll goes on).
const MAX_BATCHES_PER_TURN: usize = 64;

/// How often the daemon asks every shard's leader to read the inbox, besides when a
/// batch arrives at this replica.
pub(in crate::daemon) const INBOX_POLL: Duration = Duration::from_millis(200);

/// What a unit reading the inbox keeps.
pub(in crate::daemon) struct InboxReader {
    inbox: AuditInbox,
    /// The place read up to; `None`: read it from the shard's store first (after
    /// taking the shard over, or when recording it failed).
    at: Option<u64>,
    /// With sharding, per stream: whether a list that started after this unit took the
    /// shard over has ended. The index is whole once every stream's has.
    listed: BTreeMap<Stream, bool>,
}

impl InboxReader {
    pub(in crate::daemon) fn new(inbox: AuditInbox) -> InboxReader {
        InboxReader { inbox, at: None, listed: BTreeMap::new() }
    }
}

impl EvalThread {
    /// This unit took its store over (a takeover, or a reopen after a failed write):
    /// its place is read again from the store.
    pub(super) fn inbox_taken_over(&mut self) {
        if let Some(r) = self.inbox.as_mut() {
            r.at = None;
        }
    }

    /// Its election gave this unit the shard: with sharding, its index is whole only
    /// after the relist that follows (a reopen of the store keeps the index).
    pub(super) fn inbox_owned(&mut self) {
        if let Some(r) = self.inbox.as_mut() {
            r.listed.clear();
        }
    }

    /// A list of `stream` started (`done` false) or ended.
    pub(super) fn inbox_listed(&mut self, stream: &Stream, done: bool) {
        if let Some(r) = self.inbox.as_mut() {
            match done {
                false => {
                    r.listed.insert(stream.clone(), false);
                }
                true => {
                    if let Some(d) = r.listed.get_mut(stream) {
                        *d = true;
                    }
                }
            }
        }
    }

    /// Whether this unit's index holds every Application of its shard.
    fn indexed(&self, r: &InboxReader) -> bool {
        match self.sharded {
            true => self.lists.streams().iter().all(|s| r.listed.get(s).copied().unwrap_or(false)),
            false => self.lists.all_done(),
        }
    }

    /// Reads what came after this shard's place (see the module's documentation).
    pub(super) fn read_inbox(&mut self) {
        let Some(r) = self.inbox.as_ref() else { return };
        let (Some(store), Some(shared)) = (self.lead.store().cloned(), self.eval.audit().cloned()) else { return };
        if !self.indexed(r) || self.lead.write_failing() {
            return;
        }
        let (inbox, at) = (r.inbox.clone(), r.at);
        let cursor = store.inbox_cursor();
        let Some(start) = self.place(at, &cursor, &inbox) else { return };
        let max_age = self.eval.runtime().audit.times.max_age;
        let mut at = start;
        for _ in 0..MAX_BATCHES_PER_TURN {
            let (seq, batch) = match inbox.next_after(at) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the audit inbox");
                    break;
                }
            };
            at = seq;
            // Past the age bound since it arrived (its shard had no leader that long):
            // its events would be refused as replays if they arrived now.
            let arrived = crate::state::from_millis(batch.at_ms);
            if arrived.checked_add_signed(max_age).is_none_or(|until| until < chrono::Utc::now()) {
                crate::metrics::METRICS.audit_dropped.inc("inbox-expired");
                continue;
            }
            let relevant = crate::audit::inbox::read(&shared, &batch);
            let waited = crate::clock::wall_ms().saturating_sub(batch.at_ms);
            let arrived = Instant::now().checked_sub(Duration::from_millis(waited)).unwrap_or_else(Instant::now);
            self.eval.received(Some(batch.at_ms));
            self.audited(relevant, arrived);
            self.eval.received(None);
        }
        if let Some(r) = self.inbox.as_mut() {
            r.at = Some(at);
        }
        if at != start {
            self.record_place(&cursor, &inbox, at);
        }
    }

    /// Where this shard's reading goes on from: `at`, else its place in its store. A
    /// place past the last number the inbox gave belongs to an inbox emptied and made
    /// again (a restored database): read from its start (what was sent is not sent
    /// again).
    fn place(&self, at: Option<u64>, cursor: &crate::state::InboxCursor, inbox: &AuditInbox) -> Option<u64> {
        if let Some(at) = at {
            return Some(at);
        }
        match cursor.get().and_then(|at| inbox.last_given().map(|last| (at, last))) {
            Ok((at, last)) if at > last => {
                tracing::warn!(
                    shard = self.shard,
                    place = at,
                    last,
                    "this shard's place is past the audit inbox's last batch: reading it from its start"
                );
                Some(0)
            }
            Ok((at, _)) => Some(at),
            Err(e) => {
                tracing::warn!(error = %e, shard = self.shard, "cannot read this shard's place in the audit inbox");
                None
            }
        }
    }

    /// The passes of what was read made durable, then the place recorded and what all
    /// shards took forgotten. When either fails the place is read again from the store
    /// next time: what was read is read again, and what was already taken is dropped
    /// as replayed or sends nothing twice (a notification's key).
    fn record_place(&mut self, cursor: &crate::state::InboxCursor, inbox: &AuditInbox, at: u64) {
        // A pass that failed its write (its attempt only in memory until it is tried
        // again) keeps the place where it is.
        let recorded = self.flush()
            && !self.lead.write_failing()
            && cursor.set(at).inspect_err(|e| tracing::warn!(error = %e, "cannot record the audit inbox place")).is_ok();
        if !recorded {
            if let Some(r) = self.inbox.as_mut() {
                r.at = None;
            }
            return;
        }
        let max_age = self.eval.runtime().audit.times.max_age;
        let expired = chrono::Utc::now().checked_sub_signed(max_age).map_or(0, crate::state::to_millis);
        if let Err(e) = inbox.ack(self.shard, at, self.eval.runtime().shards, expired) {
            tracing::warn!(error = %e, "cannot forget what every shard took of the audit inbox");
        }
        if let Ok(n) = inbox.len() {
            crate::metrics::METRICS.audit_inbox.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
