//! The `mattermost:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json};
use crate::template::Section;

/// Mattermost fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MattermostDef {
    /// A JSON array of Slack-style attachments.
    pub attachments: Option<At<String>>,
}

impl Section for MattermostDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("mattermost.attachments", Json)];

    /// Every field of a `mattermost:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let m = self;
        all.push(("mattermost.attachments".into(), Json, m.attachments.as_ref()));
    }
}
