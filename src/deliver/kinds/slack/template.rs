//! The `slack:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json, Text};
use crate::template::Section;

/// Slack fields of a template.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackDef {
    /// Message text; the template's `message` when absent.
    pub text: Option<At<String>>,
    /// Legacy attachments, a JSON array.
    pub attachments: Option<At<String>>,
    /// Block Kit blocks, a JSON array.
    pub blocks: Option<At<String>>,
    /// Messages with the same rendered key go to one thread.
    #[serde(rename = "groupingKey")]
    pub grouping_key: Option<At<String>>,
}

impl Section for SlackDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("slack.text", Text), ("slack.attachments", Json), ("slack.blocks", Json), ("slack.groupingKey", Text)];

    /// Every field of a `slack:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let s = self;
        all.push(("slack.text".into(), Text, s.text.as_ref()));
        all.push(("slack.attachments".into(), Json, s.attachments.as_ref()));
        all.push(("slack.blocks".into(), Json, s.blocks.as_ref()));
        all.push(("slack.groupingKey".into(), Text, s.grouping_key.as_ref()));
    }
}
