//! Break-glass exceptions in the state store, by when each opened ([`super::timed`]),
//! each with its transitions (opened, approved, active, refused, expired, overdue,
//! closed): the Application's history of them, and what a pass compares its judgement
//! with. `latest_break_glass` holds, per Application, where its newest exception is,
//! whether it is closed, and its fingerprint, so a pass of an Application without an
//! exception reads one short value.

use crate::state::kv::{TableDefinition, WriteTransaction};
use chrono::{DateTime, Utc};

use super::timed::Timed;
use super::{Retention, SEP, StateError, StateStore, storage};
use crate::drift::break_glass::{Record, State};

/// At most this many exceptions are kept per Application (the oldest go first).
pub const MAX_EXCEPTIONS_PER_APP: usize = 20;

pub(super) const EXCEPTIONS: Timed = Timed {
    records: TableDefinition::new("break_glass"),
    by_time: TableDefinition::new("break_glass_by_time"),
    latest: TableDefinition::new("latest_break_glass"),
    per_app: MAX_EXCEPTIONS_PER_APP,
    what: "break-glass exception",
};

pub(super) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    EXCEPTIONS.create(tx)
}

/// What a pass reads first of an Application's newest exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestException {
    pub opened_ms: u64,
    pub closed: bool,
    pub fingerprint: String,
}

fn parse_latest(v: &str) -> Option<LatestException> {
    let mut parts = v.splitn(3, SEP);
    let opened_ms = parts.next()?.parse().ok()?;
    let closed = parts.next()? == "1";
    Some(LatestException { opened_ms, closed, fingerprint: parts.next()?.to_string() })
}

impl StateStore {
    /// Stores an Application's exception as judged now (with its transitions) inside a
    /// pass's transaction, as its newest.
    pub(super) fn save_break_glass_in(
        tx: &WriteTransaction,
        r: &Record,
        retention: Retention,
        now: DateTime<Utc>,
    ) -> Result<(), StateError> {
        let json = serde_json::to_string(r).map_err(storage)?;
        let closed = if r.break_glass.state == State::Closed { "1" } else { "0" };
        let latest = format!("{}{SEP}{closed}{SEP}{}", r.opened_ms(), r.break_glass.fingerprint());
        EXCEPTIONS.save_in(tx, &r.app_key, &[(r.opened_ms(), json)], Some(&latest), retention, now)
    }

    /// Exceptions of the Applications matching `app` (`namespace/name`, or a name),
    /// oldest first, at most `limit` (the newest).
    pub fn break_glass_history(&self, q: &super::HistoryQuery, limit: usize) -> Result<Vec<Record>, StateError> {
        EXCEPTIONS.list(self.db(), q, limit, |r: &Record| r.name.as_str())
    }

    pub(super) fn forget_latest_break_glass_in(tx: &WriteTransaction, app: &str) -> Result<(), StateError> {
        EXCEPTIONS.forget_latest_in(tx, app)
    }
}

impl super::StateView {
    /// Where an Application's newest exception is, if it ever had one.
    pub(super) fn latest_break_glass(&self, app: &str) -> Result<Option<LatestException>, StateError> {
        Ok(EXCEPTIONS.latest(&self.tx, app)?.and_then(|v| parse_latest(&v)))
    }

    /// One stored exception of an Application (an unreadable copy is none: the pass
    /// judges afresh).
    pub(super) fn break_glass(&self, app: &str, opened_ms: u64) -> Result<Option<Record>, StateError> {
        Ok(EXCEPTIONS.get(&self.tx, app, opened_ms)?.and_then(|json| serde_json::from_str(&json).ok()))
    }
}
