//! The notification-state store: what driftwatch remembers across restarts, in an
//! embedded redb file (one replica, replays) or in PostgreSQL (replicas without a
//! shared volume).
//!
//! [`Store`] opens it and hands out one small face per role, each in its own file:
//!
//! - [`PassStore`] (`pass.rs`): an evaluation pass reads what the store holds about
//!   its Application ([`AppState`], from one snapshot) and writes its outcome with its
//!   notifications, and the dead letters of those it could not queue, in one
//!   transaction;
//! - [`Outbox`] (`outbox.rs`): the delivery workers take what is due and settle each
//!   attempt (its dedup key recorded, its episode noted, in the settle's transaction);
//!   dead letters and their requeue;
//! - [`History`] (`history.rs`): drift episodes, the fleet's open ones, sync
//!   operations and break-glass exceptions;
//! - [`MessageRefs`] (`message_refs.rs`): where sent chat messages are, the only
//!   part of the store a destination kind gets;
//! - [`AuditInbox`] and [`InboxCursor`] (`inbox.rs`): audit batches any replica
//!   received, for each shard's leader, and a shard's place in them.
//!
//! The tables are private to `tables/`, free functions over a transaction that the
//! faces call by name; the engines sit behind one small key-value face (`kv/`), and
//! no engine type is public.
//!
//! A pass decides from one consistent snapshot ([`PassStore::view`]: what was
//! delivered, what is in flight, hold-downs, the latest episode) and its enqueue
//! re-checks, inside the write transaction, that no settle changed a key it decided on
//! since; a dedup key is written only when its delivery succeeded
//! ([`Outbox::settle`]), so a failed send is tried again (Argo CD records first and
//! loses it).

mod app_state;
mod history;
mod inbox;
mod kv;
mod message_refs;
mod outbox;
mod pass;
/// A private PostgreSQL for the tests: compiled for the crate's own tests and, with
/// the `test-support` feature (which the integration tests turn on), for theirs; never
/// in the daemon.
#[cfg(any(test, feature = "test-support"))]
pub mod pgtest;
mod store;
mod tables;

pub use app_state::{AppState, GroupReads, NoGroups, StateView, StoredException};
pub use history::{History, HistoryQuery, OpenEpisode, Retention};
pub use inbox::{AuditInbox, InboxBatch, InboxCursor, MAX_INBOX_BATCHES, MAX_SPOKE_BATCHES};
pub use kv::pg::{LeaseGeneration, PgOptions, Role};
pub use message_refs::{MAX_MESSAGE_REFS, MessageRef, MessageRefs};
pub use outbox::{Due, Outbox};
#[cfg(test)]
pub(crate) use pass::MAX_PENDING_OPERATIONS;
pub use pass::{PassStore, PassWrite, Reject};
pub use store::{DEFAULT_MAX_KEYS_PER_APP, Store};
pub use tables::break_glass::{LatestException, MAX_EXCEPTIONS_PER_APP};
pub use tables::dead::{DeadLetter, MAX_DEAD_LETTERS, Quarantined, Requeued};
pub use tables::groups::{Group, Listed, MAX_LISTED, Member};
pub use tables::operations::MAX_OPERATIONS_PER_APP;
pub use tables::outbox::{EnqueueReport, MAX_OUTBOX_PER_SERVICE, OutboxEntry, Settle};

use chrono::{DateTime, Utc};

/// Unix milliseconds, as the store keeps instants.
pub fn to_millis(t: DateTime<Utc>) -> u64 {
    u64::try_from(t.timestamp_millis()).unwrap_or(0)
}

