//! The `mattermost:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json};

/// Mattermost fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MattermostDef {
    /// A JSON array of Slack-style attachments.
    pub attachments: Option<At<String>>,
}

/// The section's fields with fixed names, and whether each renders to JSON (what
/// `driftwatch import` maps Argo CD's fields onto): [`fields`] yields the same paths.
pub(super) const FIELDS: &[(&str, FieldKind)] = &[("mattermost.attachments", Json)];

/// Every field of a `mattermost:` section, with its path and whether it renders to JSON.
pub(super) fn fields<'a>(section: &'a MattermostDef, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
    let m = section;
    all.push(("mattermost.attachments".into(), Json, m.attachments.as_ref()));
}
