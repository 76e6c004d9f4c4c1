//! The audit log's writes of the break-glass annotation, per Application, kept for
//! the exceptions they open or approve (bounded; the first write of each exception is
//! never pushed out).

use super::*;

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

/// The audit input's writes of the annotation, per Application, for as long as an
/// exception may last (`breakGlass.maxFor`): what verifies its opening and approval.
#[derive(Debug, Default)]
pub struct Writes {
    by_app: std::collections::HashMap<String, Vec<Write>>,
}

/// The index of the first (oldest) write of each exception id in `list` (sorted by time).
fn first_of_each_exception(list: &[Write]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, w) in list.iter().enumerate() {
        if let Some(id) = w.value.as_deref().and_then(|v| serde_json::from_str::<Exception>(v).ok()).map(|e| e.id())
            && seen.insert(id)
        {
            out.push(i);
        }
    }
    out
}

impl Writes {
    /// Keeps a write; `false` when it was dropped (too many Applications).
    pub fn record(&mut self, w: Write) -> bool {
        if !self.by_app.contains_key(&w.app_key) && self.by_app.len() >= MAX_APPS_WITH_WRITES {
            return false;
        }
        let list = self.by_app.entry(w.app_key.clone()).or_default();
        if !list.iter().any(|o| o.audit_id == w.audit_id) {
            list.push(w);
            list.sort_by_key(|w| w.time);
            // Over the bound the oldest write goes that is not the first of its
            // exception (its opening): writes of a value already seen cannot push out
            // the opening they would otherwise be taken for.
            while list.len() > MAX_WRITES_PER_APP {
                let firsts: Vec<usize> = first_of_each_exception(list);
                let victim = (0..list.len()).find(|i| !firsts.contains(i)).unwrap_or(0);
                list.remove(victim);
            }
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
