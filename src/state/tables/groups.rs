//! Grouped notifications (a route's `group:`, Alertmanager's model): the members of
//! each group, and the one outbox entry that sends the group's message.
//!
//! A member joining or leaving is one pass's write: the group's row gets the message
//! the pass rendered (the group as it is after the change) and a new revision, the
//! member's dedup record waits in the group, and the group has at most one outbox
//! entry, due `wait` after the group opened (its first message) or `interval` after
//! the last message (an update). When the outbox hands that entry to a worker it
//! carries the group's latest message (`Outbox::due`), so what is sent is what
//! the group is when it is sent, however many members joined while it waited. Its
//! settle records the dedup keys of the members the sent revision included, in the
//! same transaction; members that joined during the attempt get the next update.
//! Everything is in the state store: a restart inside `wait` finds the entry and the
//! members where they were, so the message is neither lost nor sent twice.
//!
//! Cost: a join reads and writes one group row and one member row; the group row
//! lists at most [`MAX_LISTED`] members (the message names those, then "and N more");
//! a settle reads the members waiting for that message, nothing else.

use serde::{Deserialize, Serialize};

use super::outbox::{DEPTH, MAX_OUTBOX_PER_SERVICE, OutboxEntry, PENDING, idempotency_key, insert_entry, pending_key_of};
use super::{episodes, from_json, next_id, notified, to_json};
use crate::drift::episode::Sent;
use crate::model::{Action, Destination, GroupRef, Notification, StateRecord};
use crate::state::kv::{ReadTransaction, Table, TableDefinition, WriteTransaction};
use crate::state::{StateError, from_millis, storage};

/// group key -> JSON [`Group`].
const GROUPS: TableDefinition<&str, &str> = TableDefinition::new("groups");
/// `"<group key>\u{0}<app key>"` -> JSON [`Member`].
const MEMBERS: TableDefinition<&str, &str> = TableDefinition::new("group_members");
/// `"<group key>\u{0}<app key>"` -> JSON [`Waiting`]: members whose dedup record is
/// written when the group's next message is delivered.
const WAITING: TableDefinition<&str, &str> = TableDefinition::new("group_waiting");

/// `"<app key>\u{0}<trigger>\u{0}<service>\u{0}<recipient>"` -> group key: the group an
/// Application is in for one (trigger, destination), so that it leaves that group (and
/// no other) when it resolves, moves to another group (a new revision), or is deleted.
pub(in crate::state) const MEMBERSHIP: TableDefinition<&str, &str> = TableDefinition::new("group_membership");

/// Members a group's row names (and its message lists); the rest are counted.
pub const MAX_LISTED: usize = 25;

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(GROUPS).map_err(storage)?;
    tx.open_table(MEMBERS).map_err(storage)?;
    tx.open_table(WAITING).map_err(storage)?;
    tx.open_table(MEMBERSHIP).map_err(storage)?;
    Ok(())
}

/// An Application's membership of a group for one trigger and destination. Only a
/// route of the configuration groups, and only its own recipients
/// (`pipeline::group::grouping`), so no part here is the Application's to choose; the
/// trigger and destination are read back from the key (`memberships`).
fn slot(app_key: &str, trigger: &str, d: &Destination) -> String {
    format!("{app_key}\u{0}{trigger}\u{0}{}\u{0}{}", d.service, d.recipient)
}

/// Drops an Application's memberships (its state is purged).
pub(in crate::state) fn forget_memberships(tx: &WriteTransaction, app_key: &str) -> Result<(), StateError> {
    let (lo, hi) = (format!("{app_key}\u{0}"), format!("{app_key}\u{1}"));
    tx.open_table(MEMBERSHIP).map_err(storage)?.retain_in(lo.as_str()..hi.as_str(), |_, _| false).map_err(storage)?;
    Ok(())
}

