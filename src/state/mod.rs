//! The notification-state store, in an embedded redb database on disk so it survives
//! restarts:
//!
//! - which dedup keys each Application has been notified for;
//! - the outbox: notifications decided but not yet delivered, the durable queue the
//!   delivery workers pull from (so a crash loses nothing);
//! - dead letters: what finally failed, and quarantined entries that could not be read;
//! - the drift history: episodes with their indexes (open summaries, by Application,
//!   by resolution) and hold-downs (`history.rs`);
//! - sync operations and break-glass exceptions per Application (`operations.rs`,
//!   `break_glass.rs`);
//! - grouped notifications: the group's row, members and waiting records
//!   (`outbox/groups.rs`);
//! - references to sent chat messages (Slack, Mattermost, Rocket.Chat, Google Chat,
//!   Webex), to update them and thread under them.
//!
//! A pass decides from one consistent snapshot ([`StateStore::view`]: what was
//! delivered, what is in flight, hold-downs, the latest episode) and its enqueue
//! re-checks, inside the write transaction, that no settle changed a key it decided on
//! since; a dedup key is written only when its delivery succeeded
//! ([`StateStore::settle`]), so a failed send is tried again (Argo CD records first and
//! loses it).

mod app_state;
mod break_glass;
mod history;
mod holds;
mod keys;
mod kv;
mod message_refs;
mod operations;
mod outbox;
/// A private PostgreSQL for the tests: compiled for the crate's own tests and, with
/// the `test-support` feature (which the integration tests turn on), for theirs; never
/// in the daemon.
#[cfg(any(test, feature = "test-support"))]
pub mod pgtest;
mod timed;

pub use app_state::{AppState, GroupReads, NoGroups, StoredException};
pub use break_glass::{LatestException, MAX_EXCEPTIONS_PER_APP};
pub use history::{HistoryQuery, OpenEpisode, Retention};
pub use operations::MAX_OPERATIONS_PER_APP;
pub use outbox::groups::{Group, Listed, MAX_LISTED, Member};

pub use message_refs::{MAX_MESSAGE_REFS, MessageRef, MessageRefs};
pub use outbox::{DeadLetter, EnqueueReport, MAX_DEAD_LETTERS, MAX_OUTBOX_PER_SERVICE, OutboxEntry, Quarantined, Requeued, Settle};
use outbox::{from_json, to_json};

use std::path::Path;

use chrono::{DateTime, Utc};
pub use kv::pg::{LeaseGeneration, PgOptions, Role};
use kv::{Database, Field, Table, TableDefinition, WriteTransaction};

/// `"<app key>\u{0}<dedup key>"` -> unix milliseconds of the delivery.
const NOTIFIED: TableDefinition<&str, u64> = TableDefinition::new("notified");
/// state key -> a note about the Application for whoever looks (`driftwatch state
/// list`): what the subscription limits dropped.
const NOTES: TableDefinition<&str, &str> = TableDefinition::new("app_notes");
/// Deleted Applications whose outbox entries have not all settled yet (state key ->
/// when the deletion was seen, unix ms): their state is purged when the last settles.
const DELETED: TableDefinition<&str, u64> = TableDefinition::new("deleted_apps");

/// Unix milliseconds, as the store keeps instants.
pub fn to_millis(t: DateTime<Utc>) -> u64 {
    u64::try_from(t.timestamp_millis()).unwrap_or(0)
}

