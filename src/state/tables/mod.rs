//! The store's tables, each private to its module: free functions over a transaction
//! (`&WriteTransaction` to write, `&ReadTransaction` to read), which the faces
//! (`pass.rs`, `outbox.rs`, `history.rs`, `message_refs.rs`) call by name. Nothing here
//! opens or commits a transaction: the face that calls decides what goes in one.
//!
//! - `notified`: delivered dedup keys; `holds`: hold-downs; `apps`: notes, deleted
//!   Applications, and the purge of one;
//! - `episodes`: the drift history and its indexes; `operations`, `break_glass`: the
//!   records kept per Application in time order (`timed`);
//! - `outbox`: entries, the due index, depth counters, in-flight markers; `dead`: dead
//!   letters and quarantined entries; `groups`: grouped notifications; `files`: the
//!   outbox in queueing order and the file a service is writing;
//! - `message_refs`: where sent chat messages are; `inbox`: the audit batches any
//!   replica received, for each shard's leader, and each shard's place in them.

pub(super) mod apps;
pub(super) mod break_glass;
pub(super) mod dead;
pub(super) mod episodes;
pub(super) mod files;
pub(super) mod groups;
pub(super) mod holds;
pub(super) mod inbox;
pub(super) mod message_refs;
pub(super) mod notified;
pub(super) mod operations;
pub(super) mod outbox;
mod timed;

use serde::{Deserialize, Serialize};

use super::kv::{Field, Table, TableDefinition, WriteTransaction};
use super::{StateError, storage};

/// Separates the Application key from the rest of a key (neither can contain NUL).
pub(super) const SEP: char = '\u{0}';

/// Small counters and markers of the store: the next outbox id, which indexes were
/// built.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Creates every table (and builds what an older state file lacks), in the
/// transaction that opens the store.
pub(super) fn create_all(tx: &WriteTransaction) -> Result<(), StateError> {
    notified::create_tables(tx)?;
    apps::create_tables(tx)?;
    outbox::create_tables(tx)?;
    episodes::create_tables(tx)?;
    holds::create_tables(tx)?;
    message_refs::create_tables(tx)?;
    operations::create_tables(tx)?;
    break_glass::create_tables(tx)?;
    groups::create_tables(tx)?;
    inbox::create_tables(tx)?;
    files::create_tables(tx)?;
    Ok(())
}

/// The tables keyed by the Application (`<app>` or `<app>\0...`) that a pass's write
/// and a settle read and write: on PostgreSQL their Applications' ranges are read with
/// the BEGIN ([`written_spans`]), so what they read and write there costs no round trip.
const WRITTEN_BY_APP: [&str; 11] = [
    notified::NOTIFIED.name(),
    holds::HOLDS.name(),
    episodes::LATEST.name(),
    episodes::OPEN.name(),
    operations::OPERATIONS.latest.name(),
    break_glass::EXCEPTIONS.latest.name(),
    apps::NOTES.name(),
    apps::DELETED.name(),
    outbox::PENDING.name(),
    groups::MEMBERSHIP.name(),
    break_glass::EXCEPTIONS.records.name(),
];

/// Small tables a pass's write and a settle read whole: the outbox's depth counters
/// (one per service) and the open episodes' class counters.
const WRITTEN_WHOLE: [&str; 2] = [outbox::DEPTH.name(), episodes::OPEN_BY_CLASS.name()];

/// The key ranges a write for `apps` reads with its BEGIN (`kv::Database::begin_write_reading`):
/// each Application's keys, the small counter tables, and the next outbox id. Missing
/// one costs a round trip, never a wrong answer.
pub(super) fn written_spans<'a>(
    apps: impl IntoIterator<Item = &'a str>,
) -> Vec<(&'static [&'static str], String, String, &'static [Followed])> {
    let mut spans: Vec<(&'static [&'static str], String, String, &'static [Followed])> =
        apps.into_iter().map(|a| (&WRITTEN_BY_APP[..], a.to_string(), format!("{a}\u{1}"), &FOLLOWED[..])).collect();
    spans.push((&WRITTEN_WHOLE[..], String::new(), "\u{10ffff}".to_string(), &[]));
    spans.push((&NEXT_ID[..], "next_id".to_string(), "next_id\u{0}".to_string(), &[]));
    spans
}

/// (target, pointer): an entry read through a pointer keyed by the Application.
type Followed = (&'static str, &'static str);

/// The Application's latest episode, through `latest_episode` (its key is not the
/// Application's): read with its keys by a pass's view, its write and a settle.
pub(super) const FOLLOWED: [Followed; 1] = [(episodes::EPISODES.name(), episodes::LATEST.name())];

const NEXT_ID: [&str; 1] = [META.name()];

/// `"<app key>\u{0}<key>"`: a key of a table keyed per Application.
pub(super) fn full_key(app: &str, key: &str) -> String {
    format!("{app}{SEP}{key}")
}

