//! The drift history's tables: episodes and their indexes.
//!
//! - `episodes`: every drift episode, keyed by opening time then Application, as JSON;
//!   bounded by count and age (the oldest resolved ones go first, critical ones last:
//!   see `prune`);
//! - `episodes_by_resolved`: resolved episodes below critical by when they resolved, so
//!   pruning reads only what it drops (an open episode older than the age, a drift
//!   nobody fixed for months, is never read to be skipped);
//! - `episodes_by_resolved_critical`: the same for resolved critical (security)
//!   episodes, so pruning by count reaches them only once no other resolved episode is
//!   left, without reading one to tell;
//! - `latest_episode`: per Application, the key of its newest episode (open or last
//!   resolved), which the pipeline reads on every evaluation;
//! - `open_episodes`: per Application with an open episode, a summary of it (who,
//!   what class, since when), so the fleet view and `/metrics` read the open episodes
//!   only, never the history;
//! - `open_episodes_by_class`: per class, how many open episodes have it (`none` for
//!   those with no class), kept with `open_episodes`, so a scrape of `/metrics` reads a
//!   handful of counters, not every open episode;
//! - `episodes_by_app`: `<namespace>/<name>` then episode key, so an Application's
//!   story reads its own episodes, not the whole history;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::SEP;
use crate::drift::episode::{Episode, Sent};
use crate::model::{Notification, Severity};
use crate::state::kv::{ReadTransaction, Table, TableDefinition, WriteTransaction};
use crate::state::{HistoryQuery, OpenEpisode, Retention, StateError, from_millis, storage};

pub(in crate::state) const EPISODES: TableDefinition<&str, &str> = TableDefinition::new("episodes");
pub(in crate::state) const LATEST: TableDefinition<&str, &str> = TableDefinition::new("latest_episode");
/// `"<resolved at, unix ms, 15 digits>\u{0}<episode key>"` -> nothing, for resolved
/// episodes of a severity below critical.
const RESOLVED: TableDefinition<&str, ()> = TableDefinition::new("episodes_by_resolved");
/// As [`RESOLVED`], for resolved episodes of severity critical (the security ones):
/// pruned by count only once [`RESOLVED`] is empty.
const RESOLVED_CRITICAL: TableDefinition<&str, ()> = TableDefinition::new("episodes_by_resolved_critical");
/// A history query looks at most this many stored episodes, newest first.
pub const MAX_VISITED_PER_QUERY: usize = 50_000;

/// State key -> [`OpenEpisode`] (JSON) of its open episode.
pub(in crate::state) const OPEN: TableDefinition<&str, &str> = TableDefinition::new("open_episodes");
/// Class -> how many open episodes have it (`none`: those with no class).
pub(in crate::state) const OPEN_BY_CLASS: TableDefinition<&str, u64> = TableDefinition::new("open_episodes_by_class");
/// `"<namespace>/<name>\u{0}<episode key>"` -> nothing.
const BY_APP: TableDefinition<&str, ()> = TableDefinition::new("episodes_by_app");

/// The by-Application index key of an episode key (`<opened>\0<ns>/<name>@<uid>`).
fn by_app_key(episode_key: &str) -> String {
    let app_key = episode_key.split_once(SEP).map_or("", |(_, a)| a);
    let app = app_key.rsplit_once('@').map_or(app_key, |(a, _)| a);
    format!("{app}{SEP}{episode_key}")
}

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(EPISODES).map_err(storage)?;
    tx.open_table(LATEST).map_err(storage)?;
    super::index_once(tx, "episodes_by_resolved", EPISODES, RESOLVED, |k, v| {
        let stored = serde_json::from_str::<Stored>(v).map_err(storage)?;
        Ok(stored.resolved_at.filter(|_| !stored.critical()).map(|at| resolved_key(at, k)))
    })?;
    index_critical_once(tx)?;
    super::index_once(tx, "episodes_by_app", EPISODES, BY_APP, |k, _| Ok(Some(by_app_key(k))))?;
    index_open_once(tx)?;
    count_open_once(tx)
}

/// The class counters of an open episode's summary (JSON), as [`OPEN_BY_CLASS`] keys;
/// none for a summary that cannot be read (it was never counted: summaries are counted
/// from what was written, and an unreadable one is skipped by every reader).
fn open_classes(json: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Classes {
        #[serde(default)]
        classes: Vec<String>,
    }
    match serde_json::from_str::<Classes>(json) {
        Ok(c) if c.classes.is_empty() => vec!["none".to_string()],
        Ok(c) => c.classes,
        Err(_) => Vec::new(),
    }
}

/// Sets (`Some`) or removes (`None`) an Application's open-episode summary, and moves
/// the class counters with it: every change of `open_episodes` goes through here.
fn set_open(tx: &WriteTransaction, app: &str, summary: Option<&OpenEpisode>) -> Result<(), StateError> {
    let mut open = tx.open_table(OPEN).map_err(storage)?;
    let new = summary.map(serde_json::to_string).transpose().map_err(storage)?;
    let old = match &new {
        Some(json) => open.insert(app, json.as_str()).map_err(storage)?.map(|v| v.value().to_string()),
        None => open.remove(app).map_err(storage)?.map(|v| v.value().to_string()),
    };
    let (old, new) = (old.as_deref().map(open_classes).unwrap_or_default(), new.as_deref().map(open_classes).unwrap_or_default());
    if old == new {
        return Ok(());
    }
    let mut counts = tx.open_table(OPEN_BY_CLASS).map_err(storage)?;
    for (classes, up) in [(old, false), (new, true)] {
        for c in classes {
            let n = counts.get(c.as_str()).map_err(storage)?.map_or(0, |v| v.value());
            match if up { n.checked_add(1) } else { n.checked_sub(1).filter(|n| *n > 0) } {
                Some(n) => counts.insert(c.as_str(), n).map_err(storage)?,
                None => counts.remove(c.as_str()).map_err(storage)?,
            };
        }
    }
    Ok(())
}

/// Counts the open episodes by class once per state file (one written before the
/// counters existed).
fn count_open_once(tx: &WriteTransaction) -> Result<(), StateError> {
    super::once_per_file(tx, "open_episodes_by_class", || {
        let open = tx.open_table(OPEN).map_err(storage)?;
        let mut counts = tx.open_table(OPEN_BY_CLASS).map_err(storage)?;
        if !counts.is_empty().map_err(storage)? {
            return Ok(());
        }
        let mut by_class: BTreeMap<String, u64> = BTreeMap::new();
        for item in open.iter().map_err(storage)? {
            let (_, v) = item.map_err(storage)?;
            for c in open_classes(v.value()) {
                *by_class.entry(c).or_default() += 1;
            }
        }
        for (c, n) in by_class {
            counts.insert(c.as_str(), n).map_err(storage)?;
        }
        Ok(())
    })
}