/// One run of a group, from its first member to the delivery of the message that
/// shows none firing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    pub key: String,
    pub instance: String,
    pub opened_ms: u64,
    pub firing: u64,
    pub resolved: u64,
    /// The first [`MAX_LISTED`] members, in the order they joined.
    pub listed: Vec<Listed>,
    /// One per member change.
    pub revision: u64,
    /// The revision the last delivered message showed (0: none yet).
    #[serde(default)]
    pub sent_revision: u64,
    #[serde(default)]
    pub last_sent_ms: Option<u64>,
    /// The group's outbox entry, while it has one.
    #[serde(default)]
    pub entry: Option<u64>,
    /// The message of the latest revision, as the pass rendered it.
    #[serde(default)]
    pub notification: Option<Notification>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listed {
    /// `namespace/name`.
    pub app: String,
    pub firing: bool,
}

/// A member of a group's run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub instance: String,
    pub firing: bool,
}

/// A member's dedup record, written when the message of `revision` (or a later one) is
/// delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Waiting {
    record: StateRecord,
    revision: u64,
    /// Noted in the member's episode when delivered.
    #[serde(default)]
    episode: Option<String>,
    trigger: String,
}

impl Group {
    /// How `member` joining (`joins`) or leaving changes the group: `None` when it does
    /// not (leaving a group it is not firing in). A pure function of what the store
    /// holds, so the pass that renders the message and the write that stores it decide
    /// the same. `instance` names the run a new group starts (the pass's choice).
    pub fn after(
        prev: Option<&Group>,
        member: Option<&Member>,
        key: &str,
        app: &str,
        joins: bool,
        instance: &str,
        now_ms: u64,
    ) -> Option<(Group, Member)> {
        let Some(prev) = prev else {
            if !joins {
                return None;
            }
            let g = Group {
                key: key.to_string(),
                instance: instance.to_string(),
                opened_ms: now_ms,
                firing: 1,
                resolved: 0,
                listed: vec![Listed { app: app.to_string(), firing: true }],
                revision: 1,
                sent_revision: 0,
                last_sent_ms: None,
                entry: None,
                notification: None,
            };
            return Some((g, Member { instance: instance.to_string(), firing: true }));
        };
        let was = member.filter(|m| m.instance == prev.instance).map(|m| m.firing);
        let mut g = prev.clone();
        match (joins, was) {
            (true, Some(true)) => {}
            (true, Some(false)) => {
                g.resolved = g.resolved.saturating_sub(1);
                g.firing += 1;
            }
            (true, None) => g.firing += 1,
            (false, Some(true)) => {
                g.firing = g.firing.saturating_sub(1);
                g.resolved += 1;
            }
            (false, _) => return None,
        }
        if let Some(l) = g.listed.iter_mut().find(|l| l.app == app) {
            l.firing = joins;
        } else if g.listed.len() < MAX_LISTED {
            g.listed.push(Listed { app: app.to_string(), firing: joins });
        }
        g.revision += 1;
        let m = Member { instance: g.instance.clone(), firing: joins };
        Some((g, m))
    }

    /// What a template sees as `group`.
    pub fn view(&self, labels: &std::collections::BTreeMap<String, String>) -> serde_json::Value {
        let count = self.firing + self.resolved;
        serde_json::json!({
            "key": self.key,
            "instance": self.instance,
            "labels": labels,
            "count": count,
            "firing": self.firing,
            "resolved": self.resolved,
            "apps": self.listed,
            "more": count.saturating_sub(self.listed.len() as u64),
        })
    }
}

/// A stored row, or `None` when it cannot be read: a damaged group row is treated as
/// absent (the next join starts the group again and overwrites it) rather than failing
/// every pass and settle that touches it.
fn row<T: for<'de> Deserialize<'de>>(v: Option<crate::state::kv::Got<&str>>) -> Option<T> {
    let v = v?;
    match from_json(v.value()) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(error = %e, "a grouped notification's stored row cannot be read; it is treated as absent");
            None
        }
    }
}

