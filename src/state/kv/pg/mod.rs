//! The PostgreSQL engine under the store's tables (`kv.rs`): every table is a range of
//! one relation `kv (t, k, v)` with its primary key on `(t, k)`, so a table's ordered
//! range is an index range, and `len` is a counter in `kv_len` kept by each commit.
//!
//! - **One writer at a time, fenced.** Every write transaction first locks the row of
//!   `fence` (`SELECT ... FOR UPDATE`). That serialises writers as redb does (two
//!   delivery workers can never take one outbox entry: the second reads after the
//!   first committed), and it carries the fencing token: a daemon that took the store
//!   over holds the epoch it was given, and a write transaction whose epoch is no
//!   longer the row's is refused before it writes anything. A replica deposed while
//!   paused can neither send (its settle is refused) nor record.
//! - **Reads are snapshots**: `REPEATABLE READ READ ONLY`.
//! - **Deferred durability** is `synchronous_commit = off` for that transaction; the
//!   next durable commit (every write transaction locks the fence row, which is
//!   WAL-logged) makes it and all before it durable, as redb's `Durability::None`.
//! - **Pool**: bounded (`maxConnections`), with a connect timeout; a broken connection
//!   is dropped, not reused.
//! - **Schema**: in its own PostgreSQL schema (`driftwatch` by default), versioned in
//!   `schema_version` and migrated at start under an advisory lock, in one transaction:
//!   a failed migration changes nothing and the daemon refuses to start, saying why.

use std::time::Duration;

use r2d2_postgres::PostgresConnectionManager;
use r2d2_postgres::r2d2;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::KvError;

mod fence;
mod migrate;
mod pool;
mod table;
mod tx;

pub use pool::Pg;
pub use table::{Range, Table};
pub use tx::{Entry, Span, Tx};

type Manager = PostgresConnectionManager<MakeRustlsConnect>;
type Conn = r2d2::PooledConnection<Manager>;

/// The longest key PostgreSQL's index takes comfortably (a btree entry must fit in a
/// third of a page); a longer one is refused with this bound in the error.
pub const MAX_KEY_BYTES: usize = 2000;

/// Rows fetched per round trip of a range: the first page is small (most ranges are
/// read for their first entries), later ones larger.
const FIRST_PAGE: i64 = 32;
const PAGE: i64 = 512;

/// How to reach PostgreSQL (`state.postgres` of the configuration).
#[derive(Clone)]
pub struct PgOptions {
    /// `postgres://user:password@host:port/db?sslmode=...` (from a secret).
    pub url: crate::secret::Secret,
    /// The PostgreSQL schema holding driftwatch's tables.
    pub schema: String,
    pub max_connections: u32,
    pub connect_timeout: Duration,
    /// PEM CA bundle that verifies the server (the system's web roots when absent).
    pub ca_file: Option<std::path::PathBuf>,
}

impl PgOptions {
    /// The store of shard `i` (`sharding.shards`): a schema of its own, `<schema>_shard_<i>`,
    /// with its own fence, outbox and history.
    pub fn for_shard(&self, i: u32) -> PgOptions {
        PgOptions { schema: format!("{}_shard_{i}", self.schema), ..self.clone() }
    }
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgOptions")
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

/// Who opens the store, which decides the fence.
#[derive(Debug, Clone)]
pub enum Role {
    /// The daemon that sends: takes the store over (a new epoch), and every write is
    /// refused once another takes it over. `lease` is the generation of the Lease it
    /// holds (with leader election): a takeover with an older generation than the one
    /// recorded is refused — the holder of an older Lease.
    Leader { holder: String, lease: Option<LeaseGeneration> },
    /// A command-line tool or a test: writes are serialised with the leader's but no
    /// epoch is taken or checked.
    Tool,
}

/// Which of two Leases (or two holdings of one) is newer: the one created later, and
/// of one Lease, the one with more changes of holder. A Lease deleted by hand and
/// created again starts its count at 0 but is newer than every holding of the one it
/// replaced, so its holder takes the store over; the holder of the deleted one cannot
/// take it back. (Creation times have whole seconds: a Lease created again within the
/// second it was created is ordered by its count alone.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseGeneration {
    /// `metadata.creationTimestamp`, unix seconds (as the API server stamped it).
    pub created: i64,
    /// `spec.leaseTransitions`.
    pub transitions: u64,
}

fn pg_err(e: postgres::Error) -> KvError {
    // The server's message and detail, not the Debug dump (which holds no secret
    // either: the URL is never part of an error).
    match e.as_db_error() {
        Some(db) => KvError::new(format!("PostgreSQL: {}{}", db.message(), db.detail().map(|d| format!(" ({d})")).unwrap_or_default())),
        None => KvError::new(format!("PostgreSQL: {e}")),
    }
}

/// Quotes an identifier for SQL.
fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Quotes a literal for SQL (names the code chooses; never user text).
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
