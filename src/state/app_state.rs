//! What the store holds about one Application that its evaluation pass decides from,
//! read at once from one snapshot ([`StateView::app_state`], a view of
//! `PassStore::view`): the pass asks the store
//! one question and the stages read plain values. A second storage engine answers the
//! same question in one query.
//!
//! Groups are the exception: a group is shared by the Applications in it, so a pass
//! that joins or leaves one reads that group (and only it) through [`GroupReads`].

use std::collections::{BTreeMap, BTreeSet};

use super::kv::ReadTransaction;
use super::tables::{apps, break_glass, episodes, groups, holds, notified, operations, outbox};
use super::{Group, Member, StateError, storage};
use crate::drift::break_glass::Record;
use crate::drift::episode::Episode;
use crate::model::{Action, Destination};

/// An Application's last judged break-glass exception, and its newest.
#[derive(Debug, Clone, Default)]
pub struct StoredException {
    /// Whether the last judged one is closed (a closed one holds nothing; the pass
    /// judges afresh only when the Application is annotated again).
    pub closed: bool,
    /// The last judged one's record (`None` when unreadable: the pass judges afresh).
    pub record: Option<Record>,
    /// The newest exception the Application ever had, and whether it ended.
    pub newest: Option<crate::drift::break_glass::Newest>,
    /// The newest one's record, when it is not `record` (the exception a pass most
    /// needs by id: the one a write may try to bring back).
    pub newest_record: Option<Record>,
}

/// One Application's state as its pass reads it. Each collection is bounded by the
/// store's per-Application limits (keys, hold-downs, outbox entries, group slots).
#[derive(Debug, Clone, Default)]
pub struct AppState {
    /// The open or last resolved episode.
    pub episode: Option<Episode>,
    /// The newest recorded sync operation: (started ms, id).
    pub operation: Option<(u64, String)>,
    /// What the subscription limits dropped, as last stored.
    pub note: Option<String>,
    /// Delivered dedup keys and when.
    pub notified: BTreeMap<String, u64>,
    /// Running hold-downs by hold key (`trigger:condition key`), since when.
    pub holds: BTreeMap<String, u64>,
    /// Notifications waiting in the outbox: (dedup key, template, action).
    pub pending: BTreeSet<(String, String, Action)>,
    /// The group each (trigger, destination) slot of the Application is in.
    pub memberships: BTreeMap<(String, Destination), String>,
    pub break_glass: Option<StoredException>,
}

impl AppState {
    pub fn notified_at(&self, key: &str) -> Option<u64> {
        self.notified.get(key).copied()
    }

    pub fn hold_since(&self, hold_key: &str) -> Option<u64> {
        self.holds.get(hold_key).copied()
    }

    /// Whether the same notification is waiting in the outbox.
    pub fn is_pending(&self, key: &str, template: &str, action: Action) -> bool {
        self.pending.contains(&(key.to_string(), template.to_string(), action))
    }

    /// The group a (trigger, destination) slot is in.
    pub fn membership(&self, trigger: &str, d: &Destination) -> Option<&str> {
        self.memberships.get(&(trigger.to_string(), d.clone())).map(String::as_str)
    }

    pub fn in_any_group(&self) -> bool {
        !self.memberships.is_empty()
    }
}

/// The groups a pass joins or leaves, read from the pass's snapshot.
pub trait GroupReads {
    fn group(&self, key: &str) -> Result<Option<Group>, StateError>;
    /// An Application's membership of a group (of its current run or an earlier one).
    fn group_member(&self, key: &str, app: &str) -> Result<Option<Member>, StateError>;
}

/// One consistent snapshot of the store for one evaluation pass
/// (`PassStore::view`).
pub struct StateView {
    tx: ReadTransaction,
}

impl GroupReads for StateView {
    fn group(&self, key: &str) -> Result<Option<Group>, StateError> {
        groups::group(&self.tx, key)
    }

    fn group_member(&self, key: &str, app: &str) -> Result<Option<Member>, StateError> {
        groups::member(&self.tx, key, app)
    }
}

/// No group exists (a pass over an empty store, a stage's unit test).
pub struct NoGroups;

impl GroupReads for NoGroups {
    fn group(&self, _: &str) -> Result<Option<Group>, StateError> {
        Ok(None)
    }

    fn group_member(&self, _: &str, _: &str) -> Result<Option<Member>, StateError> {
        Ok(None)
    }
}

