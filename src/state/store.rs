//! The store: opened on one engine (a redb file, memory, PostgreSQL), it hands out one
//! small face per role — [`PassStore`], [`Outbox`], [`History`], [`MessageRefs`] —
//! and keeps what they share: the engine, the bound on keys per Application, and the
//! passes' sync operations waiting for a write transaction (deferred durability).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::kv::{self, Database, ReadTransaction, WriteTransaction};
use super::tables::{self, apps, operations};
use super::{History, MessageRefs, Outbox, PassStore, Retention, StateError, from_millis, storage};
use crate::drift::operation::OperationRecord;

/// How many keys one Application may hold before the oldest are pruned. Argo CD's
/// annotation grows without bound; an `oncePer` per revision adds one key per deploy.
pub const DEFAULT_MAX_KEYS_PER_APP: usize = 256;

/// The notification-state store: cheap to clone (the engine is shared), and the only
/// way to its faces.
#[derive(Clone)]
pub struct Store(Arc<Shared>);

/// What every face of one store shares.
pub(super) struct Shared {
    /// With replicas: a lock on `<path>.lock`, held while the store is open, that
    /// proves the file system locks at all (see [`Store::open_fenced`]).
    _fence: Option<std::fs::File>,
    db: Database,
    max_keys_per_app: AtomicUsize,
    /// Evaluation passes commit without waiting for the disk; [`Store::flush`] makes
    /// everything before it durable (see `PassStore::write_pass`).
    deferred: AtomicBool,
    /// With deferred durability: passes whose only write is the sync operations they
    /// saw ended (an Application's first pass, most of a start's), written by the next
    /// write transaction of a pass or by [`Store::flush`], oldest first.
    pending_operations: std::sync::Mutex<Vec<PendingOperations>>,
    /// Passes committed without waiting for the disk so far, and how many of them a
    /// settle's durable commit has made durable since (a durable commit makes every
    /// commit before it durable): [`Store::flush`] has nothing to do while they agree.
    deferred_commits: std::sync::atomic::AtomicU64,
    made_durable: std::sync::atomic::AtomicU64,
}

/// A pass's sync operations waiting for a write transaction.
#[derive(Debug)]
pub(super) struct PendingOperations {
    pub(super) app: String,
    pub(super) operations: Vec<OperationRecord>,
    pub(super) retention: Retention,
    pub(super) at_ms: u64,
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StateError> {
        Self::open_file(path, None)
    }

    fn open_file(path: &Path, fence: Option<std::fs::File>) -> Result<Store, StateError> {
        let db = kv::redb::open(path)?;
        // A file redb opened but whose tables cannot be read is damaged too.
        Self::init(db, fence).map_err(|e| match e {
            StateError::Storage(detail) => StateError::Corrupt { path: path.display().to_string(), detail },
            e => e,
        })
    }

    /// [`Store::open`] for a daemon with replicas (leader election): refuses a file
    /// system that does not lock files. redb fences a second writer with a file lock,
    /// and carries on without one where the file system says locks are not supported
    /// (some NFS set-ups, FUSE volumes): with two replicas that is two writers. A lock
    /// on `<path>.lock`, held while the store is open, proves locks work there.
    pub fn open_fenced(path: &Path) -> Result<Store, StateError> {
        let lock = kv::redb::lock_beside(path)?;
        Self::open_file(path, Some(lock))
    }

    /// A store that lives in memory only (replays that should start from nothing).
    pub fn in_memory() -> Result<Store, StateError> {
        #[cfg(test)]
        if let Some(store) = super::pgtest::postgres_if_asked() {
            return store;
        }
        Self::init(kv::redb::in_memory().map_err(storage)?, None)
    }

    /// Opens the store in PostgreSQL (replicas without a shared volume): connects,
    /// migrates the schema, and takes the fence as `role` says.
    pub fn open_postgres(opts: &super::PgOptions, role: &super::Role) -> Result<Store, StateError> {
        let pg = kv::pg::Pg::open(opts, role).map_err(StateError::of_postgres)?;
        Self::init(Database::Pg(pg), None)
    }

    fn init(db: Database, fence: Option<std::fs::File>) -> Result<Store, StateError> {
        let tx = db.begin_write().map_err(storage)?;
        tables::create_all(&tx)?;
        tx.commit().map_err(storage)?;
        Ok(Store(Arc::new(Shared {
            _fence: fence,
            db,
            max_keys_per_app: AtomicUsize::new(DEFAULT_MAX_KEYS_PER_APP),
            deferred: AtomicBool::new(false),
            pending_operations: std::sync::Mutex::new(Vec::new()),
            deferred_commits: std::sync::atomic::AtomicU64::new(0),
            made_durable: std::sync::atomic::AtomicU64::new(0),
        })))
    }

