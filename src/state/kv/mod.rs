//! The store's tables over two engines: embedded redb (one replica, the replay) and
//! PostgreSQL (replicas without a shared volume, `pg.rs`).
//!
//! The table modules (`outbox.rs`, `history.rs`, ...) are written against this face:
//! typed tables of `&str`/`u64` keys and `&str`/`u64`/`()` values, opened in a read or
//! a write transaction, with the operations redb gives (get, insert, remove, ordered
//! ranges both ways, first, pop, retain, len). Neither engine's type appears above
//! this module. The semantics are redb's, and PostgreSQL is held to them:
//!
//! - one writer at a time (redb's write lock; on PostgreSQL the fence row's lock, taken
//!   first in every write transaction), so a transaction's reads are not changed under
//!   it by another writer;
//! - a read transaction is one snapshot (PostgreSQL: `REPEATABLE READ READ ONLY`);
//! - keys are ordered as bytes: a `&str` by its UTF-8, a `u64` by its value (big-endian
//!   on PostgreSQL);
//! - `len` is a counter, not a scan.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use self::redb::{own_pair, redb_err};

mod error;
pub(super) mod pg;
pub(super) mod redb;

pub use error::KvError;

/// A key or value type of a table: what it is as owned data, and its bytes in
/// PostgreSQL (ordered as the key's order).
pub trait Field: ::redb::Value {
    type Owned: std::fmt::Debug;
    fn own(v: Self::SelfType<'_>) -> Self::Owned;
    fn view(o: &Self::Owned) -> Self::SelfType<'_>;
    fn encode(v: &Self::SelfType<'_>) -> Vec<u8>;
    fn decode(b: &[u8]) -> Result<Self::Owned, KvError>;
}

impl Field for &str {
    type Owned = String;
    fn own(v: &str) -> String {
        v.to_owned()
    }
    fn view(o: &String) -> &str {
        o.as_str()
    }
    fn encode(v: &&str) -> Vec<u8> {
        v.as_bytes().to_vec()
    }
    fn decode(b: &[u8]) -> Result<String, KvError> {
        String::from_utf8(b.to_vec()).map_err(|e| KvError::new(format!("a stored text is not UTF-8: {e}")))
    }
}

impl Field for u64 {
    type Owned = u64;
    fn own(v: u64) -> u64 {
        v
    }
    fn view(o: &u64) -> u64 {
        *o
    }
    fn encode(v: &u64) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }
    fn decode(b: &[u8]) -> Result<u64, KvError> {
        <[u8; 8]>::try_from(b).map(u64::from_be_bytes).map_err(|_| KvError::new(format!("a stored number has {} bytes, not 8", b.len())))
    }
}

impl Field for () {
    type Owned = ();
    fn own(_: ()) {}
    fn view(_: &()) {}
    fn encode(_: &()) -> Vec<u8> {
        Vec::new()
    }
    fn decode(_: &[u8]) -> Result<(), KvError> {
        Ok(())
    }
}

/// A key type.
pub trait KeyField: Field + ::redb::Key {}
impl<T: Field + ::redb::Key> KeyField for T {}

/// A table: its name, and its key and value types.
pub struct TableDefinition<K: KeyField + 'static, V: Field + 'static> {
    name: &'static str,
    redb: ::redb::TableDefinition<'static, K, V>,
}

impl<K: KeyField + 'static, V: Field + 'static> Clone for TableDefinition<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: KeyField + 'static, V: Field + 'static> Copy for TableDefinition<K, V> {}

impl<K: KeyField + 'static, V: Field + 'static> TableDefinition<K, V> {
    pub const fn new(name: &'static str) -> Self {
        TableDefinition { name, redb: ::redb::TableDefinition::new(name) }
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }
}

/// A value read: owned, read through [`Got::value`] as redb's guard is.
#[derive(Debug)]
pub struct Got<V: Field + 'static>(V::Owned);

impl<V: Field + 'static> Got<V> {
    pub fn value(&self) -> V::SelfType<'_> {
        V::view(&self.0)
    }
}

