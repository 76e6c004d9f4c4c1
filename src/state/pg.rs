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

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::time::Duration;

use postgres::types::{ToSql, Type};
use r2d2_postgres::PostgresConnectionManager;
use r2d2_postgres::r2d2;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::kv_error::KvError;

type Manager = PostgresConnectionManager<MakeRustlsConnect>;
type Conn = r2d2::PooledConnection<Manager>;

/// The newest schema this build knows: the migrations are `MIGRATIONS[..SCHEMA_VERSION]`.
pub const SCHEMA_VERSION: i32 = 2;

/// Each migration, in order; a migration is never edited once released (add one).
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: the tables, their counters and the fence.
    r#"
    CREATE TABLE kv (t text COLLATE "C" NOT NULL, k bytea NOT NULL, v bytea NOT NULL, PRIMARY KEY (t, k));
    CREATE TABLE kv_len (t text COLLATE "C" PRIMARY KEY, n bigint NOT NULL);
    CREATE TABLE fence (
        name text PRIMARY KEY,
        epoch bigint NOT NULL,
        holder text NOT NULL,
        lease_transitions bigint,
        taken_at timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO fence (name, epoch, holder) VALUES ('state', 0, '');
    "#,
    // 2: the creation time of the Lease the store was taken over with (a Lease deleted
    // and created again starts its count of holder changes at 0 and is newer).
    r#"
    ALTER TABLE fence ADD COLUMN lease_created bigint;
    "#,
];

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

    /// Brings the schema to [`SCHEMA_VERSION`] in one transaction, under an advisory
    /// lock (replicas starting together migrate once).
    fn migrate(&self) -> Result<(), KvError> {
        let mut c = self.conn()?;
        let schema = ident(&self.schema);
        let mut tx = c.transaction().map_err(pg_err)?;
        tx.batch_execute(&format!(
            "SELECT pg_advisory_xact_lock(hashtext({}));
             CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.schema_version (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());",
            literal(&format!("driftwatch-migrate:{}", self.schema))
        ))
        .map_err(|e| KvError::new(format!("preparing schema {}: {}", self.schema, pg_err(e))))?;
        let row = tx.query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[]).map_err(pg_err)?;
        let at: i32 = row.try_get(0).map_err(pg_err)?;
        if at > SCHEMA_VERSION {
            return Err(KvError::new(format!(
                "the state schema {} in PostgreSQL is at version {at}, written by a newer driftwatch; this one knows up to version {SCHEMA_VERSION}: run the newer version",
                self.schema
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(at).unwrap_or(0)) {
            let version = i32::try_from(i + 1).unwrap_or(i32::MAX);
            tx.batch_execute(sql).map_err(|e| {
                KvError::new(format!(
                    "migrating the state schema {} to version {version} failed, and changed nothing: {}",
                    self.schema,
                    pg_err(e)
                ))
            })?;
            tx.execute("INSERT INTO schema_version (version) VALUES ($1)", &[&version]).map_err(pg_err)?;
            tracing::info!(schema = %self.schema, version, "migrated the state schema");
        }
        tx.commit().map_err(pg_err)
    }

    /// A new epoch for this daemon; refused when the Lease it holds is older than the
    /// one recorded (another replica took over since): created earlier, or the same
    /// Lease with fewer changes of holder ([`LeaseGeneration`]). A store last taken over
    /// before creation times were recorded (schema version 1) is judged by the count
    /// alone, as then: otherwise any holder, a deposed one too, would be newer than it.
    fn take_over(&self, holder: &str, lease: Option<LeaseGeneration>) -> Result<i64, KvError> {
        let mut c = self.conn()?;
        let lt = lease.map(|l| i64::try_from(l.transitions).unwrap_or(i64::MAX));
        let created = lease.map(|l| l.created);
        let row = c
            .query_opt(
                "UPDATE fence SET epoch = epoch + 1, holder = $1, lease_transitions = coalesce($2, lease_transitions),
                     lease_created = coalesce($3, lease_created), taken_at = now()
                 WHERE name = 'state' AND ($2::bigint IS NULL OR lease_transitions IS NULL
                     OR (lease_created IS NULL AND lease_transitions < $2)
                     OR (lease_created, lease_transitions) < ($3::bigint, $2::bigint)
                     OR (lease_created IS NOT DISTINCT FROM $3::bigint AND lease_transitions = $2 AND holder = $1)
                     OR (lease_created IS NULL AND lease_transitions = $2 AND holder = $1))
                 RETURNING epoch",
                &[&holder, &lt, &created],
            )
            .map_err(pg_err)?;
        match row {
            Some(r) => {
                let epoch: i64 = r.try_get(0).map_err(pg_err)?;
                tracing::info!(epoch, holder, "took the state store over (fencing epoch)");
                Ok(epoch)
            }
            None => {
                let now =
                    c.query_one("SELECT holder, lease_transitions, lease_created FROM fence WHERE name = 'state'", &[]).map_err(pg_err)?;
                let (by, at, born): (String, Option<i64>, Option<i64>) =
                    (now.try_get(0).map_err(pg_err)?, now.try_get(1).map_err(pg_err)?, now.try_get(2).map_err(pg_err)?);
                let when = |s: Option<i64>| {
                    s.and_then(|s| chrono::DateTime::from_timestamp(s, 0)).map_or("unknown".to_string(), |t| t.to_rfc3339())
                };
                Err(KvError::fenced(format!(
                    "fenced: the state store was taken over by {by} at Lease transition {} of a Lease created {}, after this replica's Lease (transition {}, created {}): not taking it back",
                    at.unwrap_or_default(),
                    when(born),
                    lt.unwrap_or_default(),
                    when(created)
                )))
            }
        }
    }

    /// Whether a write was refused because another daemon took the store over.
    pub fn fenced(&self) -> bool {
        self.fenced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Refuses (and remembers) when another daemon took the store over since this one
    /// did: checked before a delivery worker takes a batch, so a deposed leader starts
    /// no send after the takeover committed. One read, no lock.
    pub fn check_fence(&self) -> Result<(), KvError> {
        let Some(mine) = self.epoch else { return Ok(()) };
        let mut c = self.conn()?;
        let row = c.query_typed_one("SELECT epoch FROM fence WHERE name = 'state'", &[]).map_err(pg_err)?;
        let now: i64 = row.try_get(0).map_err(pg_err)?;
        self.refuse_unless(mine, now)
    }

    fn refuse_unless(&self, mine: i64, now: i64) -> Result<(), KvError> {
        if mine == now {
            return Ok(());
        }
        self.fenced.store(true, std::sync::atomic::Ordering::Relaxed);
        Err(KvError::fenced(format!(
            "fenced: another replica took the state store over (epoch {now}, this one holds {mine}); nothing written or sent"
        )))
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

/// One PostgreSQL transaction on a pooled connection (rolled back when dropped
/// uncommitted).
pub struct Tx {
    conn: RefCell<Option<Conn>>,
    write: bool,
    /// A read transaction begins with its first statement (a pass's view may need one
    /// round trip in all: [`Tx::prefetch`]).
    begun: Cell<bool>,
    /// What [`Tx::prefetch`] read: every entry of some tables in a key range.
    cache: RefCell<Option<Prefetched>>,
    durable: Cell<bool>,
    /// A statement failed: PostgreSQL aborted the transaction, so it cannot commit.
    failed: Cell<bool>,
    /// Entries added (or removed) per table, written to `kv_len` at commit.
    counts: RefCell<BTreeMap<&'static str, i64>>,
}

/// A stored entry: key and value bytes.
pub type Entry = (Vec<u8>, Vec<u8>);

type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// How a read transaction begins: one snapshot for all its statements.
const READ_BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// Every entry of `tables` with a key in `lo..hi`, read at once.
struct Prefetched {
    tables: Vec<&'static str>,
    lo: Vec<u8>,
    hi: Vec<u8>,
    rows: BTreeMap<(&'static str, Vec<u8>), Vec<u8>>,
}

impl Prefetched {
    fn holds_key(&self, table: &str, k: &[u8]) -> bool {
        self.tables.contains(&table) && self.lo.as_slice() <= k && k < self.hi.as_slice()
    }

    /// Whether `lo..hi` of `table` lies inside what was read.
    fn holds_range(&self, table: &str, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
        let starts_inside = match lo {
            Bound::Included(k) | Bound::Excluded(k) => k.as_slice() >= self.lo.as_slice(),
            Bound::Unbounded => false,
        };
        let ends_inside = match hi {
            Bound::Excluded(k) => k.as_slice() <= self.hi.as_slice(),
            Bound::Included(k) => k.as_slice() < self.hi.as_slice(),
            Bound::Unbounded => false,
        };
        self.tables.contains(&table) && starts_inside && ends_inside
    }
}

/// `bytes` as SQL: `decode('<hex>', 'hex')` (no quoting of user bytes at all).
fn bytea_literal(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut hex = String::with_capacity(bytes.len() * 2 + 20);
    hex.push_str("decode('");
    for b in bytes {
        let _ = write!(hex, "{b:02x}");
    }
    hex.push_str("', 'hex')");
    hex
}

/// The bytes of PostgreSQL's hex text of a bytea (`\x0a1b...`).
fn from_hex(text: &str) -> Result<Vec<u8>, KvError> {
    let digits = text.strip_prefix("\\x").ok_or_else(|| KvError::new("a bytea without its \\x prefix"))?;
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(KvError::new("a bytea with a character that is not hex")),
    };
    digits
        .as_bytes()
        .chunks(2)
        .map(|p| match p {
            [h, l] => Ok(nibble(*h)? << 4 | nibble(*l)?),
            _ => Err(KvError::new("a bytea of odd length")),
        })
        .collect()
}

impl Tx {
    fn new(c: Conn, write: bool) -> Tx {
        Tx {
            conn: RefCell::new(Some(c)),
            write,
            begun: Cell::new(write),
            cache: RefCell::new(None),
            durable: Cell::new(true),
            failed: Cell::new(false),
            counts: RefCell::new(BTreeMap::new()),
        }
    }

    pub fn table(&self, name: &'static str) -> Table<'_> {
        Table { tx: self, name }
    }

    /// Reads every entry of `tables` with a key in `lo..hi` in one round trip (with
    /// the BEGIN when it is the transaction's first statement): a pass's view of its
    /// Application, whose keys all start with the Application's key. Later reads
    /// inside that range of those tables are answered from it. Read transactions only.
    pub fn prefetch(&self, tables: &[&'static str], lo: &[u8], hi: &[u8]) -> Result<(), KvError> {
        if self.write || tables.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = tables.iter().map(|t| literal(t)).collect();
        let mut sql = String::new();
        if !self.begun.get() {
            sql.push_str(READ_BEGIN);
            sql.push_str("; ");
        }
        sql.push_str(&format!(
            "SELECT t, v, k FROM kv WHERE t IN ({}) AND k >= {} AND k < {}",
            names.join(", "),
            bytea_literal(lo),
            bytea_literal(hi)
        ));
        // Begun even if the SELECT fails: the drop must end the transaction.
        self.begun.set(true);
        let messages = self.simple(&sql)?;
        let mut rows = BTreeMap::new();
        for m in &messages {
            if let postgres::SimpleQueryMessage::Row(r) = m {
                let (Some(t), Some(v), Some(k)) = (r.get(0), r.get(1), r.get(2)) else { continue };
                let Some(table) = tables.iter().find(|n| **n == t) else { continue };
                rows.insert((*table, from_hex(k)?), from_hex(v)?);
            }
        }
        *self.cache.borrow_mut() = Some(Prefetched { tables: tables.to_vec(), lo: lo.to_vec(), hi: hi.to_vec(), rows });
        Ok(())
    }

    /// Commits with `synchronous_commit = off`.
    pub fn defer_durability(&self) {
        self.durable.set(false);
    }

    pub(super) fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<postgres::Row>, KvError> {
        let mut slot = self.conn.borrow_mut();
        let Some(c) = slot.as_mut() else { return Err(KvError::new("the transaction has ended")) };
        if !self.begun.get() {
            c.batch_execute(READ_BEGIN).map_err(pg_err)?;
            self.begun.set(true);
        }
        c.query_typed(sql, params).map_err(|e| {
            self.failed.set(true);
            pg_err(e)
        })
    }

    /// Statements in the simple protocol (several at once, text results); a failure
    /// marks the transaction failed.
    fn simple(&self, sql: &str) -> Result<Vec<postgres::SimpleQueryMessage>, KvError> {
        let mut slot = self.conn.borrow_mut();
        let Some(c) = slot.as_mut() else { return Err(KvError::new("the transaction has ended")) };
        c.simple_query(sql).map_err(|e| {
            self.failed.set(true);
            pg_err(e)
        })
    }

    pub(super) fn count(&self, table: &'static str, delta: i64) {
        if delta != 0 {
            let mut counts = self.counts.borrow_mut();
            let n = counts.entry(table).or_default();
            *n = n.saturating_add(delta);
        }
    }

    /// Writes the counters and commits, in one round trip.
    pub fn commit(self) -> Result<(), KvError> {
        if self.failed.get() {
            return Err(KvError::new("a statement of the transaction failed; it was rolled back"));
        }
        let mut sql = String::new();
        let counts = self.counts.borrow();
        if self.write && counts.values().any(|n| *n != 0) {
            let rows: Vec<String> = counts.iter().filter(|(_, n)| **n != 0).map(|(t, n)| format!("({}, {n})", literal(t))).collect();
            sql.push_str(&format!(
                "INSERT INTO kv_len (t, n) VALUES {} ON CONFLICT (t) DO UPDATE SET n = kv_len.n + excluded.n; ",
                rows.join(", ")
            ));
        }
        if self.write && !self.durable.get() {
            sql.push_str("SET LOCAL synchronous_commit TO off; ");
        }
        sql.push_str("COMMIT");
        drop(counts);
        let Some(mut c) = self.conn.borrow_mut().take() else { return Err(KvError::new("the transaction has ended")) };
        c.batch_execute(&sql).map_err(|e| {
            // A statement before the COMMIT failed: the transaction is aborted and
            // still open. It must not go back to the pool so (a broken connection is
            // dropped by the pool anyway).
            let _ = c.batch_execute("ROLLBACK");
            pg_err(e)
        })
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        if let Some(mut c) = self.conn.get_mut().take() {
            if !self.begun.get() {
                return;
            }
            // A read ends as it began; a write that did not commit is undone. A
            // connection that cannot say so is broken, and the pool drops it.
            let end = if self.write { "ROLLBACK" } else { "COMMIT" };
            if let Err(e) = c.batch_execute(end) {
                tracing::debug!(error = %e, "ending a PostgreSQL transaction failed");
            }
        }
    }
}

/// One table of a transaction.
pub struct Table<'t> {
    tx: &'t Tx,
    name: &'static str,
}

fn bytes(row: &postgres::Row, i: usize) -> Result<Vec<u8>, KvError> {
    row.try_get::<_, Vec<u8>>(i).map_err(pg_err)
}

fn pair(row: &postgres::Row) -> Result<Entry, KvError> {
    Ok((bytes(row, 0)?, bytes(row, 1)?))
}

impl<'t> Table<'t> {
    pub fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        if let Some(p) = self.tx.cache.borrow().as_ref().filter(|p| p.holds_key(self.name, k)) {
            return Ok(p.rows.get(&(self.name, k.to_vec())).cloned());
        }
        let rows = self.tx.query("SELECT v FROM kv WHERE t = $1 AND k = $2", &[(&self.name, Type::TEXT), (&k, Type::BYTEA)])?;
        rows.first().map(|r| bytes(r, 0)).transpose()
    }

    /// The values of `keys`, in their order, in one round trip.
    pub fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows =
            self.tx.query("SELECT k, v FROM kv WHERE t = $1 AND k = ANY($2)", &[(&self.name, Type::TEXT), (&keys, Type::BYTEA_ARRAY)])?;
        let mut found = rows.iter().map(pair).collect::<Result<std::collections::HashMap<Vec<u8>, Vec<u8>>, KvError>>()?;
        Ok(keys.iter().map(|k| found.remove(k)).collect())
    }

    pub fn insert(&self, k: Vec<u8>, v: Vec<u8>) -> Result<Option<Vec<u8>>, KvError> {
        if k.len() > MAX_KEY_BYTES {
            // Refused before the statement: PostgreSQL would fail (and abort) the
            // transaction; this way the caller can tell bad input from a failing store.
            return Err(KvError::refused(format!(
                "a key of {} bytes in table {} (PostgreSQL's index takes up to {MAX_KEY_BYTES})",
                k.len(),
                self.name
            )));
        }
        let rows = self.tx.query(
            "WITH old AS (SELECT v FROM kv WHERE t = $1 AND k = $2),
                  up AS (INSERT INTO kv (t, k, v) VALUES ($1, $2, $3) ON CONFLICT (t, k) DO UPDATE SET v = excluded.v)
             SELECT v FROM old",
            &[(&self.name, Type::TEXT), (&k, Type::BYTEA), (&v, Type::BYTEA)],
        )?;
        let old = rows.first().map(|r| bytes(r, 0)).transpose()?;
        if old.is_none() {
            self.tx.count(self.name, 1);
        }
        Ok(old)
    }

    pub fn remove(&self, k: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let rows = self.tx.query("DELETE FROM kv WHERE t = $1 AND k = $2 RETURNING v", &[(&self.name, Type::TEXT), (&k, Type::BYTEA)])?;
        let old = rows.first().map(|r| bytes(r, 0)).transpose()?;
        if old.is_some() {
            self.tx.count(self.name, -1);
        }
        Ok(old)
    }

    /// Removes `keys`, a thousand a statement; returns how many there were.
    pub fn remove_all(&self, keys: &[Vec<u8>]) -> Result<u64, KvError> {
        let mut removed = 0u64;
        for chunk in keys.chunks(1000) {
            let chunk: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            let rows = self.tx.query(
                "DELETE FROM kv WHERE t = $1 AND k = ANY($2) RETURNING 1",
                &[(&self.name, Type::TEXT), (&chunk, Type::BYTEA_ARRAY)],
            )?;
            self.tx.count(self.name, -i64::try_from(rows.len()).unwrap_or(i64::MAX));
            removed = removed.saturating_add(u64::try_from(rows.len()).unwrap_or(u64::MAX));
        }
        Ok(removed)
    }

    /// Removes every entry; returns how many there were (the tests' way to stand for a
    /// store written before a table existed).
    #[cfg(test)]
    pub fn clear(&self) -> Result<u64, KvError> {
        let rows =
            self.tx.query("WITH d AS (DELETE FROM kv WHERE t = $1 RETURNING 1) SELECT count(*) FROM d", &[(&self.name, Type::TEXT)])?;
        let n: i64 = rows.first().map(|r| r.try_get(0).map_err(pg_err)).transpose()?.unwrap_or(0);
        self.tx.count(self.name, -n);
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The first entry.
    pub fn first(&self) -> Result<Option<Entry>, KvError> {
        let rows = self.tx.query("SELECT k, v FROM kv WHERE t = $1 ORDER BY k LIMIT 1", &[(&self.name, Type::TEXT)])?;
        rows.first().map(pair).transpose()
    }

    pub fn pop_first(&self) -> Result<Option<Entry>, KvError> {
        let rows = self.tx.query(
            "DELETE FROM kv WHERE t = $1 AND k = (SELECT k FROM kv WHERE t = $1 ORDER BY k LIMIT 1) RETURNING k, v",
            &[(&self.name, Type::TEXT)],
        )?;
        let got = rows.first().map(pair).transpose()?;
        if got.is_some() {
            self.tx.count(self.name, -1);
        }
        Ok(got)
    }

    pub fn is_empty(&self) -> Result<bool, KvError> {
        Ok(self.first()?.is_none())
    }

    pub fn len(&self) -> Result<u64, KvError> {
        let rows = self.tx.query("SELECT n FROM kv_len WHERE t = $1", &[(&self.name, Type::TEXT)])?;
        let stored: i64 = rows.first().map(|r| r.try_get(0).map_err(pg_err)).transpose()?.unwrap_or(0);
        let pending = self.tx.counts.borrow().get(self.name).copied().unwrap_or(0);
        Ok(u64::try_from(stored.saturating_add(pending)).unwrap_or(0))
    }

    pub fn range(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Range<'t> {
        let cached = self.tx.cache.borrow().as_ref().filter(|p| p.holds_range(self.name, &lo, &hi)).map(|p| {
            p.rows
                .range((Bound::Included((self.name, Vec::new())), Bound::Unbounded))
                .take_while(|((t, _), _)| *t == self.name)
                .filter(|((_, k), _)| RangeBounds::<Vec<u8>>::contains(&(lo.as_ref(), hi.as_ref()), k))
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect::<VecDeque<Entry>>()
        });
        match cached {
            Some(buf) => Range { tx: self.tx, name: self.name, lo, hi, rev: false, buf, done: true, page: PAGE },
            None => Range { tx: self.tx, name: self.name, lo, hi, rev: false, buf: VecDeque::new(), done: false, page: FIRST_PAGE },
        }
    }
}

/// A range read a page at a time (keyset paging on the primary key).
pub struct Range<'t> {
    tx: &'t Tx,
    name: &'static str,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    rev: bool,
    buf: VecDeque<Entry>,
    done: bool,
    page: i64,
}

impl Range<'_> {
    /// The range from its end (called before the first `next`).
    pub fn rev(mut self) -> Self {
        self.rev = !self.rev;
        if self.done {
            // Answered from a prefetch: all of it is here.
            self.buf = self.buf.into_iter().rev().collect();
        } else {
            self.buf.clear();
        }
        self
    }

    fn fetch(&mut self) -> Result<(), KvError> {
        let mut sql = String::from("SELECT k, v FROM kv WHERE t = $1");
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![(&self.name, Type::TEXT)];
        for (bound, incl, excl) in [(&self.lo, ">=", ">"), (&self.hi, "<=", "<")] {
            let (op, key) = match bound {
                Bound::Included(k) => (incl, k),
                Bound::Excluded(k) => (excl, k),
                Bound::Unbounded => continue,
            };
            params.push((key, Type::BYTEA));
            sql.push_str(&format!(" AND k {op} ${}", params.len()));
        }
        sql.push_str(if self.rev { " ORDER BY k DESC" } else { " ORDER BY k" });
        sql.push_str(&format!(" LIMIT {}", self.page));
        let rows = self.tx.query(&sql, &params)?;
        if i64::try_from(rows.len()).unwrap_or(i64::MAX) < self.page {
            self.done = true;
        }
        self.page = PAGE;
        for r in &rows {
            self.buf.push_back(pair(r)?);
        }
        if let Some((k, _)) = self.buf.back() {
            if self.rev {
                self.hi = Bound::Excluded(k.clone());
            } else {
                self.lo = Bound::Excluded(k.clone());
            }
        }
        Ok(())
    }
}

impl Iterator for Range<'_> {
    type Item = Result<Entry, KvError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty()
            && !self.done
            && let Err(e) = self.fetch()
        {
            self.done = true;
            return Some(Err(e));
        }
        self.buf.pop_front().map(Ok)
    }
}
