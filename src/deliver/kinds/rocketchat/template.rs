//! The `rocketchat:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json, Text};

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

/// The section's fields with fixed names, and whether each renders to JSON (what
/// `driftwatch import` maps Argo CD's fields onto): [`fields`] yields the same paths.
pub(super) const FIELDS: &[(&str, FieldKind)] = &[("rocketchat.attachments", Json), ("rocketchat.alias", Text), ("rocketchat.emoji", Text), ("rocketchat.avatar", Text)];

/// Every field of a `rocketchat:` section, with its path and whether it renders to JSON.
pub(super) fn fields<'a>(section: &'a RocketChatDef, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
    let r = section;
    all.push(("rocketchat.attachments".into(), Json, r.attachments.as_ref()));
    for (f, v) in [("alias", &r.alias), ("emoji", &r.emoji), ("avatar", &r.avatar)] {
        all.push((format!("rocketchat.{f}"), Text, v.as_ref()));
    }
}
