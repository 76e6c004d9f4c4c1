//! The walk of the desired object against the live one: each differing leaf as a
//! [`Raw`] change, list items matched by name, bounded by [`MAX_VISITED`] nodes and
//! [`MAX_DEPTH`] levels; and the security walk of the live object, which lists every
//! security value whether or not the desired side is known.

use std::collections::HashSet;

use serde_json::Value;

use super::{InSync, MAX_COLLECTED, MAX_DEPTH, MAX_VISITED, MISSING, Raw, SECURITY_NOT_ALL_READ, Shown, Step, security};
use crate::drift::classes::{grants, holds_security_values, is_security_field};

pub(super) struct Walk<'k> {
    pub(super) raw: Vec<Raw<'k>>,
    /// The paths listed so far: a field two walks find is listed once.
    pub(super) seen: HashSet<String>,
    pub(super) total: usize,
    pub(super) visited: usize,
    pub(super) cut: bool,
    /// A listed change sets a security value that grants something (`ResourceDiff::security`).
    pub(super) security: bool,
    pub(super) kind_class: &'k str,
}

impl<'a> Walk<'a> {
    pub(super) fn push(&mut self, r: Raw<'a>) {
        if self.seen.len() < MAX_VISITED && !self.seen.insert(r.path.clone()) {
            return;
        }
        self.total += 1;
        self.note_security(&r);
        if self.raw.len() < MAX_COLLECTED {
            self.raw.push(r);
        }
    }

    pub(super) fn note_security(&mut self, r: &Raw<'a>) {
        if r.security && holds_security_values(self.kind_class) && matches!(r.live, Shown::Value(v) if grants(&r.path, v)) {
            self.security = true;
        }
    }

    /// The live object's security values that grant something and that no trusted
    /// desired state gives: with one (`trusted`), those it lacks (it has the others,
    /// compared by the desired walk); without one, those driftwatch did not read as
    /// they are while the resource was Synced (`in_sync`). Where the untrusted desired
    /// object (the last-applied annotation) has a value it is the writer's, so the Git
    /// value is `(not known)`; where it has none, `(not set)` as it says. Returns how
    /// many were taken as Git's from `in_sync`.
    pub(super) fn security_values(
        &mut self,
        live: &'a Value,
        desired: Option<&'a Value>,
        trusted: bool,
        in_sync: Option<&InSync>,
    ) -> usize {
        let found = security::leaves(live, self.kind_class);
        if found.cut {
            // Not every security value was seen (an object padded past the bound):
            // what was not is not known to be Git's.
            self.security = true;
            self.cut = true;
            self.push(Raw {
                path: SECURITY_NOT_ALL_READ.to_string(),
                at: Vec::new(),
                desired: Shown::NotKnown,
                live: Shown::NotKnown,
                security: true,
            });
        }
        let in_desired: HashSet<String> = match desired {
            Some(d) => security::leaves(d, self.kind_class).leaves.into_iter().map(|l| l.path).collect(),
            None => HashSet::new(),
        };
        let mut kept = 0;
        for leaf in found.leaves.into_iter().filter(|l| grants(&l.path, l.value)) {
            let desired = if trusted {
                if in_desired.contains(&leaf.path) {
                    continue;
                }
                Shown::NotSet
            } else {
                if in_sync.is_some_and(|r| r.holds(&leaf.path, leaf.value)) {
                    kept += 1;
                    continue;
                }
                if let Some(i) = self.raw.iter().position(|r| r.path == leaf.path) {
                    self.raw[i].desired = Shown::NotKnown;
                    self.security = true;
                    continue;
                }
                if desired.is_some() && !in_desired.contains(&leaf.path) { Shown::NotSet } else { Shown::NotKnown }
            };
            self.security = true;
            self.push(Raw { path: leaf.path, at: leaf.at, desired, live: Shown::Value(leaf.value), security: true });
        }
        kept
    }

