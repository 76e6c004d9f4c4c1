//! Break-glass exceptions in the state store, by when each opened ([`super::timed`]),
//! each with its transitions (opened, approved, active, refused, expired, overdue,
//! closed): the Application's history of them, and what a pass compares its judgement
//! with. `latest_break_glass` holds, per Application, where the last judged exception
//! is, whether it is closed, its fingerprint, and the newest exception the Application
//! ever had and whether it ended ([`Newest`]), so a pass of an Application without an
//! exception reads one short value, and no pruning of the records can bring a closed
//! exception back.

use chrono::{DateTime, Utc};

use super::SEP;
use super::timed::Timed;
use crate::drift::break_glass::{Newest, Record, State};
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{HistoryQuery, Retention, StateError, storage};

/// At most this many exceptions are kept per Application (the oldest go first).
pub const MAX_EXCEPTIONS_PER_APP: usize = 20;

pub(in crate::state) const EXCEPTIONS: Timed = Timed {
    records: TableDefinition::new("break_glass"),
    by_time: TableDefinition::new("break_glass_by_time"),
    latest: TableDefinition::new("latest_break_glass"),
    per_app: MAX_EXCEPTIONS_PER_APP,
    what: "break-glass exception",
};

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    EXCEPTIONS.create(tx)
}

/// What a pass reads first of an Application's exceptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestException {
    /// Where the last judged exception is (when it opened, unix ms).
    pub opened_ms: u64,
    pub closed: bool,
    pub fingerprint: String,
    /// The newest exception ever, when the store recorded it (`None`: written by a
    /// version that did not; the pass takes it from the last judged one).
    pub newest: Option<Newest>,
}

/// Marks the value's second layout (with [`Newest`]); the first began with a number.
const V2: &str = "v2";

fn format_latest(r: &Record) -> String {
    let closed = if r.break_glass.state == State::Closed { "1" } else { "0" };
    let fingerprint = r.break_glass.fingerprint();
    match &r.newest {
        Some(n) => format!(
            "{V2}{SEP}{}{SEP}{closed}{SEP}{}{SEP}{:x}{SEP}{}{SEP}{fingerprint}",
            r.opened_ms(),
            n.opened_ms,
            n.id_hash,
            u8::from(n.ended)
        ),
        None => format!("{}{SEP}{closed}{SEP}{fingerprint}", r.opened_ms()),
    }
}

fn parse_latest(v: &str) -> Option<LatestException> {
    if let Some(rest) = v.strip_prefix(V2).and_then(|r| r.strip_prefix(SEP)) {
        // The fingerprint is last: it may hold anything, the separator too.
        let mut parts = rest.splitn(6, SEP);
        let opened_ms = parts.next()?.parse().ok()?;
        let closed = parts.next()? == "1";
        let newest = Newest {
            opened_ms: parts.next()?.parse().ok()?,
            id_hash: u64::from_str_radix(parts.next()?, 16).ok()?,
            ended: parts.next()? == "1",
        };
        return Some(LatestException { opened_ms, closed, fingerprint: parts.next()?.to_string(), newest: Some(newest) });
    }
    let mut parts = v.splitn(3, SEP);
    let opened_ms = parts.next()?.parse().ok()?;
    let closed = parts.next()? == "1";
    Some(LatestException { opened_ms, closed, fingerprint: parts.next()?.to_string(), newest: None })
}

/// Stores an Application's exception as judged now (with its transitions) inside a
/// pass's transaction, as its newest.
pub(in crate::state) fn save(tx: &WriteTransaction, r: &Record, retention: Retention, now: DateTime<Utc>) -> Result<(), StateError> {
    let json = serde_json::to_string(r).map_err(storage)?;
    let latest = format_latest(r);
    EXCEPTIONS.save_in(tx, &r.app_key, &[(r.opened_ms(), json)], Some(&latest), retention, now)
}

/// Exceptions of the Applications matching `app` (`namespace/name`, or a name),
/// oldest first, at most `limit` (the newest).
pub(in crate::state) fn list(tx: &ReadTransaction, q: &HistoryQuery, limit: usize) -> Result<Vec<Record>, StateError> {
    EXCEPTIONS.list(tx, q, limit, |r: &Record| r.name.as_str())
}

pub(in crate::state) fn forget_latest(tx: &WriteTransaction, app: &str) -> Result<(), StateError> {
    EXCEPTIONS.forget_latest_in(tx, app)
}

/// Where an Application's newest exception is, if it ever had one.
pub(in crate::state) fn latest(tx: &ReadTransaction, app: &str) -> Result<Option<LatestException>, StateError> {
    Ok(EXCEPTIONS.latest(tx, app)?.and_then(|v| parse_latest(&v)))
}

/// One stored exception of an Application (an unreadable copy is none: the pass
/// judges afresh).
pub(in crate::state) fn get(tx: &ReadTransaction, app: &str, opened_ms: u64) -> Result<Option<Record>, StateError> {
    Ok(EXCEPTIONS.get(tx, app, opened_ms)?.and_then(|json| serde_json::from_str(&json).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest exception survives a round trip, and a value of the first layout
    /// still reads (without it).
    #[test]
    fn the_latest_value_reads_back_in_both_layouts() {
        let r = Record { newest: Some(Newest { opened_ms: 1_796_378_400_000, id_hash: 0xdead_beef, ended: true }), ..Record::default() };
        let back = parse_latest(&format_latest(&r)).unwrap();
        assert_eq!((back.opened_ms, back.closed, back.newest), (0, false, r.newest.clone()));
        assert_eq!(back.fingerprint, r.break_glass.fingerprint());
        let old = parse_latest(&format!("17{SEP}1{SEP}a{SEP}b")).unwrap();
        assert_eq!((old.opened_ms, old.closed, old.fingerprint.as_str(), old.newest), (17, true, "a\u{0}b", None));
    }
}
