//! The `alertmanager:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};
use crate::template::Section;

/// Alertmanager alert fields (Argo CD's names).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerDef {
    #[serde(default)]
    pub labels: BTreeMap<String, At<String>>,
    #[serde(default)]
    pub annotations: BTreeMap<String, At<String>>,
    #[serde(rename = "generatorURL")]
    pub generator_url: Option<At<String>>,
}

impl Section for AlertmanagerDef {
    const FIELDS: &'static [(&'static str, FieldKind)] =
        &[("alertmanager.labels.*", Text), ("alertmanager.annotations.*", Text), ("alertmanager.generatorURL", Text)];

    /// Every field of a `alertmanager:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let a = self;
        for (l, v) in &a.labels {
            all.push((format!("alertmanager.labels.{l}"), Text, Some(v)));
        }
        for (l, v) in &a.annotations {
            all.push((format!("alertmanager.annotations.{l}"), Text, Some(v)));
        }
        all.push(("alertmanager.generatorURL".into(), Text, a.generator_url.as_ref()));
    }
}