    /// Walks the desired node `d` with the live node at the same place; `path` and `at`
    /// are buffers that each level extends and restores (copied only for a change).
    pub(super) fn desired(&mut self, d: &'a Value, l: Option<&'a Value>, path: &mut String, at: &mut Vec<Step>, depth: usize) {
        if self.visited >= MAX_VISITED {
            self.cut = true;
            return;
        }
        self.visited += 1;
        // Most of an object did not drift: an equal subtree is done at once.
        if l == Some(d) {
            return;
        }
        let mark = path.len();
        match d {
            Value::Object(m) if !m.is_empty() && depth < MAX_DEPTH && l.is_none_or(Value::is_object) => {
                for (k, dv) in m {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    at.push(Step::Key(k.clone()));
                    self.desired(dv, l.and_then(|l| l.get(k)), path, at, depth + 1);
                    at.pop();
                    path.truncate(mark);
                }
            }
            Value::Array(items) if !items.is_empty() && depth < MAX_DEPTH && l.is_none_or(Value::is_array) => {
                let live_items = l.and_then(Value::as_array);
                match named(items) {
                    Some(names) => {
                        for (item, name) in items.iter().zip(names) {
                            let found =
                                live_items.and_then(|li| li.iter().position(|x| x.get("name").and_then(Value::as_str) == Some(name)));
                            let lv = found.and_then(|i| live_items.and_then(|li| li.get(i)));
                            path.push('[');
                            path.push_str(name);
                            path.push(']');
                            // An item the live object lacks has no place there (and so no owner).
                            at.push(found.map_or(Step::Key(MISSING.into()), Step::Index));
                            self.desired(item, lv, path, at, depth + 1);
                            at.pop();
                            path.truncate(mark);
                        }
                        // Items only the live object has.
                        for (i, x) in live_items.into_iter().flatten().enumerate() {
                            let name = x.get("name").and_then(Value::as_str).unwrap_or_default();
                            if !items.iter().any(|d| d.get("name").and_then(Value::as_str) == Some(name)) {
                                self.added(format!("{path}[{name}]"), at, i, x);
                            }
                        }
                    }
                    None if items.iter().all(|i| !i.is_object() && !i.is_array()) => self.leaf(d, l, path, at),
                    None => {
                        let n = items.len().max(live_items.map_or(0, Vec::len));
                        for i in 0..n {
                            match (items.get(i), live_items.and_then(|li| li.get(i))) {
                                (Some(item), lv) => {
                                    path.push_str(&format!("[{i}]"));
                                    at.push(Step::Index(i));
                                    self.desired(item, lv, path, at, depth + 1);
                                    at.pop();
                                    path.truncate(mark);
                                }
                                (None, Some(x)) => self.added(format!("{path}[{i}]"), at, i, x),
                                (None, None) => {}
                            }
                        }
                    }
                }
            }
            _ => self.leaf(d, l, path, at),
        }
    }

    /// A list item only the live object has, at index `i` under `at`.
    fn added(&mut self, path: String, at: &[Step], i: usize, x: &'a Value) {
        let mut at = at.to_vec();
        at.push(Step::Index(i));
        self.push(Raw { security: is_security_field(self.kind_class, &path), path, at, desired: Shown::NotSet, live: Shown::Value(x) });
    }

    fn leaf(&mut self, d: &'a Value, l: Option<&'a Value>, path: &str, at: &[Step]) {
        let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty()) || v.as_array().is_some_and(|a| a.is_empty());
        let same = match l {
            Some(l) => l == d || (empty(l) && empty(d)) || numbers_equal(l, d),
            None => empty(d),
        };
        if !same {
            self.push(Raw {
                security: is_security_field(self.kind_class, path),
                path: path.to_string(),
                at: at.to_vec(),
                desired: Shown::Value(d),
                live: l.map_or(Shown::NotSet, Shown::Value),
            });
        }
    }
}

/// `2` and `2.0` are the same number.
pub(super) fn numbers_equal(a: &Value, b: &Value) -> bool {
    matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y)
}

/// The names of a list whose items all have a distinct string `name` (containers, env,
/// volumes, ports by name), as `managedFields` keys them.
pub(super) fn named(items: &[Value]) -> Option<Vec<&str>> {
    let names: Vec<&str> = items.iter().map(|i| i.get("name").and_then(Value::as_str)).collect::<Option<_>>()?;
    let mut seen = std::collections::HashSet::new();
    names.iter().all(|n| seen.insert(*n)).then_some(names)
}
