//! The error of the store's engines (`kv.rs`, `pg.rs`): text, which the table modules
//! map to `StateError::Storage`. A module of its own so that neither engine depends on
//! the face for it.

#[derive(Debug)]
pub struct KvError(pub String);

impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