/// The instant of unix milliseconds the store kept (saturating at the representable
/// range).
pub fn from_millis(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Separates the Application key from the dedup key (neither can contain NUL).
const SEP: char = '\u{0}';

/// How many keys one Application may hold before the oldest are pruned. Argo CD's
/// annotation grows without bound; an `oncePer` per revision adds one key per deploy.
pub const DEFAULT_MAX_KEYS_PER_APP: usize = 256;

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

/// The notification-state store.
pub struct StateStore {
    /// With replicas: a lock on `<path>.lock`, held while the store is open, that
    /// proves the file system locks at all (see [`StateStore::open_fenced`]).
    _fence: Option<std::fs::File>,
    db: Database,
    max_keys_per_app: usize,
    /// Evaluation passes commit without waiting for the disk; [`StateStore::flush`]
    /// makes everything before it durable (see [`StateStore::write_pass`]).
    deferred: std::sync::atomic::AtomicBool,
    /// With deferred durability: passes whose only write is the sync operations they
    /// saw ended (an Application's first pass, most of a start's), written by the next
    /// write transaction of a pass or by [`StateStore::flush`], oldest first.
    pending_operations: std::sync::Mutex<Vec<PendingOperations>>,
}

/// A pass's sync operations waiting for a write transaction.
#[derive(Debug)]
struct PendingOperations {
    app: String,
    operations: Vec<crate::drift::operation::OperationRecord>,
    retention: Retention,
    at_ms: u64,
}

/// At most this many passes' operations wait; the next writes them with its own. It
/// bounds that transaction too, which every other writer waits out (on PostgreSQL a
/// few statements per operation).
pub(crate) const MAX_PENDING_OPERATIONS: usize = 256;

/// What one evaluation pass writes besides its notifications: its episode (when it
/// changed), hold-downs started or ended, dedup keys re-armed, sync operations seen
/// ended, a break-glass record, the Application's note, and whether it was deleted.
#[derive(Debug, Default)]
pub struct PassWrite<'a> {
    pub app_key: &'a str,
    /// The pass's instant (unix ms), the history's clock: a replay's passes run on the
    /// snapshots' clock while its deliveries, with `--deliver`, run on the system's.
    pub at_ms: u64,
    pub episode: Option<(&'a crate::drift::episode::Episode, Retention)>,
    /// Sync operations seen for the first time (oldest first).
    pub operations: &'a [crate::drift::operation::OperationRecord],
    /// The Application's break-glass exception changed (a transition to record).
    pub break_glass: Option<&'a crate::drift::break_glass::Record>,
    /// The history's bounds, for operations and exceptions.
    pub retention: Retention,
    pub holds: &'a [(String, Option<u64>)],
    pub forgets: Vec<&'a str>,
    /// The Application's note changes (`Some(None)`: cleared).
    pub note: Option<Option<&'a str>>,
    /// The Application was deleted: its state goes once nothing of it is in the outbox.
    pub deleted: bool,
}

impl PassWrite<'_> {
    /// Nothing to write (most passes).
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty() && self.nothing_but_operations()
    }

    /// Sync operations and nothing else to write (an Application's first pass).
    fn only_operations(&self) -> bool {
        !self.operations.is_empty() && self.nothing_but_operations()
    }

    fn nothing_but_operations(&self) -> bool {
        self.episode.is_none()
            && self.break_glass.is_none()
            && self.holds.is_empty()
            && self.forgets.is_empty()
            && self.note.is_none()
            && !self.deleted
    }
}

impl StateStore {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<StateStore, StateError> {
        let db = kv::redb::open(path)?;
        // A file redb opened but whose tables cannot be read is damaged too.
        Self::init(db).map_err(|e| match e {
            StateError::Storage(detail) => StateError::Corrupt { path: path.display().to_string(), detail },
            e => e,
        })
    }

    /// [`StateStore::open`] for a daemon with replicas (leader election): refuses a
    /// file system that does not lock files. redb fences a second writer with a file
    /// lock, and carries on without one where the file system says locks are not
    /// supported (some NFS set-ups, FUSE volumes): with two replicas that is two
    /// writers. A lock on `<path>.lock`, held while the store is open, proves locks
    /// work there.
    pub fn open_fenced(path: &Path) -> Result<StateStore, StateError> {
        let lock = kv::redb::lock_beside(path)?;
        let mut store = StateStore::open(path)?;
        store._fence = Some(lock);
        Ok(store)
    }

    /// A store that lives in memory only (replays that should start from nothing).
    pub fn in_memory() -> Result<StateStore, StateError> {
        #[cfg(test)]
        if let Some(store) = pgtest::postgres_if_asked() {
            return store;
        }
        Self::init(kv::redb::in_memory().map_err(storage)?)
    }

