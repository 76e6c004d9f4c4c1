//! The `pagerduty:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Json, Text};
use crate::template::Section;

/// PagerDuty Events API v2 fields of a template.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerDutyDef {
    /// At most 1,024 characters after rendering (longer is cut); `message` when absent.
    pub summary: Option<At<String>>,
    /// `critical`, `error`, `warning` or `info`; `error` when absent.
    pub severity: Option<At<String>>,
    /// The affected system; the Application's `namespace/name` when absent.
    pub source: Option<At<String>>,
    pub component: Option<At<String>>,
    pub group: Option<At<String>>,
    pub class: Option<At<String>>,
    /// A JSON object.
    #[serde(rename = "customDetails")]
    pub custom_details: Option<At<String>>,
}

impl Section for PagerDutyDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("pagerduty.summary", Text), ("pagerduty.severity", Text), ("pagerduty.source", Text), ("pagerduty.component", Text), ("pagerduty.group", Text), ("pagerduty.class", Text), ("pagerduty.customDetails", Json)];

    /// Every field of a `pagerduty:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let p = self;
        all.push(("pagerduty.summary".into(), Text, p.summary.as_ref()));
        all.push(("pagerduty.severity".into(), Text, p.severity.as_ref()));
        all.push(("pagerduty.source".into(), Text, p.source.as_ref()));
        all.push(("pagerduty.component".into(), Text, p.component.as_ref()));
        all.push(("pagerduty.group".into(), Text, p.group.as_ref()));
        all.push(("pagerduty.class".into(), Text, p.class.as_ref()));
        all.push(("pagerduty.customDetails".into(), Json, p.custom_details.as_ref()));
    }
}
