//! The error of the store's engines (`kv/`): text, which the table modules
//! map to `StateError::Storage`, and whether it is a fencing refusal (another replica
//! took the store over), which the store reports as `StateError::Fenced`, or a value
//! the engine refuses to hold (a key too long for PostgreSQL's index), which the store
//! reports as `StateError::Refused`: the write's input is wrong, not the store. A module of
//! its own so that neither engine depends on the face for it.

#[derive(Debug)]
pub struct KvError {
    pub message: String,
    /// A refusal for an older fencing epoch (nothing was written or sent).
    pub fenced: bool,
    /// A value the engine cannot hold was refused before anything was sent (the
    /// transaction is still sound).
    pub refused: bool,
}

impl KvError {
    pub fn new(message: impl Into<String>) -> KvError {
        KvError { message: message.into(), fenced: false, refused: false }
    }

    /// A refusal for an older fencing epoch.
    pub fn fenced(message: impl Into<String>) -> KvError {
        KvError { message: message.into(), fenced: true, refused: false }
    }

    /// A value the engine cannot hold (a key too long).
    pub fn refused(message: impl Into<String>) -> KvError {
        KvError { message: message.into(), fenced: false, refused: true }
    }
}

impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
