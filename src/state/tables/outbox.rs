//! The outbox's tables: the durable per-service delivery queue (entries, the due index,
//! depth counters, in-flight markers).
//!
//! An entry is written when the pipeline decides to send, and removed — in the same
//! transaction that records its dedup key — only when the delivery succeeded. A crash
//! anywhere in between leaves it in the outbox, and the workers deliver it after the
//! restart.
//!
//! Cost per item does not grow with the queue: entries are stored by id, an index keyed
//! by (service, next attempt time, id) gives the due entries and the next wake-up of a
//! service in O(log n) without decoding any other entry, and a per-service counter is
//! the queue depth (for the bound and for `/metrics`). Outcomes of several attempts are
//! settled in one transaction (`Outbox::settle`).

use serde::{Deserialize, Serialize};

use super::{app_range, from_json, groups, next_id, notified, to_json};
use crate::model::{Action, Notification};
use crate::state::kv::{ReadTransaction, Table, TableDefinition, WriteTransaction};
use crate::state::{StateError, storage};

/// The first layout, `"<service>\u{0}<id>"` -> JSON entry: read once at open to move its
/// entries to the tables below, then left empty.
const OUTBOX_V1: TableDefinition<&str, &str> = TableDefinition::new("outbox");
/// id -> JSON [`OutboxEntry`].
pub(in crate::state) const ENTRIES: TableDefinition<u64, &str> = TableDefinition::new("outbox_entries");
/// `"<service>\u{0}<next attempt ms, 20 digits>\u{0}<id, 20 digits>"` -> id: what is due
/// when, per service, in order.
pub(in crate::state) const DUE: TableDefinition<&str, u64> = TableDefinition::new("outbox_due");
/// service -> how many entries it has in the outbox.
pub(in crate::state) const DEPTH: TableDefinition<&str, u64> = TableDefinition::new("outbox_depth");
/// `"<app>\u{0}<dedup key>\u{0}<template>\u{0}<action>"` -> outbox id: what is in flight.
pub(in crate::state) const PENDING: TableDefinition<&str, u64> = TableDefinition::new("pending");

/// Most undelivered notifications one service may hold; past it new ones are
/// dead-lettered as "queue full" rather than growing without bound.
pub const MAX_OUTBOX_PER_SERVICE: usize = 10_000;

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(ENTRIES).map_err(storage)?;
    tx.open_table(DUE).map_err(storage)?;
    tx.open_table(DEPTH).map_err(storage)?;
    migrate_v1(tx)?;
    tx.open_table(PENDING).map_err(storage)?;
    super::dead::create_tables(tx)
}

/// A notification waiting to be delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEntry {
    pub id: u64,
    pub notification: Notification,
    /// Delivery attempts made so far.
    pub attempts: u32,
    pub enqueued_ms: u64,
    /// Not to be tried before this instant (backoff, `Retry-After`).
    pub next_attempt_ms: u64,
    /// Why the last attempt failed (secrets redacted).
    pub last_error: Option<String>,
}

/// What the oldest-age gauge reads of an entry.
#[derive(Deserialize)]
struct Enqueued {
    #[serde(default)]
    enqueued_ms: u64,
}

/// Moves the entries of the first layout (one table keyed by service and id) into the
/// indexed one, in the transaction that opens the store.
fn migrate_v1(tx: &WriteTransaction) -> Result<(), StateError> {
    let mut old = tx.open_table(OUTBOX_V1).map_err(storage)?;
    if old.is_empty().map_err(storage)? {
        return Ok(());
    }
    let mut moved = Vec::new();
    for item in old.iter().map_err(storage)? {
        let (_, v) = item.map_err(storage)?;
        moved.push(from_json::<OutboxEntry>(v.value())?);
    }
    old.retain(|_, _| false).map_err(storage)?;
    for e in moved {
        insert_entry(tx, &e)?;
    }
    Ok(())
}

pub(in crate::state) fn due_key(service: &str, next_ms: u64, id: u64) -> String {
    format!("{service}\u{0}{next_ms:020}\u{0}{id:020}")
}

fn service_range(service: &str) -> (String, String) {
    (format!("{service}\u{0}"), format!("{service}\u{1}"))
}

