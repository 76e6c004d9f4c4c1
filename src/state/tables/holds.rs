//! Hold-downs: per Application and condition, since when a condition with `for:` has
//! held, so a hold-down survives a restart (table `holds`).

use std::collections::BTreeMap;

use super::{SEP, app_range, full_key, remove_app_entries};
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{StateError, storage};

pub(in crate::state) const HOLDS: TableDefinition<&str, u64> = TableDefinition::new("holds");

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(HOLDS).map_err(storage)?;
    Ok(())
}

/// A deleted Application's hold-downs go.
pub(in crate::state) fn forget_app(tx: &WriteTransaction, app: &str) -> Result<(), StateError> {
    remove_app_entries(&mut tx.open_table(HOLDS).map_err(storage)?, app)?;
    Ok(())
}

/// Starts (`Some(since)`) or ends (`None`) a hold-down.
pub(in crate::state) fn set_hold(tx: &WriteTransaction, app: &str, key: &str, since_ms: Option<u64>) -> Result<(), StateError> {
    let mut table = tx.open_table(HOLDS).map_err(storage)?;
    let k = full_key(app, key);
    match since_ms {
        Some(ms) => {
            table.insert(k.as_str(), ms).map_err(storage)?;
        }
        None => {
            table.remove(k.as_str()).map_err(storage)?;
        }
    }
    Ok(())
}

/// Since when (unix ms) a held condition has held, if it is being held.
#[cfg(test)]
pub(in crate::state) fn hold_since(tx: &ReadTransaction, app: &str, key: &str) -> Result<Option<u64>, StateError> {
    let table = tx.open_table(HOLDS).map_err(storage)?;
    Ok(table.get(full_key(app, key).as_str()).map_err(storage)?.map(|v| v.value()))
}

/// An Application's running hold-downs by hold key, since when.
pub(in crate::state) fn of_app(tx: &ReadTransaction, app: &str) -> Result<BTreeMap<String, u64>, StateError> {
    let (lo, hi) = app_range(app);
    let mut holds = BTreeMap::new();
    for item in tx.open_table(HOLDS).map_err(storage)?.range(lo.as_str()..hi.as_str()).map_err(storage)? {
        let (k, v) = item.map_err(storage)?;
        holds.insert(k.value().split_once(SEP).map(|(_, rest)| rest.to_string()).unwrap_or_default(), v.value());
    }
    Ok(holds)
}
