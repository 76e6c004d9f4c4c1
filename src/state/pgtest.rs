//! A private PostgreSQL for the tests and benches (not used by the daemon): one server
//! per process, started from the installed PostgreSQL (`initdb`, `postgres`) in a
//! temporary directory, listening on a Unix socket there only (no port to collide
//! with), and torn down when the process ends however it ends: the server runs under a
//! shell that waits on a pipe from this process, and when the pipe closes it stops the
//! server (fast shutdown) and removes the directory.
//!
//! As root (PostgreSQL refuses to run as root), the server runs as the `postgres`
//! user through `runuser`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{PgOptions, Role, StateError, Store};

/// The running server.
pub struct Server {
    pub socket_dir: PathBuf,
    pub port: u16,
    /// The shell that stops the server when its stdin closes (this process ended).
    _keeper: std::sync::Mutex<Child>,
    /// The keeper's stdin (commands; its closing is the end) and stdout (answers).
    control: std::sync::Mutex<(std::process::ChildStdin, std::io::BufReader<std::process::ChildStdout>)>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// The installed PostgreSQL's programs: the newest `/usr/lib/postgresql/<v>/bin`, or
/// `PG_BIN`.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("PostgreSQL is not installed (/usr/lib/postgresql: {e}); install Debian's postgresql"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, p)| p.join("initdb").is_file())
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p).ok_or_else(|| "no /usr/lib/postgresql/<version>/bin/initdb".to_string())
}

fn as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The command, run as `postgres` when this process is root.
fn command(program: &Path) -> Command {
    if as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn start() -> Result<Server, String> {
    let bin = bin_dir()?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("driftwatch-pg-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if as_root() {
        let out = Command::new("id").args(["-u", "postgres"]).output().map_err(|e| format!("id -u postgres: {e}"))?;
        let uid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| "no postgres user".to_string())?;
        let out = Command::new("id").args(["-g", "postgres"]).output().map_err(|e| format!("id -g postgres: {e}"))?;
        let gid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| "no postgres group".to_string())?;
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", dir.display()))?;
    }
    let data = dir.join("data");
    let out = command(&bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"])
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let port: u16 = 5432;
    // The shell starts the server and then obeys this process: `stop` and `start` on
    // its stdin stop (fast shutdown) and start the server again; when the pipe closes
    // (this process ended, or the `Server` was dropped) it stops the server and
    // removes the directory.
    // The tests' server does not wait for the disk; the benches' (DRIFTWATCH_PG_FSYNC=on)
    // does, as a production server.
    let fsync = if std::env::var("DRIFTWATCH_PG_FSYNC").as_deref() == Ok("on") { "on" } else { "off" };
    let script = r#"
        bin=$1 data=$2 dir=$3 port=$4 fsync=$5
        up() {
            "$bin" -D "$data" -k "$dir" -p "$port" -c listen_addresses= -c fsync="$fsync" -c synchronous_commit=on \
                 -c full_page_writes="$fsync" -c max_connections=400 -c shared_buffers=32MB >>"$dir/server.log" 2>&1 &
            pid=$!
        }
        down() {
            if [ -n "$pid" ]; then kill -INT "$pid"; wait "$pid"; pid=; fi
        }
        up
        while read -r cmd; do
            case "$cmd" in
                stop) down; echo stopped ;;
                start) up; echo started ;;
            esac
        done
        down
        rm -rf "$dir"
    "#;
    let mut keeper = command(Path::new("/bin/sh"))
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(bin.join("postgres"))
        .arg(&data)
        .arg(&dir)
        .arg(port.to_string())
        .arg(fsync)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting postgres: {e}"))?;
    let stdin = keeper.stdin.take().ok_or("no stdin to the server's keeper")?;
    let stdout = keeper.stdout.take().ok_or("no stdout from the server's keeper")?;
    let server = Server {
        socket_dir: dir.clone(),
        port,
        _keeper: std::sync::Mutex::new(keeper),
        control: std::sync::Mutex::new((stdin, std::io::BufReader::new(stdout))),
    };
    server.wait_ready()?;
    Ok(server)
}