/// Writes an entry, its place in the due index, and counts it.
pub(in crate::state) fn insert_entry(tx: &WriteTransaction, e: &OutboxEntry) -> Result<(), StateError> {
    let service = e.notification.destination.service.as_str();
    // Keys of a new id: what they were does not matter (PostgreSQL sends them later).
    tx.open_table(ENTRIES).map_err(storage)?.put(e.id, to_json(e)?.as_str()).map_err(storage)?;
    tx.open_table(DUE).map_err(storage)?.put(due_key(service, e.next_attempt_ms, e.id).as_str(), e.id).map_err(storage)?;
    let mut depth = tx.open_table(DEPTH).map_err(storage)?;
    let n = depth.get(service).map_err(storage)?.map_or(0, |v| v.value());
    depth.insert(service, n + 1).map_err(storage)?;
    Ok(())
}

/// One entry of `service` left the outbox: its depth counter goes down (and away at 0).
pub(in crate::state) fn count_out(depth: &mut Table<&str, u64>, service: &str) -> Result<(), StateError> {
    count_out_by(depth, service, 1)
}

/// `service`'s depth counter, `gone` entries fewer.
fn count_out_by(depth: &mut Table<&str, u64>, service: &str, gone: u64) -> Result<(), StateError> {
    if gone == 0 {
        return Ok(());
    }
    let n = depth.get(service).map_err(storage)?.map_or(0, |v| v.value());
    match n.saturating_sub(gone) {
        0 => depth.remove(service).map_err(storage)?,
        left => depth.insert(service, left).map_err(storage)?,
    };
    Ok(())
}

/// How a settled attempt ends for one entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Settle {
    /// Delivered: removed, its dedup key recorded.
    Delivered,
    /// To be tried again at `next_ms`.
    Retry { next_ms: u64, error: String },
    /// Finally failed: moved to the dead letters (recorded as handled when permanent).
    Dead { error: String, permanent: bool },
}

/// The in-flight identity of a notification.
pub fn pending_key(n: &Notification) -> Option<String> {
    let r = n.record.as_ref()?;
    Some(pending_key_of(&r.app_key, &r.key, &n.template, n.action))
}

pub(in crate::state) fn pending_key_of(app: &str, key: &str, template: &str, action: Action) -> String {
    format!("{app}\u{0}{key}\u{0}{template}\u{0}{}", action.as_str())
}

/// Whether this notification (key, template, action) is waiting in the outbox.
#[cfg(test)]
pub(in crate::state) fn is_pending(tx: &ReadTransaction, app: &str, key: &str, template: &str, action: Action) -> Result<bool, StateError> {
    let t = tx.open_table(PENDING).map_err(storage)?;
    Ok(t.get(pending_key_of(app, key, template, action).as_str()).map_err(storage)?.is_some())
}

