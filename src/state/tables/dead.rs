//! Where the outbox's failures go: dead letters (what finally failed, kept for
//! `driftwatch deliveries` and put back on demand) and quarantined entries (what could
//! not be decoded, kept as text).

use serde::{Deserialize, Serialize};

use super::outbox::{DEPTH, MAX_OUTBOX_PER_SERVICE, OutboxEntry, PENDING, count_out, insert_entry, pending_key};
use super::{from_json, next_id, to_json};
use crate::model::Notification;
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{StateError, storage};

/// id -> JSON [`DeadLetter`].
pub(in crate::state) const DEAD: TableDefinition<u64, &str> = TableDefinition::new("dead_letters");

/// id -> JSON [`Quarantined`]: outbox entries that could not be decoded.
pub(in crate::state) const QUARANTINE: TableDefinition<u64, &str> = TableDefinition::new("outbox_quarantine");

/// Most dead letters kept (oldest dropped).
pub const MAX_DEAD_LETTERS: usize = 1_000;

/// A notification that finally failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub id: u64,
    pub failed_ms: u64,
    pub attempts: u32,
    pub error: String,
    /// Permanent failures (a 400, an unknown channel) are recorded as delivered so they
    /// are not re-sent; others are decided again at the next evaluation.
    pub permanent: bool,
    pub notification: Notification,
}

/// An outbox entry that could not be decoded, kept as text for whoever looks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    pub id: u64,
    pub at_ms: u64,
    pub service: String,
    pub error: String,
    /// The entry's stored text, at most 4 KiB of it.
    pub raw: String,
}

/// What `Outbox::requeue_dead` did, by dead letter id.
#[derive(Debug, Default, PartialEq)]
pub struct Requeued {
    /// Back in the outbox, with the service it goes to.
    pub queued: Vec<(u64, String)>,
    /// Already in flight again: the dead letter is dropped.
    pub in_flight: Vec<u64>,
    /// Its service's outbox is full: left in the dead letters.
    pub full: Vec<u64>,
    /// No such dead letter.
    pub missing: Vec<u64>,
}

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(DEAD).map_err(storage)?;
    tx.open_table(QUARANTINE).map_err(storage)?;
    Ok(())
}

/// Moves undecodable entries (due key, id, why) out of the outbox into the
/// quarantine, with their text as it was (cut at 4 KiB). Finding an entry's
/// in-flight marker needs its key, which cannot be decoded, so the in-flight index
/// is scanned for the id: once per damaged entry, never on the delivery path.
pub(in crate::state) fn quarantine(
    tx: &WriteTransaction,
    service: &str,
    bad: &[(String, u64, String)],
    now_ms: u64,
) -> Result<(), StateError> {
    {
        let mut entries = tx.open_table(super::outbox::ENTRIES).map_err(storage)?;
        let mut index = tx.open_table(super::outbox::DUE).map_err(storage)?;
        let mut depth = tx.open_table(DEPTH).map_err(storage)?;
        let mut pending = tx.open_table(PENDING).map_err(storage)?;
        let mut quarantine = tx.open_table(QUARANTINE).map_err(storage)?;
        for (due, id, error) in bad {
            let Some(raw) = entries.remove(*id).map_err(storage)?.map(|v| v.value().to_string()) else { continue };
            index.remove(due.as_str()).map_err(storage)?;
            count_out(&mut depth, service)?;
            pending.retain(|_, v| v != *id).map_err(storage)?;
            tracing::error!(service, id, %error, "an outbox entry cannot be read: quarantined (driftwatch deliveries --failed)");
            let raw = crate::text::prefix(&raw, 4096).to_string();
            let q = Quarantined { id: *id, at_ms: now_ms, service: service.to_string(), error: error.clone(), raw };
            quarantine.insert(*id, to_json(&q)?.as_str()).map_err(storage)?;
            while quarantine.len().map_err(storage)? > MAX_DEAD_LETTERS as u64 {
                if quarantine.pop_first().map_err(storage)?.is_none() {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// How many dead letters the store keeps (its length, not a scan).
pub(in crate::state) fn count(tx: &ReadTransaction) -> Result<u64, StateError> {
    tx.open_table(DEAD).map_err(storage)?.len().map_err(storage)
}

/// Dead-letters a notification that never entered the outbox (its service is not
/// configured).
pub(in crate::state) fn reject(tx: &WriteTransaction, n: &Notification, error: &str, now_ms: u64) -> Result<(), StateError> {
    let id = next_id(tx)?;
    insert(tx, &DeadLetter { id, failed_ms: now_ms, attempts: 0, error: error.to_string(), permanent: false, notification: n.clone() })
}

/// Keeps a dead letter (the oldest go past [`MAX_DEAD_LETTERS`]).
pub(in crate::state) fn insert(tx: &WriteTransaction, dead: &DeadLetter) -> Result<(), StateError> {
    let mut t = tx.open_table(DEAD).map_err(storage)?;
    t.insert(dead.id, to_json(dead)?.as_str()).map_err(storage)?;
    while t.len().map_err(storage)? > MAX_DEAD_LETTERS as u64 {
        let Some(first) = t.first().map_err(storage)?.map(|(k, _)| k.value()) else { break };
        t.remove(first).map_err(storage)?;
    }
    Ok(())
}

/// Puts dead letters back in the outbox (`ids`, or every one), due at `now_ms`
/// with their attempts reset, keeping their idempotency key (a receiver that did
/// get a delivery the sender gave up on drops the copy). One whose notification is
/// in flight again (decided anew meanwhile) just leaves the dead letters; one whose
/// service's outbox is full stays where it is. Operator's action: no re-check of
/// the dedup key, so a permanent failure fixed at the receiver is sent.
pub(in crate::state) fn requeue(tx: &WriteTransaction, ids: Option<&[u64]>, now_ms: u64) -> Result<Requeued, StateError> {
    let mut report = Requeued::default();
    {
        let mut dead = tx.open_table(DEAD).map_err(storage)?;
        let chosen: Vec<u64> = match ids {
            Some(ids) => ids.to_vec(),
            None => dead.iter().map_err(storage)?.map(|i| i.map(|(k, _)| k.value())).collect::<Result<_, _>>().map_err(storage)?,
        };
        for id in chosen {
            let Some(letter) = dead.get(id).map_err(storage)?.map(|v| from_json::<DeadLetter>(v.value())) else {
                report.missing.push(id);
                continue;
            };
            let letter = letter?;
            let n = letter.notification;
            let service = n.destination.service.clone();
            let in_flight = match pending_key(&n) {
                Some(p) => tx.open_table(PENDING).map_err(storage)?.get(p.as_str()).map_err(storage)?.is_some(),
                None => false,
            };
            if !in_flight {
                let queued = tx.open_table(DEPTH).map_err(storage)?.get(service.as_str()).map_err(storage)?.map_or(0, |v| v.value());
                if queued >= MAX_OUTBOX_PER_SERVICE as u64 {
                    report.full.push(id);
                    continue;
                }
                let new_id = next_id(tx)?;
                let pkey = pending_key(&n);
                let entry = OutboxEntry {
                    id: new_id,
                    notification: n,
                    attempts: 0,
                    enqueued_ms: now_ms,
                    next_attempt_ms: now_ms,
                    last_error: None,
                };
                insert_entry(tx, &entry)?;
                if let Some(p) = pkey {
                    tx.open_table(PENDING).map_err(storage)?.insert(p.as_str(), new_id).map_err(storage)?;
                }
                report.queued.push((id, service));
            } else {
                report.in_flight.push(id);
            }
            dead.remove(id).map_err(storage)?;
        }
    }
    Ok(report)
}
