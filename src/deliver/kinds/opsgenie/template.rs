//! The `opsgenie:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json, Text};
use crate::template::Section;

/// Opsgenie alert fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpsgenieDef {
    pub description: Option<At<String>>,
    /// `P1` to `P5`; from the severity when absent.
    pub priority: Option<At<String>>,
    /// Stable per Application, trigger and condition when absent.
    pub alias: Option<At<String>>,
    pub note: Option<At<String>>,
    pub entity: Option<At<String>>,
    pub user: Option<At<String>>,
    /// JSON arrays.
    pub tags: Option<At<String>>,
    pub actions: Option<At<String>>,
    pub responders: Option<At<String>>,
    pub visible_to: Option<At<String>>,
    /// A JSON object.
    pub details: Option<At<String>>,
}

impl Section for OpsgenieDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("opsgenie.description", Text), ("opsgenie.priority", Text), ("opsgenie.alias", Text), ("opsgenie.note", Text), ("opsgenie.entity", Text), ("opsgenie.user", Text), ("opsgenie.tags", Json), ("opsgenie.actions", Json), ("opsgenie.responders", Json), ("opsgenie.visibleTo", Json), ("opsgenie.details", Json)];

    /// Every field of a `opsgenie:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let o = self;
        for (f, k, v) in [
            ("description", Text, &o.description),
            ("priority", Text, &o.priority),
            ("alias", Text, &o.alias),
            ("note", Text, &o.note),
            ("entity", Text, &o.entity),
            ("user", Text, &o.user),
            ("tags", Json, &o.tags),
            ("actions", Json, &o.actions),
            ("responders", Json, &o.responders),
            ("visibleTo", Json, &o.visible_to),
            ("details", Json, &o.details),
        ] {
            all.push((format!("opsgenie.{f}"), k, v.as_ref()));
        }
    }
}