/// Fills `open_episodes` once per state file (a file written before it existed): each
/// Application's latest episode, if open.
fn index_open_once(tx: &WriteTransaction) -> Result<(), StateError> {
    super::once_per_file(tx, "open_episodes", || {
        let latest = tx.open_table(LATEST).map_err(storage)?;
        let episodes = tx.open_table(EPISODES).map_err(storage)?;
        let mut open = tx.open_table(OPEN).map_err(storage)?;
        for item in latest.iter().map_err(storage)? {
            let (app, key) = item.map_err(storage)?;
            if let Some(v) = episodes.get(key.value()).map_err(storage)?
                && let Ok(ep) = parse(v.value())
                && ep.is_open()
            {
                open.insert(app.value(), serde_json::to_string(&OpenEpisode::of(&ep)).map_err(storage)?.as_str()).map_err(storage)?;
            }
        }
        Ok(())
    })
}

/// Moves the resolved critical episodes of a state file written before
/// [`RESOLVED_CRITICAL`] existed out of [`RESOLVED`] into it, once per state file (one
/// read of the history's summaries, as any index built afterwards).
fn index_critical_once(tx: &WriteTransaction) -> Result<(), StateError> {
    super::once_per_file(tx, "episodes_by_resolved_critical", || {
        let episodes = tx.open_table(EPISODES).map_err(storage)?;
        let mut resolved = tx.open_table(RESOLVED).map_err(storage)?;
        let mut critical = tx.open_table(RESOLVED_CRITICAL).map_err(storage)?;
        for item in episodes.iter().map_err(storage)? {
            let (k, v) = item.map_err(storage)?;
            // An unreadable episode is left where it is (see `reset_episode`).
            let Ok(stored) = serde_json::from_str::<Stored>(v.value()) else { continue };
            if let Some(at) = stored.resolved_at.filter(|_| stored.critical()) {
                let entry = resolved_key(at, k.value());
                resolved.remove(entry.as_str()).map_err(storage)?;
                critical.insert(entry.as_str(), ()).map_err(storage)?;
            }
        }
        Ok(())
    })
}

/// The resolution index an episode of this severity is kept in.
fn closed_index(critical: bool) -> TableDefinition<&'static str, ()> {
    if critical { RESOLVED_CRITICAL } else { RESOLVED }
}

/// Removes an episode's entry from the resolution indexes (from both: which one holds
/// it is not read, and a removal of what is not there costs one lookup).
fn unindex_closed(tx: &WriteTransaction, at: DateTime<Utc>, episode_key: &str) -> Result<(), StateError> {
    let entry = resolved_key(at, episode_key);
    for index in [RESOLVED, RESOLVED_CRITICAL] {
        tx.open_table(index).map_err(storage)?.remove(entry.as_str()).map_err(storage)?;
    }
    Ok(())
}

fn resolved_key(at: DateTime<Utc>, episode_key: &str) -> String {
    format!("{:015}{SEP}{episode_key}", at.timestamp_millis().max(0))
}

fn episode_key(ep: &Episode) -> String {
    format!("{:015}{SEP}{}", ep.opened_at.timestamp_millis().max(0), ep.app_key)
}

/// What a save reads of the stored episode: its notifications, when it resolved and
/// its severity (the rest of the JSON is skipped, not built).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    #[serde(default)]
    notifications: Vec<Sent>,
    #[serde(default)]
    resolved_at: Option<DateTime<Utc>>,
    /// As written (`critical`, ...); read as text so an unknown one is no error.
    #[serde(default)]
    severity: Option<String>,
}

impl Stored {
    /// Whether the stored episode reached severity critical (a security episode).
    fn critical(&self) -> bool {
        self.severity.as_deref() == Some(Severity::Critical.as_str())
    }
}

fn parse(json: &str) -> Result<Episode, StateError> {
    #[cfg(test)]
    tests::DECODED.with(|d| d.set(d.get() + 1));
    serde_json::from_str(json).map_err(storage)
}

/// Forgets an Application's latest episode when it cannot be read (damaged, or
/// written by a newer version): the unreadable copy is removed and the next
/// observation starts afresh. Returns whether there was one.
pub(in crate::state) fn reset(tx: &WriteTransaction, app: &str) -> Result<bool, StateError> {
    let key = tx.open_table(LATEST).map_err(storage)?.remove(app).map_err(storage)?.map(|k| k.value().to_string());
    if let Some(k) = &key {
        let mut episodes = tx.open_table(EPISODES).map_err(storage)?;
        let resolved_at = match episodes.remove(k.as_str()).map_err(storage)? {
            Some(v) => serde_json::from_str::<Stored>(v.value()).ok().and_then(|s| s.resolved_at),
            None => None,
        };
        if let Some(at) = resolved_at {
            unindex_closed(tx, at, k)?;
        }
        tx.open_table(BY_APP).map_err(storage)?.remove(by_app_key(k).as_str()).map_err(storage)?;
    }
    set_open(tx, app, None)?;
    Ok(key.is_some())
}