/// What a transaction reads at once: every entry of `tables` with a key in `lo..hi`,
/// and for each `(target, via)` of `follow` the entry of `target` whose key is the
/// value of `via`'s entry `lo`. Later reads there cost no round trip (PostgreSQL);
/// missing one costs a round trip, never a wrong answer.
pub struct Reads<'a> {
    pub tables: &'a [&'static str],
    pub lo: &'a str,
    pub hi: &'a str,
    pub follow: &'a [(&'static str, &'static str)],
}

/// The database: one engine.
pub enum Database {
    Redb(::redb::Database),
    Pg(pg::Pg),
}

impl Database {
    pub fn begin_write(&self) -> Result<WriteTransaction, KvError> {
        match self {
            Database::Redb(db) => db.begin_write().map(WriteTransaction::Redb).map_err(redb_err),
            Database::Pg(pg) => pg.begin(true).map(WriteTransaction::Pg),
        }
    }

    /// [`Database::begin_write`] that also reads `spans` ([`Reads`]) with the fence's lock (PostgreSQL: one
    /// round trip; reads and writes inside them later cost none). redb reads in place
    /// and needs nothing.
    pub fn begin_write_reading(&self, spans: &[Reads<'_>]) -> Result<WriteTransaction, KvError> {
        match self {
            Database::Redb(_) => self.begin_write(),
            Database::Pg(pg) => {
                let spans: Vec<pg::Span<'_>> = spans
                    .iter()
                    .map(|r| pg::Span { tables: r.tables, lo: r.lo.as_bytes(), hi: r.hi.as_bytes(), follow: r.follow })
                    .collect();
                pg.begin_write(&spans).map(WriteTransaction::Pg)
            }
        }
    }

    /// [`Database::begin_read`] that refuses a deposed leader (PostgreSQL's fence, read
    /// in the transaction's first round trip); nothing more on redb.
    pub fn begin_read_fenced(&self) -> Result<ReadTransaction, KvError> {
        match self {
            Database::Pg(pg) => pg.begin_read_fenced().map(|t| ReadTransaction::Pg(Box::new(t))),
            Database::Redb(_) => self.begin_read(),
        }
    }

    pub fn begin_read(&self) -> Result<ReadTransaction, KvError> {
        match self {
            Database::Redb(db) => ::redb::ReadableDatabase::begin_read(db).map(ReadTransaction::Redb).map_err(redb_err),
            Database::Pg(pg) => pg.begin(false).map(|t| ReadTransaction::Pg(Box::new(t))),
        }
    }

    pub fn pg(&self) -> Option<&pg::Pg> {
        match self {
            Database::Pg(pg) => Some(pg),
            Database::Redb(_) => None,
        }
    }
}

pub enum WriteTransaction {
    Redb(::redb::WriteTransaction),
    Pg(pg::Tx),
}

impl WriteTransaction {
    pub fn open_table<K: KeyField + 'static, V: Field + 'static>(&self, def: TableDefinition<K, V>) -> Result<Table<'_, K, V>, KvError> {
        match self {
            WriteTransaction::Redb(tx) => tx.open_table(def.redb).map(Table::Write).map_err(redb_err),
            WriteTransaction::Pg(tx) => Ok(Table::Pg(tx.table(def.name), PhantomData)),
        }
    }

    /// Commits without waiting for the disk: made durable by the next durable commit
    /// (redb's `Durability::None`; PostgreSQL's `synchronous_commit = off`).
    pub fn defer_durability(&mut self) -> Result<(), KvError> {
        match self {
            WriteTransaction::Redb(tx) => tx.set_durability(::redb::Durability::None).map_err(redb_err),
            WriteTransaction::Pg(tx) => {
                tx.defer_durability();
                Ok(())
            }
        }
    }