/// Every notification of one Application waiting in the outbox: (dedup key, template,
/// action), a range of its own entries.
pub(in crate::state) fn pending_of(
    tx: &ReadTransaction,
    app: &str,
) -> Result<std::collections::BTreeSet<(String, String, Action)>, StateError> {
    let t = tx.open_table(PENDING).map_err(storage)?;
    let (lo, hi) = app_range(app);
    let mut out = std::collections::BTreeSet::new();
    for item in t.range(lo.as_str()..hi.as_str()).map_err(storage)? {
        let (k, _) = item.map_err(storage)?;
        let mut parts = k.value()[lo.len()..].rsplitn(3, '\u{0}');
        let (Some(action), Some(template), Some(key)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let action = if action == Action::Resolve.as_str() { Action::Resolve } else { Action::Fire };
        out.insert((key.to_string(), template.to_string(), action));
    }
    Ok(out)
}

/// What a pass's enqueue did with each notification.
#[derive(Debug, Default, PartialEq)]
pub struct EnqueueReport {
    pub queued: usize,
    /// Already in flight (same key, template and action).
    pub duplicates: usize,
    /// A settle changed the key after the pass decided (it was delivered, or resolved,
    /// meanwhile): sending it would repeat what was just delivered.
    pub superseded: usize,
    /// Grouped notifications that joined a group's message already waiting.
    pub grouped: usize,
    /// Per service whose outbox was full, how many were not queued. Nothing about
    /// them is recorded, so the caller decides them again once there is room.
    pub full: std::collections::BTreeMap<String, usize>,
}

impl EnqueueReport {
    /// Notifications refused because their service's outbox was full.
    pub fn rejected(&self) -> usize {
        self.full.values().sum()
    }
}

/// The idempotency key of an outbox entry: the same for every attempt at it, across
/// crashes and restarts (the entry keeps its id until it settles), different for every
/// other notification (a repeat or a second firing is a new entry). Opaque, 32 hex
/// digits; receivers that honour `Idempotency-Key` drop the copy a crash between
/// sending and recording makes.
pub(in crate::state) fn idempotency_key(app_key: &str, enqueued_ms: u64, id: u64) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{app_key}\u{0}{enqueued_ms}\u{0}{id}").as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Entries due, and those that cannot be decoded (due key, id, why).
pub(in crate::state) type Due = (Vec<OutboxEntry>, Vec<(String, u64, String)>);

/// Whether any notification of `app` is in the outbox: a range of the in-flight
/// index, one entry read at most.
pub(in crate::state) fn has_pending(tx: &WriteTransaction, app: &str) -> Result<bool, StateError> {
    let (lo, hi) = app_range(app);
    let pending = tx.open_table(PENDING).map_err(storage)?;
    let mut range = pending.range(lo.as_str()..hi.as_str()).map_err(storage)?;
    Ok(range.next().is_some())
}

/// Writes notifications to the outbox, skipping any already in flight. Re-checks, in this
/// write transaction (redb serialises writers, so no settle commits in between),
/// what the pass decided on: a notification already in flight is a duplicate, and
/// one whose key a settle changed since the pass's snapshot (its `seen`) is
/// superseded. A full service queue refuses the entry without recording anything.
/// `due`: when each item is first due (by index; `now_ms` without).
pub(in crate::state) fn enqueue(
    tx: &WriteTransaction,
    items: &[Notification],
    now_ms: u64,
    due: Option<&[u64]>,
) -> Result<EnqueueReport, StateError> {
    let mut report = EnqueueReport::default();
    let mut pending = tx.open_table(PENDING).map_err(storage)?;
    let notified = tx.open_table(notified::NOTIFIED).map_err(storage)?;
    for (i, n) in items.iter().enumerate() {
        let first_due = due.and_then(|d| d.get(i)).copied().unwrap_or(now_ms).max(now_ms);
        let pkey = pending_key(n);
        if let Some(p) = &pkey
            && pending.get(p.as_str()).map_err(storage)?.is_some()
        {
            report.duplicates += 1;
            continue;
        }
        if let Some(r) = &n.record {
            let now_at = notified.get(super::full_key(&r.app_key, &r.key).as_str()).map_err(storage)?.map(|v| v.value());
            if now_at != r.seen {
                report.superseded += 1;
                continue;
            }
        }
        if let Some(g) = &n.group {
            match groups::join(tx, &mut pending, n, g, pkey.as_deref(), now_ms)? {
                groups::Joined::Queued => report.queued += 1,
                groups::Joined::Merged => report.grouped += 1,
                groups::Joined::Unchanged => report.duplicates += 1,
                groups::Joined::Full => *report.full.entry(n.destination.service.clone()).or_default() += 1,
            }
            continue;
        }
        let queued = tx.open_table(DEPTH).map_err(storage)?.get(n.destination.service.as_str()).map_err(storage)?.map_or(0, |v| v.value());
        if queued >= MAX_OUTBOX_PER_SERVICE as u64 {
            *report.full.entry(n.destination.service.clone()).or_default() += 1;
            continue;
        }
        let id = next_id(tx)?;
        let mut notification = n.clone();
        let app_key = n.record.as_ref().map_or(n.app.as_str(), |r| r.app_key.as_str());
        notification.idempotency_key = Some(idempotency_key(app_key, now_ms, id));
        let entry = OutboxEntry { id, notification, attempts: 0, enqueued_ms: now_ms, next_attempt_ms: first_due, last_error: None };
        insert_entry(tx, &entry)?;
        if let Some(p) = &pkey {
            pending.insert(p.as_str(), id).map_err(storage)?;
        }
        report.queued += 1;
    }
    Ok(report)
}

/// Up to `limit` entries of `service` due at `now_ms`, the earliest due first (among
/// those, the oldest first): a range of the due index, decoding only what it returns.
/// Also returns the entries that cannot be decoded (due key, id, why), for the
/// caller to quarantine.
pub(in crate::state) fn due(tx: &ReadTransaction, service: &str, now_ms: u64, limit: usize) -> Result<Due, StateError> {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    {
        let index = tx.open_table(DUE).map_err(storage)?;
        let entries = tx.open_table(ENTRIES).map_err(storage)?;
        let lo = format!("{service}\u{0}");
        let hi = format!("{service}\u{0}{:020}", now_ms.saturating_add(1));
        let mut due = Vec::new();
        for item in index.range(lo.as_str()..hi.as_str()).map_err(storage)?.take(limit) {
            let (k, id) = item.map_err(storage)?;
            due.push((k.value().to_string(), id.value()));
        }
        // The batch's entries in one read (one round trip on PostgreSQL).
        let ids: Vec<u64> = due.iter().map(|(_, id)| *id).collect();
        for ((k, id), v) in due.into_iter().zip(entries.get_many(&ids).map_err(storage)?) {
            if let Some(v) = v {
                match from_json::<OutboxEntry>(v.value()) {
                    Ok(mut e) => {
                        groups::message(tx, &mut e)?;
                        out.push(e)
                    }
                    Err(e) => bad.push((k, id, e.to_string())),
                }
            }
        }
    }
    Ok((out, bad))
}

/// The earliest `next_attempt_ms` of `service`'s entries, if it has any: the first
/// key of its range of the due index.
pub(in crate::state) fn next_due_ms(tx: &ReadTransaction, service: &str) -> Result<Option<u64>, StateError> {
    let index = tx.open_table(DUE).map_err(storage)?;
    let (lo, hi) = service_range(service);
    let first = index.range(lo.as_str()..hi.as_str()).map_err(storage)?.next();
    match first {
        Some(item) => {
            let (k, _) = item.map_err(storage)?;
            Ok(k.value().split('\u{0}').nth(1).and_then(|ms| ms.parse().ok()))
        }
        None => Ok(None),
    }
}

/// When the oldest entry still in the outbox was queued (unix ms): the first entry
/// by id, which the outbox gives in queueing order. One read.
pub(in crate::state) fn oldest_enqueued_ms(tx: &ReadTransaction) -> Result<Option<u64>, StateError> {
    let entries = tx.open_table(ENTRIES).map_err(storage)?;
    let first = entries.first().map_err(storage)?;
    Ok(match first {
        Some((_, v)) => serde_json::from_str::<Enqueued>(v.value()).ok().map(|e| e.enqueued_ms),
        None => None,
    })
}

/// How many entries each service has in the outbox (counters, not a scan).
pub(in crate::state) fn queue_depths(tx: &ReadTransaction) -> Result<Vec<(String, u64)>, StateError> {
    let t = tx.open_table(DEPTH).map_err(storage)?;
    let mut out = Vec::new();
    for item in t.iter().map_err(storage)? {
        let (k, v) = item.map_err(storage)?;
        out.push((k.value().to_string(), v.value()));
    }
    Ok(out)
}

/// Every outbox entry (of one service, or all), in due order per service. Reads the
/// whole outbox: for `driftwatch deliveries`, not for a running daemon's loops.
pub(in crate::state) fn entries(tx: &ReadTransaction, service: Option<&str>) -> Result<Vec<OutboxEntry>, StateError> {
    let index = tx.open_table(DUE).map_err(storage)?;
    let entries = tx.open_table(ENTRIES).map_err(storage)?;
    let ids: Vec<u64> = match service {
        Some(s) => {
            let (lo, hi) = service_range(s);
            index.range::<&str>(lo.as_str()..hi.as_str()).map_err(storage)?.map(|i| i.map(|(_, id)| id.value())).collect::<Result<_, _>>()
        }
        None => index.iter().map_err(storage)?.map(|i| i.map(|(_, id)| id.value())).collect::<Result<_, _>>(),
    }
    .map_err(storage)?;
    let mut out = Vec::new();
    for id in ids {
        if let Some(v) = entries.get(id).map_err(storage)? {
            out.push(from_json(v.value())?);
        }
    }
    Ok(out)
}

/// Takes `entries` out of the outbox: their bodies, due-index keys and pending
/// markers, one removal per table (on PostgreSQL one statement each, not one per
/// entry), and each service's depth counter once.
pub(in crate::state) fn remove_entries(tx: &WriteTransaction, entries: &[&OutboxEntry]) -> Result<(), StateError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut by_service: std::collections::BTreeMap<&str, Vec<u64>> = std::collections::BTreeMap::new();
    for e in entries {
        by_service.entry(e.notification.destination.service.as_str()).or_default().push(e.id);
    }
    {
        let mut bodies = tx.open_table(ENTRIES).map_err(storage)?;
        let mut depth = tx.open_table(DEPTH).map_err(storage)?;
        for (service, ids) in &by_service {
            let existed = bodies.remove_many(ids).map_err(storage)?;
            count_out_by(&mut depth, service, existed)?;
        }
    }
    let due: Vec<String> = entries.iter().map(|e| due_key(e.notification.destination.service.as_str(), e.next_attempt_ms, e.id)).collect();
    tx.open_table(DUE).map_err(storage)?.delete_many(&due.iter().map(String::as_str).collect::<Vec<_>>()).map_err(storage)?;
    let pending: Vec<String> = entries.iter().filter_map(|e| pending_key(&e.notification)).collect();
    tx.open_table(PENDING).map_err(storage)?.delete_many(&pending.iter().map(String::as_str).collect::<Vec<_>>()).map_err(storage)?;
    Ok(())
}

