//! The audit inbox's two faces. [`AuditInbox`], on the store every replica shares: the
//! receiving replica appends an audit batch (its relevant-looking events) and answers
//! the API server only once it is written; each shard's leader reads what came after
//! its place and says how far it got, and what every shard has taken is forgotten.
//! [`InboxCursor`], on a shard's own store: the shard's place, written (fenced) by its
//! leader once the passes of what it took are durable.

use std::sync::Arc;

use super::StateError;
use super::store::Shared;
use super::tables::inbox;

/// Batches the inbox holds at most: past it a batch is refused (the API server sends
/// it again later) rather than the inbox growing while a shard has no leader.
pub const MAX_INBOX_BATCHES: u64 = 10_000;

/// Batches the spokes' feeds may fill the inbox to: four fifths of it, the rest kept
/// for the hub's.
pub const MAX_SPOKE_BATCHES: u64 = MAX_INBOX_BATCHES / 5 * 4;

/// Batches forgotten per acknowledgement at most (the rest go with the next ones).
const MAX_FORGOTTEN: usize = 1_000;

/// One batch as the inbox keeps it: when it arrived, the cluster whose API server sent
/// it, and its events (a JSON array, as the audit input kept them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxBatch {
    pub at_ms: u64,
    pub cluster: String,
    pub events: String,
}

impl InboxBatch {
    /// `"<at_ms>\t<cluster>\n<events>"`.
    fn encode(&self) -> String {
        format!("{}\t{}\n{}", self.at_ms, self.cluster, self.events)
    }

    fn decode(v: &str) -> Result<InboxBatch, StateError> {
        let bad = || StateError::Storage("an audit inbox entry is not <time>\\t<cluster>\\n<events>".into());
        let (head, events) = v.split_once('\n').ok_or_else(bad)?;
        let (at, cluster) = head.split_once('\t').ok_or_else(bad)?;
        Ok(InboxBatch { at_ms: at.parse().map_err(|_| bad())?, cluster: cluster.to_string(), events: events.to_string() })
    }
}

/// The shared inbox (see the module's documentation).
#[derive(Clone)]
pub struct AuditInbox(Arc<Shared>);

impl AuditInbox {
    pub(super) fn new(shared: Arc<Shared>) -> AuditInbox {
        AuditInbox(shared)
    }

    /// Appends `batch` durably; its sequence number, or `None` when the inbox is full.
    /// A cluster name holding a tab or a line break is refused (the configuration's
    /// names never do).
    /// A spoke's batch (its `cluster` not empty) is refused past
    /// [`MAX_SPOKE_BATCHES`]: a spoke's token holder flooding the inbox cannot keep the
    /// hub's batches out.
    pub fn push(&self, batch: &InboxBatch) -> Result<Option<u64>, StateError> {
        let max = if batch.cluster.is_empty() { MAX_INBOX_BATCHES } else { MAX_SPOKE_BATCHES };
        self.push_within(batch, max)
    }

    fn push_within(&self, batch: &InboxBatch, max: u64) -> Result<Option<u64>, StateError> {
        if batch.cluster.contains(['\t', '\n']) {
            return Err(StateError::Refused(format!("cluster name {:?} holds a tab or a line break", batch.cluster)));
        }
        let encoded = batch.encode();
        self.0.write_with(|tx| inbox::push(tx, &encoded, batch.at_ms, max))
    }

    /// The first batch after `seq` (the next number, or the first held when those
    /// after `seq` were forgotten), read alone.
    pub fn next_after(&self, seq: u64) -> Result<Option<(u64, InboxBatch)>, StateError> {
        match self.0.read_with(|tx| inbox::next(tx, seq))? {
            Some((s, v)) => InboxBatch::decode(&v).map(|b| Some((s, b))),
            None => Ok(None),
        }
    }

    /// The last sequence number given (0: none): a shard's place past it belongs to an
    /// inbox that was emptied and made again.
    pub fn last_given(&self) -> Result<u64, StateError> {
        self.0.read_with(inbox::last_given)
    }