    #[cfg(test)]
    /// Drops a whole table (the tests' way to stand for a store written before it).
    pub fn delete_table<K: KeyField + 'static, V: Field + 'static>(&self, def: TableDefinition<K, V>) -> Result<bool, KvError> {
        match self {
            WriteTransaction::Redb(tx) => tx.delete_table(def.redb).map_err(redb_err),
            WriteTransaction::Pg(tx) => tx.table(def.name).clear().map(|n| n > 0),
        }
    }

    pub fn commit(self) -> Result<(), KvError> {
        match self {
            WriteTransaction::Redb(tx) => tx.commit().map_err(redb_err),
            WriteTransaction::Pg(tx) => tx.commit(),
        }
    }
}

pub enum ReadTransaction {
    Redb(::redb::ReadTransaction),
    Pg(Box<pg::Tx>),
}

impl ReadTransaction {
    /// Reads every entry of `tables` whose key lies in `lo..hi` at once, so the reads
    /// that follow inside that range cost no round trip (PostgreSQL; redb reads its
    /// pages in place and needs nothing).
    pub fn prefetch(&self, reads: &Reads<'_>) -> Result<(), KvError> {
        match self {
            ReadTransaction::Redb(_) => Ok(()),
            ReadTransaction::Pg(tx) => tx.prefetch(reads.tables, reads.lo.as_bytes(), reads.hi.as_bytes(), reads.follow),
        }
    }

    pub fn open_table<K: KeyField + 'static, V: Field + 'static>(&self, def: TableDefinition<K, V>) -> Result<Table<'_, K, V>, KvError> {
        match self {
            ReadTransaction::Redb(tx) => tx.open_table(def.redb).map(Table::Read).map_err(redb_err),
            ReadTransaction::Pg(tx) => Ok(Table::Pg(tx.table(def.name), PhantomData)),
        }
    }
}

