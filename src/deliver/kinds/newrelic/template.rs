//! The `newrelic:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};
use crate::template::Section;

/// New Relic deployment-marker fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRelicDef {
    pub revision: Option<At<String>>,
    pub changelog: Option<At<String>>,
    pub description: Option<At<String>>,
    pub user: Option<At<String>>,
}

impl Section for NewRelicDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("newrelic.revision", Text), ("newrelic.changelog", Text), ("newrelic.description", Text), ("newrelic.user", Text)];

    /// Every field of a `newrelic:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let n = self;
        for (f, v) in [("revision", &n.revision), ("changelog", &n.changelog), ("description", &n.description), ("user", &n.user)] {
            all.push((format!("newrelic.{f}"), Text, v.as_ref()));
        }
    }
}
