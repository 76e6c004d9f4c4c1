//! A table: a range of the one `kv` relation, and its ordered ranges.

use std::collections::VecDeque;
use std::ops::Bound;

use postgres::types::{ToSql, Type};

use super::tx::{Entry, Tx, bytea_literal};
use super::{FIRST_PAGE, KvError, MAX_KEY_BYTES, PAGE, literal, pg_err};

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
    /// `t = '<table>' AND k = <key>` as SQL literals.
    fn row(&self, k: &[u8]) -> String {
        format!("t = {} AND k = {}", literal(self.name), bytea_literal(k))
    }

    pub fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        if let Some(v) = self.tx.known.borrow().value(self.name, k) {
            return Ok(v);
        }
        if self.tx.write {
            // After the writes buffered, in one round trip; known from then on.
            let v = self.tx.send_value(&format!("SELECT v FROM kv WHERE {}", self.row(k)))?;
            self.tx.known.borrow_mut().set(self.name, k.to_vec(), v.clone());
            return Ok(v);
        }
        let rows = self.tx.query("SELECT v FROM kv WHERE t = $1 AND k = $2", &[(&self.name, Type::TEXT), (&k, Type::BYTEA)])?;
        rows.first().map(|r| bytes(r, 0)).transpose()
    }

    /// The values of `keys`, in their order, in one round trip.
    pub fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let known: Option<Vec<Option<Vec<u8>>>> = {
            let known = self.tx.known.borrow();
            keys.iter().map(|k| known.value(self.name, k)).collect()
        };
        if let Some(values) = known {
            return Ok(values);
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
        let upsert = format!(
            "INSERT INTO kv (t, k, v) VALUES ({}, {}, {}) ON CONFLICT (t, k) DO UPDATE SET v = excluded.v",
            literal(self.name),
            bytea_literal(&k),
            bytea_literal(&v)
        );
        let known = self.tx.known.borrow().value(self.name, &k);
        let old = match known {
            // Its old value known: sent later, with the next statement or the COMMIT.
            Some(old) => {
                self.tx.buffer(&upsert);
                old
            }
            None => {
                self.tx.send_value(&format!("WITH old AS (SELECT v FROM kv WHERE {}), up AS ({upsert}) SELECT v FROM old", self.row(&k)))?
            }
        };
        if old.is_none() {
            self.tx.count(self.name, 1);
        }
        self.tx.known.borrow_mut().set(self.name, k, Some(v));
        Ok(old)
    }

    /// Sets `k` to `v` without asking what it was (a write transaction's key made
    /// new, from an id it took): sent with the next statement or the COMMIT, and
    /// counted in `kv_len` by the statement itself.
    pub fn put(&self, k: Vec<u8>, v: Vec<u8>) -> Result<(), KvError> {
        if !self.tx.write || self.tx.known.borrow().value(self.name, &k).is_some() || k.len() > MAX_KEY_BYTES {
            return self.insert(k, v).map(drop);
        }
        let t = literal(self.name);
        self.tx.buffer(&format!(
            "WITH old AS (SELECT 1 FROM kv WHERE {}), up AS (INSERT INTO kv (t, k, v) VALUES ({t}, {}, {}) ON CONFLICT (t, k) DO UPDATE SET v = excluded.v) \
             INSERT INTO kv_len (t, n) SELECT {t}, 1 WHERE NOT EXISTS (SELECT 1 FROM old) ON CONFLICT (t) DO UPDATE SET n = kv_len.n + excluded.n",
            self.row(&k),
            bytea_literal(&k),
            bytea_literal(&v)
        ));
        self.tx.known.borrow_mut().set(self.name, k, Some(v));
        Ok(())
    }

    /// Removes `keys` without asking how many there were: sent with the next
    /// statement or the COMMIT, a thousand a statement, counted in `kv_len` by the
    /// statement itself.
    pub fn delete_all(&self, keys: &[Vec<u8>]) -> Result<(), KvError> {
        if !self.tx.write {
            return self.remove_all(keys).map(drop);
        }
        let t = literal(self.name);
        for chunk in keys.chunks(1000) {
            let ks: Vec<String> = chunk.iter().map(|k| bytea_literal(k)).collect();
            self.tx.buffer(&format!(
                "WITH d AS (DELETE FROM kv WHERE t = {t} AND k IN ({}) RETURNING 1) \
                 INSERT INTO kv_len (t, n) SELECT {t}, -count(*) FROM d HAVING count(*) > 0 ON CONFLICT (t) DO UPDATE SET n = kv_len.n + excluded.n",
                ks.join(", ")
            ));
        }
        let mut known = self.tx.known.borrow_mut();
        for k in keys {
            known.set(self.name, k.clone(), None);
        }
        Ok(())
    }

    pub fn remove(&self, k: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        let known = self.tx.known.borrow().value(self.name, k);
        let old = match known {
            Some(None) => return Ok(None),
            Some(Some(old)) => {
                self.tx.buffer(&format!("DELETE FROM kv WHERE {}", self.row(k)));
                Some(old)
            }
            None => self.tx.send_value(&format!("DELETE FROM kv WHERE {} RETURNING v", self.row(k)))?,
        };
        if old.is_some() {
            self.tx.count(self.name, -1);
        }
        self.tx.known.borrow_mut().set(self.name, k.to_vec(), None);
        Ok(old)
    }

    /// Removes `keys`, a thousand a statement; returns how many there were.
    pub fn remove_all(&self, keys: &[Vec<u8>]) -> Result<u64, KvError> {
        let mut removed = 0u64;
        // Those whose presence is known: one buffered statement; the rest asked.
        let (mut present, mut unknown) = (Vec::new(), Vec::new());
        {
            let known = self.tx.known.borrow();
            for k in keys {
                match known.value(self.name, k) {
                    Some(Some(_)) => present.push(bytea_literal(k)),
                    Some(None) => {}
                    None => unknown.push(k.clone()),
                }
            }
        }
        for chunk in present.chunks(1000) {
            self.tx.buffer(&format!("DELETE FROM kv WHERE t = {} AND k IN ({})", literal(self.name), chunk.join(", ")));
            self.tx.count(self.name, -i64::try_from(chunk.len()).unwrap_or(i64::MAX));
            removed = removed.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        }
        {
            let mut known = self.tx.known.borrow_mut();
            for k in keys {
                known.set(self.name, k.clone(), None);
            }
        }
        for chunk in unknown.chunks(1000) {
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
        self.tx.known.borrow_mut().forget(self.name);
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
        if let Some((k, _)) = &got {
            self.tx.count(self.name, -1);
            self.tx.known.borrow_mut().set(self.name, k.clone(), None);
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
        let cached = {
            let known = self.tx.known.borrow();
            known.holds_range(self.name, &lo, &hi).then(|| known.range(self.name, &lo, &hi))
        };
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