fn member_key(group: &str, app: &str) -> String {
    format!("{group}\u{0}{app}")
}

fn group_range(group: &str) -> (String, String) {
    (format!("{group}\u{0}"), format!("{group}\u{1}"))
}

/// A group's current run, if it has one.
pub(in crate::state) fn group(tx: &ReadTransaction, key: &str) -> Result<Option<Group>, StateError> {
    let t = tx.open_table(GROUPS).map_err(storage)?;
    Ok(row(t.get(key).map_err(storage)?))
}

/// Every (trigger, destination, group key) `app_key` is in: a range of one
/// Application's slots (a handful), for a deleted Application leaving its groups.
pub(in crate::state) fn memberships(tx: &ReadTransaction, app_key: &str) -> Result<Vec<(String, Destination, String)>, StateError> {
    let t = tx.open_table(MEMBERSHIP).map_err(storage)?;
    let (lo, hi) = (format!("{app_key}\u{0}"), format!("{app_key}\u{1}"));
    let mut out = Vec::new();
    for item in t.range(lo.as_str()..hi.as_str()).map_err(storage)? {
        let (k, v) = item.map_err(storage)?;
        let mut parts = k.value()[lo.len()..].splitn(3, '\u{0}');
        if let (Some(trigger), Some(service), Some(recipient)) = (parts.next(), parts.next(), parts.next()) {
            out.push((trigger.to_string(), Destination::new(service, recipient), v.value().to_string()));
        }
    }
    Ok(out)
}

/// An Application's membership of a group (of its current run or an earlier one).
pub(in crate::state) fn member(tx: &ReadTransaction, key: &str, app: &str) -> Result<Option<Member>, StateError> {
    let t = tx.open_table(MEMBERS).map_err(storage)?;
    Ok(row(t.get(member_key(key, app).as_str()).map_err(storage)?))
}

/// How a grouped notification's enqueue went.
pub(in crate::state) enum Joined {
    /// A new outbox entry (the group's first message, or an update after a sent one).
    Queued,
    /// Into the message already waiting.
    Merged,
    /// Nothing changed (a member leaving a group it is not firing in).
    Unchanged,
    /// The service's queue is full.
    Full,
}