/// Stores an episode (new or changed) as its Application's latest; a new one
/// prunes the history to `retention`.
///
/// The pass owns everything in an episode but its `notifications`, which the
/// outbox workers own: the pass read its copy before a delivery may have noted a
/// `Sent` on the stored one, so the stored list is kept, not overwritten (redb
/// serialises write transactions, so the read and the insert here are atomic).
pub(in crate::state) fn save(tx: &WriteTransaction, ep: &Episode, retention: Retention, now: DateTime<Utc>) -> Result<(), StateError> {
    let key = episode_key(ep);
    let mut episodes = tx.open_table(EPISODES).map_err(storage)?;
    // An unreadable stored copy (see `reset_episode`) is overwritten.
    let stored = match episodes.get(key.as_str()).map_err(storage)? {
        Some(v) => serde_json::from_str::<Stored>(v.value()).ok(),
        None => None,
    };
    // Its entry in the resolution indexes: when it resolved, and in which (critical
    // or not).
    let was_resolved = stored.as_ref().and_then(|s| s.resolved_at.map(|at| (at, s.critical())));
    let is_resolved = ep.resolved_at.map(|at| (at, ep.severity == Severity::Critical));
    if was_resolved != is_resolved {
        if let Some((at, critical)) = was_resolved {
            tx.open_table(closed_index(critical)).map_err(storage)?.remove(resolved_key(at, &key).as_str()).map_err(storage)?;
        }
        if let Some((at, critical)) = is_resolved {
            tx.open_table(closed_index(critical)).map_err(storage)?.insert(resolved_key(at, &key).as_str(), ()).map_err(storage)?;
        }
    }
    let json = match stored.map(|s| s.notifications) {
        Some(notifications) if notifications != ep.notifications => {
            serde_json::to_string(&Episode { notifications, ..ep.clone() }).map_err(storage)?
        }
        _ => serde_json::to_string(ep).map_err(storage)?,
    };
    let new = episodes.insert(key.as_str(), json.as_str()).map_err(storage)?.is_none();
    tx.open_table(LATEST).map_err(storage)?.insert(ep.app_key.as_str(), key.as_str()).map_err(storage)?;
    set_open(tx, &ep.app_key, ep.is_open().then(|| OpenEpisode::of(ep)).as_ref())?;
    if new {
        tx.open_table(BY_APP).map_err(storage)?.insert(by_app_key(&key).as_str(), ()).map_err(storage)?;
        prune(&mut episodes, tx, retention, now)?;
    }
    Ok(())
}

/// Episodes matching `q`, oldest first. Read newest first, stopping once `limit`
/// match: a filter is checked on the few fields it needs (decoded without the
/// rest), and only a match is decoded whole, so `/history?limit=20` decodes 20
/// episodes, not the history.
pub(in crate::state) fn query(tx: &ReadTransaction, q: &HistoryQuery) -> Result<Vec<Episode>, StateError> {
    /// What the filters read of a stored episode.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        #[serde(default)]
        name: String,
        #[serde(default)]
        namespace: String,
        #[serde(default)]
        classes: Vec<String>,
        #[serde(default)]
        resolved_at: Option<DateTime<Utc>>,
        #[serde(default)]
        opened_at: Option<DateTime<Utc>>,
    }
    let table = tx.open_table(EPISODES).map_err(storage)?;
    let mut out = Vec::new();
    let limit = q.limit.unwrap_or(usize::MAX);
    let mut visited = 0usize;
    // Whether to stop at the episode stored at `k`: once `limit` are taken, or once
    // [`MAX_VISITED_PER_QUERY`] were looked at (a filter nothing matches does not
    // walk a history of millions).
    let mut visit = |k: &str, v: &str| -> bool {
        visited += 1;
        if visited > MAX_VISITED_PER_QUERY {
            return true;
        }
        // One unreadable episode does not hide the rest of the history.
        let unreadable = |e: &dyn std::fmt::Display| {
            tracing::warn!(episode = %k.replace(SEP, " "), error = %e, "a stored drift episode cannot be read; skipped");
        };
        let head: Head = match serde_json::from_str(v) {
            Ok(h) => h,
            Err(e) => {
                unreadable(&e);
                return false;
            }
        };
        let app_matches = q.app.as_ref().is_none_or(|a| *a == head.name || *a == format!("{}/{}", head.namespace, head.name));
        let since_matches = q.since.is_none_or(|since| head.resolved_at.is_none_or(|r| r >= since));
        let until_matches = q.until.is_none_or(|until| head.opened_at.is_none_or(|o| o <= until));
        let class_matches = q.class.as_ref().is_none_or(|c| head.classes.contains(c));
        if app_matches && since_matches && until_matches && class_matches {
            match parse(v) {
                Ok(ep) => out.push(ep),
                Err(e) => unreadable(&e),
            }
        }
        out.len() >= limit
    };
    if limit == 0 {
        return Ok(Vec::new());
    }
    match q.app.as_deref().filter(|a| a.contains('/')) {
        // One Application's (`namespace/name`): its own episodes, by the index.
        Some(app) => {
            let (lo, hi) = super::app_range(app);
            let by_app = tx.open_table(BY_APP).map_err(storage)?;
            for item in by_app.range(lo.as_str()..hi.as_str()).map_err(storage)?.rev() {
                let (ik, _) = item.map_err(storage)?;
                let Some((_, key)) = ik.value().split_once(SEP) else { continue };
                if let Some(v) = table.get(key).map_err(storage)?
                    && visit(key, v.value())
                {
                    break;
                }
            }
        }
        None => {
            for item in table.iter().map_err(storage)?.rev() {
                let (k, v) = item.map_err(storage)?;
                if visit(k.value(), v.value()) {
                    break;
                }
            }
        }
    }
    out.reverse();
    Ok(out)
}

/// Remembers a notification's outcome in its episode (delivered, or `failed` with
/// the dead letter's error), inside the settle's transaction.
pub(in crate::state) fn note_sent(tx: &WriteTransaction, n: &Notification, now_ms: u64, failed: Option<&str>) -> Result<(), StateError> {
    let (Some(id), Some(r)) = (n.episode.as_ref().and_then(|e| e.get("id")).and_then(|v| v.as_str()), &n.record) else {
        return Ok(());
    };
    let sent = Sent {
        trigger: n.trigger.clone(),
        service: n.destination.service.clone(),
        recipient: n.destination.recipient.clone(),
        action: n.action,
        at: from_millis(now_ms),
        failed: failed.map(Sent::failure),
    };
    note_sent_to(tx, &r.app_key, id, sent)
}

/// Remembers a notification's outcome in the Application's episode `id` (when it is
/// still the latest), inside the settle's transaction.
pub(in crate::state) fn note_sent_to(tx: &WriteTransaction, app_key: &str, id: &str, sent: Sent) -> Result<(), StateError> {
    let key = match tx.open_table(LATEST).map_err(storage)?.get(app_key).map_err(storage)? {
        Some(k) => k.value().to_string(),
        None => return Ok(()),
    };
    let mut episodes = tx.open_table(EPISODES).map_err(storage)?;
    // An episode that cannot be read is not noted in (the delivery is recorded all
    // the same: a settle must not fail for the history's sake); the next pass
    // resets it.
    let mut ep = match episodes.get(key.as_str()).map_err(storage)?.map(|v| parse(v.value())) {
        Some(Ok(ep)) => ep,
        Some(Err(e)) => {
            tracing::warn!(app = %app_key, error = %e, "the drift episode cannot be read; the delivery is not noted in it");
            return Ok(());
        }
        None => return Ok(()),
    };
    if ep.id != id {
        return Ok(());
    }
    ep.note_sent(sent);
    let json = serde_json::to_string(&ep).map_err(storage)?;
    episodes.insert(key.as_str(), json.as_str()).map_err(storage)?;
    Ok(())
}

