//! The `rocketchat:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json, Text};
use crate::template::Section;

/// Rocket.Chat fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocketChatDef {
    /// A JSON array of attachments.
    pub attachments: Option<At<String>>,
    pub alias: Option<At<String>>,
    pub emoji: Option<At<String>>,
    pub avatar: Option<At<String>>,
}

impl Section for RocketChatDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("rocketchat.attachments", Json), ("rocketchat.alias", Text), ("rocketchat.emoji", Text), ("rocketchat.avatar", Text)];

    /// Every field of a `rocketchat:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let r = self;
        all.push(("rocketchat.attachments".into(), Json, r.attachments.as_ref()));
        for (f, v) in [("alias", &r.alias), ("emoji", &r.emoji), ("avatar", &r.avatar)] {
            all.push((format!("rocketchat.{f}"), Text, v.as_ref()));
        }
    }
}
