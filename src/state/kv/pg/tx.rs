//! One PostgreSQL transaction on a pooled connection, and the reads ahead of a range.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ops::Bound;

use postgres::types::{ToSql, Type};

use super::table::Table;
use super::{Conn, KvError, literal, pg_err};

/// One PostgreSQL transaction on a pooled connection (rolled back when dropped
/// uncommitted).
pub struct Tx {
    conn: RefCell<Option<Conn>>,
    write: bool,
    /// A read transaction begins with its first statement (a pass's view may need one
    /// round trip in all: [`Tx::prefetch`]).
    begun: Cell<bool>,
    /// What [`Tx::prefetch`] read: every entry of some tables in a key range.
    pub(super) cache: RefCell<Option<Prefetched>>,
    durable: Cell<bool>,
    /// A statement failed: PostgreSQL aborted the transaction, so it cannot commit.
    failed: Cell<bool>,
    /// Entries added (or removed) per table, written to `kv_len` at commit.
    pub(super) counts: RefCell<BTreeMap<&'static str, i64>>,
}

/// A stored entry: key and value bytes.
pub type Entry = (Vec<u8>, Vec<u8>);

type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// How a read transaction begins: one snapshot for all its statements.
const READ_BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// Every entry of `tables` with a key in `lo..hi`, read at once.
pub(super) struct Prefetched {
    tables: Vec<&'static str>,
    lo: Vec<u8>,
    hi: Vec<u8>,
    pub(super) rows: BTreeMap<(&'static str, Vec<u8>), Vec<u8>>,
}

impl Prefetched {
    pub(super) fn holds_key(&self, table: &str, k: &[u8]) -> bool {
        self.tables.contains(&table) && self.lo.as_slice() <= k && k < self.hi.as_slice()
    }

    /// Whether `lo..hi` of `table` lies inside what was read.
    pub(super) fn holds_range(&self, table: &str, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
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
    pub(super) fn new(c: Conn, write: bool) -> Tx {
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

    pub(in crate::state) fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<postgres::Row>, KvError> {
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
    pub(super) fn simple(&self, sql: &str) -> Result<Vec<postgres::SimpleQueryMessage>, KvError> {
        let mut slot = self.conn.borrow_mut();
        let Some(c) = slot.as_mut() else { return Err(KvError::new("the transaction has ended")) };
        c.simple_query(sql).map_err(|e| {
            self.failed.set(true);
            pg_err(e)
        })
    }

    pub(in crate::state) fn count(&self, table: &'static str, delta: i64) {
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