/// A grouped notification's write, in the pass's transaction: the member's change
/// applied to the group (as the pass decided it), the message replaced by the one
/// the pass rendered, the member's record waiting for delivery, and the group's
/// entry queued when it has none. `pending` is the in-flight marker of the member's
/// notification (`in_flight`, the caller's open table of them).
pub(in crate::state) fn join(
    tx: &WriteTransaction,
    in_flight: &mut Table<&str, u64>,
    n: &Notification,
    g: &GroupRef,
    pending: Option<&str>,
    now_ms: u64,
) -> Result<Joined, StateError> {
    let mut groups = tx.open_table(GROUPS).map_err(storage)?;
    let mut members = tx.open_table(MEMBERS).map_err(storage)?;
    let prev: Option<Group> = row(groups.get(g.key.as_str()).map_err(storage)?);
    let mkey = member_key(&g.key, &g.member_key);
    let member: Option<Member> = row(members.get(mkey.as_str()).map_err(storage)?);
    let Some((mut group, member)) = Group::after(prev.as_ref(), member.as_ref(), &g.key, &g.member, g.joins, &g.instance, now_ms) else {
        return Ok(Joined::Unchanged);
    };
    let mut waiting = tx.open_table(WAITING).map_err(storage)?;
    if !g.joins {
        // Leaving before the message that showed it joining was sent: its key is
        // not recorded (the pass re-arms it), and it is no longer in flight.
        let left: Option<Waiting> = row(waiting.remove(mkey.as_str()).map_err(storage)?);
        if let Some(w) = left {
            let p = pending_key_of(&w.record.app_key, &w.record.key, &n.template, Action::Fire);
            in_flight.remove(p.as_str()).map_err(storage)?;
        }
    }
    let mut stored = n.clone();
    if let Some(r) = stored.group.as_mut() {
        r.instance = group.instance.clone();
        r.revision = group.revision;
    }
    let outcome = match group.entry {
        Some(_) => Joined::Merged,
        None => {
            let service = n.destination.service.as_str();
            let queued = tx.open_table(DEPTH).map_err(storage)?.get(service).map_err(storage)?.map_or(0, |v| v.value());
            if queued >= MAX_OUTBOX_PER_SERVICE as u64 {
                return Ok(Joined::Full);
            }
            let due = match group.last_sent_ms {
                None => group.opened_ms.saturating_add(g.wait_ms),
                Some(at) => at.saturating_add(g.interval_ms).max(now_ms),
            };
            group.entry = Some(queue_entry(tx, &stored, due, now_ms)?);
            Joined::Queued
        }
    };
    if let (Some(record), Some(p), Some(id)) = (&n.record, pending, group.entry) {
        let w = Waiting {
            record: record.clone(),
            revision: group.revision,
            episode: n.episode.as_ref().and_then(|e| e.get("id")).and_then(|v| v.as_str()).map(str::to_string),
            trigger: n.trigger.clone(),
        };
        waiting.insert(mkey.as_str(), to_json(&w)?.as_str()).map_err(storage)?;
        in_flight.insert(p, id).map_err(storage)?;
    }
    group.notification = Some(stored);
    let mut membership = tx.open_table(MEMBERSHIP).map_err(storage)?;
    let slot = slot(&g.member_key, &n.trigger, &n.destination);
    if g.joins {
        membership.insert(slot.as_str(), g.key.as_str()).map_err(storage)?;
    } else if membership.get(slot.as_str()).map_err(storage)?.is_some_and(|v| v.value() == g.key) {
        membership.remove(slot.as_str()).map_err(storage)?;
    }
    members.insert(mkey.as_str(), to_json(&member)?.as_str()).map_err(storage)?;
    groups.insert(g.key.as_str(), to_json(&group)?.as_str()).map_err(storage)?;
    Ok(outcome)
}

/// Queues a group's entry: the group's message is read from its row when the
/// entry is handed out, so the entry itself carries no payload and no record.
fn queue_entry(tx: &WriteTransaction, n: &Notification, due_ms: u64, now_ms: u64) -> Result<u64, StateError> {
    let id = next_id(tx)?;
    let mut placeholder = n.clone();
    placeholder.payload = serde_json::Value::Null;
    placeholder.record = None;
    placeholder.episode = None;
    let instance = n.group.as_ref().map_or("", |g| g.instance.as_str());
    placeholder.idempotency_key = Some(idempotency_key(instance, now_ms, id));
    let entry = OutboxEntry {
        id,
        notification: placeholder,
        attempts: 0,
        enqueued_ms: now_ms,
        next_attempt_ms: due_ms.max(now_ms),
        last_error: None,
    };
    insert_entry(tx, &entry)?;
    Ok(id)
}

/// The group's latest message for its entry, as the outbox hands it out: the
/// entry's id, attempts and idempotency key with the row's notification, whose
/// action is a resolve once no member is firing. An entry whose group is gone (a
/// dead letter requeued after the group ended) is handed out as it was stored.
pub(in crate::state) fn message(tx: &ReadTransaction, e: &mut OutboxEntry) -> Result<(), StateError> {
    let Some(key) = e.notification.group.as_ref().map(|g| g.key.clone()) else { return Ok(()) };
    let groups = tx.open_table(GROUPS).map_err(storage)?;
    let Some(group) = row::<Group>(groups.get(key.as_str()).map_err(storage)?) else { return Ok(()) };
    if group.entry != Some(e.id) {
        return Ok(());
    }
    if let Some(mut n) = group.notification {
        n.idempotency_key = e.notification.idempotency_key.take();
        n.record = None;
        n.action = if group.firing == 0 { Action::Resolve } else { Action::Fire };
        if let Some(r) = n.group.as_mut() {
            r.revision = group.revision;
        }
        e.notification = n;
    }
    Ok(())
}