    pub fn with_max_keys_per_app(self, n: usize) -> Self {
        self.0.max_keys_per_app.store(n.max(1), Ordering::Relaxed);
        self
    }

    /// The face of an evaluation pass.
    pub fn pass(&self) -> PassStore {
        PassStore::new(self.0.clone())
    }

    /// The face of the delivery workers and of `driftwatch deliveries`.
    pub fn outbox(&self) -> Outbox {
        Outbox::new(self.0.clone())
    }

    /// The face of the drift history's readers (the web view, `driftwatch history`).
    pub fn history(&self) -> History {
        History::new(self.0.clone())
    }

    /// The face a chat destination kind gets: its message references, nothing else.
    pub fn message_refs(&self) -> MessageRefs {
        MessageRefs::new(self.0.clone())
    }

    /// The audit inbox's shared face (on the store every replica opens as a tool).
    pub fn audit_inbox(&self) -> super::AuditInbox {
        super::AuditInbox::new(self.0.clone())
    }

    /// A shard's place in the audit inbox (on the shard's own store).
    pub fn inbox_cursor(&self) -> super::InboxCursor {
        super::InboxCursor::new(self.0.clone())
    }

    /// Whether a write was refused because another replica took the store over
    /// (PostgreSQL's fence): this daemon must stop writing, not reopen and take it
    /// back.
    pub fn fenced(&self) -> bool {
        self.0.db.pg().is_some_and(kv::pg::Pg::fenced)
    }

    /// Which engine holds the store (`redb`, `postgres`).
    pub fn engine(&self) -> &'static str {
        match self.0.db {
            Database::Redb(_) => "redb",
            Database::Pg(_) => "postgres",
        }
    }

    /// Lets evaluation passes commit without waiting for the disk (the daemon, which
    /// calls [`Store::flush`] after each burst of passes).
    pub fn defer_durability(&self, on: bool) {
        self.0.deferred.store(on, Ordering::Relaxed);
    }

    /// Makes every commit so far durable: one write to the disk for a burst of passes.
    /// A settled delivery does the same (its commit is durable and covers what came
    /// before it). The operations of passes that wrote nothing else go in this commit.
    /// Nothing to do when a settle committed durably after the last deferred pass and
    /// no operations wait (the evaluation thread then waits for no disk at all).
    pub fn flush(&self) -> Result<(), StateError> {
        let passes = self.0.deferred_commits.load(Ordering::Acquire);
        if self.0.pending().is_empty() && self.0.made_durable.load(Ordering::Acquire) >= passes {
            return Ok(());
        }
        self.0.commit_with_pending(self.0.write()?, |_| Ok(()))?;
        self.0.made_durable.fetch_max(passes, Ordering::AcqRel);
        Ok(())
    }
}

impl Shared {
    pub(super) fn read(&self) -> Result<ReadTransaction, StateError> {
        self.db.begin_read().map_err(storage)
    }

    pub(super) fn write(&self) -> Result<WriteTransaction, StateError> {
        self.db.begin_write().map_err(storage)
    }

