//! The `pushover:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};
use crate::template::Section;

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

impl Section for PushoverDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("pushover.title", Text), ("pushover.priority", Text), ("pushover.url", Text), ("pushover.urlTitle", Text), ("pushover.sound", Text), ("pushover.device", Text)];

    /// Every field of a `pushover:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let p = self;
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
}
