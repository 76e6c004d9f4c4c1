//! The `pushover:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};

/// Pushover fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PushoverDef {
    pub title: Option<At<String>>,
    /// -2 to 1.
    pub priority: Option<At<String>>,
    pub url: Option<At<String>>,
    pub url_title: Option<At<String>>,
    pub sound: Option<At<String>>,
    pub device: Option<At<String>>,
}

/// The section's fields with fixed names, and whether each renders to JSON (what
/// `driftwatch import` maps Argo CD's fields onto): [`fields`] yields the same paths.
pub(super) const FIELDS: &[(&str, FieldKind)] = &[("pushover.title", Text), ("pushover.priority", Text), ("pushover.url", Text), ("pushover.urlTitle", Text), ("pushover.sound", Text), ("pushover.device", Text)];

/// Every field of a `pushover:` section, with its path and whether it renders to JSON.
pub(super) fn fields<'a>(section: &'a PushoverDef, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
    let p = section;
    for (f, v) in [
        ("title", &p.title),
        ("priority", &p.priority),
        ("url", &p.url),
        ("urlTitle", &p.url_title),
        ("sound", &p.sound),
        ("device", &p.device),
    ] {
        all.push((format!("pushover.{f}"), Text, v.as_ref()));
    }
}
