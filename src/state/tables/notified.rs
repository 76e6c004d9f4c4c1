//! The delivered keys (table `notified`): per Application, each dedup key with when
//! its delivery settled. Only a settle records one ([`record`], in the settle's
//! transaction); a pass's re-arm forgets one; the oldest beyond the bound per
//! Application go.

use super::{SEP, app_range, full_key};
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{StateError, storage};

/// `"<app key>\u{0}<dedup key>"` -> unix milliseconds of the delivery.
pub(in crate::state) const NOTIFIED: TableDefinition<&str, u64> = TableDefinition::new("notified");

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(NOTIFIED).map_err(storage)?;
    Ok(())
}

/// Records a delivered notification, then prunes the Application's oldest keys beyond
/// `max_keys_per_app`.
pub(in crate::state) fn record(
    tx: &WriteTransaction,
    app: &str,
    key: &str,
    at_millis: u64,
    max_keys_per_app: usize,
) -> Result<(), StateError> {
    let mut table = tx.open_table(NOTIFIED).map_err(storage)?;
    table.insert(full_key(app, key).as_str(), at_millis).map_err(storage)?;
    let (lo, hi) = app_range(app);
    let mut entries: Vec<(String, u64)> = Vec::new();
    for item in table.range(lo.as_str()..hi.as_str()).map_err(storage)? {
        let (k, v) = item.map_err(storage)?;
        entries.push((k.value().to_string(), v.value()));
    }
    if entries.len() > max_keys_per_app {
        entries.sort_by_key(|(k, at)| (*at, k.clone()));
        let excess = entries.len() - max_keys_per_app;
        for (k, _) in entries.into_iter().take(excess) {
            table.remove(k.as_str()).map_err(storage)?;
        }
    }
    Ok(())
}

/// Forgets one key (a plain trigger whose condition turned false re-arms). Returns
/// whether it was there.
pub(in crate::state) fn forget(tx: &WriteTransaction, app: &str, key: &str) -> Result<bool, StateError> {
    let mut table = tx.open_table(NOTIFIED).map_err(storage)?;
    Ok(table.remove(full_key(app, key).as_str()).map_err(storage)?.is_some())
}

/// Forgets every key of a purged Application; returns how many there were.
pub(in crate::state) fn forget_app(tx: &WriteTransaction, app: &str) -> Result<usize, StateError> {
    super::remove_app_entries(&mut tx.open_table(NOTIFIED).map_err(storage)?, app)
}

/// When a key was recorded (unix ms), if it is.
pub(in crate::state) fn notified_at(tx: &ReadTransaction, app: &str, key: &str) -> Result<Option<u64>, StateError> {
    let table = tx.open_table(NOTIFIED).map_err(storage)?;
    Ok(table.get(full_key(app, key).as_str()).map_err(storage)?.map(|v| v.value()))
}

/// Every key of one Application with its delivery time.
pub(in crate::state) fn keys(tx: &ReadTransaction, app: &str) -> Result<Vec<(String, u64)>, StateError> {
    let table = tx.open_table(NOTIFIED).map_err(storage)?;
    let (lo, hi) = app_range(app);
    let mut out = Vec::new();
    for item in table.range(lo.as_str()..hi.as_str()).map_err(storage)? {
        let (k, v) = item.map_err(storage)?;
        let key = k.value().split_once(SEP).map(|(_, k)| k.to_string()).unwrap_or_default();
        out.push((key, v.value()));
    }
    Ok(out)
}

/// Every Application key with a recorded key.
pub(in crate::state) fn apps(tx: &ReadTransaction) -> Result<Vec<String>, StateError> {
    let table = tx.open_table(NOTIFIED).map_err(storage)?;
    let mut out: Vec<String> = Vec::new();
    for item in table.iter().map_err(storage)? {
        let (k, _) = item.map_err(storage)?;
        if let Some((app, _)) = k.value().split_once(SEP)
            && out.last().map(String::as_str) != Some(app)
        {
            out.push(app.to_string());
        }
    }
    Ok(out)
}