    /// A write transaction that reads with its BEGIN what a write for `apps` reads and
    /// writes (`tables::written_spans`): on PostgreSQL the BEGIN, the fence's lock and
    /// those reads are one round trip, and the writes go with the COMMIT.
    pub(super) fn write_for<'a>(&self, apps: impl IntoIterator<Item = &'a str>) -> Result<WriteTransaction, StateError> {
        if self.db.pg().is_none() {
            return self.write();
        }
        let spans = super::tables::written_spans(apps);
        let spans: Vec<kv::Reads<'_>> =
            spans.iter().map(|(tables, lo, hi, follow)| kv::Reads { tables, lo: lo.as_str(), hi: hi.as_str(), follow }).collect();
        self.db.begin_write_reading(&spans).map_err(storage)
    }

    /// A write transaction with what `f` writes, committed.
    pub(super) fn write_with<T>(&self, f: impl FnOnce(&WriteTransaction) -> Result<T, StateError>) -> Result<T, StateError> {
        let tx = self.write()?;
        let t = f(&tx)?;
        tx.commit().map_err(storage)?;
        Ok(t)
    }

    /// What one read transaction gives.
    pub(super) fn read_with<T>(&self, f: impl FnOnce(&ReadTransaction) -> Result<T, StateError>) -> Result<T, StateError> {
        f(&self.read()?)
    }

    /// A pass committed without waiting for the disk.
    pub(super) fn deferred_commit(&self) {
        self.deferred_commits.fetch_add(1, Ordering::AcqRel);
    }

    /// The deferred commits counted so far, read before a durable transaction begins:
    /// once it commits, [`Shared::made_durable`] with this.
    pub(super) fn deferred_so_far(&self) -> u64 {
        self.deferred_commits.load(Ordering::Acquire)
    }

    /// A durable commit that began after `passes` deferred ones committed made them
    /// durable.
    pub(super) fn made_durable(&self, passes: u64) {
        self.made_durable.fetch_max(passes, Ordering::AcqRel);
    }

    pub(super) fn max_keys_per_app(&self) -> usize {
        self.max_keys_per_app.load(Ordering::Relaxed)
    }

    pub(super) fn deferred(&self) -> bool {
        self.deferred.load(Ordering::Relaxed)
    }

    /// What one read transaction gives, on PostgreSQL after the fence's check in its
    /// first round trip: a deposed leader takes no batch (it would send what the new
    /// leader sends).
    pub(super) fn read_fenced_with<T>(&self, f: impl FnOnce(&ReadTransaction) -> Result<T, StateError>) -> Result<T, StateError> {
        let tx = self.db.begin_read_fenced().map_err(|e| match e.fenced {
            true => StateError::of_postgres(e),
            false => storage(e),
        })?;
        f(&tx)
    }

    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, Vec<PendingOperations>> {
        // A panic mid-push leaves a usable list.
        self.pending_operations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the waiting operations in `tx`, then what `f` writes, and commits. When
    /// that fails they wait again, before any that came since: what a pass decided is
    /// not lost while the daemon runs, and a crash loses only what its restart records
    /// again (an operation is recorded until the Application's latest says it was).
    pub(super) fn commit_with_pending<T>(
        &self,
        tx: WriteTransaction,
        f: impl FnOnce(&WriteTransaction) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        let pending = std::mem::take(&mut *self.pending());
        let written = write_pending(&tx, &pending).and_then(|()| f(&tx)).and_then(|t| tx.commit().map_err(storage).map(|()| t));
        if written.is_err() && !pending.is_empty() {
            let mut now = self.pending();
            let since = std::mem::replace(&mut *now, pending);
            now.extend(since);
        }
        written
    }

    #[cfg(test)]
    pub(super) fn db(&self) -> &Database {
        &self.db
    }
}

/// Waiting passes' writes: their operations, and (as every pass of an Application not
/// deleted) no purge waiting for them.
fn write_pending(tx: &WriteTransaction, pending: &[PendingOperations]) -> Result<(), StateError> {
    if pending.is_empty() {
        return Ok(());
    }
    for p in pending {
        operations::save(tx, &p.app, &p.operations, p.retention, from_millis(p.at_ms))?;
    }
    apps::seen(tx, pending.iter().map(|p| p.app.as_str()))
}

/// The tests' shortcuts to single table writes, each in a transaction of its own.
#[cfg(test)]
impl Store {
    pub(super) fn db(&self) -> &Database {
        self.0.db()
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.0
    }

    /// When a key was recorded (unix ms), if it is.
    pub(crate) fn notified_at(&self, app: &str, key: &str) -> Result<Option<u64>, StateError> {
        self.0.read_with(|tx| tables::notified::notified_at(tx, app, key))
    }

    /// Records a delivered notification (pruning the Application's oldest keys).
    pub(crate) fn record(&self, app: &str, key: &str, at_millis: u64) -> Result<(), StateError> {
        let max = self.0.max_keys_per_app();
        self.0.write_with(|tx| tables::notified::record(tx, app, key, at_millis, max))
    }

    /// Forgets one key; returns whether it was there.
    pub(crate) fn forget(&self, app: &str, key: &str) -> Result<bool, StateError> {
        self.0.write_with(|tx| tables::notified::forget(tx, app, key))
    }

    /// Starts (`Some(since)`) or ends (`None`) a hold-down.
    pub(crate) fn set_hold(&self, app: &str, key: &str, since_ms: Option<u64>) -> Result<(), StateError> {
        self.0.write_with(|tx| tables::holds::set_hold(tx, app, key, since_ms))
    }

    /// Since when (unix ms) a held condition has held, if it is being held.
    pub(crate) fn hold_since(&self, app: &str, key: &str) -> Result<Option<u64>, StateError> {
        self.0.read_with(|tx| tables::holds::hold_since(tx, app, key))
    }

    /// Drops everything about one Application at once, outbox or not (the passes
    /// retire a deleted Application through [`super::PassWrite::deleted`]).
    pub(crate) fn remove_app(&self, app: &str) -> Result<usize, StateError> {
        self.0.write_with(|tx| apps::purge(tx, app))
    }