/// An entry to be tried again at `next_ms`: one attempt more, the error kept, and
/// its place in the due index moved.
pub(in crate::state) fn reschedule(tx: &WriteTransaction, e: &OutboxEntry, next_ms: u64, error: &str) -> Result<(), StateError> {
    let service = e.notification.destination.service.as_str();
    let mut next = e.clone();
    next.attempts += 1;
    next.next_attempt_ms = next_ms;
    next.last_error = Some(error.to_string());
    let mut index = tx.open_table(DUE).map_err(storage)?;
    index.remove(due_key(service, e.next_attempt_ms, e.id).as_str()).map_err(storage)?;
    index.insert(due_key(service, next.next_attempt_ms, e.id).as_str(), e.id).map_err(storage)?;
    tx.open_table(ENTRIES).map_err(storage)?.insert(e.id, to_json(&next)?.as_str()).map_err(storage)?;
    Ok(())
}

/// Makes entries of `service` that wait out a backoff due at `now_ms` again: a
/// destination that was down is back, and what failed against it while it was down
/// goes with the rest of the queue rather than after its own backoff. `entries`
/// are (id, the next attempt its last settle gave it); one that settled or was
/// attempted since is left alone. Reads only those entries.
pub(in crate::state) fn release(tx: &WriteTransaction, service: &str, entries: &[(u64, u64)], now_ms: u64) -> Result<usize, StateError> {
    let mut released = 0;
    {
        let mut table = tx.open_table(ENTRIES).map_err(storage)?;
        let mut index = tx.open_table(DUE).map_err(storage)?;
        // The entries in one read (one round trip on PostgreSQL).
        let ids: Vec<u64> = entries.iter().map(|(id, _)| *id).collect();
        let bodies = table.get_many(&ids).map_err(storage)?;
        for (&(id, next_ms), body) in entries.iter().zip(bodies) {
            // One that cannot be decoded is left where it is (quarantined when it
            // falls due): a release is not worth failing the settle it rides in.
            let Some(Ok(mut e)) = body.map(|v| from_json::<OutboxEntry>(v.value())) else { continue };
            if e.next_attempt_ms != next_ms || next_ms <= now_ms {
                continue;
            }
            index.remove(due_key(service, next_ms, id).as_str()).map_err(storage)?;
            e.next_attempt_ms = now_ms;
            index.insert(due_key(service, now_ms, id).as_str(), id).map_err(storage)?;
            table.insert(id, to_json(&e)?.as_str()).map_err(storage)?;
            released += 1;
        }
    }
    Ok(released)
}

