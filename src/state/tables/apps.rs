//! What the store keeps about an Application as a whole: its note (what the
//! subscription limits dropped), whether it was deleted with entries still in the
//! outbox, and the purge of everything about it once nothing of it is left there.

use std::collections::BTreeSet;

use super::{episodes, groups, notified, outbox};
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{StateError, storage};

/// state key -> a note about the Application for whoever looks (`driftwatch state
/// list`): what the subscription limits dropped.
pub(in crate::state) const NOTES: TableDefinition<&str, &str> = TableDefinition::new("app_notes");
/// Deleted Applications whose outbox entries have not all settled yet (state key ->
/// when the deletion was seen, unix ms): their state is purged when the last settles.
pub(in crate::state) const DELETED: TableDefinition<&str, u64> = TableDefinition::new("deleted_apps");

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(DELETED).map_err(storage)?;
    tx.open_table(NOTES).map_err(storage)?;
    Ok(())
}

/// Sets (`Some`) or clears (`None`) the Application's note.
pub(in crate::state) fn set_note(tx: &WriteTransaction, app: &str, note: Option<&str>) -> Result<(), StateError> {
    let mut notes = tx.open_table(NOTES).map_err(storage)?;
    match note {
        Some(text) => notes.insert(app, text).map_err(storage)?,
        None => notes.remove(app).map_err(storage)?,
    };
    Ok(())
}

/// The Application's note, if it has one.
pub(in crate::state) fn note(tx: &ReadTransaction, app: &str) -> Result<Option<String>, StateError> {
    let table = tx.open_table(NOTES).map_err(storage)?;
    Ok(table.get(app).map_err(storage)?.map(|v| v.value().to_string()))
}

/// Every Application with a note, and the note.
pub(in crate::state) fn notes(tx: &ReadTransaction) -> Result<Vec<(String, String)>, StateError> {
    let table = tx.open_table(NOTES).map_err(storage)?;
    let mut out = Vec::new();
    for item in table.iter().map_err(storage)? {
        let (k, v) = item.map_err(storage)?;
        out.push((k.value().to_string(), v.value().to_string()));
    }
    Ok(out)
}

/// Applications seen again (a pass of one not deleted): whatever was waiting to purge
/// them no longer applies.
pub(in crate::state) fn seen<'a>(tx: &WriteTransaction, apps: impl IntoIterator<Item = &'a str>) -> Result<(), StateError> {
    let mut deleted = tx.open_table(DELETED).map_err(storage)?;
    apps.into_iter().try_for_each(|app| deleted.remove(app).map(drop).map_err(storage))
}

/// Deleted Applications still waiting for their outbox entries to settle.
pub(in crate::state) fn deleted_waiting(tx: &ReadTransaction) -> Result<u64, StateError> {
    tx.open_table(DELETED).map_err(storage)?.len().map_err(storage)
}

/// A deleted Application: its state is purged now if nothing of it is in the outbox,
/// else marked so that the settle of its last entry purges it (a delivery settled
/// after the purge would write its key back, for an Application that no longer
/// exists).
pub(in crate::state) fn retire(tx: &WriteTransaction, app: &str, now_ms: u64) -> Result<(), StateError> {
    if outbox::has_pending(tx, app)? {
        tx.open_table(DELETED).map_err(storage)?.insert(app, now_ms).map_err(storage)?;
        Ok(())
    } else {
        purge(tx, app).map(drop)
    }
}

/// After entries of `apps` settled: purges those that were deleted and have nothing
/// left in the outbox. Reads one marker per Application, not the table.
pub(in crate::state) fn purge_settled(tx: &WriteTransaction, apps: &BTreeSet<&str>) -> Result<(), StateError> {
    let mut marked = Vec::new();
    {
        let deleted = tx.open_table(DELETED).map_err(storage)?;
        for app in apps {
            if deleted.get(*app).map_err(storage)?.is_some() {
                marked.push(*app);
            }
        }
    }
    for app in marked {
        if !outbox::has_pending(tx, app)? {
            purge(tx, app)?;
        }
    }
    Ok(())
}

/// Drops everything about one Application (dedup keys, hold-downs, the latest
/// episode pointer, the deletion marker, its note and group memberships); returns how
/// many dedup keys it had.
pub(in crate::state) fn purge(tx: &WriteTransaction, app: &str) -> Result<usize, StateError> {
    let n = notified::forget_app(tx, app)?;
    episodes::forget_app(tx, app)?;
    tx.open_table(DELETED).map_err(storage)?.remove(app).map_err(storage)?;
    tx.open_table(NOTES).map_err(storage)?.remove(app).map_err(storage)?;
    groups::forget_memberships(tx, app)?;
    Ok(n)
}
