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

use super::kv_error::KvError;

mod fence;
mod migrate;
mod table;
mod tx;

pub use table::{Range, Table};
pub use tx::{Entry, Tx};

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

/// PostgreSQL, opened.
pub struct Pg {
    /// Always `Some` but while dropped (see the `Drop`).
    pool: Option<r2d2::Pool<Manager>>,
    schema: String,
    /// The epoch this daemon holds (none for a tool).
    epoch: Option<i64>,
    /// Set once a write was refused for an older epoch.
    fenced: std::sync::atomic::AtomicBool,
    /// After a connection could not be had: until when the store answers "unreachable"
    /// at once rather than have every pass wait for a connect timeout (the evaluation
    /// thread would stall for each Application during an outage or a failover).
    down_until: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long a checkout waits for a connection (at most; `connectTimeout` if shorter).
const CHECKOUT_WAIT: Duration = Duration::from_secs(2);
/// How long the store answers "unreachable" at once after a checkout failed.
const DOWN_FOR: Duration = Duration::from_secs(1);

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

/// Whether every host of the URL is this machine (a Unix socket, or loopback). A
/// `hostaddr` is where the client connects whatever `host` says, so each of them must
/// be loopback too (review L-e: `host=localhost hostaddr=10.0.0.9` is not local).
fn local_only(cfg: &postgres::Config) -> bool {
    use postgres::config::Host;
    !cfg.get_hosts().is_empty()
        && cfg.get_hosts().iter().all(|h| match h {
            Host::Unix(_) => true,
            Host::Tcp(name) => name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()),
        })
        && cfg.get_hostaddrs().iter().all(|ip| ip.is_loopback())
}

fn tls_config(ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, KvError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| KvError::new(format!("state.postgres.caFile {}: {e}", path.display())))?;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert = cert.map_err(|e| KvError::new(format!("state.postgres.caFile {}: {e}", path.display())))?;
                roots.add(cert).map_err(|e| KvError::new(format!("state.postgres.caFile {}: {e}", path.display())))?;
            }
            if roots.is_empty() {
                return Err(KvError::new(format!("state.postgres.caFile {} holds no certificate", path.display())));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| KvError::new(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl Pg {
    /// Connects (the pool's first connection within the connect timeout), migrates the
    /// schema, and takes the fence as `role` says.
    pub fn open(opts: &PgOptions, role: &Role) -> Result<Pg, KvError> {
        let mut cfg: postgres::Config = opts
            .url
            .expose()
            .parse()
            // The parser's message does not repeat the URL (it holds the password).
            .map_err(|e| KvError::new(format!("state.postgres.url is not a PostgreSQL URL: {e}")))?;
        if cfg.get_hosts().is_empty() {
            return Err(KvError::new("state.postgres.url names no host"));
        }
        // TLS, verified, for anything but this machine: `prefer` (the default) would
        // carry on in the clear when the server offers no TLS.
        match cfg.get_ssl_mode() {
            postgres::config::SslMode::Disable if !local_only(&cfg) => {
                return Err(KvError::new(
                    "state.postgres.url has sslmode=disable for a server that is not on this machine: the state (and the fencing) would cross the network unencrypted and unauthenticated",
                ));
            }
            postgres::config::SslMode::Prefer if !local_only(&cfg) => {
                cfg.ssl_mode(postgres::config::SslMode::Require);
            }
            _ => {}
        }
        cfg.options(&format!("-c search_path={}", ident(&opts.schema)));
        cfg.application_name("driftwatch");
        cfg.connect_timeout(opts.connect_timeout);
        let tls = MakeRustlsConnect::new(tls_config(opts.ca_file.as_deref())?);
        let pool = r2d2::Pool::builder()
            .max_size(opts.max_connections.max(1))
            .min_idle(Some(1))
            .connection_timeout(opts.connect_timeout)
            // A checkout does not ask the server first (a round trip per transaction);
            // a connection that broke is seen closed and dropped.
            .test_on_check_out(false)
            .error_handler(Box::new(r2d2::LoggingErrorHandler))
            .build(PostgresConnectionManager::new(cfg, tls))
            .map_err(|e| KvError::new(format!("cannot connect to PostgreSQL: {e}")))?;
        let mut pg = Pg {
            pool: Some(pool),
            schema: opts.schema.clone(),
            epoch: None,
            fenced: std::sync::atomic::AtomicBool::new(false),
            down_until: std::sync::Mutex::new(None),
        };
        pg.migrate()?;
        if let Role::Leader { holder, lease } = role {
            pg.epoch = Some(pg.take_over(holder, *lease)?);
        }
        Ok(pg)
    }

    fn conn(&self) -> Result<Conn, KvError> {
        let pool = self.pool.as_ref().ok_or_else(|| KvError::new("the store is closed"))?;
        let now = std::time::Instant::now();
        let down = *self.down_until.lock().unwrap_or_else(|p| p.into_inner());
        if down.is_some_and(|until| now < until) {
            return Err(KvError::new("PostgreSQL is unreachable (a connection just failed); retrying"));
        }
        pool.get_timeout(CHECKOUT_WAIT.min(pool.connection_timeout())).map_err(|e| {
            // Every connection busy is load, not an outage; fewer than the bound open
            // means new ones could not be made.
            if pool.state().connections < pool.max_size() {
                *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now().checked_add(DOWN_FOR);
            }
            KvError::new(format!("no PostgreSQL connection: {e}"))
        })
    }

    /// A transaction: a write one locks the fence row first (and checks the epoch), a
    /// read one is a snapshot.
    pub fn begin(&self, write: bool) -> Result<Tx, KvError> {
        let c = self.conn()?;
        if !write {
            return Ok(Tx::new(c, false));
        }
        // The transaction exists from here: whatever fails below, its drop rolls it
        // back before the connection goes back to the pool.
        let tx = Tx::new(c, true);
        let rows = tx.simple("BEGIN; SELECT epoch FROM fence WHERE name = 'state' FOR UPDATE")?;
        let held = rows.iter().find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => r.get(0).and_then(|s| s.parse::<i64>().ok()),
            _ => None,
        });
        match (self.epoch, held) {
            (_, None) => Err(KvError::new("the fence row of the state schema is missing")),
            (Some(mine), Some(now)) => self.refuse_unless(mine, now).map(|()| tx),
            (None, Some(_)) => Ok(tx),
        }
    }
}

impl Drop for Pg {
    /// The last holder of the store may be a task on the async runtime (a delivery
    /// worker ending), and closing a connection blocks: the pool is closed on a thread
    /// of its own.
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let closing = std::thread::Builder::new().name("driftwatch-pg-close".into()).spawn(move || drop(pool));
            if let Err(e) = closing {
                tracing::warn!(error = %e, "closing the PostgreSQL connections: no thread; they close when the process ends");
            }
        }
    }
}
