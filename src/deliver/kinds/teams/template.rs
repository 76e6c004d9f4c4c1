//! The `teams:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json, Text};
use crate::template::Section;

/// Microsoft Teams MessageCard fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TeamsDef {
    pub title: Option<At<String>>,
    pub summary: Option<At<String>>,
    pub text: Option<At<String>>,
    pub theme_color: Option<At<String>>,
    /// JSON arrays.
    pub facts: Option<At<String>>,
    pub sections: Option<At<String>>,
    pub potential_action: Option<At<String>>,
    /// A whole card (JSON object), sent as it is.
    pub template: Option<At<String>>,
}

impl Section for TeamsDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("teams.title", Text), ("teams.summary", Text), ("teams.text", Text), ("teams.themeColor", Text), ("teams.facts", Json), ("teams.sections", Json), ("teams.potentialAction", Json), ("teams.template", Json)];

    /// Every field of a `teams:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let t = self;
        for (f, k, v) in [
            ("title", Text, &t.title),
            ("summary", Text, &t.summary),
            ("text", Text, &t.text),
            ("themeColor", Text, &t.theme_color),
            ("facts", Json, &t.facts),
            ("sections", Json, &t.sections),
            ("potentialAction", Json, &t.potential_action),
            ("template", Json, &t.template),
        ] {
            all.push((format!("teams.{f}"), k, v.as_ref()));
        }
    }
}
