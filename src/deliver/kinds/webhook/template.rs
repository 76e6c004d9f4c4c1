//! The `webhook:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};
use crate::template::Section;

/// Fields for one webhook service (`webhook.<service name>` in the template).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookDef {
    /// HTTP method; `POST` when absent.
    pub method: Option<At<String>>,
    /// Appended to the service URL.
    pub path: Option<At<String>>,
    #[serde(default)]
    pub headers: BTreeMap<String, At<String>>,
    pub body: Option<At<String>>,
}

impl Section for BTreeMap<String, WebhookDef> {
    const FIELDS: &'static [(&'static str, FieldKind)] =
        &[("webhook.*.method", Text), ("webhook.*.path", Text), ("webhook.*.headers.*", Text), ("webhook.*.body", Text)];

    /// Every field of a `webhook:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        for (service, w) in self {
            all.push((format!("webhook.{service}.method"), Text, w.method.as_ref()));
            all.push((format!("webhook.{service}.path"), Text, w.path.as_ref()));
            for (h, v) in &w.headers {
                all.push((format!("webhook.{service}.headers.{h}"), Text, Some(v)));
            }
            all.push((format!("webhook.{service}.body"), Text, w.body.as_ref()));
        }
    }
}