/// A notification of `ns/a@u` to `service`, dedup key `key`, template `t`.
#[cfg(test)]
pub(in crate::state) fn test_notification(service: &str, key: &str) -> Notification {
    Notification {
        received_ms: None,
        app: "ns/a".into(),
        meta: crate::model::AppMeta::default(),
        trigger: "on-x".into(),
        condition: 0,
        condition_key: "[0].x".into(),
        template: "t".into(),
        destination: crate::model::Destination::new(service, "r"),
        kind: crate::model::DestinationKind::Webhook,
        action: Action::Fire,
        severity: crate::model::Severity::Info,
        payload: serde_json::json!({}),
        record: Some(crate::model::StateRecord { app_key: "ns/a@u".into(), key: key.into(), op: crate::model::RecordOp::Set, seen: None }),
        episode: None,
        operation: None,
        idempotency_key: None,
        group: None,
    }
}

#[cfg(test)]
mod tests {
    use super::test_notification as n;
    use super::*;
    use crate::state::PassWrite;
    use crate::state::{Requeued, Settle, Store};

    /// A deleted Application with an entry in flight waits for its settle; seen again
    /// before that (a replay re-creating it), it is not purged by that settle.
    #[test]
    fn a_deleted_application_is_purged_by_its_last_settle_unless_it_came_back() {
        let s = Store::in_memory().unwrap();
        let deleted = |deleted| PassWrite { app_key: "ns/a@u", deleted, ..Default::default() };
        s.record("ns/a@u", "old", 1).unwrap();
        s.pass().write_pass(&deleted(true), &[n("hook", "k1")], 10).unwrap();
        assert_eq!((s.pass().deleted_waiting().unwrap(), s.pass().keys("ns/a@u").unwrap().len()), (1, 1), "waits for k1");
        let entry = s.outbox().due("hook", 10, 10).unwrap().remove(0);
        s.outbox().settle(&[(entry, Settle::Delivered)], 11).unwrap();
        assert_eq!((s.pass().deleted_waiting().unwrap(), s.pass().keys("ns/a@u").unwrap()), (0, vec![]), "k1's settle purged old and k1");

        s.pass().write_pass(&deleted(true), &[n("hook", "k2")], 20).unwrap();
        s.pass().write_pass(&PassWrite { app_key: "ns/a@u", forgets: vec!["x"], ..Default::default() }, &[], 21).unwrap();
        assert_eq!(s.pass().deleted_waiting().unwrap(), 0, "seen again");
        let entry = s.outbox().due("hook", 21, 10).unwrap().remove(0);
        s.outbox().settle(&[(entry, Settle::Delivered)], 22).unwrap();
        assert_eq!(s.pass().keys("ns/a@u").unwrap().len(), 1, "k2 recorded and kept");
    }