/// One table opened in a transaction.
pub enum Table<'t, K: KeyField + 'static, V: Field + 'static> {
    Write(::redb::Table<'t, K, V>),
    Read(::redb::ReadOnlyTable<K, V>),
    Pg(pg::Table<'t>, PhantomData<(K, V)>),
}

pub(super) type Pair<K, V> = (Got<K>, Got<V>);

fn decode_pair<K: KeyField + 'static, V: Field + 'static>(p: Option<pg::Entry>) -> Result<Option<Pair<K, V>>, KvError> {
    p.map(|(k, v)| Ok((Got(K::decode(&k)?), Got(V::decode(&v)?)))).transpose()
}

/// A range's bounds as bytes (PostgreSQL).
fn byte_bounds<'a, K: KeyField + 'static, KR: Borrow<K::SelfType<'a>> + 'a>(r: &impl RangeBounds<KR>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let enc = |b: Bound<&KR>| match b {
        Bound::Included(k) => Bound::Included(K::encode(k.borrow())),
        Bound::Excluded(k) => Bound::Excluded(K::encode(k.borrow())),
        Bound::Unbounded => Bound::Unbounded,
    };
    (enc(r.start_bound()), enc(r.end_bound()))
}

impl<'t, K: KeyField + 'static, V: Field + 'static> Table<'t, K, V> {
    pub fn get<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<Got<V>>, KvError> {
        use ::redb::ReadableTable;
        let got = match self {
            Table::Write(t) => t.get(key).map_err(redb_err)?.map(|v| Got(V::own(v.value()))),
            Table::Read(t) => t.get(key).map_err(redb_err)?.map(|v| Got(V::own(v.value()))),
            Table::Pg(t, _) => return t.get(&K::encode(key.borrow()))?.map(|v| V::decode(&v).map(Got)).transpose(),
        };
        Ok(got)
    }

    /// The values of `keys`, in their order: on PostgreSQL in one round trip rather
    /// than one per key (a worker's batch reads its entries so).
    pub fn get_many<'k, Q: Borrow<K::SelfType<'k>>>(&self, keys: &[Q]) -> Result<Vec<Option<Got<V>>>, KvError> {
        match self {
            Table::Pg(t, _) => {
                let encoded: Vec<Vec<u8>> = keys.iter().map(|k| K::encode(k.borrow())).collect();
                t.get_many(&encoded)?.into_iter().map(|v| v.map(|v| V::decode(&v).map(Got)).transpose()).collect()
            }
            _ => keys.iter().map(|k| self.get(k.borrow())).collect(),
        }
    }

    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<Range<'_, K, V>, KvError>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        use ::redb::ReadableTable;
        match self {
            Table::Write(t) => t.range(range).map(|r| Range::Redb(r, false)).map_err(redb_err),
            Table::Read(t) => t.range(range).map(|r| Range::Redb(r, false)).map_err(redb_err),
            Table::Pg(t, _) => {
                let (lo, hi) = byte_bounds::<K, KR>(&range);
                Ok(Range::Pg(t.range(lo, hi), PhantomData))
            }
        }
    }

    pub fn iter(&self) -> Result<Range<'_, K, V>, KvError> {
        self.range::<K::SelfType<'_>>(..)
    }

    pub fn first(&self) -> Result<Option<Pair<K, V>>, KvError> {
        use ::redb::ReadableTable;
        match self {
            Table::Write(t) => Ok(own_pair(t.first().map_err(redb_err)?)),
            Table::Read(t) => Ok(own_pair(t.first().map_err(redb_err)?)),
            Table::Pg(t, _) => decode_pair(t.first()?),
        }
    }

    /// How many entries: a counter on both engines.
    pub fn len(&self) -> Result<u64, KvError> {
        use ::redb::ReadableTableMetadata;
        match self {
            Table::Write(t) => t.len().map_err(redb_err),
            Table::Read(t) => t.len().map_err(redb_err),
            Table::Pg(t, _) => t.len(),
        }
    }

    pub fn is_empty(&self) -> Result<bool, KvError> {
        use ::redb::ReadableTableMetadata;
        match self {
            Table::Write(t) => t.is_empty().map_err(redb_err),
            Table::Read(t) => t.is_empty().map_err(redb_err),
            Table::Pg(t, _) => t.is_empty(),
        }
    }

    fn read_only() -> KvError {
        KvError::new("a write to a table opened in a read transaction")
    }

    /// Sets `key` to `value`; returns what it was.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<Option<Got<V>>, KvError> {
        match self {
            Table::Write(t) => Ok(t.insert(key, value).map_err(redb_err)?.map(|v| Got(V::own(v.value())))),
            Table::Read(_) => Err(Self::read_only()),
            Table::Pg(t, _) => t.insert(K::encode(key.borrow()), V::encode(value.borrow()))?.map(|v| V::decode(&v).map(Got)).transpose(),
        }
    }

    /// Sets `key` to `value` when what it was does not matter (a key made new from an
    /// id just taken): on PostgreSQL sent with the next statement or the COMMIT rather
    /// than in a round trip of its own.
    pub fn put<'k, 'v>(&mut self, key: impl Borrow<K::SelfType<'k>>, value: impl Borrow<V::SelfType<'v>>) -> Result<(), KvError> {
        match self {
            Table::Pg(t, _) => t.put(K::encode(key.borrow()), V::encode(value.borrow())),
            _ => self.insert(key, value).map(drop),
        }
    }

    /// Removes `keys` when how many there were does not matter: on PostgreSQL sent
    /// with the next statement or the COMMIT.
    pub fn delete_many<'k, Q: Borrow<K::SelfType<'k>>>(&mut self, keys: &[Q]) -> Result<(), KvError> {
        match self {
            Table::Pg(t, _) => t.delete_all(&keys.iter().map(|k| K::encode(k.borrow())).collect::<Vec<_>>()),
            _ => self.remove_many(keys).map(drop),
        }
    }

    /// Removes `key`; returns what it was.
    pub fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<Option<Got<V>>, KvError> {
        match self {
            Table::Write(t) => Ok(t.remove(key).map_err(redb_err)?.map(|v| Got(V::own(v.value())))),
            Table::Read(_) => Err(Self::read_only()),
            Table::Pg(t, _) => t.remove(&K::encode(key.borrow()))?.map(|v| V::decode(&v).map(Got)).transpose(),
        }
    }

    /// Removes `keys`; returns how many there were. On PostgreSQL one statement (per
    /// thousand keys) rather than one per key.
    pub fn remove_many<'k, Q: Borrow<K::SelfType<'k>>>(&mut self, keys: &[Q]) -> Result<u64, KvError> {
        match self {
            Table::Pg(t, _) => t.remove_all(&keys.iter().map(|k| K::encode(k.borrow())).collect::<Vec<_>>()),
            _ => {
                let mut removed = 0u64;
                for k in keys {
                    if self.remove(k.borrow())?.is_some() {
                        removed += 1;
                    }
                }
                Ok(removed)
            }
        }
    }

    /// Removes and returns the first entry.
    pub fn pop_first(&mut self) -> Result<Option<Pair<K, V>>, KvError> {
        match self {
            Table::Write(t) => Ok(own_pair(t.pop_first().map_err(redb_err)?)),
            Table::Read(_) => Err(Self::read_only()),
            Table::Pg(t, _) => decode_pair(t.pop_first()?),
        }
    }

    /// Keeps the entries `keep` says yes to.
    pub fn retain<F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool>(&mut self, keep: F) -> Result<(), KvError> {
        self.retain_in::<K::SelfType<'_>, F>(.., keep)
    }

    /// Keeps the entries of `range` that `keep` says yes to.
    pub fn retain_in<'a, KR, F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool>(
        &mut self,
        range: impl RangeBounds<KR> + 'a,
        mut keep: F,
    ) -> Result<(), KvError>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        match self {
            Table::Write(t) => t.retain_in(range, keep).map_err(redb_err),
            Table::Read(_) => Err(Self::read_only()),
            Table::Pg(t, _) => {
                let (lo, hi) = byte_bounds::<K, KR>(&range);
                let mut doomed = Vec::new();
                for item in t.range(lo, hi) {
                    let (k, v) = item?;
                    let (key, value) = (K::decode(&k)?, V::decode(&v)?);
                    if !keep(K::view(&key), V::view(&value)) {
                        doomed.push(k);
                    }
                }
                t.remove_all(&doomed).map(drop)
            }
        }
    }
}

/// An ordered range of a table; [`Range::rev`] walks it from the end.
pub enum Range<'t, K: KeyField + 'static, V: Field + 'static> {
    Redb(::redb::Range<'t, K, V>, bool),
    Pg(pg::Range<'t>, PhantomData<(K, V)>),
}

impl<K: KeyField + 'static, V: Field + 'static> Range<'_, K, V> {
    /// The same range, last entry first.
    pub fn rev(self) -> Self {
        match self {
            Range::Redb(r, back) => Range::Redb(r, !back),
            Range::Pg(r, p) => Range::Pg(r.rev(), p),
        }
    }
}

impl<K: KeyField + 'static, V: Field + 'static> Iterator for Range<'_, K, V> {
    type Item = Result<Pair<K, V>, KvError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Range::Redb(r, back) => {
                let item = if *back { r.next_back()? } else { r.next()? };
                Some(item.map(|(k, v)| (Got(K::own(k.value())), Got(V::own(v.value())))).map_err(redb_err))
            }
            Range::Pg(r, _) => {
                let item = r.next()?;
                Some(item.and_then(|(k, v)| Ok((Got(K::decode(&k)?), Got(V::decode(&v)?)))))
            }
        }
    }
}
