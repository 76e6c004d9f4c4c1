//! The audit inbox: audit batches any replica received, in the order they were taken,
//! for each shard's leader to read from where it left off. Kept in the store every
//! replica shares (PostgreSQL's own schema; any engine in the tests); each shard's
//! place in it (its cursor) is kept in that shard's own store, fenced as its passes are.

use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{StateError, storage};

/// Sequence number -> the batch (when it arrived, from which cluster, its events).
/// Numbers are given one after another and batches leave from the front only, so
/// the batches held are one run of numbers.
const INBOX: TableDefinition<u64, &str> = TableDefinition::new("audit_inbox");
/// Sequence number -> when the batch arrived (unix ms): what forgetting reads, never
/// the batches themselves.
const ARRIVED: TableDefinition<u64, u64> = TableDefinition::new("audit_inbox_arrived");
/// Shard -> the last sequence number its leader has taken and made durable: what the
/// inbox may forget once every shard is past it.
const ACKED: TableDefinition<u64, u64> = TableDefinition::new("audit_inbox_acked");
/// In a shard's own store: `"cursor"` -> the last sequence number taken.
const CURSOR: TableDefinition<&str, u64> = TableDefinition::new("audit_inbox_cursor");
/// The key of [`ACKED`] that holds the last sequence number given.
const LAST_GIVEN: u64 = u64::MAX;

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(INBOX).map_err(storage)?;
    tx.open_table(ARRIVED).map_err(storage)?;
    tx.open_table(ACKED).map_err(storage)?;
    tx.open_table(CURSOR).map_err(storage)?;
    Ok(())
}

/// Appends a batch (arrived at `at_ms`) after the last one; `None` when the inbox
/// holds `max` batches already (nothing written).
pub(in crate::state) fn push(tx: &WriteTransaction, batch: &str, at_ms: u64, max: u64) -> Result<Option<u64>, StateError> {
    let mut t = tx.open_table(INBOX).map_err(storage)?;
    if t.len().map_err(storage)? >= max {
        return Ok(None);
    }
    // The sequence never goes back, also once the inbox was emptied: the last number
    // given is kept (under a key no shard has).
    let mut acked = tx.open_table(ACKED).map_err(storage)?;
    let seq = acked.get(LAST_GIVEN).map_err(storage)?.map_or(0, |v| v.value()).saturating_add(1);
    acked.insert(LAST_GIVEN, seq).map_err(storage)?;
    t.insert(seq, batch).map_err(storage)?;
    tx.open_table(ARRIVED).map_err(storage)?.insert(seq, at_ms).map_err(storage)?;
    Ok(Some(seq))
}

/// The first batch after `seq`, read alone (a batch can be megabytes): the next
/// number, or the first held when the ones after `seq` were forgotten.
pub(in crate::state) fn next(tx: &ReadTransaction, seq: u64) -> Result<Option<(u64, String)>, StateError> {
    let t = tx.open_table(INBOX).map_err(storage)?;
    let want = seq.saturating_add(1);
    if let Some(v) = t.get(want).map_err(storage)? {
        return Ok(Some((want, v.value().to_string())));
    }
    let first = tx.open_table(ARRIVED).map_err(storage)?.first().map_err(storage)?.map(|(k, _)| k.value());
    match first.filter(|f| *f > want) {
        Some(f) => Ok(t.get(f).map_err(storage)?.map(|v| (f, v.value().to_string()))),
        None => Ok(None),
    }
}

/// The last sequence number given (0: none yet).
pub(in crate::state) fn last_given(tx: &ReadTransaction) -> Result<u64, StateError> {
    Ok(tx.open_table(ACKED).map_err(storage)?.get(LAST_GIVEN).map_err(storage)?.map_or(0, |v| v.value()))
}

/// How many batches the inbox holds.
pub(in crate::state) fn len(tx: &ReadTransaction) -> Result<u64, StateError> {
    tx.open_table(INBOX).map_err(storage)?.len().map_err(storage)
}

/// Shard `shard` has taken everything up to `seq` and made it durable; the batches
/// every one of `shards` has taken are forgotten (at most `max_removed` at a time),
/// and so are those that arrived before `expired_before_ms` (whatever was not taken
/// by then is past the audit input's age bound, and a reader drops it). Reads only the
/// arrivals. Returns how many were forgotten.
pub(in crate::state) fn ack(
    tx: &WriteTransaction,
    (shard, seq): (u32, u64),
    shards: u32,
    expired_before_ms: u64,
    max_removed: usize,
) -> Result<usize, StateError> {
    let mut acked = tx.open_table(ACKED).map_err(storage)?;
    let before = acked.get(u64::from(shard)).map_err(storage)?.map_or(0, |v| v.value());
    acked.insert(u64::from(shard), before.max(seq)).map_err(storage)?;
    let mut all = u64::MAX;
    for s in 0..shards {
        all = all.min(acked.get(u64::from(s)).map_err(storage)?.map_or(0, |v| v.value()));
    }
    let mut arrived = tx.open_table(ARRIVED).map_err(storage)?;
    let mut gone = Vec::new();
    for item in arrived.range::<u64>(..).map_err(storage)?.take(max_removed) {
        let (k, at) = item.map_err(storage)?;
        if k.value() > all && at.value() >= expired_before_ms {
            break;
        }
        gone.push(k.value());
    }
    arrived.remove_many(&gone).map_err(storage)?;
    tx.open_table(INBOX).map_err(storage)?.remove_many(&gone).map_err(storage)?;
    Ok(gone.len())
}

/// A shard's cursor (0: nothing taken yet).
pub(in crate::state) fn cursor(tx: &ReadTransaction) -> Result<u64, StateError> {
    Ok(tx.open_table(CURSOR).map_err(storage)?.get("cursor").map_err(storage)?.map_or(0, |v| v.value()))
}

pub(in crate::state) fn set_cursor(tx: &WriteTransaction, seq: u64) -> Result<(), StateError> {
    tx.open_table(CURSOR).map_err(storage)?.insert("cursor", seq).map_err(storage)?;
    Ok(())
}
