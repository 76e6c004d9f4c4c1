//! The `telegram:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};

/// Telegram fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramDef {
    /// `Markdown`, `MarkdownV2` or `HTML`.
    #[serde(rename = "parseMode")]
    pub parse_mode: Option<At<String>>,
}

/// The section's fields with fixed names, and whether each renders to JSON (what
/// `driftwatch import` maps Argo CD's fields onto): [`fields`] yields the same paths.
pub(super) const FIELDS: &[(&str, FieldKind)] = &[("telegram.parseMode", Text)];

/// Every field of a `telegram:` section, with its path and whether it renders to JSON.
pub(super) fn fields<'a>(section: &'a TelegramDef, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
    let t = section;
    all.push(("telegram.parseMode".into(), Text, t.parse_mode.as_ref()));
}
