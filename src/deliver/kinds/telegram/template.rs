//! The `telegram:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};
use crate::template::Section;

/// Telegram fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramDef {
    /// `Markdown`, `MarkdownV2` or `HTML`.
    #[serde(rename = "parseMode")]
    pub parse_mode: Option<At<String>>,
}

impl Section for TelegramDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("telegram.parseMode", Text)];

    /// Every field of a `telegram:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let t = self;
        all.push(("telegram.parseMode".into(), Text, t.parse_mode.as_ref()));
    }
}
