//! Hold-downs: per Application and condition, since when a condition with `for:` has
//! held, so a hold-down survives a restart (table `holds`).

use crate::state::kv::{TableDefinition, WriteTransaction};

use super::{StateError, StateStore, remove_app_entries, storage};

pub(super) const HOLDS: TableDefinition<&str, u64> = TableDefinition::new("holds");

pub(super) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(HOLDS).map_err(storage)?;
    Ok(())
}

/// A deleted Application's hold-downs go.
pub(super) fn forget_app_in(tx: &WriteTransaction, app: &str) -> Result<(), StateError> {
    remove_app_entries(&mut tx.open_table(HOLDS).map_err(storage)?, app)?;
    Ok(())
}

impl StateStore {
    /// Since when (unix ms) a held condition has held, if it is being held.
    pub fn hold_since(&self, app: &str, key: &str) -> Result<Option<u64>, StateError> {
        self.view()?.hold_since(app, key)
    }

    /// Starts (`Some(since)`) or ends (`None`) a hold-down.
    #[cfg(test)]
    pub fn set_hold(&self, app: &str, key: &str, since_ms: Option<u64>) -> Result<(), StateError> {
        let tx = self.db().begin_write().map_err(storage)?;
        Self::set_hold_in(&tx, app, key, since_ms)?;
        tx.commit().map_err(storage)
    }

    pub(super) fn set_hold_in(tx: &WriteTransaction, app: &str, key: &str, since_ms: Option<u64>) -> Result<(), StateError> {
        let mut table = tx.open_table(HOLDS).map_err(storage)?;
        let k = Self::full_key(app, key);
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
}

impl super::StateView {
    /// Since when (unix ms) a held condition has held, if it is being held.
    pub(super) fn hold_since(&self, app: &str, key: &str) -> Result<Option<u64>, StateError> {
        let table = self.tx.open_table(HOLDS).map_err(storage)?;
        Ok(table.get(StateStore::full_key(app, key).as_str()).map_err(storage)?.map(|v| v.value()))
    }
}
