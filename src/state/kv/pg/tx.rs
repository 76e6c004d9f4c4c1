//! One PostgreSQL transaction on a pooled connection, what it already knows, and the
//! writes it has not sent yet.
//!
//! A write transaction holds the fence row's lock (no other writer commits under it),
//! so what it read or wrote stays true until it ends: a value it knows is answered
//! without asking, and a write whose outcome it knows (the old value, for the return
//! and the `len` counter) is buffered and sent with the next statement or the COMMIT.
//! A pass's write that prefetched its Application's keys ([`Tx::prefetch`] at
//! [`super::Pg::begin_write`]) is two round trips: the BEGIN with the fence's lock
//! and its reads, then its writes with the COMMIT.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};

use postgres::types::{ToSql, Type};

use super::table::Table;
use super::{Conn, KvError, literal, pg_err};

/// One PostgreSQL transaction on a pooled connection (rolled back when dropped
/// uncommitted).
pub struct Tx {
    conn: RefCell<Option<Conn>>,
    pub(super) write: bool,
    /// A read transaction begins with its first statement (a pass's view may need one
    /// round trip in all: [`Tx::prefetch`]).
    begun: Cell<bool>,
    /// What the transaction knows without asking (see [`Known`]).
    pub(super) known: RefCell<Known>,
    /// Write statements not sent yet (each ending in `; `): sent before the next
    /// statement, or with the COMMIT.
    buffered: RefCell<String>,
    durable: Cell<bool>,
    /// A statement failed: PostgreSQL aborted the transaction, so it cannot commit.
    failed: Cell<bool>,
    /// Entries added (or removed) per table, written to `kv_len` at commit.
    pub(super) counts: RefCell<BTreeMap<&'static str, i64>>,
    /// The store's count of round trips.
    round_trips: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A stored entry: key and value bytes.
pub type Entry = (Vec<u8>, Vec<u8>);

type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// How a read transaction begins: one snapshot for all its statements.
const READ_BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// A range of keys of some tables, read whole: `lo..hi`; and for each `(target, via)`
/// of `follow`, the entry of `target` whose key is the value of `via`'s entry `lo` (an
/// Application's latest episode, through its pointer).
pub struct Span<'a> {
    pub tables: &'a [&'static str],
    pub lo: &'a [u8],
    pub hi: &'a [u8],
    pub follow: &'a [(&'static str, &'static str)],
}

