//! Paths as `managedFields` writes them (`f:spec`, `k:{"name":"app"}`, `v:"x"`): the
//! fields a manager owns, where such a path is in an object, and how it is shown
//! (`spec.template.spec.containers[app].securityContext.privileged`).

use super::{MAX_DEPTH, MAX_OWNED, MAX_VISITED, Step, numbers_equal};
use serde_json::Value;

/// One segment of a path as `managedFields` writes it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seg {
    Field(String),
    /// A list item by its key fields (`k:{"name":"app"}`).
    Key(serde_json::Map<String, Value>),
    /// A set member (`v:"x"`).
    Member(Value),
    Index(usize),
}

/// The leaf paths of a FieldsV1 set.
pub(super) fn owned_paths(node: &Value, prefix: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>, visited: &mut usize) {
    let Some(map) = node.as_object() else { return };
    *visited += 1;
    if out.len() >= MAX_OWNED || *visited >= MAX_VISITED || prefix.len() >= MAX_DEPTH {
        return;
    }
    let mut leaf = true;
    for (k, v) in map.iter().filter(|(k, _)| k.as_str() != ".") {
        leaf = false;
        let seg = match k.split_once(':') {
            Some(("f", name)) => Seg::Field(name.to_string()),
            Some(("k", key)) => match serde_json::from_str(key) {
                Ok(m) => Seg::Key(m),
                Err(_) => continue,
            },
            Some(("v", value)) => match serde_json::from_str(value) {
                Ok(v) => Seg::Member(v),
                Err(_) => continue,
            },
            Some(("i", index)) => match index.parse() {
                Ok(i) => Seg::Index(i),
                Err(_) => continue,
            },
            _ => continue,
        };
        prefix.push(seg);
        owned_paths(v, prefix, out, visited);
        prefix.pop();
    }
    if leaf && !prefix.is_empty() {
        out.push(prefix.clone());
    }
}

/// Where a managedFields path is in `obj`, and the value there.
pub(super) fn locate<'v>(obj: &'v Value, segs: &[Seg]) -> Option<(Vec<Step>, &'v Value)> {
    let mut node = obj;
    let mut at = Vec::with_capacity(segs.len());
    for s in segs {
        match s {
            Seg::Field(k) => {
                node = node.get(k.as_str())?;
                at.push(Step::Key(k.clone()));
            }
            Seg::Index(i) => {
                node = node.as_array()?.get(*i)?;
                at.push(Step::Index(*i));
            }
            Seg::Key(key) => {
                let a = node.as_array()?;
                let i = a.iter().position(|x| key.iter().all(|(k, v)| x.get(k).is_some_and(|got| got == v || numbers_equal(got, v))))?;
                node = &a[i];
                at.push(Step::Index(i));
            }
            Seg::Member(m) => {
                let a = node.as_array()?;
                let i = a.iter().position(|x| x == m)?;
                node = &a[i];
                at.push(Step::Index(i));
            }
        }
    }
    Some((at, node))
}

/// `spec.template.spec.containers[app].securityContext.privileged`, as attribution
/// writes paths.
pub(super) fn display(segs: &[Seg]) -> String {
    let mut s = String::new();
    for seg in segs {
        match seg {
            Seg::Field(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Key(m) => s.push_str(&format!("[{}]", key_label(m))),
            Seg::Member(v) => s.push_str(&format!("[{}]", scalar(v))),
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// A list item's key as paths show it: `{"name":"app"}` -> `app`;
/// `{"containerPort":80,"protocol":"TCP"}` -> `containerPort=80,protocol=TCP`.
pub fn key_label(m: &serde_json::Map<String, Value>) -> String {
    if m.len() == 1 {
        m.values().next().map(scalar).unwrap_or_default()
    } else {
        m.iter().map(|(k, v)| format!("{k}={}", scalar(v))).collect::<Vec<_>>().join(",")
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