    #[test]
    fn enqueue_deduplicates_in_flight_and_complete_records() {
        let s = Store::in_memory().unwrap();
        let r = s.enqueue(&[n("hook", "k1"), n("hook", "k1"), n("slack", "k2")], 10).unwrap();
        assert_eq!(r, EnqueueReport { queued: 2, duplicates: 1, ..Default::default() });
        assert!(s.outbox().is_pending("ns/a@u", "k1", "t", Action::Fire).unwrap());
        assert_eq!(s.enqueue(&[n("hook", "k1")], 11).unwrap().duplicates, 1, "still in flight");
        let due = s.outbox().due("hook", 10, 10).unwrap();
        assert_eq!(due.len(), 1);
        s.outbox().settle(&[(due[0].clone(), Settle::Delivered)], 12).unwrap();
        assert!(s.pass().is_notified("ns/a@u", "k1").unwrap());
        assert!(!s.outbox().is_pending("ns/a@u", "k1", "t", Action::Fire).unwrap());
        assert!(s.outbox().due("hook", 100, 10).unwrap().is_empty());
        assert_eq!(s.outbox().due("slack", 100, 10).unwrap().len(), 1, "other services untouched");
    }

    /// A store with two entries due for `hook` (k1, k2) and `slack`'s k3 delivered.
    fn two_hook_entries_due() -> (Store, Vec<OutboxEntry>) {
        let s = Store::in_memory().unwrap();
        s.enqueue(&[n("hook", "k1"), n("hook", "k2")], 0).unwrap();
        s.enqueue(&[n("slack", "k3")], 7).unwrap();
        assert_eq!((s.outbox().oldest_enqueued_ms().unwrap(), s.outbox().dead_letter_count().unwrap()), (Some(0), 0));
        let k3 = s.outbox().due("slack", 7, 10).unwrap();
        s.outbox().settle(&[(k3[0].clone(), Settle::Delivered)], 8).unwrap();
        let due = s.outbox().due("hook", 0, 10).unwrap();
        (s, due)
    }

    #[test]
    fn reschedule_and_dead_letter() {
        let (s, due) = two_hook_entries_due();
        s.outbox().settle(&[(due[0].clone(), Settle::Retry { next_ms: 5_000, error: "503".into() })], 1).unwrap();
        assert_eq!(s.outbox().due("hook", 1_000, 10).unwrap().len(), 1, "the rescheduled one waits");
        assert_eq!(s.outbox().next_due_ms("hook").unwrap(), Some(0));
        // In due order: k2 (due at 0) before the rescheduled k1 (due at 5000).
        let later = s.outbox().due("hook", 5_000, 10).unwrap();
        assert_eq!(later[1].attempts, 1);
        assert_eq!(later[1].last_error.as_deref(), Some("503"));
        s.outbox().settle(&[(later[1].clone(), Settle::Dead { error: "gave up after 503".into(), permanent: false })], 6_000).unwrap();
        s.outbox().settle(&[(later[0].clone(), Settle::Dead { error: "400 bad request".into(), permanent: true })], 6_000).unwrap();
        let dead = s.outbox().dead_letters().unwrap();
        assert_eq!((dead.len(), s.outbox().dead_letter_count().unwrap()), (2, 2));
        assert_eq!(s.outbox().oldest_enqueued_ms().unwrap(), None, "nothing waits");
        assert!(!s.pass().is_notified("ns/a@u", "k1").unwrap(), "retryable failure: decided again later");
        assert!(s.pass().is_notified("ns/a@u", "k2").unwrap(), "permanent failure: not re-sent");
        assert!(s.outbox().entries(None).unwrap().is_empty());
    }