    /// Writes notifications to the outbox in one transaction, skipping any already in
    /// flight. Durable when this returns.
    pub(crate) fn enqueue(&self, items: &[crate::model::Notification], now_ms: u64) -> Result<super::EnqueueReport, StateError> {
        self.0.write_with(|tx| tables::outbox::enqueue(tx, items, now_ms, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file held by another process, and a damaged file, each get an error that
    /// names the file and the way out.
    #[test]
    fn a_locked_or_damaged_state_file_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let held = Store::open(&path).unwrap();
        let e = Store::open(&path).err().unwrap();
        assert!(matches!(e, StateError::Locked { .. }), "{e}");
        assert!(e.to_string().contains("in use by another process"), "{e}");
        drop(held);
        let bad = dir.path().join("damaged.redb");
        std::fs::write(&bad, vec![0x5au8; 64 * 1024]).unwrap();
        let e = Store::open(&bad).err().unwrap();
        let text = e.to_string();
        assert!(matches!(e, StateError::Corrupt { .. }), "{text}");
        assert!(text.contains(&bad.display().to_string()) && text.contains("mv "), "{text}");
    }

    /// With replicas, a file system whose locks do not work is refused (redb would
    /// carry on without its lock); a second holder is refused as locked.
    #[test]
    fn a_fenced_store_needs_working_file_locks() {
        use kv::redb::{LockProbe, lock_probe_of};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let held = Store::open_fenced(&path).unwrap();
        assert!(matches!(Store::open_fenced(&path), Err(StateError::Locked { .. })));
        drop(held);
        assert!(Store::open_fenced(&path).is_ok(), "released with the store");
        assert_eq!(lock_probe_of(std::io::Error::from_raw_os_error(libc::EWOULDBLOCK)), LockProbe::Busy);
        for errno in [libc::ENOTSUP, libc::ENOLCK] {
            assert!(matches!(lock_probe_of(std::io::Error::from_raw_os_error(errno)), LockProbe::Unsupported(_)), "{errno}");
        }
        let e = StateError::NoLocks { path: "/data/state.redb".into(), detail: "Operation not supported".into() };
        assert!(e.to_string().contains("run one replica without --leader-election"), "{e}");
    }

    #[test]
    fn records_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let s = Store::open(&path).unwrap();
            s.record("ns/a@u", "rev1:on-deployed:[0].x:slack:c", 1).unwrap();
            assert!(s.pass().is_notified("ns/a@u", "rev1:on-deployed:[0].x:slack:c").unwrap());
        }
        let s = Store::open(&path).unwrap();
        assert!(s.pass().is_notified("ns/a@u", "rev1:on-deployed:[0].x:slack:c").unwrap());
        assert!(!s.pass().is_notified("ns/a@u", "rev2:on-deployed:[0].x:slack:c").unwrap());
        assert_eq!(s.pass().apps().unwrap(), ["ns/a@u"]);
    }

    /// `DRIFTWATCH_TEST_STATE=postgres` (scripts/test.sh's second run of the store's
    /// tests) puts every store of the suite in PostgreSQL: this says it really does.
    #[test]
    fn the_suite_runs_on_the_engine_asked_for() {
        let asked = std::env::var("DRIFTWATCH_TEST_STATE").unwrap_or_default();
        let want = if asked == "postgres" { "postgres" } else { "redb" };
        assert_eq!(Store::in_memory().unwrap().engine(), want);
    }

    #[test]
    fn keys_per_app_are_bounded_oldest_first() {
        let s = Store::in_memory().unwrap().with_max_keys_per_app(3);
        for i in 0..5u64 {
            s.record("app", &format!("k{i}"), i).unwrap();
        }
        s.record("other", "k0", 0).unwrap();
        let keys: Vec<String> = s.pass().keys("app").unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["k2", "k3", "k4"]);
        assert_eq!(s.pass().keys("other").unwrap().len(), 1);
    }

    #[test]
    fn forget_and_remove_app() {
        let s = Store::in_memory().unwrap();
        s.record("a", "k1", 1).unwrap();
        s.record("a", "k2", 2).unwrap();
        s.record("ab", "k1", 1).unwrap();
        assert!(s.forget("a", "k1").unwrap());
        assert!(!s.forget("a", "k1").unwrap());
        assert_eq!(s.remove_app("a").unwrap(), 1);
        assert!(s.pass().keys("a").unwrap().is_empty());
        assert_eq!(s.pass().keys("ab").unwrap().len(), 1, "a prefix-sharing app is untouched");
    }
}
