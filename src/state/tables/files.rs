//! The outbox as a service that writes files reads it (`Deliverer::files`): its
//! entries in queueing order (by id), and the last id of the file it is writing, kept
//! before the file is sent so that a restart retakes exactly the same entries.
//!
//! Outbox ids only grow, and a file's entries settle together, so "this service's
//! entries up to id N" names the same set until they settle, whatever was queued
//! since: that one number per service is the file's membership.

use super::{from_json, groups, outbox};
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::tables::outbox::OutboxEntry;
use crate::state::{StateError, storage};

/// service -> the last outbox id of the file it is writing (its first is the
/// service's oldest entry).
const FILES: TableDefinition<&str, u64> = TableDefinition::new("outbox_files");

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(FILES).map_err(storage)?;
    Ok(())
}

/// What [`head`] read: up to `limit` entries of a service, oldest (smallest id) first,
/// the ones that could not be decoded (due key, id, why), and the last id of the file
/// it was writing, if one was marked.
pub(in crate::state) type Head = (Vec<OutboxEntry>, Vec<(String, u64, String)>, Option<u64>);

/// The first `limit` entries of `service` in queueing order. Reads the service's
/// keys of the due index (no entry decoded) to order them by id, then decodes only
/// the `limit` first.
pub(in crate::state) fn head(tx: &ReadTransaction, service: &str, limit: usize) -> Result<Head, StateError> {
    let mut keys: Vec<(u64, String)> = Vec::new();
    {
        let index = tx.open_table(outbox::DUE).map_err(storage)?;
        let (lo, hi) = (format!("{service}\u{0}"), format!("{service}\u{1}"));
        for item in index.range(lo.as_str()..hi.as_str()).map_err(storage)? {
            let (k, id) = item.map_err(storage)?;
            keys.push((id.value(), k.value().to_string()));
        }
    }
    keys.sort_unstable();
    keys.truncate(limit);
    let ids: Vec<u64> = keys.iter().map(|(id, _)| *id).collect();
    let mut out = Vec::with_capacity(ids.len());
    let mut bad = Vec::new();
    let entries = tx.open_table(outbox::ENTRIES).map_err(storage)?;
    for ((id, key), v) in keys.into_iter().zip(entries.get_many(&ids).map_err(storage)?) {
        let Some(v) = v else { continue };
        match from_json::<OutboxEntry>(v.value()) {
            Ok(mut e) => {
                groups::message(tx, &mut e)?;
                out.push(e);
            }
            Err(e) => bad.push((key, id, e.to_string())),
        }
    }
    let marked = tx.open_table(FILES).map_err(storage)?.get(service).map_err(storage)?.map(|v| v.value());
    Ok((out, bad, marked))
}

/// Marks the file `service` is about to send: its entries are those up to `last_id`.
pub(in crate::state) fn mark(tx: &WriteTransaction, service: &str, last_id: u64) -> Result<(), StateError> {
    tx.open_table(FILES).map_err(storage)?.insert(service, last_id).map_err(storage)?;
    Ok(())
}