    /// Opens the store in PostgreSQL (replicas without a shared volume): connects,
    /// migrates the schema, and takes the fence as `role` says.
    pub fn open_postgres(opts: &PgOptions, role: &Role) -> Result<StateStore, StateError> {
        let pg = kv::pg::Pg::open(opts, role).map_err(StateError::of_postgres)?;
        Self::init(Database::Pg(pg))
    }

    /// Whether a write was refused because another replica took the store over
    /// (PostgreSQL's fence): this daemon must stop writing, not reopen and take it
    /// back.
    pub fn fenced(&self) -> bool {
        self.db.pg().is_some_and(kv::pg::Pg::fenced)
    }

    /// Which engine holds the store (`redb`, `postgres`).
    pub fn engine(&self) -> &'static str {
        match self.db {
            Database::Redb(_) => "redb",
            Database::Pg(_) => "postgres",
        }
    }

    fn init(db: Database) -> Result<StateStore, StateError> {
        let tx = db.begin_write().map_err(storage)?;
        tx.open_table(NOTIFIED).map_err(storage)?;
        tx.open_table(DELETED).map_err(storage)?;
        tx.open_table(NOTES).map_err(storage)?;
        outbox::create_tables(&tx)?;
        history::create_tables(&tx)?;
        holds::create_tables(&tx)?;
        message_refs::create_tables(&tx)?;
        operations::create_tables(&tx)?;
        break_glass::create_tables(&tx)?;
        outbox::groups::create_tables(&tx)?;
        tx.commit().map_err(storage)?;
        Ok(StateStore {
            _fence: None,
            db,
            max_keys_per_app: DEFAULT_MAX_KEYS_PER_APP,
            deferred: std::sync::atomic::AtomicBool::new(false),
            pending_operations: std::sync::Mutex::new(Vec::new()),
        })
    }

    pub fn with_max_keys_per_app(mut self, n: usize) -> Self {
        self.max_keys_per_app = n.max(1);
        self
    }

    fn db(&self) -> &Database {
        &self.db
    }

    /// Lets evaluation passes commit without waiting for the disk (the daemon, which
    /// calls [`StateStore::flush`] after each burst of passes).
    pub fn defer_durability(&self, on: bool) {
        self.deferred.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes every commit so far durable: one write to the disk for a burst of passes.
    /// A settled delivery does the same (its commit is durable and covers what came
    /// before it). The operations of passes that wrote nothing else go in this commit.
    pub fn flush(&self) -> Result<(), StateError> {
        self.commit_with_pending(self.db.begin_write().map_err(storage)?, |_| Ok(()))
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<PendingOperations>> {
        // A panic mid-push leaves a usable list.
        self.pending_operations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the waiting operations in `tx`, then what `f` writes, and commits. When
    /// that fails they wait again, before any that came since: what a pass decided is
    /// not lost while the daemon runs, and a crash loses only what its restart records
    /// again (an operation is recorded until the Application's latest says it was).
    fn commit_with_pending<T>(
        &self,
        tx: WriteTransaction,
        f: impl FnOnce(&WriteTransaction) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        let pending = std::mem::take(&mut *self.pending());
        let written = Self::write_pending_in(&tx, &pending).and_then(|()| f(&tx)).and_then(|t| tx.commit().map_err(storage).map(|()| t));
        if written.is_err() && !pending.is_empty() {
            let mut now = self.pending();
            let since = std::mem::replace(&mut *now, pending);
            now.extend(since);
        }
        written
    }

    /// Waiting passes' writes: their operations, and (as every pass of an Application
    /// not deleted) no purge waiting for them.
    fn write_pending_in(tx: &WriteTransaction, pending: &[PendingOperations]) -> Result<(), StateError> {
        if pending.is_empty() {
            return Ok(());
        }
        for p in pending {
            Self::save_operations_in(tx, &p.app, &p.operations, p.retention, from_millis(p.at_ms))?;
        }
        let mut deleted = tx.open_table(DELETED).map_err(storage)?;
        pending.iter().try_for_each(|p| deleted.remove(p.app.as_str()).map(drop).map_err(storage))
    }

    /// Writes one evaluation pass — episode, hold-downs, re-armed keys and the outbox
    /// entries of its notifications — in one transaction. With deferred durability it
    /// does not wait for the disk: a crash before the next flush loses the pass, which
    /// the re-evaluation at start-up decides again (no fingerprint survives a restart),
    /// and nothing of it can have been delivered (a delivery's record is durable and
    /// would have made the pass durable first). `now_ms` is the outbox's clock (when
    /// the entries are enqueued and first due).
    pub fn write_pass(
        &self,
        pass: &PassWrite,
        notifications: &[crate::model::Notification],
        now_ms: u64,
    ) -> Result<EnqueueReport, StateError> {
        self.write_pass_due(pass, notifications, now_ms, None)
    }

    /// [`StateStore::write_pass`] with when each notification is first due (by index):
    /// the delivery side's fair share between Applications.
    pub fn write_pass_due(
        &self,
        pass: &PassWrite,
        notifications: &[crate::model::Notification],
        now_ms: u64,
        due: Option<&[u64]>,
    ) -> Result<EnqueueReport, StateError> {
        if pass.is_empty() && notifications.is_empty() {
            // Most passes decide nothing to write: no transaction at all.
            return Ok(EnqueueReport::default());
        }
        let deferred = self.deferred.load(std::sync::atomic::Ordering::Relaxed);
        let operations_only = notifications.is_empty() && pass.only_operations();
        if deferred && operations_only {
            // Recorded by the next pass's transaction or flush: one transaction for a
            // start's first passes, not one each. A full list is written with this pass.
            let mut pending = self.pending();
            if pending.len() < MAX_PENDING_OPERATIONS {
                pending.push(PendingOperations {
                    app: pass.app_key.to_string(),
                    operations: pass.operations.to_vec(),
                    retention: pass.retention,
                    at_ms: pass.at_ms,
                });
                return Ok(EnqueueReport::default());
            }
        }
        let mut tx = self.db.begin_write().map_err(storage)?;
        if deferred {
            tx.defer_durability().map_err(storage)?;
        }
        // What waits goes first, in the order the passes decided it.
        self.commit_with_pending(tx, |tx| Self::write_pass_in(tx, pass, notifications, now_ms, due))
    }

    fn write_pass_in(
        tx: &WriteTransaction,
        pass: &PassWrite,
        notifications: &[crate::model::Notification],
        now_ms: u64,
        due: Option<&[u64]>,
    ) -> Result<EnqueueReport, StateError> {
        if let Some((ep, retention)) = pass.episode {
            Self::save_episode_in(tx, ep, retention, from_millis(pass.at_ms))?;
        }
        Self::save_operations_in(tx, pass.app_key, pass.operations, pass.retention, from_millis(pass.at_ms))?;
        if let Some(r) = pass.break_glass {
            Self::save_break_glass_in(tx, r, pass.retention, from_millis(pass.at_ms))?;
        }
        for (key, since) in pass.holds {
            Self::set_hold_in(tx, pass.app_key, key, *since)?;
        }
        for key in &pass.forgets {
            Self::forget_in(tx, pass.app_key, key)?;
        }
        match pass.note {
            Some(Some(text)) => {
                tx.open_table(NOTES).map_err(storage)?.insert(pass.app_key, text).map_err(storage)?;
            }
            Some(None) => {
                tx.open_table(NOTES).map_err(storage)?.remove(pass.app_key).map_err(storage)?;
            }
            None => {}
        }
        let report = if notifications.is_empty() { EnqueueReport::default() } else { Self::enqueue_in(tx, notifications, now_ms, due)? };
        if pass.deleted {
            Self::retire_app_in(tx, pass.app_key, now_ms)?;
        } else {
            // Seen again (a replay that deletes and re-creates one object): whatever was
            // waiting to purge it no longer applies.
            tx.open_table(DELETED).map_err(storage)?.remove(pass.app_key).map_err(storage)?;
        }
        Ok(report)
    }

    /// A deleted Application: its state is purged now if nothing of it is in the
    /// outbox, else marked so that the settle of its last entry purges it (a delivery
    /// settled after the purge would write its key back, for an Application that no
    /// longer exists).
    fn retire_app_in(tx: &WriteTransaction, app: &str, now_ms: u64) -> Result<(), StateError> {
        if Self::has_pending_in(tx, app)? {
            tx.open_table(DELETED).map_err(storage)?.insert(app, now_ms).map_err(storage)?;
            Ok(())
        } else {
            Self::purge_app_in(tx, app).map(drop)
        }
    }

    /// After entries of `apps` settled: purges those that were deleted and have nothing
    /// left in the outbox. Reads one marker per Application, not the table.
    fn purge_settled_in(tx: &WriteTransaction, apps: &std::collections::BTreeSet<&str>) -> Result<(), StateError> {
        let mut marked = Vec::new();
        {
            let deleted = tx.open_table(DELETED).map_err(storage)?;
            for app in apps {
                if deleted.get(*app).map_err(storage)?.is_some() {
                    marked.push(*app);
                }
            }
        }
        for app in marked {
            if !Self::has_pending_in(tx, app)? {
                Self::purge_app_in(tx, app)?;
            }
        }
        Ok(())
    }

    /// Drops everything about one Application (dedup keys, hold-downs, the latest
    /// episode pointer, the deletion marker) inside a caller's transaction.
    fn purge_app_in(tx: &WriteTransaction, app: &str) -> Result<usize, StateError> {
        let n = remove_app_entries(&mut tx.open_table(NOTIFIED).map_err(storage)?, app)?;
        Self::forget_app_history_in(tx, app)?;
        tx.open_table(DELETED).map_err(storage)?.remove(app).map_err(storage)?;
        tx.open_table(NOTES).map_err(storage)?.remove(app).map_err(storage)?;
        outbox::groups::forget_memberships_in(tx, app)?;
        Ok(n)
    }

    /// An Application that now belongs to another shard (its destination cluster
    /// changed): its state here is retired as a deleted one's is — purged once nothing
    /// of it is left in the outbox — but without a last pass: it was not deleted, and
    /// its new shard tells what it does next. Its episodes stay in this shard's history.
    pub fn retire_moved(&self, app: &str) -> Result<(), StateError> {
        let tx = self.db.begin_write().map_err(storage)?;
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        // Its operations still waiting go first, as they would have.
        self.commit_with_pending(tx, |tx| Self::retire_app_in(tx, app, now_ms))
    }

    /// Deleted Applications still waiting for their outbox entries to settle.
    pub fn deleted_waiting(&self) -> Result<u64, StateError> {
        let tx = self.db.begin_read().map_err(storage)?;
        tx.open_table(DELETED).map_err(storage)?.len().map_err(storage)
    }

    pub(crate) fn full_key(app: &str, key: &str) -> String {
        format!("{app}{SEP}{key}")
    }

    /// A consistent snapshot of the store for one evaluation pass: every read of the
    /// pass sees the same committed state, so a settle that commits meanwhile is seen
    /// either entirely (its key recorded and its entry gone) or not at all. Cheap (a
    /// redb read transaction); the pass drops it before it writes.
    pub fn view(&self) -> Result<StateView, StateError> {
        Ok(StateView { tx: self.db.begin_read().map_err(storage)? })
    }

    /// Every Application with a note, and the note.
    pub fn notes(&self) -> Result<Vec<(String, String)>, StateError> {
        let tx = self.db.begin_read().map_err(storage)?;
        let table = tx.open_table(NOTES).map_err(storage)?;
        let mut out = Vec::new();
        for item in table.iter().map_err(storage)? {
            let (k, v) = item.map_err(storage)?;
            out.push((k.value().to_string(), v.value().to_string()));
        }
        Ok(out)
    }

    /// Drops everything about one Application at once, outbox or not (the passes retire
    /// a deleted Application through [`PassWrite::deleted`]).
    #[cfg(test)]
    pub(crate) fn remove_app(&self, app: &str) -> Result<usize, StateError> {
        let tx = self.db.begin_write().map_err(storage)?;
        let n = Self::purge_app_in(&tx, app)?;
        tx.commit().map_err(storage)?;
        Ok(n)
    }
}

/// One consistent snapshot of the store ([`StateStore::view`]).
pub struct StateView {
    pub(crate) tx: kv::ReadTransaction,
}

impl StateView {
    /// The Application's note, if it has one.
    pub(super) fn app_note(&self, app: &str) -> Result<Option<String>, StateError> {
        let table = self.tx.open_table(NOTES).map_err(storage)?;
        Ok(table.get(app).map_err(storage)?.map(|v| v.value().to_string()))
    }
}

/// Removes every entry of one Application from a table keyed `<app>\0...`; returns
/// how many there were.
fn remove_app_entries<V: Field>(table: &mut Table<&str, V>, app: &str) -> Result<usize, StateError> {
    let (lo, hi) = app_range(app);
    let mut n = 0;
    table
        .retain_in(lo.as_str()..hi.as_str(), |_, _| {
            n += 1;
            false
        })
        .map_err(storage)?;
    Ok(n)
}

/// Small counters and markers of the store: the next outbox id, which indexes were
/// built.
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Runs `build` once per state file: a file written before what it builds (an index,
/// counters) existed gets it at its first open, and the marker `indexed:<name>` in
/// `meta` says so, so later opens read nothing.
pub(super) fn once_per_file(tx: &WriteTransaction, name: &str, build: impl FnOnce() -> Result<(), StateError>) -> Result<(), StateError> {
    let marker = format!("indexed:{name}");
    if tx.open_table(META).map_err(storage)?.get(marker.as_str()).map_err(storage)?.is_some() {
        return Ok(());
    }
    build()?;
    tx.open_table(META).map_err(storage)?.insert(marker.as_str(), 1).map_err(storage)?;
    Ok(())
}

/// Fills `index` from `table` once per state file ([`once_per_file`]). `entry` gives an
/// entry's index key (`None`: not indexed).
pub(super) fn index_once(
    tx: &WriteTransaction,
    name: &str,
    table: TableDefinition<&str, &str>,
    index: TableDefinition<&str, ()>,
    entry: impl Fn(&str, &str) -> Result<Option<String>, StateError>,
) -> Result<(), StateError> {
    once_per_file(tx, name, || {
        let source = tx.open_table(table).map_err(storage)?;
        let mut idx = tx.open_table(index).map_err(storage)?;
        // An index that has entries was kept up to date by a build that knew it.
        if idx.is_empty().map_err(storage)? {
            for item in source.iter().map_err(storage)? {
                let (k, v) = item.map_err(storage)?;
                if let Some(key) = entry(k.value(), v.value())? {
                    idx.insert(key.as_str(), ()).map_err(storage)?;
                }
            }
        }
        Ok(())
    })
}

/// The half-open key range holding one Application's entries.
fn app_range(app: &str) -> (String, String) {
    (format!("{app}{SEP}"), format!("{app}\u{1}"))
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

    #[test]
    fn an_index_is_built_once_per_state_file() {
        const T: TableDefinition<&str, &str> = TableDefinition::new("t");
        const I: TableDefinition<&str, ()> = TableDefinition::new("t_by_value");
        let s = StateStore::in_memory().unwrap();
        let put = |k: &str, v: &str| {
            let tx = s.db().begin_write().unwrap();
            tx.open_table(T).unwrap().insert(k, v).unwrap();
            tx.commit().unwrap();
        };
        let index = || {
            let tx = s.db().begin_write().unwrap();
            index_once(&tx, "t_by_value", T, I, |k, v| Ok((v != "skip").then(|| format!("{v}/{k}")))).unwrap();
            tx.commit().unwrap();
            let tx = s.db().begin_read().unwrap();
            let t = tx.open_table(I).unwrap();
            t.iter().unwrap().map(|e| e.unwrap().0.value().to_string()).collect::<Vec<_>>()
        };
        put("a", "2");
        put("b", "1");
        put("c", "skip");
        assert_eq!(index(), ["1/b", "2/a"]);
        put("d", "0");
        assert_eq!(index(), ["1/b", "2/a"], "built once: later opens read nothing (the index is kept by its writers)");
    }

    /// A file held by another process, and a damaged file, each get an error that
    /// names the file and the way out.
    #[test]
    fn a_locked_or_damaged_state_file_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let held = StateStore::open(&path).unwrap();
        let e = StateStore::open(&path).err().unwrap();
        assert!(matches!(e, StateError::Locked { .. }), "{e}");
        assert!(e.to_string().contains("in use by another process"), "{e}");
        drop(held);
        let bad = dir.path().join("damaged.redb");
        std::fs::write(&bad, vec![0x5au8; 64 * 1024]).unwrap();
        let e = StateStore::open(&bad).err().unwrap();
        let text = e.to_string();
        assert!(matches!(e, StateError::Corrupt { .. }), "{text}");
        assert!(text.contains(&bad.display().to_string()) && text.contains("mv "), "{text}");
    }

    /// With replicas, a file system whose locks do not work is refused (redb would
    /// carry on without its lock); a second holder is refused as locked.
    #[test]
    fn a_fenced_store_needs_working_file_locks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let held = StateStore::open_fenced(&path).unwrap();
        assert!(matches!(StateStore::open_fenced(&path), Err(StateError::Locked { .. })));
        drop(held);
        assert!(StateStore::open_fenced(&path).is_ok(), "released with the store");
        assert_eq!(kv::redb::lock_probe_of(std::io::Error::from_raw_os_error(libc::EWOULDBLOCK)), kv::redb::LockProbe::Busy);
        for errno in [libc::ENOTSUP, libc::ENOLCK] {
            assert!(
                matches!(kv::redb::lock_probe_of(std::io::Error::from_raw_os_error(errno)), kv::redb::LockProbe::Unsupported(_)),
                "{errno}"
            );
        }
        let e = StateError::NoLocks { path: "/data/state.redb".into(), detail: "Operation not supported".into() };
        assert!(e.to_string().contains("run one replica without --leader-election"), "{e}");
    }

    #[test]
    fn records_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = StateStore::open(&path).unwrap();
            s.record("ns/a@u", "rev1:on-deployed:[0].x:slack:c", 1).unwrap();
            assert!(s.is_notified("ns/a@u", "rev1:on-deployed:[0].x:slack:c").unwrap());
        }
        let s = StateStore::open(&path).unwrap();
        assert!(s.is_notified("ns/a@u", "rev1:on-deployed:[0].x:slack:c").unwrap());
        assert!(!s.is_notified("ns/a@u", "rev2:on-deployed:[0].x:slack:c").unwrap());
        assert_eq!(s.apps().unwrap(), ["ns/a@u"]);
    }

    /// `DRIFTWATCH_TEST_STATE=postgres` (scripts/test.sh's second run of the store's
    /// tests) puts every store of the suite in PostgreSQL: this says it really does.
    #[test]
    fn the_suite_runs_on_the_engine_asked_for() {
        let asked = std::env::var("DRIFTWATCH_TEST_STATE").unwrap_or_default();
        let want = if asked == "postgres" { "postgres" } else { "redb" };
        assert_eq!(StateStore::in_memory().unwrap().engine(), want);
    }

    #[test]
    fn keys_per_app_are_bounded_oldest_first() {
        let s = StateStore::in_memory().unwrap().with_max_keys_per_app(3);
        for i in 0..5u64 {
            s.record("app", &format!("k{i}"), i).unwrap();
        }
        s.record("other", "k0", 0).unwrap();
        let keys: Vec<String> = s.keys("app").unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["k2", "k3", "k4"]);
        assert_eq!(s.keys("other").unwrap().len(), 1);
    }

    #[test]
    fn forget_and_remove_app() {
        let s = StateStore::in_memory().unwrap();
        s.record("a", "k1", 1).unwrap();
        s.record("a", "k2", 2).unwrap();
        s.record("ab", "k1", 1).unwrap();
        assert!(s.forget("a", "k1").unwrap());
        assert!(!s.forget("a", "k1").unwrap());
        assert_eq!(s.remove_app("a").unwrap(), 1);
        assert!(s.keys("a").unwrap().is_empty());
        assert_eq!(s.keys("ab").unwrap().len(), 1, "a prefix-sharing app is untouched");
    }
}
