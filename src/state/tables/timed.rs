//! A kind of history record kept per Application in time order — sync operations,
//! break-glass exceptions — in three tables:
//!
//! - the records: `"<app key>\u{0}<unix ms, 15 digits>"` -> JSON, at most `per_app` per
//!   Application (the oldest go first);
//! - `<name>_by_time`: `"<unix ms>\u{0}<app key>"`, so the history's bounds (count and
//!   age, as for episodes) drop the oldest of all and read only what they drop;
//! - `latest_<name>`: per Application, a short value the pipeline reads every pass to
//!   tell whether anything is new (what it holds is the caller's).

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use super::{SEP, app_range};
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{Retention, StateError, storage};

pub(in crate::state) struct Timed {
    pub(in crate::state) records: TableDefinition<&'static str, &'static str>,
    pub(in crate::state) by_time: TableDefinition<&'static str, ()>,
    pub(in crate::state) latest: TableDefinition<&'static str, &'static str>,
    pub(in crate::state) per_app: usize,
    /// For log lines about an unreadable record.
    pub(in crate::state) what: &'static str,
}

fn key(app: &str, ms: u64) -> String {
    format!("{app}{SEP}{ms:015}")
}

fn time_key(app: &str, ms: u64) -> String {
    format!("{ms:015}{SEP}{app}")
}

fn ms_of(key: &str) -> u64 {
    key.rsplit_once(SEP).and_then(|(_, ms)| ms.parse().ok()).unwrap_or(0)
}

/// Unix milliseconds of an instant, 0 before 1970.
pub(super) fn millis(t: DateTime<Utc>) -> u64 {
    u64::try_from(t.timestamp_millis()).unwrap_or(0)
}

impl Timed {
    pub(super) fn create(&self, tx: &WriteTransaction) -> Result<(), StateError> {
        tx.open_table(self.records).map_err(storage)?;
        tx.open_table(self.by_time).map_err(storage)?;
        tx.open_table(self.latest).map_err(storage)?;
        Ok(())
    }

    /// Writes records of one Application (`(ms, json)`; the same instant replaces),
    /// sets its latest value when given, and prunes to the bounds.
    pub fn save_in(
        &self,
        tx: &WriteTransaction,
        app: &str,
        items: &[(u64, String)],
        latest: Option<&str>,
        retention: Retention,
        now: DateTime<Utc>,
    ) -> Result<(), StateError> {
        let mut table = tx.open_table(self.records).map_err(storage)?;
        let mut by_time = tx.open_table(self.by_time).map_err(storage)?;
        for (ms, json) in items {
            table.insert(key(app, *ms).as_str(), json.as_str()).map_err(storage)?;
            by_time.insert(time_key(app, *ms).as_str(), ()).map_err(storage)?;
        }
        if let Some(v) = latest {
            tx.open_table(self.latest).map_err(storage)?.insert(app, v).map_err(storage)?;
        }
        if items.is_empty() {
            return Ok(());
        }
        // This Application's bound: its oldest go (a range of its own keys).
        let (lo, hi) = app_range(app);
        let mine = table.range(lo.as_str()..hi.as_str()).map_err(storage)?.count();
        let mut drop: Vec<(String, u64)> = Vec::new();
        for item in table.range(lo.as_str()..hi.as_str()).map_err(storage)?.take(mine.saturating_sub(self.per_app)) {
            drop.push((app.to_string(), ms_of(item.map_err(storage)?.0.value())));
        }
        // The history's bounds: the oldest beyond the count, and those older than the age.
        let len = usize::try_from(by_time.len().map_err(storage)?).unwrap_or(usize::MAX);
        let cutoff = now.checked_sub_signed(retention.max_age).map_or(0, millis);
        let excess = len.saturating_sub(retention.max_episodes.max(1));
        for (i, item) in by_time.iter().map_err(storage)?.enumerate() {
            let (k, _) = item.map_err(storage)?;
            let Some((ms, owner)) = k.value().split_once(SEP) else { continue };
            let ms: u64 = ms.parse().unwrap_or(0);
            if i >= excess && ms >= cutoff {
                break;
            }
            drop.push((owner.to_string(), ms));
        }
        for (owner, ms) in drop {
            table.remove(key(&owner, ms).as_str()).map_err(storage)?;
            by_time.remove(time_key(&owner, ms).as_str()).map_err(storage)?;
        }
        Ok(())
    }

    /// Records of the Applications matching `q.app` (`namespace/name`: that
    /// Application's keys only; a bare name: `name_of` tells), at or after `q.since`
    /// and at or before `q.until`, oldest first, at most `limit` (the newest).
    pub fn list<T: DeserializeOwned>(
        &self,
        tx: &ReadTransaction,
        q: &crate::state::HistoryQuery,
        limit: usize,
        name_of: impl Fn(&T) -> &str,
    ) -> Result<Vec<T>, StateError> {
        let table = tx.open_table(self.records).map_err(storage)?;
        let app = q.app.as_deref();
        let (since_ms, until_ms) = (q.since.map_or(0, millis), q.until.map_or(u64::MAX, millis));
        let (lo, hi) = match app.filter(|a| a.contains('/')) {
            // Keys start `<namespace>/<name>@<uid>`: every uid of that name.
            Some(a) => (format!("{a}@"), format!("{a}A")),
            None => (String::new(), "\u{10FFFF}".to_string()),
        };
        let mut out = Vec::new();
        for item in table.range(lo.as_str()..hi.as_str()).map_err(storage)? {
            let (k, v) = item.map_err(storage)?;
            let ms = ms_of(k.value());
            if ms < since_ms || ms > until_ms {
                continue;
            }
            match serde_json::from_str::<T>(v.value()) {
                Ok(r) if app.is_none_or(|a| a.contains('/') || a == name_of(&r)) => out.push((ms, r)),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(record = %k.value().replace(SEP, " "), error = %e, "a stored {} cannot be read; skipped", self.what)
                }
            }
        }
        out.sort_by_key(|(ms, _)| *ms);
        let skip = out.len().saturating_sub(limit);
        Ok(out.into_iter().skip(skip).map(|(_, r)| r).collect())
    }

    /// The latest value of an Application.
    pub(super) fn latest(&self, tx: &ReadTransaction, app: &str) -> Result<Option<String>, StateError> {
        let table = tx.open_table(self.latest).map_err(storage)?;
        Ok(table.get(app).map_err(storage)?.map(|v| v.value().to_string()))
    }

    /// The latest value of an Application, inside a write transaction.
    pub(super) fn latest_in(&self, tx: &WriteTransaction, app: &str) -> Result<Option<String>, StateError> {
        let table = tx.open_table(self.latest).map_err(storage)?;
        Ok(table.get(app).map_err(storage)?.map(|v| v.value().to_string()))
    }

    /// One record of an Application.
    pub(super) fn get(&self, tx: &ReadTransaction, app: &str, ms: u64) -> Result<Option<String>, StateError> {
        let table = tx.open_table(self.records).map_err(storage)?;
        Ok(table.get(key(app, ms).as_str()).map_err(storage)?.map(|v| v.value().to_string()))
    }

    /// A deleted Application: its latest value goes; its records stay in the history.
    pub(super) fn forget_latest_in(&self, tx: &WriteTransaction, app: &str) -> Result<(), StateError> {
        tx.open_table(self.latest).map_err(storage)?.remove(app).map_err(storage)?;
        Ok(())
    }
}