/// The instant of unix milliseconds the store kept (saturating at the representable
/// range).
pub fn from_millis(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another process holds the file's lock.
    #[error(
        "state store {path} is in use by another process (another driftwatch, or a second replica on the same volume): stop it, or give this one its own --state"
    )]
    Locked { path: String },
    /// The file is not a state store redb can read (damaged, truncated, or another file).
    #[error(
        "state store {path} is damaged ({detail}): restore it from a backup, or move it aside (mv {path} {path}.damaged) and start again — an empty store re-decides every notification whose condition still holds, and what was waiting in the outbox of the damaged one is not sent"
    )]
    Corrupt { path: String, detail: String },
    /// The file could not be opened for another reason (permissions, I/O).
    #[error("state store {path}: {detail}")]
    Open { path: String, detail: String },
    /// The file system does not lock files: redb carries on without its lock there, and
    /// two replicas would both write the file.
    #[error(
        "the volume of state store {path} does not support file locks ({detail}), so nothing keeps a second replica from writing it: run one replica without --leader-election, or put the state on a volume that supports locks"
    )]
    NoLocks { path: String, detail: String },
    /// PostgreSQL could not be reached, or its schema migrated.
    #[error("state store in PostgreSQL: {0}")]
    Postgres(String),
    /// Another replica took the store in PostgreSQL over (a newer fencing epoch): this
    /// one must not write.
    #[error("state store in PostgreSQL: {0}")]
    Fenced(String),
    /// One stored episode cannot be read; the Application's episode state is reset.
    #[error("the stored drift episode of {app} cannot be read ({detail})")]
    Episode { app: String, detail: String },
    #[error("state store: {0}")]
    Storage(String),
    /// A write the store refused for what it held (a key too long), before anything
    /// was written: the pass's input is at fault, not the store, which stays open.
    #[error("state store refused a write: {0}")]
    Refused(String),
}

impl StateError {
    /// An error of PostgreSQL's engine outside a table operation: a fencing refusal
    /// stays one.
    fn of_postgres(e: kv::KvError) -> StateError {
        match e.fenced {
            true => StateError::Fenced(e.message),
            false => StateError::Postgres(e.message),
        }
    }
}

/// A failure of the store's engine or of what it read, as a [`StateError`]: a write
/// the engine refused for what it held stays a [`StateError::Refused`], so that the
/// daemon fails that pass only and does not reopen a sound store.
pub(crate) fn storage<E: std::fmt::Display + 'static>(e: E) -> StateError {
    if let Some(kv) = (&e as &dyn std::any::Any).downcast_ref::<kv::KvError>()
        && kv.refused
    {
        return StateError::Refused(kv.message.clone());
    }
    StateError::Storage(e.to_string())
}

/// The dedup key of one (condition result, destination), in Argo CD's layout:
/// `<oncePer>:<trigger>:<condition>:<service>:<recipient>`. A plain trigger has an empty
/// `oncePer` part. Each part is bounded ([`crate::text::key_part`]): the `oncePer`
/// value and the recipient are whatever the Application says (`app.status.sync.revision`
/// is writable), and a key the store cannot hold would fail every pass of the
/// Application. Parts that fit are kept as they are, so existing keys do not change.
pub fn dedup_key(once_per: Option<&str>, trigger: &str, condition_key: &str, service: &str, recipient: &str) -> String {
    use crate::text::key_part;
    format!(
        "{}:{}:{}:{}:{}",
        key_part(once_per.unwrap_or("")),
        key_part(trigger),
        key_part(condition_key),
        key_part(service),
        key_part(recipient)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of values that fitted stay what they were (an upgrade re-sends nothing);
    /// a tenant's over-long `oncePer` value or recipient makes a key within the bound.
    #[test]
    fn dedup_keys_keep_short_values_and_bound_long_ones() {
        assert_eq!(dedup_key(Some("abc123"), "on-drift", "[0].x", "slack", "#ops"), "abc123:on-drift:[0].x:slack:#ops");
        assert_eq!(dedup_key(None, "on-drift", "[0].x", "hook", ""), ":on-drift:[0].x:hook:");
        let long = "x".repeat(2_100);
        let key = dedup_key(Some(&long), "on-drift", "[0].x", "slack", &long);
        assert!(key.len() <= 2 * crate::text::MAX_KEY_PART_BYTES + 40, "{} bytes", key.len());
        assert_ne!(key, dedup_key(Some(&format!("{long}y")), "on-drift", "[0].x", "slack", &long));
    }
}