/// After a group's entry settled (delivered, or dead with `failed`): the dedup keys
/// of the members the attempted message showed are recorded (`record`: delivered,
/// or a permanent failure) and its outcome noted in their episodes, their in-flight
/// markers and waiting records dropped; an update is queued for members that joined
/// during the attempt; a run whose last message showed none firing ends (its row and
/// members go). Returns the Applications whose markers went (a deleted one may now
/// be purged).
pub(in crate::state) fn settle(
    tx: &WriteTransaction,
    e: &OutboxEntry,
    failed: Option<&str>,
    record: bool,
    now_ms: u64,
    max_keys_per_app: usize,
) -> Result<Vec<String>, StateError> {
    let delivered = failed.is_none();
    let Some(g) = e.notification.group.as_ref() else { return Ok(Vec::new()) };
    let mut groups = tx.open_table(GROUPS).map_err(storage)?;
    let Some(mut group) = row::<Group>(groups.get(g.key.as_str()).map_err(storage)?) else {
        return Ok(Vec::new());
    };
    if group.entry != Some(e.id) {
        return Ok(Vec::new());
    }
    let sent = g.revision;
    let mut done = Vec::new();
    {
        let mut waiting = tx.open_table(WAITING).map_err(storage)?;
        let (lo, hi) = group_range(&g.key);
        let (mut drained, mut unreadable) = (Vec::new(), Vec::new());
        for item in waiting.range(lo.as_str()..hi.as_str()).map_err(storage)? {
            let (k, v) = item.map_err(storage)?;
            match from_json::<Waiting>(v.value()) {
                Ok(w) if w.revision <= sent => drained.push((k.value().to_string(), w)),
                Ok(_) => {}
                // Nothing to record from it: the member's next pass decides again.
                Err(_) => unreadable.push(k.value().to_string()),
            }
        }
        for k in unreadable {
            waiting.remove(k.as_str()).map_err(storage)?;
        }
        for (k, w) in drained {
            waiting.remove(k.as_str()).map_err(storage)?;
            let p = pending_key_of(&w.record.app_key, &w.record.key, &e.notification.template, Action::Fire);
            tx.open_table(PENDING).map_err(storage)?.remove(p.as_str()).map_err(storage)?;
            if record {
                notified::record(tx, &w.record.app_key, &w.record.key, now_ms, max_keys_per_app)?;
            }
            if let Some(id) = &w.episode {
                let note = Sent {
                    trigger: w.trigger.clone(),
                    service: e.notification.destination.service.clone(),
                    recipient: e.notification.destination.recipient.clone(),
                    action: Action::Fire,
                    at: from_millis(now_ms),
                    failed: failed.map(Sent::failure),
                };
                episodes::note_sent_to(tx, &w.record.app_key, id, note)?;
            }
            done.push(w.record.app_key);
        }
    }
    if delivered {
        group.sent_revision = sent;
        group.last_sent_ms = Some(now_ms);
    }
    group.entry = None;
    if group.revision > sent {
        let due = now_ms.saturating_add(g.interval_ms);
        if let Some(n) = group.notification.clone() {
            group.entry = Some(queue_entry(tx, &n, due, now_ms)?);
        }
    } else if delivered && group.firing == 0 {
        groups.remove(g.key.as_str()).map_err(storage)?;
        let (lo, hi) = group_range(&g.key);
        tx.open_table(MEMBERS).map_err(storage)?.retain_in(lo.as_str()..hi.as_str(), |_, _| false).map_err(storage)?;
        return Ok(done);
    }
    groups.insert(g.key.as_str(), to_json(&group)?.as_str()).map_err(storage)?;
    Ok(done)
}

