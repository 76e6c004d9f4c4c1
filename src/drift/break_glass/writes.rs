//! The audit log's writes of the break-glass annotation, per Application, kept for
//! the exceptions they open or approve. Bounded per Application, and over the bound
//! the writer with the most writes loses their oldest: one person's writes, however
//! many and whatever values they leave, cannot push out another's opening or approval
//! (review L-a).

use super::{DateTime, Utc};

/// A write of the annotation the audit input saw (an allowed request on the
/// Application that named it): who, through what, and the value it left.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Write {
    pub app_key: String,
    pub username: String,
    /// The identity's UID and groups as the API server authenticated it (the two-person
    /// rule compares people, not names).
    pub uid: String,
    pub groups: Vec<String>,
    pub user_agent: String,
    pub audit_id: String,
    /// driftwatch's identity of the event ([`crate::audit::event::event_id`]): the
    /// audit ID is the client's to choose.
    pub id: String,
    pub time: DateTime<Utc>,
    /// The annotation after the write (`None`: removed).
    pub value: Option<String>,
}

/// At most this many writes of the annotation are kept per Application, and this many
/// Applications with writes (past it a new Application's write is dropped, counted).
pub const MAX_WRITES_PER_APP: usize = 8;

pub const MAX_APPS_WITH_WRITES: usize = 10_000;

/// Brings `list` (sorted by time) within [`MAX_WRITES_PER_APP`]: the writer with the
/// most writes loses their oldest (of two writers with as many, the one whose write
/// is older). A writer loses none while another has more writes than they do; the
/// newest write, the one that left the value the Application holds, is never the one
/// to go.
fn evict(list: &mut Vec<Write>) {
    while list.len() > MAX_WRITES_PER_APP {
        let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for w in list.iter() {
            *counts.entry(w.username.as_str()).or_default() += 1;
        }
        let most = counts.values().copied().max().unwrap_or(0);
        let victim = list.iter().position(|w| counts.get(w.username.as_str()) == Some(&most)).unwrap_or(0);
        list.remove(victim);
    }
}

/// The audit input's writes of the annotation, per Application, for as long as an
/// exception may last (`breakGlass.maxFor`): what verifies its opening and approval.
#[derive(Debug, Default)]
pub struct Writes {
    by_app: std::collections::HashMap<String, Vec<Write>>,
}

impl Writes {
    /// Keeps a write; `false` when it was dropped (too many Applications).
    pub fn record(&mut self, w: Write) -> bool {
        if !self.by_app.contains_key(&w.app_key) && self.by_app.len() >= MAX_APPS_WITH_WRITES {
            return false;
        }
        let list = self.by_app.entry(w.app_key.clone()).or_default();
        // The same event again (a batch posted twice), not merely the same audit ID: the
        // client chooses that ID, and a write under a reused one must still count.
        let again = |o: &Write| (&o.audit_id, &o.username, o.time, &o.value) == (&w.audit_id, &w.username, w.time, &w.value);
        if !list.iter().any(again) {
            list.push(w);
            list.sort_by_key(|w| w.time);
            evict(list);
        }
        true
    }

    pub fn of(&self, app_key: &str) -> &[Write] {
        self.by_app.get(app_key).map(Vec::as_slice).unwrap_or_default()
    }

    pub fn remove(&mut self, app_key: &str) {
        self.by_app.remove(app_key);
    }

    /// Forgets writes older than `keep` before `now`.
    pub fn expire(&mut self, keep: chrono::Duration, now: DateTime<Utc>) {
        let Some(cutoff) = now.checked_sub_signed(keep) else { return };
        self.by_app.retain(|_, list| {
            list.retain(|w| w.time >= cutoff);
            !list.is_empty()
        });
    }
}
