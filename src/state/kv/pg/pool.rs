//! The pool: PostgreSQL opened (TLS, a bounded pool of connections, the schema
//! migrated, the fence taken), and a transaction on one of its connections.

use std::time::Duration;

use r2d2_postgres::PostgresConnectionManager;
use r2d2_postgres::r2d2;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Conn, KvError, Manager, PgOptions, Role, Span, Tx, ident};

/// PostgreSQL, opened.
pub struct Pg {
    /// Always `Some` but while dropped (see the `Drop`).
    pub(super) pool: Option<r2d2::Pool<Manager>>,
    pub(super) schema: String,
    /// The epoch this daemon holds (none for a tool).
    pub(super) epoch: Option<i64>,
    /// Set once a write was refused for an older epoch.
    pub(super) fenced: std::sync::atomic::AtomicBool,
    /// After a connection could not be had: until when the store answers "unreachable"
    /// at once rather than have every pass wait for a connect timeout (the evaluation
    /// thread would stall for each Application during an outage or a failover).
    pub(super) down_until: std::sync::Mutex<Option<std::time::Instant>>,
    /// Round trips of this store's transactions (what a pass's cost is made of).
    pub(super) round_trips: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How long a checkout waits for a connection (at most; `connectTimeout` if shorter).
const CHECKOUT_WAIT: Duration = Duration::from_secs(2);
/// How long the store answers "unreachable" at once after a checkout failed.
const DOWN_FOR: Duration = Duration::from_secs(1);

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
            round_trips: std::sync::Arc::default(),
        };
        pg.migrate()?;
        if let Role::Leader { holder, lease } = role {
            pg.epoch = Some(pg.take_over(holder, *lease)?);
        }
        Ok(pg)
    }

    pub(super) fn conn(&self) -> Result<Conn, KvError> {
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
        match write {
            true => self.begin_write(&[]),
            false => self.conn().map(|c| Tx::new(c, false, self.round_trips.clone())),
        }
    }

    /// A write transaction that locks the fence row (and checks the epoch) and reads
    /// `spans` whole, in one round trip: what it reads or writes there later costs none
    /// (`tx.rs`).
    pub fn begin_write(&self, spans: &[Span<'_>]) -> Result<Tx, KvError> {
        let c = self.conn()?;
        // The transaction exists from here: whatever fails below, its drop rolls it
        // back before the connection goes back to the pool.
        let tx = Tx::new(c, true, self.round_trips.clone());
        let rows = tx.prefetch_with("BEGIN; SELECT epoch FROM fence WHERE name = 'state' FOR UPDATE; ", spans)?;
        let held = rows.iter().find_map(|r| r.get(0).and_then(|s| s.parse::<i64>().ok()));
        match (self.epoch, held) {
            (_, None) => Err(KvError::new("the fence row of the state schema is missing")),
            (Some(mine), Some(now)) => self.refuse_unless(mine, now).map(|()| tx),
            (None, Some(_)) => Ok(tx),
        }
    }
}

impl Pg {
    /// Round trips of this store's transactions so far.
    #[cfg(test)]
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(std::sync::atomic::Ordering::Relaxed)
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