/// What a transaction knows without asking: ranges it read whole (a key in one and not
/// among the values is absent), and values it read or wrote (`None`: absent). A read
/// transaction knows only its prefetch; a write transaction also what it read and
/// wrote since (it holds the fence's lock: nobody else writes meanwhile). Bounded by
/// what the transaction itself read and wrote.
#[derive(Default)]
pub(super) struct Known {
    spans: Vec<(Vec<&'static str>, Vec<u8>, Vec<u8>)>,
    values: BTreeMap<(&'static str, Vec<u8>), Option<Vec<u8>>>,
}

impl Known {
    /// `Some(value)` when the transaction knows `k`'s value (`Some(None)`: absent).
    pub(super) fn value(&self, table: &'static str, k: &[u8]) -> Option<Option<Vec<u8>>> {
        if let Some(v) = self.values.get(&(table, k.to_vec())) {
            return Some(v.clone());
        }
        self.spans.iter().any(|(t, lo, hi)| t.contains(&table) && lo.as_slice() <= k && k < hi.as_slice()).then_some(None)
    }

    /// Whether `lo..hi` of `table` lies inside a range read whole.
    pub(super) fn holds_range(&self, table: &str, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
        self.spans.iter().any(|(tables, slo, shi)| {
            let starts_inside = match lo {
                Bound::Included(k) | Bound::Excluded(k) => k.as_slice() >= slo.as_slice(),
                Bound::Unbounded => false,
            };
            let ends_inside = match hi {
                Bound::Excluded(k) => k.as_slice() <= shi.as_slice(),
                Bound::Included(k) => k.as_slice() < shi.as_slice(),
                Bound::Unbounded => false,
            };
            tables.contains(&table) && starts_inside && ends_inside
        })
    }

    /// The entries of `table` in `lo..hi` (inside a range read whole), in key order.
    pub(super) fn range(&self, table: &'static str, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> VecDeque<Entry> {
        self.values
            .range((Bound::Included((table, Vec::new())), Bound::Unbounded))
            .take_while(|((t, _), _)| *t == table)
            .filter(|((_, k), _)| RangeBounds::<Vec<u8>>::contains(&(lo.as_ref(), hi.as_ref()), k))
            .filter_map(|((_, k), v)| Some((k.clone(), v.clone()?)))
            .collect()
    }

    pub(super) fn set(&mut self, table: &'static str, k: Vec<u8>, v: Option<Vec<u8>>) {
        self.values.insert((table, k), v);
    }

    /// Forgets everything known of `table` (a statement changed it in ways not followed).
    #[cfg(test)]
    pub(super) fn forget(&mut self, table: &'static str) {
        self.values.retain(|(t, _), _| *t != table);
        self.spans.retain(|(tables, ..)| !tables.contains(&table));
    }
}

/// `bytes` as SQL: `decode('<hex>', 'hex')` (no quoting of user bytes at all).
pub(super) fn bytea_literal(bytes: &[u8]) -> String {
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

/// The SQL that reads every entry of `spans`.
fn spans_sql(spans: &[&Span<'_>]) -> String {
    let parts: Vec<String> = spans
        .iter()
        .map(|sp| {
            let names: Vec<String> = sp.tables.iter().map(|t| literal(t)).collect();
            let mut part = format!("(t IN ({}) AND k >= {} AND k < {})", names.join(", "), bytea_literal(sp.lo), bytea_literal(sp.hi));
            for (target, via) in sp.follow {
                part.push_str(&format!(
                    " OR (t = {} AND k = (SELECT v FROM kv WHERE t = {} AND k = {}))",
                    literal(target),
                    literal(via),
                    bytea_literal(sp.lo)
                ));
            }
            part
        })
        .collect();
    format!("SELECT t, v, k FROM kv WHERE {}", parts.join(" OR "))
}

/// The text of a row's column `i` as bytes (a bytea in hex), if not null.
fn hex_column(r: &postgres::SimpleQueryRow, i: usize) -> Result<Option<Vec<u8>>, KvError> {
    r.get(i).map(from_hex).transpose()
}

impl Tx {
    pub(super) fn new(c: Conn, write: bool, round_trips: std::sync::Arc<std::sync::atomic::AtomicU64>) -> Tx {
        Tx {
            conn: RefCell::new(Some(c)),
            write,
            begun: Cell::new(write),
            known: RefCell::new(Known::default()),
            buffered: RefCell::new(String::new()),
            durable: Cell::new(true),
            failed: Cell::new(false),
            counts: RefCell::new(BTreeMap::new()),
            round_trips,
        }
    }

    fn trip(&self) {
        self.round_trips.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn table(&self, name: &'static str) -> Table<'_> {
        Table { tx: self, name }
    }

    /// Reads every entry of `spans` in one round trip (with the BEGIN when it is the
    /// transaction's first statement, `begin`): a pass's view of its Application, whose
    /// keys all start with the Application's key. Later reads inside those ranges are
    /// answered from what was read (and, in a write transaction, what was written
    /// since). Returns the rows of `begin`'s statements (those before the read).
    pub(super) fn prefetch_with(&self, begin: &str, spans: &[Span<'_>]) -> Result<Vec<postgres::SimpleQueryRow>, KvError> {
        let spans: Vec<&Span<'_>> = spans.iter().filter(|s| !s.tables.is_empty()).collect();
        let mut sql = String::from(begin);
        if !self.begun.get() && !self.write {
            sql.push_str(READ_BEGIN);
            sql.push_str("; ");
        }
        if !spans.is_empty() {
            sql.push_str(&spans_sql(&spans));
        }
        // Begun even if the SELECT fails: the drop must end the transaction.
        self.begun.set(true);
        if sql.is_empty() {
            return Ok(Vec::new());
        }
        let messages = self.send(&sql)?;
        // Statements end with a CommandComplete each: the read is the last one.
        let statements = messages.iter().filter(|m| matches!(m, postgres::SimpleQueryMessage::CommandComplete(_))).count();
        let (mut done, mut before, mut rows) = (0, Vec::new(), Vec::new());
        for m in messages {
            match m {
                postgres::SimpleQueryMessage::CommandComplete(_) => done += 1,
                postgres::SimpleQueryMessage::Row(r) if spans.is_empty() || done + 1 < statements => before.push(r),
                postgres::SimpleQueryMessage::Row(r) => rows.push(r),
                _ => {}
            }
        }
        let mut known = self.known.borrow_mut();
        for r in &rows {
            let (Some(t), Some(v), Some(k)) = (r.get(0), hex_column(r, 1)?, hex_column(r, 2)?) else { continue };
            let followed = spans.iter().flat_map(|s| s.follow.iter().map(|(target, _)| target));
            let Some(table) = spans.iter().flat_map(|s| s.tables.iter()).chain(followed).find(|n| **n == t) else { continue };
            known.set(table, k, Some(v));
        }
        for sp in &spans {
            known.spans.push((sp.tables.to_vec(), sp.lo.to_vec(), sp.hi.to_vec()));
        }
        Ok(before)
    }

    /// [`Tx::prefetch_with`] of one range.
    pub fn prefetch(&self, tables: &[&'static str], lo: &[u8], hi: &[u8], follow: &[(&'static str, &'static str)]) -> Result<(), KvError> {
        self.prefetch_with("", &[Span { tables, lo, hi, follow }]).map(drop)
    }

    /// Begins a read transaction with the fence's epoch read, in one round trip.
    pub(super) fn begin_reading_epoch(&self) -> Result<Option<i64>, KvError> {
        // Begun even if it fails: the drop must end the transaction.
        self.begun.set(true);
        let rows = self.send_rows(&format!("{READ_BEGIN}; SELECT epoch FROM fence WHERE name = 'state'"))?;
        Ok(rows.first().and_then(|r| r.get(0)).and_then(|s| s.parse().ok()))
    }

    /// Commits with `synchronous_commit = off`.
    pub fn defer_durability(&self) {
        self.durable.set(false);
    }

    /// Sends the buffered writes (one round trip; none when there are none).
    fn flush(&self) -> Result<(), KvError> {
        let sql = std::mem::take(&mut *self.buffered.borrow_mut());
        if !sql.is_empty() {
            self.simple(&sql)?;
        }
        Ok(())
    }

    /// Buffers a write whose outcome is known (see the module's comment).
    pub(super) fn buffer(&self, sql: &str) {
        let mut b = self.buffered.borrow_mut();
        b.push_str(sql);
        b.push_str("; ");
    }

    /// `sql` after the buffered writes, in one round trip (the simple protocol).
    pub(super) fn send(&self, sql: &str) -> Result<Vec<postgres::SimpleQueryMessage>, KvError> {
        let mut batch = std::mem::take(&mut *self.buffered.borrow_mut());
        batch.push_str(sql);
        self.simple(&batch)
    }

    /// The rows `sql` returns, after the buffered writes (which return none), in one
    /// round trip.
    pub(super) fn send_rows(&self, sql: &str) -> Result<Vec<postgres::SimpleQueryRow>, KvError> {
        Ok(self
            .send(sql)?
            .into_iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => Some(r),
                _ => None,
            })
            .collect())
    }

    /// The first column (a bytea) of the first row `sql` returns, if any.
    pub(super) fn send_value(&self, sql: &str) -> Result<Option<Vec<u8>>, KvError> {
        match self.send_rows(sql)?.first() {
            Some(r) => hex_column(r, 0),
            None => Ok(None),
        }
    }

    pub(in crate::state) fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<postgres::Row>, KvError> {
        self.flush()?;
        let mut slot = self.conn.borrow_mut();
        let Some(c) = slot.as_mut() else { return Err(KvError::new("the transaction has ended")) };
        if !self.begun.get() {
            self.trip();
            c.batch_execute(READ_BEGIN).map_err(pg_err)?;
            self.begun.set(true);
        }
        self.trip();
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
        self.trip();
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

    /// Sends the buffered writes, writes the counters and commits, in one round trip.
    pub fn commit(self) -> Result<(), KvError> {
        if self.failed.get() {
            return Err(KvError::new("a statement of the transaction failed; it was rolled back"));
        }
        let mut sql = std::mem::take(&mut *self.buffered.borrow_mut());
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
        self.trip();
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
            self.trip();
            if let Err(e) = c.batch_execute(end) {
                tracing::debug!(error = %e, "ending a PostgreSQL transaction failed");
            }
        }
    }
}
