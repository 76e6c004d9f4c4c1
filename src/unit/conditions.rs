//! Kubernetes conditions (`status.conditions[]`: `type`, `status`, `reason`,
//! `message`, `lastTransitionTime`), as Flux and Fleet write them, read by type.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::json::Pointer;

/// At most this many conditions are looked at per object.
const MAX_CONDITIONS: usize = 64;

/// An object's conditions.
pub struct Conditions<'a> {
    list: &'a [Value],
}

/// One condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Condition<'a> {
    /// `Some(true)` for `"True"`, `Some(false)` for `"False"`, `None` for `"Unknown"`.
    pub status: Option<bool>,
    pub reason: &'a str,
    pub message: &'a str,
    pub since: Option<DateTime<Utc>>,
}

impl<'a> Conditions<'a> {
    /// The conditions under `status.conditions` (none when absent or malformed).
    pub fn of(object: &'a Value) -> Conditions<'a> {
        let list = object.at("/status/conditions").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        Conditions { list: &list[..list.len().min(MAX_CONDITIONS)] }
    }

    /// The condition of `kind` (`Ready`, `Stalled`, `Drifted`, …), if present.
    pub fn get(&self, kind: &str) -> Option<Condition<'a>> {
        let c = self.list.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(kind))?;
        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
        let status = match text("status") {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        };
        let since = DateTime::parse_from_rfc3339(text("lastTransitionTime")).ok().map(|t| t.with_timezone(&Utc));
        Some(Condition { status, reason: text("reason"), message: text("message"), since })
    }

    /// Whether the condition of `kind` is present and `True`.
    pub fn is_true(&self, kind: &str) -> bool {
        self.get(kind).is_some_and(|c| c.status == Some(true))
    }

    /// Whether the condition of `kind` is present and `False`.
    pub fn is_false(&self, kind: &str) -> bool {
        self.get(kind).is_some_and(|c| c.status == Some(false))
    }
}