/// The tables [`StateView::app_state`] reads by the Application's key.
const APP_KEYED: [&str; 9] = [
    notified::NOTIFIED.name(),
    holds::HOLDS.name(),
    episodes::LATEST.name(),
    operations::OPERATIONS.latest.name(),
    break_glass::EXCEPTIONS.latest.name(),
    break_glass::EXCEPTIONS.records.name(),
    apps::NOTES.name(),
    outbox::PENDING.name(),
    groups::MEMBERSHIP.name(),
];

impl StateView {
    pub(super) fn new(tx: ReadTransaction) -> StateView {
        StateView { tx }
    }

    /// Everything the store holds about `app` that its pass decides from: point reads
    /// and range reads of its own keys, nothing of another Application's. An
    /// unreadable episode is `StateError::Episode` (the pass resets it).
    pub fn app_state(&self, app: &str) -> Result<AppState, StateError> {
        let hi = format!("{app}\u{1}");
        // Every table below keyed by the Application (`<app>` or `<app>\0...`), read in
        // one round trip on PostgreSQL. A name missing here costs a round trip, not a
        // wrong answer.
        // Its latest episode too, through its pointer.
        let reads = crate::state::kv::Reads { tables: &APP_KEYED, lo: app, hi: &hi, follow: &super::tables::FOLLOWED };
        self.tx.prefetch(&reads).map_err(storage)?;
        let tx = &self.tx;
        let notified: BTreeMap<String, u64> = notified::keys(tx, app)?.into_iter().collect();
        let holds = holds::of_app(tx, app)?;
        let break_glass = break_glass::latest(tx, app)?.map(|l| {
            let record = break_glass::get(tx, app, l.opened_ms)?;
            let newest_record = match &l.newest {
                Some(n) if n.opened_ms != l.opened_ms => break_glass::get(tx, app, n.opened_ms)?,
                _ => None,
            };
            Ok::<_, StateError>(StoredException { closed: l.closed, record, newest: l.newest, newest_record })
        });
        Ok(AppState {
            episode: episodes::latest(tx, app)?,
            operation: operations::latest(tx, app)?,
            note: apps::note(tx, app)?,
            notified,
            holds,
            pending: outbox::pending_of(tx, app)?,
            memberships: groups::memberships(tx, app)?.into_iter().map(|(t, d, g)| ((t, d), g)).collect(),
            break_glass: break_glass.transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Notification;
    use crate::state::{PassWrite, Retention, Store};

    fn pending(app_key: &str, key: &str, action: Action) -> Notification {
        let mut n = crate::state::tables::outbox::test_notification("hook", key);
        n.action = action;
        if let Some(r) = n.record.as_mut() {
            r.app_key = app_key.into();
        }
        n
    }

    #[test]
    fn one_read_gives_the_applications_own_state_and_nothing_of_its_neighbours() {
        let s = Store::in_memory().unwrap();
        // "ns/a@u" and "ns/a@u2": one key is a prefix of the other.
        for (app, n) in [("ns/a@u", 1), ("ns/a@u2", 2)] {
            s.record(app, &format!("k{n}"), 100 + n).unwrap();
            s.set_hold(app, &format!("on-x:h{n}"), Some(200 + n)).unwrap();
            s.enqueue(&[pending(app, &format!("p{n}"), Action::Resolve)], 10).unwrap();
            let note = format!("note {n}");
            let pass = PassWrite {
                app_key: app,
                at_ms: 1,
                episode: None,
                operations: &[],
                break_glass: None,
                retention: Retention::default(),
                holds: &[],
                forgets: vec![],
                note: Some(Some(note.as_str())),
                deleted: false,
            };
            s.pass().write_pass(&pass, &[], 1).unwrap();
        }
        let st = s.pass().view().unwrap().app_state("ns/a@u").unwrap();
        assert_eq!(st.notified, [("k1".to_string(), 101)].into());
        assert_eq!(st.hold_since("on-x:h1"), Some(201));
        assert_eq!(st.holds.len(), 1);
        assert!(st.is_pending("p1", "t", Action::Resolve));
        assert!(!st.is_pending("p1", "t", Action::Fire), "the action is part of what is in flight");
        assert_eq!(st.pending.len(), 1);
        assert_eq!(st.note.as_deref(), Some("note 1"));
        assert!(st.episode.is_none() && st.operation.is_none() && st.break_glass.is_none() && !st.in_any_group());
        let empty = s.pass().view().unwrap().app_state("ns/b@u").unwrap();
        assert!(empty.notified.is_empty() && empty.holds.is_empty() && empty.pending.is_empty() && empty.note.is_none());
    }
}