/// Open episodes by class (an episode of several classes counts in each; one of
/// none in `none`): reads the counters kept with them, one entry per class.
pub(in crate::state) fn open_by_class(tx: &ReadTransaction) -> Result<BTreeMap<String, u64>, StateError> {
    let counts = tx.open_table(OPEN_BY_CLASS).map_err(storage)?;
    let mut out = BTreeMap::new();
    for item in counts.iter().map_err(storage)? {
        let (c, n) = item.map_err(storage)?;
        out.insert(c.value().to_string(), n.value());
    }
    Ok(out)
}

/// Every open episode's summary (one per Application with one, at most as many as
/// it watches; unreadable summaries are skipped), in no particular order.
pub(in crate::state) fn open(tx: &ReadTransaction) -> Result<Vec<OpenEpisode>, StateError> {
    let open = tx.open_table(OPEN).map_err(storage)?;
    let mut out = Vec::new();
    for item in open.iter().map_err(storage)? {
        let (_, v) = item.map_err(storage)?;
        if let Ok(ep) = serde_json::from_str::<OpenEpisode>(v.value()) {
            out.push(ep);
        }
    }
    Ok(out)
}

/// A deleted Application: its hold-downs and latest-episode pointer go; its
/// episodes stay in the history.
pub(in crate::state) fn forget_app(tx: &WriteTransaction, app: &str) -> Result<(), StateError> {
    tx.open_table(LATEST).map_err(storage)?.remove(app).map_err(storage)?;
    set_open(tx, app, None)?;
    super::operations::forget_latest(tx, app)?;
    super::break_glass::forget_latest(tx, app)?;
    super::holds::forget_app(tx, app)?;
    Ok(())
}

/// The newest episode of an Application (open, or the last resolved one).
pub(in crate::state) fn latest(tx: &ReadTransaction, app: &str) -> Result<Option<Episode>, StateError> {
    let latest = tx.open_table(LATEST).map_err(storage)?;
    let Some(key) = latest.get(app).map_err(storage)? else { return Ok(None) };
    let episodes = tx.open_table(EPISODES).map_err(storage)?;
    match episodes.get(key.value()).map_err(storage)? {
        Some(v) => parse(v.value()).map(Some).map_err(|e| StateError::Episode { app: app.to_string(), detail: e.to_string() }),
        None => Ok(None),
    }
}

/// Drops episodes beyond the count, and resolved ones older than the age. Reads only
/// what it drops: the first entries of the resolution indexes (and of `episodes`, for
/// open ones) for the count, a range of each resolution index for the age.
///
/// By count, in this order, each found by its own index (no episode is read to be
/// skipped):
///
/// 1. resolved episodes below critical, the longest resolved first
///    (`episodes_by_resolved`);
/// 2. only once none of those is left, resolved critical (security) episodes, the
///    longest resolved first (`episodes_by_resolved_critical`): a flood of harmless
///    episodes — allowed writes on one's own objects each open one — does not push out
///    the record of an earlier security episode, self-healed or not;
/// 3. only once no resolved episode is left, open ones (or unreadable ones), the oldest
///    opened first: an open episode — a long-standing security drift — is still
///    someone's problem.
///
/// By age, every resolved episode older than `history.maxAge`, critical or not; an
/// open episode is never dropped for age.
fn prune(episodes: &mut Table<&str, &str>, tx: &WriteTransaction, retention: Retention, now: DateTime<Utc>) -> Result<(), StateError> {
    let len = usize::try_from(episodes.len().map_err(storage)?).unwrap_or(usize::MAX);
    let excess = len.saturating_sub(retention.max_episodes.max(1));
    // Episode keys to drop, with when each resolved (its index entry goes too).
    let mut drop: BTreeMap<String, Option<DateTime<Utc>>> = BTreeMap::new();
    let mut resolved = tx.open_table(RESOLVED).map_err(storage)?;
    let mut critical = tx.open_table(RESOLVED_CRITICAL).map_err(storage)?;
    if excess > 0 {
        // The resolved ones below critical, then the critical ones, the longest
        // resolved first, found by the resolution indexes (no episode is read).
        for index in [&resolved, &critical] {
            let wanted = excess.saturating_sub(drop.len());
            if wanted == 0 {
                break;
            }
            for item in index.iter().map_err(storage)?.take(wanted) {
                let (k, _) = item.map_err(storage)?;
                let Some((at, key)) = k.value().split_once(SEP) else { continue };
                drop.insert(key.to_string(), at.parse::<i64>().ok().and_then(DateTime::from_timestamp_millis));
            }
        }
        // Not enough resolved ones: the oldest of the rest (open, or unreadable).
        if drop.len() < excess {
            let wanted = excess - drop.len();
            let mut more = Vec::new();
            for item in episodes.iter().map_err(storage)? {
                let (k, v) = item.map_err(storage)?;
                if drop.contains_key(k.value()) {
                    continue;
                }
                let resolved_at = serde_json::from_str::<Stored>(v.value()).ok().and_then(|s| s.resolved_at);
                more.push((k.value().to_string(), resolved_at));
                if more.len() >= wanted {
                    break;
                }
            }
            drop.extend(more);
        }
    }

    // A maximum age reaching before representable time drops nothing for age.
    if let Some(cutoff) = now.checked_sub_signed(retention.max_age).map(|c| c.timestamp_millis()).filter(|c| *c > 0) {
        let below = format!("{cutoff:015}");
        for index in [&resolved, &critical] {
            for item in index.range(..below.as_str()).map_err(storage)? {
                let (k, _) = item.map_err(storage)?;
                let Some((at, key)) = k.value().split_once(SEP) else { continue };
                let at = at.parse::<i64>().ok().and_then(DateTime::from_timestamp_millis);
                drop.entry(key.to_string()).or_insert(at);
            }
        }
    }
    if drop.is_empty() {
        return Ok(());
    }
    let mut latest = tx.open_table(LATEST).map_err(storage)?;
    let mut by_app = tx.open_table(BY_APP).map_err(storage)?;
    for (k, resolved_at) in drop {
        episodes.remove(k.as_str()).map_err(storage)?;
        by_app.remove(by_app_key(&k).as_str()).map_err(storage)?;
        if let Some(at) = resolved_at {
            // In one of the two indexes; a removal of what is not there is a lookup.
            let entry = resolved_key(at, &k);
            resolved.remove(entry.as_str()).map_err(storage)?;
            critical.remove(entry.as_str()).map_err(storage)?;
        }
        let app = k.split_once(SEP).map_or("", |(_, app)| app);
        if latest.get(app).map_err(storage)?.is_some_and(|v| v.value() == k) {
            latest.remove(app).map_err(storage)?;
            set_open(tx, app, None)?;
        }
    }
    Ok(())
}