    /// How many batches wait (for one shard or another).
    pub fn len(&self) -> Result<u64, StateError> {
        self.0.read_with(inbox::len)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> Result<bool, StateError> {
        self.len().map(|n| n == 0)
    }

    /// Shard `shard` (of `shards`) took everything up to `seq` and made it durable:
    /// what every shard has taken is forgotten, and so is what arrived before
    /// `expired_before_ms` (taken by nobody in time, the audit input would drop it).
    /// Returns how many batches were forgotten.
    pub fn ack(&self, shard: u32, seq: u64, shards: u32, expired_before_ms: u64) -> Result<usize, StateError> {
        self.0.write_with(|tx| inbox::ack(tx, (shard, seq), shards.max(1), expired_before_ms, MAX_FORGOTTEN))
    }
}

/// A shard's place in the inbox, in the shard's own store.
#[derive(Clone)]
pub struct InboxCursor(Arc<Shared>);

impl InboxCursor {
    pub(super) fn new(shared: Arc<Shared>) -> InboxCursor {
        InboxCursor(shared)
    }

    /// The last sequence number this shard took (0: none).
    pub fn get(&self) -> Result<u64, StateError> {
        self.0.read_with(inbox::cursor)
    }

    /// Records that this shard took everything up to `seq`. On PostgreSQL the write is
    /// fenced like a pass's (its transaction takes the fence's lock and a deposed
    /// leader's is refused) and durable, which makes every pass written before it
    /// durable too.
    pub fn set(&self, seq: u64) -> Result<(), StateError> {
        self.0.write_with(|tx| inbox::set_cursor(tx, seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(at_ms: u64, n: u32) -> InboxBatch {
        InboxBatch { at_ms, cluster: "in-cluster".into(), events: format!("[{n}]") }
    }

    /// Batches come back in order after a place; what every shard took is forgotten
    /// and the numbering goes on after it; a full inbox refuses; an expired batch goes
    /// although a shard never took it.
    #[test]
    fn the_inbox_keeps_order_forgets_what_all_shards_took_and_is_bounded() {
        let store = crate::state::Store::in_memory().unwrap();
        let inbox = store.audit_inbox();
        let seqs: Vec<u64> = (0..5).map(|n| inbox.push(&batch(1_000 + u64::from(n), n)).unwrap().unwrap()).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
        assert_eq!(inbox.next_after(2).unwrap(), Some((3, batch(1_002, 2))));
        assert_eq!(inbox.next_after(5).unwrap(), None);
        // Shard 0 took up to 4, shard 1 up to 2: only 1 and 2 go.
        assert_eq!(inbox.ack(0, 4, 2, 0).unwrap(), 0, "shard 1 has taken nothing yet");
        assert_eq!(inbox.ack(1, 2, 2, 0).unwrap(), 2);
        assert_eq!(inbox.next_after(0).unwrap().map(|(s, _)| s), Some(3), "the first held after what was forgotten");
        // Expired before 1_004: 3 and 4 go though shard 1 has not taken them.
        assert_eq!(inbox.ack(1, 2, 2, 1_004).unwrap(), 2);
        assert_eq!(inbox.len().unwrap(), 1);
        assert_eq!(inbox.ack(0, 5, 2, 0).unwrap(), 0);
        assert_eq!(inbox.ack(1, 5, 2, 0).unwrap(), 1);
        assert!(inbox.is_empty().unwrap());
        assert_eq!(inbox.push(&batch(2_000, 9)).unwrap(), Some(6), "numbers never go back once emptied");
        assert_eq!(inbox.last_given().unwrap(), 6);
        let bad = InboxBatch { cluster: "a\tb".into(), ..batch(1, 1) };
        assert!(matches!(inbox.push(&bad), Err(StateError::Refused(_))));
    }

    #[test]
    fn a_full_inbox_refuses_and_the_cursor_is_kept() {
        let store = crate::state::Store::in_memory().unwrap();
        let inbox = store.audit_inbox();
        for n in 0..20 {
            assert!(inbox.push_within(&batch(n, 0), 20).unwrap().is_some());
        }
        assert_eq!(inbox.push_within(&batch(0, 0), 20).unwrap(), None, "full");
        assert_eq!(inbox.ack(0, 10, 1, 0).unwrap(), 10);
        assert!(inbox.push_within(&batch(0, 0), 20).unwrap().is_some(), "room again");
        let cursor = store.inbox_cursor();
        assert_eq!(cursor.get().unwrap(), 0);
        cursor.set(42).unwrap();
        assert_eq!(cursor.get().unwrap(), 42);
    }
}
