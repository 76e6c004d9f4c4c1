//! The redb engine: a state file opened (or one in memory), its lock proved with
//! replicas, and redb's errors as the face's.

use std::path::Path;

use super::{Database, Field, Got, KeyField, KvError, Pair};
use crate::state::StateError;

pub(super) fn redb_err<E: std::fmt::Display>(e: E) -> KvError {
    KvError::new(e.to_string())
}

pub(super) fn own_pair<K: KeyField + 'static, V: Field + 'static>(
    p: Option<(::redb::AccessGuard<'_, K>, ::redb::AccessGuard<'_, V>)>,
) -> Option<Pair<K, V>> {
    p.map(|(k, v)| (Got(K::own(k.value())), Got(V::own(v.value()))))
}

/// Opens (or creates) the state file at `path`.
pub(in crate::state) fn open(path: &Path) -> Result<Database, StateError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(crate::state::storage)?;
    }
    ::redb::Database::create(path).map(Database::Redb).map_err(|e| opening(path, e))
}

/// A store in memory only.
pub(in crate::state) fn in_memory() -> Result<Database, KvError> {
    ::redb::Database::builder().create_with_backend(::redb::backends::InMemoryBackend::new()).map(Database::Redb).map_err(redb_err)
}

/// Takes the lock on `<path>.lock` that proves the file system locks files (see
/// `Store::open_fenced`): held while the returned file is open.
pub(in crate::state) fn lock_beside(path: &Path) -> Result<std::fs::File, StateError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(crate::state::storage)?;
    }
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| StateError::Open { path: path.display().to_string(), detail: e.to_string() })?;
    match try_lock(&lock) {
        LockProbe::Held => Ok(lock),
        LockProbe::Busy => Err(StateError::Locked { path: path.display().to_string() }),
        LockProbe::Unsupported(detail) => Err(StateError::NoLocks { path: path.display().to_string(), detail }),
    }
}

/// What opening a file said, as the store reports it.
fn opening(path: &Path, e: ::redb::DatabaseError) -> StateError {
    let path = path.display().to_string();
    match e {
        ::redb::DatabaseError::DatabaseAlreadyOpen => StateError::Locked { path },
        ::redb::DatabaseError::Storage(::redb::StorageError::Corrupted(detail)) => StateError::Corrupt { path, detail },
        ::redb::DatabaseError::Storage(::redb::StorageError::Io(io)) if io.kind() == std::io::ErrorKind::InvalidData => {
            StateError::Corrupt { path, detail: io.to_string() }
        }
        other => StateError::Open { path, detail: other.to_string() },
    }
}

/// Whether a file system honours `flock`: the answer to trying it.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::state) enum LockProbe {
    Held,
    Busy,
    Unsupported(String),
}

/// Takes an exclusive, non-blocking `flock` on `file` (kept until it is closed).
fn try_lock(file: &std::fs::File) -> LockProbe {
    use std::os::fd::AsRawFd;
    // SAFETY: flock only reads the descriptor number, which `file` keeps open for the
    // duration of the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return LockProbe::Held;
    }
    lock_probe_of(std::io::Error::last_os_error())
}

pub(in crate::state) fn lock_probe_of(e: std::io::Error) -> LockProbe {
    // Anything but "held by another" (ENOTSUP, ENOLCK, EINVAL, ENOSYS, ...) means the
    // lock cannot be relied on.
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => LockProbe::Busy,
        _ => LockProbe::Unsupported(e.to_string()),
    }
}