impl Server {
    /// Waits until the server accepts connections (its socket appears when it is
    /// ready), at most 60 s.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match postgres::Config::new()
                .host_path(&self.socket_dir)
                .port(self.port)
                .user("postgres")
                .dbname("postgres")
                .connect(postgres::NoTls)
            {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    let log = std::fs::read_to_string(self.socket_dir.join("server.log")).unwrap_or_default();
                    return Err(format!("PostgreSQL did not accept connections within 60 s: {e}\n{log}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Sends the keeper `cmd` and waits for its answer (`stopped`, `started`).
    fn control(&self, cmd: &str) -> Result<(), String> {
        use std::io::BufRead;
        let mut c = self.control.lock().map_err(|_| "the keeper's pipe is poisoned".to_string())?;
        writeln!(c.0, "{cmd}").and_then(|()| c.0.flush()).map_err(|e| format!("{cmd}: {e}"))?;
        let mut answer = String::new();
        c.1.read_line(&mut answer).map_err(|e| format!("{cmd}: {e}"))?;
        Ok(())
    }

    /// Stops the server (fast shutdown: connections are cut, as in a failover).
    pub fn stop(&self) -> Result<(), ServerError> {
        self.control("stop").map_err(ServerError)
    }

    /// Starts the stopped server again and waits until it accepts connections.
    pub fn start(&self) -> Result<(), ServerError> {
        self.control("start").and_then(|()| self.wait_ready()).map_err(ServerError)
    }
}

/// Why the private PostgreSQL could not be started, stopped or reached.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ServerError(pub String);

/// A server of the caller's own (one a test stops and starts), torn down when dropped.
pub fn private_server() -> Result<Server, ServerError> {
    start().map_err(ServerError)
}

/// The process's server, started at the first call.
pub fn server() -> Result<&'static Server, ServerError> {
    SERVER.get_or_init(start).as_ref().map_err(|e| ServerError(e.clone()))
}

impl Server {
    /// A connection string for `user` to `postgres` over the socket.
    pub fn url(&self) -> String {
        format!("host={} port={} user=postgres dbname=postgres", self.socket_dir.display(), self.port)
    }

    /// Options for a schema of its own, with a pool of one connection: the store's
    /// suite then proves that no operation holds two transactions at once (it would
    /// wait for itself and fail).
    pub fn options(&self, schema: &str) -> PgOptions {
        PgOptions {
            url: crate::secret::Secret::new(self.url()),
            schema: schema.to_string(),
            max_connections: 1,
            connect_timeout: Duration::from_secs(10),
            ca_file: None,
        }
    }
}

/// A schema name no other store of this process (or another test process) uses.
pub fn fresh_schema() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!("t{}_{}", std::process::id(), N.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// A store in a fresh schema of the process's server.
pub fn fresh_store(role: &Role) -> Result<Store, StateError> {
    let server = server().map_err(|e| StateError::Postgres(e.0))?;
    Store::open_postgres(&server.options(&fresh_schema()), role)
}

/// With `DRIFTWATCH_TEST_STATE=postgres`, the store the tests take as "in memory" is
/// one in PostgreSQL: how the store's whole test suite runs against both engines.
pub fn postgres_if_asked() -> Option<Result<Store, StateError>> {
    (std::env::var("DRIFTWATCH_TEST_STATE").as_deref() == Ok("postgres")).then(|| fresh_store(&Role::Tool))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tables::outbox::test_notification as n;

    fn leader(holder: &str, lease_transitions: u64) -> Role {
        leader_of(holder, 1_700_000_000, lease_transitions)
    }

    /// The holder of a Lease created at `created` (unix seconds).
    fn leader_of(holder: &str, created: i64, transitions: u64) -> Role {
        Role::Leader { holder: holder.into(), lease: Some(crate::state::LeaseGeneration { created, transitions }) }
    }

    fn raw(server: &Server) -> postgres::Client {
        postgres::Client::connect(&server.url(), postgres::NoTls).unwrap()
    }

    /// A replica deposed by a newer Lease holder (paused past its Lease, partitioned)
    /// writes nothing and takes no batch to send; taking the store back with its older
    /// Lease is refused, and only a newer Lease takes it.
    #[test]
    fn a_deposed_leader_can_neither_record_nor_take_a_batch() {
        let server = server().unwrap();
        let opts = server.options(&fresh_schema());
        let a = Store::open_postgres(&opts, &leader("a", 1)).unwrap();
        a.enqueue(&[n("hook", "k1")], 10).unwrap();
        assert_eq!(a.outbox().due("hook", 10, 10).unwrap().len(), 1);
        let b = Store::open_postgres(&opts, &leader("b", 2)).unwrap();
        assert!(!a.fenced());
        let e = a.enqueue(&[n("hook", "k2")], 10).expect_err("a deposed leader's write is refused");
        assert!(e.to_string().contains("fenced"), "{e}");
        assert!(a.fenced(), "the store says so, so the daemon does not reopen and take it back");
        assert!(matches!(a.outbox().due("hook", 10, 10), Err(StateError::Fenced(_))), "no batch to send either");
        assert_eq!(b.outbox().entries(None).unwrap().len(), 1, "nothing of the deposed leader's last write landed");
        b.enqueue(&[n("hook", "k2")], 10).unwrap();
        assert_eq!(b.outbox().due("hook", 10, 10).unwrap().len(), 2);
        let again = Store::open_postgres(&opts, &leader("a", 1)).err().expect("an older Lease cannot take it back");
        assert!(matches!(again, StateError::Fenced(_)), "{again}");
        assert!(again.to_string().contains("taken over by b"), "{again}");
        // The same holder reopening at the same Lease (a reopen after a failed write).
        let b2 = Store::open_postgres(&opts, &leader("b", 2)).unwrap();
        b2.enqueue(&[n("hook", "k3")], 10).unwrap();
        let c = Store::open_postgres(&opts, &leader("a", 3)).unwrap();
        assert!(b2.enqueue(&[n("hook", "k4")], 10).is_err());
        assert_eq!(c.outbox().queue_depths().unwrap(), vec![("hook".to_string(), 3)]);
    }

    /// A Lease deleted by hand and created again starts its count of holder changes at
    /// 0: its holder takes the store over all the same (the Lease is newer), and the
    /// deleted Lease's holder cannot take it back, however high its count. Before, no
    /// replica could take the store over until someone raised the new Lease's count by
    /// hand.
    #[test]
    fn a_lease_created_again_takes_the_store_over_and_the_deleted_one_cannot_take_it_back() {
        let server = server().unwrap();
        let opts = server.options(&fresh_schema());
        let a = Store::open_postgres(&opts, &leader_of("a", 1_000, 7)).unwrap();
        a.enqueue(&[n("hook", "k1")], 10).unwrap();
        let b = Store::open_postgres(&opts, &leader_of("b", 2_000, 0)).expect("the Lease created again is newer");
        assert!(a.enqueue(&[n("hook", "k2")], 10).is_err(), "the deleted Lease's holder is fenced");
        let again = Store::open_postgres(&opts, &leader_of("a", 1_000, 9)).err().expect("an older Lease, whatever its count");
        assert!(matches!(again, StateError::Fenced(_)), "{again}");
        assert!(again.to_string().contains("created 1970-01-01T00:33:20+00:00"), "says which Lease: {again}");
        b.enqueue(&[n("hook", "k3")], 10).unwrap();
        // Within the new Lease, its count orders holders as before.
        let c = Store::open_postgres(&opts, &leader_of("c", 2_000, 1)).unwrap();
        assert!(Store::open_postgres(&opts, &leader_of("b", 2_000, 0)).is_err(), "b was deposed");
        assert_eq!(c.outbox().queue_depths().unwrap(), vec![("hook".to_string(), 2)]);
        // A store last taken over before creation times were recorded (schema version
        // 1): the count alone judges, as then — a deposed holder with a lower count is
        // refused whatever its Lease's creation time; the next holder takes it, and
        // from then on the creation time is recorded.
        let schema = opts.schema.clone();
        raw(server).batch_execute(&format!("UPDATE {schema}.fence SET lease_created = NULL")).unwrap();
        assert!(Store::open_postgres(&opts, &leader_of("b", 2_000, 0)).is_err(), "a lower count, after an upgrade");
        Store::open_postgres(&opts, &leader_of("d", 2_000, 2)).expect("the next holder, after an upgrade");
        Store::open_postgres(&opts, &leader_of("e", 3_000, 0)).expect("and a Lease created again after that");
    }

    /// Two writers on one schema (two processes, or a worker and a pass) are
    /// serialised by the fence row, as redb serialises its writers: the outbox's
    /// depth counter (a read, then a write) loses no increment, and no idempotency
    /// key is taken twice.
    #[test]
    fn concurrent_writers_lose_nothing() {
        let server = server().unwrap();
        let opts = server.options(&fresh_schema());
        let stores: Vec<Store> = (0..3).map(|_| Store::open_postgres(&opts, &Role::Tool).unwrap()).collect();
        std::thread::scope(|s| {
            for (w, store) in stores.iter().enumerate() {
                s.spawn(move || {
                    for i in 0..40 {
                        store.enqueue(&[n("hook", &format!("w{w}-{i}"))], 10).unwrap();
                    }
                });
            }
        });
        assert_eq!(stores[0].outbox().queue_depths().unwrap(), vec![("hook".to_string(), 120)]);
        let entries = stores[1].outbox().entries(None).unwrap();
        let ids: std::collections::BTreeSet<u64> = entries.iter().map(|e| e.id).collect();
        assert_eq!((entries.len(), ids.len()), (120, 120), "every entry its own id");
    }

    /// A migration that fails leaves the schema as it was (one transaction) and the
    /// error says which version and why; a schema from a newer build is refused.
    #[test]
    fn migrations_are_all_or_nothing_and_never_downgrade() {
        let server = server().unwrap();
        let schema = fresh_schema();
        let mut c = raw(server);
        c.batch_execute(&format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.kv (x int);")).unwrap();
        let e = Store::open_postgres(&server.options(&schema), &Role::Tool).err().unwrap().to_string();
        assert!(e.contains("to version 1 failed, and changed nothing") && e.contains("\"kv\" already exists"), "{e}");
        let left: Option<String> = c.query_one(&format!("SELECT to_regclass('{schema}.schema_version')::text"), &[]).unwrap().get(0);
        assert_eq!(left, None, "rolled back whole");
        c.batch_execute(&format!("DROP TABLE {schema}.kv")).unwrap();
        drop(Store::open_postgres(&server.options(&schema), &Role::Tool).unwrap());
        c.batch_execute(&format!("INSERT INTO {schema}.schema_version (version) VALUES (99)")).unwrap();
        let e = Store::open_postgres(&server.options(&schema), &Role::Tool).err().unwrap().to_string();
        assert!(e.contains("version 99, written by a newer driftwatch"), "{e}");
    }

    /// A server elsewhere is reached over verified TLS only; the URL (which holds the
    /// password) appears in no error.
    #[test]
    fn a_remote_server_without_tls_is_refused_and_the_url_never_shown() {
        let mut opts = server().unwrap().options("unused");
        opts.url = crate::secret::Secret::new("postgres://dw:hunter2@db.example.com/state?sslmode=disable".into());
        let e = Store::open_postgres(&opts, &Role::Tool).err().unwrap().to_string();
        assert!(e.contains("sslmode=disable") && !e.contains("hunter2"), "{e}");
        // `host` on loopback but `hostaddr` elsewhere: where it connects is elsewhere
        // (review L-e; before: taken as local, so in the clear).
        opts.url = crate::secret::Secret::new("host=localhost hostaddr=192.0.2.7 user=dw password=hunter2 sslmode=disable".into());
        let e = Store::open_postgres(&opts, &Role::Tool).err().unwrap().to_string();
        assert!(e.contains("sslmode=disable") && !e.contains("hunter2"), "{e}");
        opts.url = crate::secret::Secret::new("postgres://dw:hunter2@db.example.com:99999/state".into());
        let e = Store::open_postgres(&opts, &Role::Tool).err().unwrap().to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    /// `len` is a counter kept by commits: what a rolled-back transaction added is not
    /// counted, and a pop or a range removal is.
    #[test]
    fn table_lengths_follow_commits_only() {
        use crate::state::kv::TableDefinition;
        const T: TableDefinition<u64, &str> = TableDefinition::new("len_test");
        let store = fresh_store(&Role::Tool).unwrap();
        let db = store.db();
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(T).unwrap();
            for i in 0..10u64 {
                t.insert(i, "x").unwrap();
            }
            t.insert(3u64, "y").unwrap();
            assert_eq!(t.len().unwrap(), 10);
        }
        tx.commit().unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(T).unwrap().insert(77u64, "lost").unwrap();
        drop(tx);
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(T).unwrap();
            assert_eq!(t.len().unwrap(), 10, "the rolled-back insert is not counted");
            assert_eq!(t.pop_first().unwrap().map(|(k, v)| (k.value(), v.value().to_string())), Some((0, "x".into())));
            t.retain_in(5u64..8, |_, _| false).unwrap();
            assert_eq!(t.get(3u64).unwrap().map(|v| v.value().to_string()).as_deref(), Some("y"));
        }
        tx.commit().unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        assert_eq!(t.len().unwrap(), 6);
        let back: Vec<u64> = t.iter().unwrap().rev().map(|e| e.unwrap().0.value()).collect();
        assert_eq!(back, [9, 8, 4, 3, 2, 1]);
        drop(t);
        drop(r);
        // Ranges past one page, both ways, with each kind of bound.
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(T).unwrap();
            for i in 100..1300u64 {
                t.insert(i, "p").unwrap();
            }
        }
        tx.commit().unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        let fwd: Vec<u64> = t.range(150u64..=1100).unwrap().map(|e| e.unwrap().0.value()).collect();
        assert_eq!((fwd.len(), fwd.first(), fwd.last()), (951, Some(&150), Some(&1100)));
        assert!(fwd.windows(2).all(|w| w[0] < w[1]));
        let bwd: Vec<u64> = t.range(150u64..1100).unwrap().rev().map(|e| e.unwrap().0.value()).collect();
        assert_eq!((bwd.len(), bwd.first(), bwd.last()), (950, Some(&1099), Some(&150)));
        assert_eq!(t.range(1250u64..).unwrap().count(), 50);
        assert_eq!(t.len().unwrap(), 1206);
    }

    /// A statement that fails, in a transaction dropped or in a commit, leaves the
    /// connection clean for the next user: with a pool of one, the next transactions
    /// work.
    #[test]
    fn a_failed_statement_never_poisons_the_pool() {
        let server = server().unwrap();
        let opts = server.options(&fresh_schema());
        assert_eq!(opts.max_connections, 1);
        let pg = crate::state::kv::pg::Pg::open(&opts, &Role::Tool).unwrap();
        let tx = pg.begin(true).unwrap();
        assert!(tx.query("SELECT 1/0", &[]).is_err());
        assert!(tx.commit().is_err(), "an aborted transaction does not commit");
        let tx = pg.begin(false).unwrap();
        tx.prefetch(&["notified"], b"a", b"b", &[]).unwrap();
        assert!(tx.query("SELECT 1/0", &[]).is_err());
        drop(tx);
        // A counter that overflows makes the commit's own statement fail.
        let tx = pg.begin(true).unwrap();
        tx.table("t").insert(b"k".to_vec(), b"v".to_vec()).unwrap();
        tx.count("t", i64::MAX);
        tx.commit().unwrap();
        let tx = pg.begin(true).unwrap();
        tx.table("t").insert(b"k2".to_vec(), b"v".to_vec()).unwrap();
        tx.count("t", i64::MAX);
        let e = tx.commit().expect_err("bigint out of range");
        assert!(e.message.contains("out of range") && !e.fenced, "{e}");
        let tx = pg.begin(true).unwrap();
        assert_eq!(tx.table("t").get(b"k2").unwrap(), None, "the failed commit wrote nothing");
        assert_eq!(tx.table("t").get(b"k").unwrap(), Some(b"v".to_vec()));
        tx.commit().unwrap();
    }

    /// A key PostgreSQL's index cannot hold is the write's fault, not the store's: the
    /// store says `Refused` (the daemon fails that Application's pass and does not
    /// reopen the store), and the next write in the same store succeeds.
    #[test]
    fn a_key_too_long_for_the_index_is_refused_and_the_store_still_writes() {
        let store = fresh_store(&Role::Tool).unwrap();
        let e = store.record("argocd/app@u", &"k".repeat(crate::state::kv::pg::MAX_KEY_BYTES + 1), 1).unwrap_err();
        assert!(matches!(e, StateError::Refused(_)), "{e:?}");
        store.record("argocd/app@u", "k", 2).unwrap();
        assert_eq!(store.notified_at("argocd/app@u", "k").unwrap(), Some(2));
    }

    /// A write transaction that read a range with its BEGIN answers reads inside it
    /// from what it read and wrote since, buffers the writes whose outcome it knows, and
    /// sends them before its next statement or with the COMMIT: another transaction
    /// sees each of them, counted; a transaction dropped uncommitted writes nothing.
    #[test]
    fn a_write_transaction_answers_from_what_it_knows_and_sends_its_writes_with_the_commit() {
        use crate::state::kv::pg::{Pg, Span};
        use std::ops::Bound;
        let server = server().unwrap();
        let pg = Pg::open(&server.options(&fresh_schema()), &Role::Tool).unwrap();
        let tx = pg.begin(true).unwrap();
        tx.table("t").insert(b"a0".to_vec(), b"old".to_vec()).unwrap();
        tx.table("t").insert(b"z9".to_vec(), b"far".to_vec()).unwrap();
        tx.commit().unwrap();
        let (v, kv) = (|s: &str| s.as_bytes().to_vec(), |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec()));
        let span = [Span { tables: &["t"], lo: b"a", hi: b"b", follow: &[] }];
        let tx = pg.begin_write(&span).unwrap();
        let t = tx.table("t");
        assert_eq!(t.get(b"a0").unwrap(), Some(v("old")));
        assert_eq!(t.insert(v("a1"), v("new")).unwrap(), None);
        assert_eq!(t.insert(v("a0"), v("newer")).unwrap(), Some(v("old")));
        assert_eq!(t.remove(b"a2").unwrap(), None);
        let inside: Vec<_> = t.range(Bound::Included(v("a")), Bound::Excluded(v("b"))).map(Result::unwrap).collect();
        assert_eq!(inside, [kv("a0", "newer"), kv("a1", "new")]);
        // Outside the range: asked, after the buffered writes.
        assert_eq!(t.remove(b"z9").unwrap(), Some(v("far")));
        assert_eq!(t.len().unwrap(), 2);
        assert_eq!(t.remove(b"a1").unwrap(), Some(v("new")));
        assert_eq!(t.insert(v("a3"), v("x")).unwrap(), None);
        assert_eq!(t.remove_all(&[v("a3"), v("a8"), v("z9")]).unwrap(), 1);
        assert_eq!(t.insert(v("a3"), v("y")).unwrap(), None);
        tx.commit().unwrap();
        let tx = pg.begin(false).unwrap();
        let all: Vec<_> = tx.table("t").range(Bound::Unbounded, Bound::Unbounded).map(Result::unwrap).collect();
        assert_eq!(all, [kv("a0", "newer"), kv("a3", "y")]);
        assert_eq!(tx.table("t").len().unwrap(), 2);
        drop(tx);
        let tx = pg.begin_write(&span).unwrap();
        assert_eq!(tx.table("t").insert(v("a4"), v("z")).unwrap(), None);
        drop(tx);
        let tx = pg.begin(false).unwrap();
        assert_eq!((tx.table("t").get(b"a4").unwrap(), tx.table("t").len().unwrap()), (None, 2), "nothing of a dropped transaction");
    }

    /// What a pass and its delivery cost in round trips (the cost that multiplies on a
    /// busy machine): a pass's view of its Application, the write of its episode and
    /// its notification, the worker's read of what is due (with the fence's check), and
    /// the settle that records the key and notes the episode; the second time round,
    /// with the episode and its keys there.
    #[test]
    fn a_pass_and_its_delivery_take_a_few_round_trips() {
        use crate::state::tables::episodes::tests::{episode, notification};
        use crate::state::{PassWrite, Retention, Settle};
        let store = fresh_store(&Role::Leader { holder: "me".into(), lease: None }).unwrap();
        let pg = store.db().pg().unwrap();
        let ep = episode("trips", 0, "config");
        let keep = Retention { max_episodes: 10, max_age: chrono::Duration::days(1) };
        let mut trips = Vec::new();
        for (i, key) in ["k1", "k2"].into_iter().enumerate() {
            let mut costs = Vec::new();
            let mut before = pg.round_trips();
            let mut took = |costs: &mut Vec<u64>| {
                let now = pg.round_trips();
                costs.push(now - before);
                before = now;
            };
            store.pass().view().unwrap().app_state(&ep.app_key).unwrap();
            took(&mut costs);
            let pass = PassWrite { app_key: &ep.app_key, at_ms: 1, episode: Some((&ep, keep)), ..Default::default() };
            store.pass().write_pass(&pass, &[notification(&ep, "hook", key)], 1 + i as u64).unwrap();
            took(&mut costs);
            let due = store.outbox().due_and_next("hook", 10, 10).unwrap();
            took(&mut costs);
            store.outbox().settle_releasing(&[(due.entries[0].clone(), Settle::Delivered)], 10, "hook", &[]).unwrap();
            took(&mut costs);
            assert!(store.pass().is_notified(&ep.app_key, key).unwrap());
            trips.push(costs);
        }
        // The view: its BEGIN with every read (the latest episode through its pointer),
        // its COMMIT. The write: its BEGIN with the fence's lock and its reads, its
        // writes with the COMMIT. The worker's read: its BEGIN with the fence, the due
        // range, the entries, the next due time, its COMMIT. The settle: its BEGIN
        // with its reads, the entries removed, the due index with the COMMIT. (The first
        // pass also creates the episode's index entries and the outbox's counter.)
        assert_eq!(trips[1], [2, 2, 5, 4], "(view, write, due, settle)");
        assert!(trips[0].iter().sum::<u64>() <= 16, "{trips:?}");
    }

    /// A settle waits for the disk, and so makes every pass committed before it durable:
    /// the flush after it has nothing to do (no round trip); after another pass it
    /// writes again.
    #[test]
    fn a_settle_makes_the_passes_before_it_durable_and_the_flush_skips() {
        use crate::state::tables::episodes::tests::{episode, notification};
        use crate::state::{PassWrite, Settle};
        let store = fresh_store(&Role::Leader { holder: "me".into(), lease: None }).unwrap();
        store.defer_durability(true);
        let pg = store.db().pg().unwrap();
        let ep = episode("durable", 0, "config");
        let pass = PassWrite { app_key: &ep.app_key, at_ms: 1, ..Default::default() };
        store.pass().write_pass(&pass, &[notification(&ep, "hook", "k1")], 1).unwrap();
        let due = store.outbox().due_and_next("hook", 10, 10).unwrap();
        store.outbox().settle_releasing(&[(due.entries[0].clone(), Settle::Delivered)], 10, "hook", &[]).unwrap();
        let before = pg.round_trips();
        store.flush().unwrap();
        assert_eq!(pg.round_trips(), before, "the settle made the pass durable");
        store.pass().write_pass(&pass, &[notification(&ep, "hook", "k2")], 11).unwrap();
        let before = pg.round_trips();
        store.flush().unwrap();
        assert_eq!(pg.round_trips() - before, 2, "a pass after the settle: BEGIN with the fence's lock, the durable COMMIT");
    }
}
