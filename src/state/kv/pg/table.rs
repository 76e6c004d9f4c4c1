//! A table: a range of the one `kv` relation, and its ordered ranges.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

use postgres::types::{ToSql, Type};

use super::tx::{Entry, Tx};
use super::{FIRST_PAGE, KvError, MAX_KEY_BYTES, PAGE, pg_err};

/// One table of a transaction.
pub struct Table<'t> {
    pub(super) tx: &'t Tx,
    pub(super) name: &'static str,
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