    /// One entry that cannot be decoded is quarantined; the rest of the queue is
    /// delivered, and its counters and in-flight index stay right.
    #[test]
    fn an_undecodable_entry_is_quarantined_and_the_rest_delivered() {
        let s = Store::in_memory().unwrap();
        s.enqueue(&[n("hook", "k1"), n("hook", "k2"), n("hook", "k3")], 0).unwrap();
        let second = s.outbox().due("hook", 0, 10).unwrap()[1].id;
        {
            let tx = s.db().begin_write().unwrap();
            tx.open_table(ENTRIES).unwrap().insert(second, "{\"id\": 2, \"notification\": 7").unwrap();
            tx.commit().unwrap();
        }
        let due = s.outbox().due("hook", 0, 10).unwrap();
        assert_eq!(due.iter().map(|e| e.notification.record.as_ref().unwrap().key.as_str()).collect::<Vec<_>>(), ["k1", "k3"]);
        let q = s.outbox().quarantined().unwrap();
        assert_eq!((q.len(), q[0].id, q[0].service.as_str()), (1, second, "hook"));
        assert!(q[0].raw.starts_with("{\"id\": 2"), "{q:?}");
        assert_eq!(s.outbox().queue_depths().unwrap(), vec![("hook".to_string(), 2)]);
        assert!(!s.outbox().is_pending("ns/a@u", "k2", "t", Action::Fire).unwrap(), "its in-flight marker went with it");
        assert_eq!(s.enqueue(&[n("hook", "k2")], 1).unwrap().queued, 1, "so it can be decided again");
    }

    /// Dead letters are re-driven: back in the outbox, due now, attempts reset, the
    /// same idempotency key; an unknown id is reported, one in flight again dropped.
    #[test]
    fn dead_letters_are_requeued_on_demand() {
        let (s, due) = two_hook_entries_due();
        let key = due[0].notification.idempotency_key.clone();
        s.outbox()
            .settle(
                &due.iter()
                    .map(|e| (e.clone(), Settle::Dead { error: "gave up after 10 attempt(s): HTTP 403".into(), permanent: false }))
                    .collect::<Vec<_>>(),
                5,
            )
            .unwrap();
        assert_eq!(s.outbox().dead_letters().unwrap().len(), 2);
        // k2 was decided anew meanwhile: it is in flight again.
        s.enqueue(&[n("hook", "k2")], 6).unwrap();
        let ids: Vec<u64> = s.outbox().dead_letters().unwrap().iter().map(|d| d.id).collect();
        let r = s.outbox().requeue_dead(Some(&[ids[0], ids[1], 999]), 10).unwrap();
        assert_eq!(r, Requeued { queued: vec![(ids[0], "hook".into())], in_flight: vec![ids[1]], missing: vec![999], full: vec![] });
        assert!(s.outbox().dead_letters().unwrap().is_empty());
        let again = s.outbox().due("hook", 10, 10).unwrap();
        assert_eq!(again.len(), 2, "k1 re-driven, k2 decided anew");
        let k1 = again.iter().find(|e| e.notification.record.as_ref().unwrap().key == "k1").unwrap();
        assert_eq!((k1.attempts, k1.next_attempt_ms, &k1.notification.idempotency_key), (0, 10, &key));
        assert_eq!(s.outbox().requeue_dead(None, 11).unwrap(), Requeued::default(), "nothing left");
    }

