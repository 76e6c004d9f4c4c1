//! What decides whether something changed: the fingerprint of an Application (what a
//! trigger could read, without `resourceVersion` and `managedFields`) and of the
//! configuration files.

use std::hash::{BuildHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::SystemTime;

use serde_json::Value;

use crate::model::App;

/// The fingerprint's hash: foldhash's quality variant (several times faster than the
/// standard SipHash on whole Applications, which made it a tenth of a first
/// evaluation), seeded at random once per process so that nobody who can write an
/// Application can aim for a collision that hides a change.
static HASH: LazyLock<foldhash::quality::RandomState> = LazyLock::new(foldhash::quality::RandomState::default);

/// The object without the fields whose change cannot affect a trigger.
/// Walks the object instead of cloning and serialising it (this runs for every watch
/// event).
pub(super) fn fingerprint(app: &App) -> u64 {
    let mut h = HASH.build_hasher();
    match &app.object {
        Value::Object(top) => {
            for (k, v) in top {
                k.hash(&mut h);
                match (k.as_str(), v) {
                    ("metadata", Value::Object(meta)) => {
                        for (mk, mv) in meta.iter().filter(|(mk, _)| !matches!(mk.as_str(), "resourceVersion" | "managedFields")) {
                            mk.hash(&mut h);
                            hash_value(mv, &mut h);
                        }
                    }
                    _ => hash_value(v, &mut h),
                }
            }
        }
        other => hash_value(other, &mut h),
    }
    h.finish()
}

/// Feeds a JSON value to a hasher, with a tag per type so `"1"` and `1` differ.
fn hash_value(v: &Value, h: &mut impl Hasher) {
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            b.hash(h);
        }
        Value::Number(n) => {
            h.write_u8(2);
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i.hash(h),
                (None, Some(u)) => u.hash(h),
                _ => n.as_f64().unwrap_or_default().to_bits().hash(h),
            }
        }
        Value::String(s) => {
            h.write_u8(3);
            s.hash(h);
        }
        Value::Array(a) => {
            h.write_u8(4);
            a.len().hash(h);
            a.iter().for_each(|x| hash_value(x, h));
        }
        Value::Object(m) => {
            h.write_u8(5);
            m.len().hash(h);
            for (k, x) in m {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

/// What the configuration reload watches: every file the configuration was read from
/// (the config file, each file of its trigger and template directories), with
/// modification times and sizes. A mounted ConfigMap update swaps them.
pub(super) fn config_fingerprint(sources: &[PathBuf]) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
    let mut files = Vec::new();
    for p in sources {
        if p.is_dir() {
            if let Ok(entries) = std::fs::read_dir(p) {
                files.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
            }
        } else {
            files.push(p.clone());
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(&p).ok();
            let mtime = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.map_or(0, |m| m.len());
            (p, mtime, len)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_ignores_resource_version_and_managed_fields_only() {
        let app = |rv: &str, managers: Value, sync: Value| {
            App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "a", "namespace": "argocd", "uid": "u", "resourceVersion": rv, "managedFields": managers},
                "status": {"sync": {"status": sync}}}))
            .unwrap()
        };
        let base = fingerprint(&app("1", serde_json::json!([]), serde_json::json!("Synced")));
        assert_eq!(base, fingerprint(&app("2", serde_json::json!([{"manager": "x"}]), serde_json::json!("Synced"))));
        assert_ne!(base, fingerprint(&app("1", serde_json::json!([]), serde_json::json!("OutOfSync"))));
        assert_ne!(
            fingerprint(&app("1", serde_json::json!([]), serde_json::json!("1"))),
            fingerprint(&app("1", serde_json::json!([]), serde_json::json!(1))),
            "a string is not a number"
        );
    }
}
