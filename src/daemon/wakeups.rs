//! When Applications must be evaluated again although nothing changed (a hold-down
//! elapsing, a repeat falling due, a failed write retried): by key, and by time so the
//! next one and the due ones are found without a scan.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

#[derive(Debug, Default)]
pub(super) struct Wakeups {
    by_key: HashMap<String, DateTime<Utc>>,
    by_time: BTreeSet<(DateTime<Utc>, String)>,
}

impl Wakeups {
    /// Wakes `key` at `at` (instead of any earlier setting).
    pub fn set(&mut self, key: &str, at: DateTime<Utc>) {
        if let Some(old) = self.by_key.insert(key.to_string(), at) {
            self.by_time.remove(&(old, key.to_string()));
        }
        self.by_time.insert((at, key.to_string()));
    }

    /// Wakes `key` at `at` or at its current wake-up, whichever is sooner.
    pub fn set_earlier(&mut self, key: &str, at: DateTime<Utc>) {
        match self.by_key.get(key) {
            Some(current) if *current <= at => {}
            _ => self.set(key, at),
        }
    }

    pub fn remove(&mut self, key: &str) {
        if let Some(old) = self.by_key.remove(key) {
            self.by_time.remove(&(old, key.to_string()));
        }
    }

    /// The earliest wake-up.
    pub fn next(&self) -> Option<DateTime<Utc>> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Takes the keys due at `now`, earliest first.
    pub fn take_due(&mut self, now: DateTime<Utc>) -> Vec<String> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.by_time.first()
            && *at <= now
        {
            if let Some((_, key)) = self.by_time.pop_first() {
                self.by_key.remove(&key);
                due.push(key);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    #[test]
    fn the_next_and_the_due_come_in_time_order_and_a_key_has_one_wake_up() {
        let mut w = Wakeups::default();
        w.set("a", t(30));
        w.set("b", t(10));
        w.set("a", t(20));
        w.set_earlier("b", t(40));
        w.set_earlier("c", t(5));
        w.set_earlier("c", t(1));
        assert_eq!(w.next(), Some(t(1)));
        w.remove("c");
        assert_eq!(w.next(), Some(t(10)));
        assert_eq!(w.take_due(t(20)), ["b", "a"], "a moved from 30 to 20; b kept its earlier 10");
        assert_eq!(w.next(), None);
        assert!(w.take_due(t(100)).is_empty());
    }
}