    #[test]
    fn the_outbox_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.redb");
        Store::open(&p).unwrap().enqueue(&[n("hook", "k1")], 0).unwrap();
        let s = Store::open(&p).unwrap();
        let entry = s.outbox().due("hook", 0, 10).unwrap().remove(0);
        assert_eq!(entry.notification, Notification { idempotency_key: entry.notification.idempotency_key.clone(), ..n("hook", "k1") });
        assert_eq!(entry.notification.idempotency_key.as_ref().map(String::len), Some(32), "given a key when queued");
    }

    #[test]
    fn the_due_index_and_depth_counters_follow_every_change() {
        let s = Store::in_memory().unwrap();
        let keys: Vec<String> = (0..5).map(|i| format!("k{i}")).collect();
        let items: Vec<Notification> = keys.iter().map(|k| n("hook", k)).chain([n("slack", "s1")]).collect();
        s.enqueue(&items, 100).unwrap();
        let depth = |s: &Store| s.outbox().queue_depths().unwrap().into_iter().collect::<std::collections::BTreeMap<_, _>>();
        assert_eq!(depth(&s), [("hook".to_string(), 5), ("slack".to_string(), 1)].into());
        let due = s.outbox().due("hook", 100, 10).unwrap();
        assert_eq!(due.len(), 5);
        // One transaction settles a batch: delivered, retried later, dead.
        s.outbox()
            .settle(
                &[
                    (due[0].clone(), Settle::Delivered),
                    (due[1].clone(), Settle::Retry { next_ms: 10_000, error: "503".into() }),
                    (due[2].clone(), Settle::Dead { error: "400".into(), permanent: true }),
                ],
                200,
            )
            .unwrap();
        assert_eq!(depth(&s)["hook"], 3, "one delivered, one dead, three left");
        assert!(s.pass().is_notified("ns/a@u", "k0").unwrap() && s.pass().is_notified("ns/a@u", "k2").unwrap());
        assert_eq!(s.outbox().due("hook", 200, 10).unwrap().len(), 2, "the retried one waits");
        assert_eq!(s.outbox().next_due_ms("hook").unwrap(), Some(100));
        let rest = s.outbox().due("hook", 200, 10).unwrap();
        s.outbox().settle(&rest.iter().map(|e| (e.clone(), Settle::Delivered)).collect::<Vec<_>>(), 300).unwrap();
        assert_eq!(s.outbox().next_due_ms("hook").unwrap(), Some(10_000), "the next wake-up is the retried entry");
        assert_eq!(s.outbox().due("hook", 10_000, 10).unwrap()[0].attempts, 1);
        assert_eq!(s.outbox().next_due_ms("nothing").unwrap(), None);
        assert_eq!(s.outbox().entries(None).unwrap().len(), 2, "the retried hook entry and slack's");
    }

    #[test]
    fn the_outbox_bound_counts_without_scanning() {
        let s = Store::in_memory().unwrap();
        let items: Vec<Notification> = (0..MAX_OUTBOX_PER_SERVICE + 3).map(|i| n("hook", &format!("k{i}"))).collect();
        let r = s.enqueue(&items, 0).unwrap();
        assert_eq!((r.queued, r.rejected()), (MAX_OUTBOX_PER_SERVICE, 3));
        assert_eq!(s.outbox().queue_depths().unwrap(), vec![("hook".to_string(), MAX_OUTBOX_PER_SERVICE as u64)]);
        assert!(s.outbox().dead_letters().unwrap().is_empty(), "a full queue refuses; it does not dead-letter (and record) anything");
    }

    #[test]
    fn a_state_file_of_the_first_layout_is_migrated_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.redb");
        {
            // Written as the first release did: one table keyed by service and id.
            let db = crate::state::kv::Database::Redb(redb::Database::create(&p).unwrap());
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(OUTBOX_V1).unwrap();
                for (id, key) in [(7u64, "k1"), (9, "k2")] {
                    let e = OutboxEntry {
                        id,
                        notification: n("hook", key),
                        attempts: 2,
                        enqueued_ms: 5,
                        next_attempt_ms: 50,
                        last_error: None,
                    };
                    t.insert(format!("hook\u{0}{id:020}").as_str(), serde_json::to_string(&e).unwrap().as_str()).unwrap();
                }
            }
            tx.commit().unwrap();
        }
        let s = Store::open(&p).unwrap();
        let due = s.outbox().due("hook", 50, 10).unwrap();
        assert_eq!(due.iter().map(|e| e.id).collect::<Vec<_>>(), vec![7, 9]);
        assert_eq!(due[0].attempts, 2);
        assert_eq!(s.outbox().queue_depths().unwrap(), vec![("hook".to_string(), 2)]);
        drop(s);
        let s = Store::open(&p).unwrap();
        assert_eq!(s.outbox().entries(None).unwrap().len(), 2, "migrated once, not twice");
    }
}