/// The half-open key range holding one Application's entries.
pub(super) fn app_range(app: &str) -> (String, String) {
    (format!("{app}{SEP}"), format!("{app}\u{1}"))
}

/// Removes every entry of one Application from a table keyed `<app>\0...`; returns
/// how many there were.
pub(super) fn remove_app_entries<V: Field>(table: &mut Table<&str, V>, app: &str) -> Result<usize, StateError> {
    let (lo, hi) = app_range(app);
    let mut n = 0;
    table
        .retain_in(lo.as_str()..hi.as_str(), |_, _| {
            n += 1;
            false
        })
        .map_err(storage)?;
    Ok(n)
}

/// The next outbox id (entries and dead letters share the sequence).
pub(super) fn next_id(tx: &WriteTransaction) -> Result<u64, StateError> {
    let mut meta = tx.open_table(META).map_err(storage)?;
    let id = meta.get("next_id").map_err(storage)?.map_or(1, |v| v.value());
    meta.insert("next_id", id + 1).map_err(storage)?;
    Ok(id)
}

/// Runs `build` once per state file: a file written before what it builds (an index,
/// counters) existed gets it at its first open, and the marker `indexed:<name>` in
/// `meta` says so, so later opens read nothing.
pub(super) fn once_per_file(tx: &WriteTransaction, name: &str, build: impl FnOnce() -> Result<(), StateError>) -> Result<(), StateError> {
    let marker = format!("indexed:{name}");
    if tx.open_table(META).map_err(storage)?.get(marker.as_str()).map_err(storage)?.is_some() {
        return Ok(());
    }
    build()?;
    tx.open_table(META).map_err(storage)?.insert(marker.as_str(), 1).map_err(storage)?;
    Ok(())
}

/// Fills `index` from `table` once per state file ([`once_per_file`]). `entry` gives an
/// entry's index key (`None`: not indexed).
pub(super) fn index_once(
    tx: &WriteTransaction,
    name: &str,
    table: TableDefinition<&str, &str>,
    index: TableDefinition<&str, ()>,
    entry: impl Fn(&str, &str) -> Result<Option<String>, StateError>,
) -> Result<(), StateError> {
    once_per_file(tx, name, || {
        let source = tx.open_table(table).map_err(storage)?;
        let mut idx = tx.open_table(index).map_err(storage)?;
        // An index that has entries was kept up to date by a build that knew it.
        if idx.is_empty().map_err(storage)? {
            for item in source.iter().map_err(storage)? {
                let (k, v) = item.map_err(storage)?;
                if let Some(key) = entry(k.value(), v.value())? {
                    idx.insert(key.as_str(), ()).map_err(storage)?;
                }
            }
        }
        Ok(())
    })
}

pub(super) fn to_json<T: Serialize>(v: &T) -> Result<String, StateError> {
    serde_json::to_string(v).map_err(storage)
}

pub(super) fn from_json<T: for<'de> Deserialize<'de>>(s: &str) -> Result<T, StateError> {
    serde_json::from_str(s).map_err(storage)
}

/// Every value of a JSON table, in key order (for the CLI's listings).
pub(super) fn all_of<K: super::kv::KeyField, T: for<'de> Deserialize<'de>>(
    tx: &super::kv::ReadTransaction,
    table: TableDefinition<K, &str>,
) -> Result<Vec<T>, StateError> {
    let t = tx.open_table(table).map_err(storage)?;
    let mut out = Vec::new();
    for item in t.iter().map_err(storage)? {
        let (_, v) = item.map_err(storage)?;
        out.push(from_json(v.value())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_is_built_once_per_state_file() {
        const T: TableDefinition<&str, &str> = TableDefinition::new("t");
        const I: TableDefinition<&str, ()> = TableDefinition::new("t_by_value");
        let s = crate::state::Store::in_memory().unwrap();
        let put = |k: &str, v: &str| {
            let tx = s.db().begin_write().unwrap();
            tx.open_table(T).unwrap().insert(k, v).unwrap();
            tx.commit().unwrap();
        };
        let index = || {
            let tx = s.db().begin_write().unwrap();
            index_once(&tx, "t_by_value", T, I, |k, v| Ok((v != "skip").then(|| format!("{v}/{k}")))).unwrap();
            tx.commit().unwrap();
            let tx = s.db().begin_read().unwrap();
            let t = tx.open_table(I).unwrap();
            t.iter().unwrap().map(|e| e.unwrap().0.value().to_string()).collect::<Vec<_>>()
        };
        put("a", "2");
        put("b", "1");
        put("c", "skip");
        assert_eq!(index(), ["1/b", "2/a"]);
        put("d", "0");
        assert_eq!(index(), ["1/b", "2/a"], "built once: later opens read nothing (the index is kept by its writers)");
    }
}