/// Every group with a run in progress (for `driftwatch deliveries` and tests).
pub(in crate::state) fn all(tx: &ReadTransaction) -> Result<Vec<Group>, StateError> {
    super::all_of(tx, GROUPS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AppMeta, Destination, DestinationKind, RecordOp, Severity};
    use crate::state::Settle;
    use crate::state::{GroupReads, Store};

    const KEY: &str = "g1";
    const WAIT: u64 = 1_000;
    const INTERVAL: u64 = 500;

    /// What a pass does for `app` joining (firing) or leaving the group at `now`: the
    /// group as it will be, decided on a snapshot, and a message that shows it.
    fn pass(s: &Store, app: &str, joins: bool, now: u64) -> crate::state::EnqueueReport {
        let app_key = format!("{app}@u");
        let view = s.pass().view().unwrap();
        let (prev, member) = (view.group(KEY).unwrap(), view.group_member(KEY, &app_key).unwrap());
        drop(view);
        let Some((g, _)) = Group::after(prev.as_ref(), member.as_ref(), KEY, app, joins, &format!("{KEY}.{now}"), now) else {
            return crate::state::EnqueueReport::default();
        };
        let n = Notification {
            received_ms: None,
            app: app.into(),
            meta: AppMeta::default(),
            trigger: "on-x".into(),
            condition: 0,
            condition_key: "[0]".into(),
            template: "app-group".into(),
            destination: Destination::new("slack", "drift"),
            kind: DestinationKind::Slack,
            action: if g.firing == 0 { Action::Resolve } else { Action::Fire },
            severity: Severity::Info,
            payload: serde_json::json!({"firing": g.firing, "resolved": g.resolved}),
            record: joins.then(|| StateRecord { app_key: app_key.clone(), key: "on-x:k".into(), op: RecordOp::Set, seen: None }),
            episode: None,
            operation: None,
            idempotency_key: None,
            group: Some(GroupRef {
                key: KEY.into(),
                instance: g.instance.clone(),
                labels: Default::default(),
                wait_ms: WAIT,
                interval_ms: INTERVAL,
                member: app.into(),
                member_key: app_key,
                joins,
                revision: g.revision,
            }),
        };
        // A member that leaves re-arms its key in the same write (as the pipeline does).
        let forgets = if joins { vec![] } else { vec!["on-x:k"] };
        s.pass().write_pass(&crate::state::PassWrite { app_key: &format!("{app}@u"), forgets, ..Default::default() }, &[n], now).unwrap()
    }

    fn firing(e: &crate::state::OutboxEntry) -> (u64, u64) {
        let p = &e.notification.payload;
        (p["firing"].as_u64().unwrap(), p["resolved"].as_u64().unwrap())
    }

    fn notified(s: &Store, app: &str) -> bool {
        s.pass().is_notified(&format!("{app}@u"), "on-x:k").unwrap()
    }

    fn pending(s: &Store, app: &str) -> bool {
        s.outbox().is_pending(&format!("{app}@u"), "on-x:k", "app-group", Action::Fire).unwrap()
    }

    #[test]
    fn members_joining_within_wait_are_one_message_sent_when_the_wait_ends() {
        let s = Store::in_memory().unwrap();
        assert_eq!(pass(&s, "ns/a", true, 0).queued, 1);
        assert_eq!(pass(&s, "ns/b", true, 100).grouped, 1);
        assert_eq!(pass(&s, "ns/c", true, 200).grouped, 1);
        assert_eq!(pass(&s, "ns/c", true, 300).duplicates, 1, "c's join is in flight");
        assert!(s.outbox().due("slack", WAIT - 1, 10).unwrap().is_empty(), "nothing before the wait ends");
        let due = s.outbox().due("slack", WAIT, 10).unwrap();
        assert_eq!(due.len(), 1, "one message for the group");
        let e = due[0].clone();
        assert_eq!(firing(&e), (3, 0), "the group as it is when it is sent");
        assert_eq!((e.notification.action, e.notification.group.as_ref().unwrap().revision), (Action::Fire, 3));
        assert!(e.notification.record.is_none(), "the members' records are the group's to write");
        assert!(["ns/a", "ns/b", "ns/c"].iter().all(|a| pending(&s, a) && !notified(&s, a)));
        s.outbox().settle(&[(e, Settle::Delivered)], WAIT + 1).unwrap();
        assert!(["ns/a", "ns/b", "ns/c"].iter().all(|a| notified(&s, a) && !pending(&s, a)), "every member shown is recorded");
        assert!(s.outbox().due("slack", 1_000_000, 10).unwrap().is_empty(), "nothing more to send");
        let g = s.outbox().groups().unwrap().remove(0);
        assert_eq!((g.sent_revision, g.entry, g.last_sent_ms), (3, None, Some(WAIT + 1)));
    }

    #[test]
    fn a_member_joining_during_the_attempt_is_in_the_next_update_an_interval_later() {
        let s = Store::in_memory().unwrap();
        pass(&s, "ns/a", true, 0);
        pass(&s, "ns/b", true, 10);
        let e = s.outbox().due("slack", WAIT, 10).unwrap().remove(0);
        assert_eq!(pass(&s, "ns/c", true, WAIT).grouped, 1, "joins the message being sent");
        s.outbox().settle(&[(e, Settle::Delivered)], WAIT + 1).unwrap();
        assert!(notified(&s, "ns/a") && notified(&s, "ns/b"));
        assert!(pending(&s, "ns/c") && !notified(&s, "ns/c"), "the sent message did not show c");
        assert!(s.outbox().due("slack", WAIT + INTERVAL, 10).unwrap().is_empty(), "an update waits for the interval");
        let update = s.outbox().due("slack", WAIT + 1 + INTERVAL, 10).unwrap().remove(0);
        assert_eq!(firing(&update), (3, 0));
        assert_ne!(update.notification.idempotency_key, None);
        s.outbox().settle(&[(update, Settle::Delivered)], WAIT + 2 + INTERVAL).unwrap();
        assert!(notified(&s, "ns/c"));
    }

    #[test]
    fn the_last_member_leaving_resolves_the_group_and_ends_its_run() {
        let s = Store::in_memory().unwrap();
        pass(&s, "ns/a", true, 0);
        pass(&s, "ns/b", true, 0);
        let e = s.outbox().due("slack", WAIT, 10).unwrap().remove(0);
        let instance = e.notification.group.as_ref().unwrap().instance.clone();
        s.outbox().settle(&[(e, Settle::Delivered)], WAIT).unwrap();
        assert_eq!(pass(&s, "ns/a", false, 2_000).queued, 1, "an update after the last message");
        assert_eq!(pass(&s, "ns/a", false, 2_050), Default::default(), "leaving twice decides nothing");
        assert_eq!(pass(&s, "ns/b", false, 2_100).grouped, 1);
        let e = s.outbox().due("slack", 2_100, 10).unwrap().remove(0);
        assert_eq!((firing(&e), e.notification.action), ((0, 2), Action::Resolve));
        assert_eq!(e.notification.group.as_ref().unwrap().instance, instance, "the same message, resolved");
        s.outbox().settle(&[(e, Settle::Delivered)], 2_200).unwrap();
        assert!(s.outbox().groups().unwrap().is_empty(), "the run ended");
        pass(&s, "ns/a", true, 3_000);
        let e = s.outbox().due("slack", 3_000 + WAIT, 10).unwrap().remove(0);
        assert_eq!(firing(&e), (1, 0), "a new run counts from nothing");
        assert_ne!(e.notification.group.as_ref().unwrap().instance, instance, "a new message");
    }

    #[test]
    fn a_member_leaving_before_the_first_message_is_not_recorded_as_notified() {
        let s = Store::in_memory().unwrap();
        pass(&s, "ns/a", true, 0);
        pass(&s, "ns/b", true, 0);
        pass(&s, "ns/a", false, 500);
        assert!(!pending(&s, "ns/a"), "no longer in flight");
        let e = s.outbox().due("slack", WAIT, 10).unwrap().remove(0);
        assert_eq!(firing(&e), (1, 1));
        s.outbox().settle(&[(e, Settle::Delivered)], WAIT).unwrap();
        assert!(!notified(&s, "ns/a") && notified(&s, "ns/b"));
    }

    #[test]
    fn a_retried_message_carries_the_latest_members_and_a_dead_one_records_nothing() {
        let s = Store::in_memory().unwrap();
        pass(&s, "ns/a", true, 0);
        let e = s.outbox().due("slack", WAIT, 10).unwrap().remove(0);
        s.outbox().settle(&[(e, Settle::Retry { next_ms: 2_000, error: "503".into() })], WAIT).unwrap();
        pass(&s, "ns/b", true, 1_500);
        let e = s.outbox().due("slack", 2_000, 10).unwrap().remove(0);
        assert_eq!((firing(&e), e.attempts), ((2, 0), 1), "the retry shows b too");
        s.outbox().settle(&[(e, Settle::Dead { error: "gone".into(), permanent: false })], 2_000).unwrap();
        assert!(["ns/a", "ns/b"].iter().all(|a| !notified(&s, a) && !pending(&s, a)), "decided again by the next pass");
        assert_eq!(s.outbox().dead_letters().unwrap().len(), 1);
        assert_eq!(pass(&s, "ns/a", true, 3_000).queued, 1, "a rejoin queues a new message");
    }

    #[test]
    fn a_restart_inside_wait_keeps_the_group_its_members_and_its_one_entry() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.redb");
        {
            let s = Store::open(&p).unwrap();
            pass(&s, "ns/a", true, 0);
            pass(&s, "ns/b", true, 100);
        }
        let s = Store::open(&p).unwrap();
        assert_eq!(pass(&s, "ns/b", true, 200).duplicates, 1, "b is still in flight after the restart");
        assert_eq!(pass(&s, "ns/c", true, 300).grouped, 1);
        let due = s.outbox().due("slack", WAIT, 10).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(firing(&due[0]), (3, 0));
    }

    #[test]
    fn a_damaged_group_row_is_started_again_not_an_error_for_every_pass() {
        let s = Store::in_memory().unwrap();
        pass(&s, "ns/a", true, 0);
        {
            let tx = s.db().begin_write().unwrap();
            tx.open_table(GROUPS).unwrap().insert(KEY, "{not json").unwrap();
            tx.commit().unwrap();
        }
        assert!(s.pass().view().unwrap().group(KEY).unwrap().is_none(), "read as absent");
        let e = s.outbox().due("slack", WAIT, 10).unwrap().remove(0);
        s.outbox().settle(&[(e, Settle::Delivered)], WAIT).unwrap();
        assert_eq!(pass(&s, "ns/b", true, 2 * WAIT).queued, 1, "b starts the group again");
        let e = s.outbox().due("slack", 3 * WAIT, 10).unwrap().remove(0);
        assert_eq!(firing(&e), (1, 0));
    }

    #[test]
    fn a_group_lists_a_bounded_number_of_members_and_counts_the_rest() {
        let mut g: Option<Group> = None;
        for i in 0..10_000 {
            let app = format!("ns/a{i}");
            let (next, _) = Group::after(g.as_ref(), None, KEY, &app, true, "i", 0).unwrap();
            g = Some(next);
        }
        let g = g.unwrap();
        let v = g.view(&Default::default());
        assert_eq!((v["count"].as_u64(), v["more"].as_u64()), (Some(10_000), Some(10_000 - MAX_LISTED as u64)));
        assert_eq!(v["apps"].as_array().map(Vec::len), Some(MAX_LISTED));
        assert!(serde_json::to_string(&g).unwrap().len() < 4_096, "the row stays small");
    }
}