#[cfg(test)]
pub(in crate::state) mod tests {
    use super::*;
    use crate::model::{Action, App};
    use crate::state::Store;
    use serde_json::json;

    fn at(min: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-03-02T03:00:00Z").unwrap().with_timezone(&Utc) + chrono::Duration::minutes(min)
    }

    pub(in crate::state) fn episode(name: &str, min: i64, class: &str) -> Episode {
        let app = App::from_value(json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "argocd", "uid": name},
            "status": {"sync": {"status": "OutOfSync"}}}))
        .unwrap();
        crate::drift::episode::observe(
            None,
            &app,
            &serde_json::from_value(json!({"classes": [class], "severity": "warning", "direction": "live"})).unwrap(),
            at(min),
        )
        .episode
        .unwrap()
    }

    /// A notification of `ep` to `service`, recorded under `key` once delivered.
    pub(in crate::state) fn notification(ep: &Episode, service: &str, key: &str) -> Notification {
        Notification {
            received_ms: None,
            app: format!("argocd/{}", ep.name),
            meta: crate::model::AppMeta::default(),
            trigger: "on-x".into(),
            condition: 0,
            condition_key: "[0].x".into(),
            template: "t".into(),
            destination: crate::model::Destination::new(service, ""),
            kind: crate::model::DestinationKind::Webhook,
            action: Action::Fire,
            severity: crate::model::Severity::Info,
            payload: json!({}),
            record: Some(crate::model::StateRecord {
                app_key: ep.app_key.clone(),
                key: key.into(),
                op: crate::model::RecordOp::Set,
                seen: None,
            }),
            episode: Some(json!({"id": ep.id})),
            operation: None,
            idempotency_key: None,
            group: None,
        }
    }

    /// Review M2: a flood of newer episodes pushes out closed ones first, never an open
    /// one while a closed one remains.
    #[test]
    fn pruning_by_count_keeps_open_episodes_while_closed_ones_remain() {
        let s = Store::in_memory().unwrap();
        let keep3 = Retention { max_episodes: 3, max_age: chrono::Duration::days(1) };
        s.history().save_episode(&episode("security", 0, "rbac"), keep3, at(0)).unwrap();
        for i in 1..6 {
            let mut e = episode(&format!("attempt{i}"), i, "workload");
            e.resolved_at = Some(at(i));
            s.history().save_episode(&e, keep3, at(i)).unwrap();
        }
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["security", "attempt4", "attempt5"]);
        assert!(s.history().latest_episode("argocd/security@security").unwrap().is_some(), "still open, still in the fleet view");
    }

    /// A resolved episode of `severity`, opened at minute `min` and resolved a minute
    /// later.
    fn closed(name: &str, min: i64, severity: crate::model::Severity) -> Episode {
        let mut e = episode(name, min, if severity == crate::model::Severity::Critical { "rbac" } else { "workload" });
        e.severity = severity;
        e.resolved_at = Some(at(min + 1));
        e
    }

    /// Review L-d: a flood of 2 × `maxEpisodes` harmless resolved episodes (allowed
    /// writes on one's own objects each open one) after one resolved critical episode —
    /// the self-healed attack they are meant to bury — keeps the critical one: pruning
    /// by count takes every resolved episode below critical first. Open episodes still
    /// outlast it. Before: the critical episode, the longest resolved, went first (kept
    /// `open, harmless6..9`).
    #[test]
    fn a_flood_of_harmless_episodes_does_not_push_out_a_closed_critical_one() {
        use crate::model::Severity;
        let s = Store::in_memory().unwrap();
        let keep5 = Retention { max_episodes: 5, max_age: chrono::Duration::days(1) };
        s.history().save_episode(&closed("attack", 0, Severity::Critical), keep5, at(1)).unwrap();
        s.history().save_episode(&episode("open", 1, "workload"), keep5, at(1)).unwrap();
        for i in 0..10 {
            s.history().save_episode(&closed(&format!("harmless{i}"), 2 + i, Severity::Warning), keep5, at(3 + i)).unwrap();
        }
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["attack", "open", "harmless7", "harmless8", "harmless9"]);
        let got = s.history().episodes(&HistoryQuery { app: Some("argocd/attack".into()), ..Default::default() }).unwrap();
        assert_eq!(got.len(), 1, "the critical episode is kept, and found by its Application");
    }

    /// Among resolved critical episodes the longest resolved goes first, and only once no
    /// resolved episode below critical is left; an open episode outlasts them all; and
    /// `maxAge` still drops a resolved critical episode (age is the operator's choice,
    /// not something a writer can hasten). Before: a new warning episode pushed out
    /// `critical2` (kept `open, critical3, harmless`).
    #[test]
    fn critical_episodes_go_by_count_only_as_a_last_resort_and_still_age_out() {
        use crate::model::Severity;
        let s = Store::in_memory().unwrap();
        let keep3 = Retention { max_episodes: 3, max_age: chrono::Duration::days(1) };
        s.history().save_episode(&episode("open", 0, "rbac"), keep3, at(0)).unwrap();
        for i in 1..4 {
            s.history().save_episode(&closed(&format!("critical{i}"), i, Severity::Critical), keep3, at(i + 1)).unwrap();
        }
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["open", "critical2", "critical3"], "the longest resolved critical went, the open one stays");
        s.history().save_episode(&closed("harmless", 10, Severity::Error), keep3, at(11)).unwrap();
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["open", "critical2", "critical3"], "a new episode below critical goes before any critical one");
        let later = at(20) + chrono::Duration::days(2);
        s.history().save_episode(&episode("new", 20, "config"), keep3, later).unwrap();
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["open", "new"], "resolved critical episodes older than maxAge go");
        let tx = s.db().begin_read().unwrap();
        assert!(tx.open_table(RESOLVED_CRITICAL).unwrap().is_empty().unwrap(), "their index entries went with them");
    }

    /// A state file written before the critical index existed (its resolved critical
    /// episodes in `episodes_by_resolved` with the rest) has them moved once, at open,
    /// and a flood then keeps them. (No before: the index is new.)
    #[test]
    fn a_state_file_from_before_the_critical_index_is_indexed_once() {
        use crate::model::Severity;
        let s = Store::in_memory().unwrap();
        let keep3 = Retention { max_episodes: 3, max_age: chrono::Duration::days(1) };
        let attack = closed("attack", 0, Severity::Critical);
        s.history().save_episode(&attack, keep3, at(1)).unwrap();
        // As written before: the entry in the one resolution index, no marker.
        let entry = resolved_key(at(1), &episode_key(&attack));
        let tx = s.db().begin_write().unwrap();
        tx.open_table(RESOLVED_CRITICAL).unwrap().remove(entry.as_str()).unwrap();
        tx.open_table(RESOLVED).unwrap().insert(entry.as_str(), ()).unwrap();
        tx.open_table(super::super::META).unwrap().remove("indexed:episodes_by_resolved_critical").unwrap();
        create_tables(&tx).unwrap();
        tx.commit().unwrap();
        for i in 0..6 {
            s.history().save_episode(&closed(&format!("harmless{i}"), 2 + i, Severity::Warning), keep3, at(3 + i)).unwrap();
        }
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["attack", "harmless4", "harmless5"]);
    }

    /// Each notification's outcome is kept in its episode: delivered, refused for good
    /// (a permanent dead letter: recorded, not re-sent) and out of attempts (a dead
    /// letter decided again later) each say so, the failures with their error cut to
    /// [`crate::drift::episode::MAX_FAILURE`] bytes; only a delivery sets when the
    /// episode was first notified.
    #[test]
    fn a_notifications_outcome_is_kept_in_its_episode() {
        use crate::state::Settle;
        let s = Store::in_memory().unwrap();
        let ep = episode("a", 0, "rbac");
        s.history().save_episode(&ep, Retention::default(), at(0)).unwrap();
        let long = format!("HTTP 400: {}", "é".repeat(400));
        s.enqueue(&[notification(&ep, "refuses", "k1"), notification(&ep, "down", "k2"), notification(&ep, "ok", "k3")], 1_000).unwrap();
        let first = |svc: &str| s.outbox().due(svc, 1_000, 10).unwrap().remove(0);
        let t = |min: i64| u64::try_from(at(min).timestamp_millis()).unwrap();
        s.outbox().settle(&[(first("refuses"), Settle::Dead { error: long.clone(), permanent: true })], t(1)).unwrap();
        s.outbox()
            .settle(&[(first("down"), Settle::Dead { error: "gave up after 10 attempt(s): HTTP 503".into(), permanent: false })], t(2))
            .unwrap();
        let stored = s.history().latest_episode(&ep.app_key).unwrap().unwrap();
        assert_eq!(stored.notified_at, None, "nothing reached anyone yet");
        s.outbox().settle(&[(first("ok"), Settle::Delivered)], t(3)).unwrap();
        let stored = s.history().latest_episode(&ep.app_key).unwrap().unwrap();
        let outcome: Vec<(&str, Option<&str>)> = stored.notifications.iter().map(|n| (n.service.as_str(), n.failed.as_deref())).collect();
        assert_eq!(outcome.len(), 3, "{outcome:?}");
        let refused = outcome.iter().find(|(svc, _)| *svc == "refuses").and_then(|(_, f)| *f).unwrap();
        assert!(long.starts_with(refused) && refused.len() <= crate::drift::episode::MAX_FAILURE && refused.len() > 200, "{refused}");
        assert!(outcome.contains(&("down", Some("gave up after 10 attempt(s): HTTP 503"))), "{outcome:?}");
        assert!(outcome.contains(&("ok", None)), "{outcome:?}");
        assert_eq!(stored.notified_at, Some(at(3)), "the delivery, not the failures");
        assert!(s.pass().is_notified(&ep.app_key, "k1").unwrap() && !s.pass().is_notified(&ep.app_key, "k2").unwrap());
        let record = stored.record(at(4));
        assert!(record["notifications"].as_array().unwrap().iter().any(|n| n["failed"].is_string()), "{record}");
    }

    /// An episode that cannot be read is reported as such by the pass's read, does not
    /// fail a delivery's note nor the history listing, and is reset: the next episode
    /// starts afresh.
    #[test]
    fn an_unreadable_episode_is_reset_and_fails_nothing_else() {
        let s = Store::in_memory().unwrap();
        let ep = episode("a", 0, "rbac");
        s.history().save_episode(&ep, Retention::default(), at(0)).unwrap();
        s.history().save_episode(&episode("b", 1, "rbac"), Retention::default(), at(1)).unwrap();
        {
            let tx = s.db().begin_write().unwrap();
            tx.open_table(EPISODES).unwrap().insert(episode_key(&ep).as_str(), "{\"id\": 7, \"name\": [").unwrap();
            tx.commit().unwrap();
        }
        assert!(matches!(s.history().latest_episode(&ep.app_key), Err(StateError::Episode { .. })));
        assert_eq!(s.history().episodes(&HistoryQuery::default()).unwrap().len(), 1, "the readable one is still listed");
        // A delivery noted in the unreadable episode: the settle's transaction succeeds.
        let n = notification(&ep, "hook", "k");
        let tx = s.db().begin_write().unwrap();
        note_sent(&tx, &n, 5, None).unwrap();
        tx.commit().unwrap();
        assert!(s.pass().reset_episode(&ep.app_key).unwrap());
        assert_eq!(s.history().latest_episode(&ep.app_key).unwrap(), None);
        assert!(!s.pass().reset_episode(&ep.app_key).unwrap());
        s.history().save_episode(&episode("a", 10, "rbac"), Retention::default(), at(10)).unwrap();
        assert!(s.history().latest_episode(&ep.app_key).unwrap().is_some(), "a new episode starts");
    }

    /// A replay with `--deliver` writes its passes on the snapshots' clock and its
    /// outbox on the system's: the history is pruned by the pass's instant, so a
    /// replayed episode is not dropped as "older than maxAge" the moment it is saved.
    #[test]
    fn a_pass_prunes_the_history_on_its_own_clock() {
        let s = Store::in_memory().unwrap();
        let mut old = episode("a", 0, "rbac");
        old.resolved_at = Some(at(1));
        let later = episode("b", 2, "rbac");
        let months_later = crate::state::to_millis(at(2) + chrono::Duration::days(200));
        for ep in [&old, &later] {
            let pass = crate::state::PassWrite {
                app_key: &ep.app_key,
                at_ms: crate::state::to_millis(at(2)),
                episode: Some((ep, Retention::default())),
                ..Default::default()
            };
            s.pass().write_pass(&pass, &[], months_later).unwrap();
        }
        assert_eq!(s.history().episodes(&HistoryQuery::default()).unwrap().len(), 2, "both kept on the pass's clock");
    }

    #[test]
    fn episodes_survive_reopening_and_are_queryable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let s = Store::open(&path).unwrap();
            let mut a = episode("a", 0, "rbac");
            s.history().save_episode(&a, Retention::default(), at(0)).unwrap();
            s.history().save_episode(&episode("b", 5, "config"), Retention::default(), at(5)).unwrap();
            a.resolved_at = Some(at(14));
            s.history().save_episode(&a, Retention::default(), at(14)).unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.history().latest_episode("argocd/a@a").unwrap().unwrap().resolved_at, Some(at(14)));
        assert_eq!(s.history().episodes(&HistoryQuery::default()).unwrap().len(), 2, "an update does not add an episode");
        let q = |app: Option<&str>, since: Option<i64>, class: Option<&str>| {
            s.history()
                .episodes(&HistoryQuery {
                    app: app.map(Into::into),
                    since: since.map(at),
                    class: class.map(Into::into),
                    ..Default::default()
                })
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(q(Some("argocd/a"), None, None), ["a"]);
        assert_eq!(q(None, None, Some("rbac")), ["a"]);
        assert_eq!(q(None, Some(20), None), ["b"], "a resolved before --since is left out; an open one is not");
        let newest = s.history().episodes(&HistoryQuery { limit: Some(1), ..Default::default() }).unwrap();
        assert_eq!(newest.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["b"], "--limit keeps the newest");
    }

    #[test]
    fn a_pass_saving_a_stale_copy_keeps_the_notifications_noted_since() {
        let s = Store::in_memory().unwrap();
        let stale = episode("a", 0, "rbac");
        s.history().save_episode(&stale, Retention::default(), at(0)).unwrap();
        // A delivery notes a Sent on the stored episode after the pass read it.
        let mut noted = stale.clone();
        noted.note_sent(Sent {
            trigger: "on-rbac".into(),
            service: "pd".into(),
            recipient: "".into(),
            action: Action::Fire,
            at: at(1),
            failed: None,
        });
        let tx = s.db().begin_write().unwrap();
        tx.open_table(EPISODES).unwrap().insert(episode_key(&noted).as_str(), serde_json::to_string(&noted).unwrap().as_str()).unwrap();
        tx.commit().unwrap();
        // The pass writes its copy, changed otherwise.
        let mut changed = stale;
        changed.classes.insert("config".into());
        s.history().save_episode(&changed, Retention::default(), at(2)).unwrap();
        let got = s.history().latest_episode("argocd/a@a").unwrap().unwrap();
        assert!(got.classes.contains("config"), "the pass's change is kept");
        assert_eq!(got.notifications, noted.notifications, "and so is the delivery's");
    }

    #[test]
    fn a_state_file_from_before_the_resolved_index_is_indexed_and_pruned_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let s = Store::open(&path).unwrap();
            for (name, min) in [("old1", 0), ("old2", 1)] {
                let mut ep = episode(name, min, "config");
                ep.resolved_at = Some(at(min + 1));
                s.history().save_episode(&ep, Retention::default(), at(min + 1)).unwrap();
            }
            s.history().save_episode(&episode("open", 2, "config"), Retention::default(), at(2)).unwrap();
            // As a state file written before the index existed: no index, no marker.
            let tx = s.db().begin_write().unwrap();
            tx.delete_table(RESOLVED).unwrap();
            tx.open_table(super::super::META).unwrap().remove("indexed:episodes_by_resolved").unwrap();
            tx.commit().unwrap();
        }
        let s = Store::open(&path).unwrap();
        let later = at(2) + chrono::Duration::days(100);
        s.history().save_episode(&episode("new", 100 * 24 * 60, "config"), Retention::default(), later).unwrap();
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["open", "new"], "both old resolved episodes aged out; the open one stays");
        let tx = s.db().begin_read().unwrap();
        assert!(tx.open_table(RESOLVED).unwrap().is_empty().unwrap(), "their index entries went with them");
    }

    // Whole episodes decoded on this thread (what a scan would cost).
    thread_local! {
        pub(super) static DECODED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Review (RELIABILITY): the fleet and a story are read by their indexes, not by a
    /// scan that happens to give the same result: among 500 other Applications'
    /// episodes, the fleet decodes no episode and a story only its own.
    #[test]
    fn the_fleet_and_a_story_decode_only_what_they_return() {
        let s = Store::in_memory().unwrap();
        let r = Retention::default();
        let many: Vec<Episode> = (0..500).map(|i| episode(&format!("x{i}"), i, "config")).collect();
        s.history().save_episodes(&many, r, at(600)).unwrap();
        s.history().save_episode(&episode("a", 700, "rbac"), r, at(700)).unwrap();
        s.history().save_episode(&episode("a", 800, "rbac"), r, at(800)).unwrap();
        DECODED.with(|d| d.set(0));
        assert_eq!(s.history().open_episodes().unwrap().len(), 501);
        assert_eq!(DECODED.with(|d| d.get()), 0, "the fleet reads the open summaries, no episode");
        let q = HistoryQuery { app: Some("argocd/a".into()), limit: Some(10), ..Default::default() };
        assert_eq!(s.history().episodes(&q).unwrap().len(), 2);
        assert!(DECODED.with(|d| d.get()) <= 2, "a story decodes its own episodes only: {}", DECODED.with(|d| d.get()));
    }

    /// The open-episode summaries follow the episodes (opened, resolved, pruned, the
    /// Application forgotten), and an Application's story reads its own episodes by
    /// the index, newest `limit` of them, whatever else the history holds.
    #[test]
    fn open_episodes_and_an_applications_episodes_are_read_by_their_indexes() {
        let s = Store::in_memory().unwrap();
        let r = Retention::default();
        let mut a = episode("a", 0, "rbac");
        a.attribution.push(crate::drift::AttributedChange { manager: "kubectl-edit".into(), ..Default::default() });
        s.history().save_episode(&a, r, at(0)).unwrap();
        s.history().save_episode(&episode("b", 1, "config"), r, at(1)).unwrap();
        s.history().save_episode(&episode("ab", 2, "rbac"), r, at(2)).unwrap();
        let mut open = s.history().open_episodes().unwrap();
        open.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(open.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "ab", "b"]);
        assert_eq!((open[0].who.as_str(), open[0].classes.clone(), open[0].opened_at), ("kubectl-edit", vec!["rbac".to_string()], at(0)));
        assert_eq!(s.history().open_episodes_by_class().unwrap(), BTreeMap::from([("config".into(), 1), ("rbac".into(), 2)]));
        a.resolved_at = Some(at(3));
        s.history().save_episode(&a, r, at(3)).unwrap();
        assert_eq!(s.history().open_episodes_by_class().unwrap(), BTreeMap::from([("config".into(), 1), ("rbac".into(), 1)]));
        // a's second episode, then its story: a's two, not ab's (a prefix of its name).
        s.history().save_episode(&episode("a", 4, "config"), r, at(4)).unwrap();
        let q = |app: &str, limit| HistoryQuery { app: Some(app.into()), limit: Some(limit), ..Default::default() };
        let story: Vec<DateTime<Utc>> = s.history().episodes(&q("argocd/a", 10)).unwrap().iter().map(|e| e.opened_at).collect();
        assert_eq!(story, [at(0), at(4)]);
        let newest: Vec<DateTime<Utc>> = s.history().episodes(&q("argocd/a", 1)).unwrap().iter().map(|e| e.opened_at).collect();
        assert_eq!(newest, [at(4)]);
        assert_eq!(s.history().episodes(&q("a", 10)).unwrap().len(), 2, "a bare name is still found (by a scan)");
        assert!(s.history().episodes(&q("other/a", 10)).unwrap().is_empty());
        // Forgotten (deleted), its open summary goes; pruned to one episode, the index
        // entries of the dropped ones go too.
        let tx = s.db().begin_write().unwrap();
        forget_app(&tx, "argocd/b@b").unwrap();
        tx.commit().unwrap();
        assert_eq!(s.history().open_episodes_by_class().unwrap(), BTreeMap::from([("config".into(), 1), ("rbac".into(), 1)]));
        let keep1 = Retention { max_episodes: 1, max_age: chrono::Duration::days(1) };
        s.history().save_episode(&episode("c", 5, "config"), keep1, at(5)).unwrap();
        assert_eq!(s.history().open_episodes().unwrap().iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["c"]);
        assert_eq!(
            s.history().open_episodes_by_class().unwrap(),
            BTreeMap::from([("config".into(), 1)]),
            "the pruned ones left the counters"
        );
        let tx = s.db().begin_read().unwrap();
        let by_app: Vec<String> = tx.open_table(BY_APP).unwrap().iter().unwrap().map(|i| i.unwrap().0.value().to_string()).collect();
        assert_eq!(by_app.len(), 1, "{by_app:?}");
        assert!(by_app[0].starts_with("argocd/c\u{0}"));
    }

    #[test]
    fn a_state_file_from_before_the_open_and_by_app_indexes_is_indexed_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let s = Store::open(&path).unwrap();
            let mut done = episode("done", 0, "config");
            done.resolved_at = Some(at(1));
            s.history().save_episode(&done, Retention::default(), at(1)).unwrap();
            s.history().save_episode(&episode("open", 2, "rbac"), Retention::default(), at(2)).unwrap();
            let tx = s.db().begin_write().unwrap();
            tx.delete_table(OPEN).unwrap();
            tx.delete_table(BY_APP).unwrap();
            tx.delete_table(OPEN_BY_CLASS).unwrap();
            let mut meta = tx.open_table(super::super::META).unwrap();
            meta.remove("indexed:open_episodes").unwrap();
            meta.remove("indexed:episodes_by_app").unwrap();
            meta.remove("indexed:open_episodes_by_class").unwrap();
            drop(meta);
            tx.commit().unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.history().open_episodes().unwrap().iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["open"]);
        let q = HistoryQuery { app: Some("argocd/done".into()), ..Default::default() };
        assert_eq!(s.history().episodes(&q).unwrap().len(), 1);
        assert_eq!(s.history().open_episodes_by_class().unwrap(), BTreeMap::from([("rbac".into(), 1)]), "counted once");
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.history().open_episodes_by_class().unwrap(), BTreeMap::from([("rbac".into(), 1)]), "not counted again");
    }

    #[test]
    fn a_reopened_episode_leaves_the_resolved_index() {
        let s = Store::in_memory().unwrap();
        let mut ep = episode("a", 0, "config");
        ep.resolved_at = Some(at(1));
        s.history().save_episode(&ep, Retention::default(), at(1)).unwrap();
        ep.resolved_at = None;
        s.history().save_episode(&ep, Retention::default(), at(2)).unwrap();
        // Far later: an open episode is not dropped for age, whatever it once was.
        let later = at(2) + chrono::Duration::days(100);
        s.history().save_episode(&episode("new", 100 * 24 * 60, "config"), Retention::default(), later).unwrap();
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["a", "new"]);
    }

    #[test]
    fn history_is_bounded_by_count_and_age_and_deleted_apps_keep_theirs() {
        let s = Store::in_memory().unwrap();
        let keep3 = Retention { max_episodes: 3, max_age: chrono::Duration::days(1) };
        for i in 0..5 {
            s.history().save_episode(&episode(&format!("app{i}"), i, "config"), keep3, at(i)).unwrap();
        }
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["app2", "app3", "app4"]);
        assert!(s.history().latest_episode("argocd/app0@app0").unwrap().is_none());

        let mut old = episode("old", 0, "config");
        old.resolved_at = Some(at(1));
        let s = Store::in_memory().unwrap();
        s.history().save_episode(&old, Retention::default(), at(1)).unwrap();
        s.history().save_episode(&episode("open", 2, "config"), Retention::default(), at(2)).unwrap();
        let later = at(2) + chrono::Duration::days(100);
        s.history().save_episode(&episode("new", 100 * 24 * 60, "config"), Retention::default(), later).unwrap();
        let names: Vec<String> = s.history().episodes(&HistoryQuery::default()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["open", "new"], "the old resolved episode aged out; the open one stays");

        s.set_hold("argocd/new@new", "on-x:[0].h", Some(7)).unwrap();
        assert_eq!(s.hold_since("argocd/new@new", "on-x:[0].h").unwrap(), Some(7));
        s.remove_app("argocd/new@new").unwrap();
        assert_eq!(s.hold_since("argocd/new@new", "on-x:[0].h").unwrap(), None);
        assert!(s.history().latest_episode("argocd/new@new").unwrap().is_none());
        assert_eq!(s.history().episodes(&HistoryQuery { app: Some("new".into()), ..Default::default() }).unwrap().len(), 1);
    }
}
