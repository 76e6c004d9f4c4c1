//! The `email:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};

/// E-mail fields of a template.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailDef {
    pub subject: Option<At<String>>,
    /// Plain-text body; the template's `message` when absent.
    pub body: Option<At<String>>,
    /// Optional HTML part.
    pub html: Option<At<String>>,
}

/// The section's fields with fixed names, and whether each renders to JSON (what
/// `driftwatch import` maps Argo CD's fields onto): [`fields`] yields the same paths.
pub(super) const FIELDS: &[(&str, FieldKind)] = &[("email.subject", Text), ("email.body", Text), ("email.html", Text)];

/// Every field of a `email:` section, with its path and whether it renders to JSON.
pub(super) fn fields<'a>(section: &'a EmailDef, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
    let e = section;
    all.push(("email.subject".into(), Text, e.subject.as_ref()));
    all.push(("email.body".into(), Text, e.body.as_ref()));
    all.push(("email.html".into(), Text, e.html.as_ref()));
}
