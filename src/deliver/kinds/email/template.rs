//! The `email:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};
use crate::template::Section;

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

impl Section for EmailDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[("email.subject", Text), ("email.body", Text), ("email.html", Text)];

    /// Every field of a `email:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let e = self;
        all.push(("email.subject".into(), Text, e.subject.as_ref()));
        all.push(("email.body".into(), Text, e.body.as_ref()));
        all.push(("email.html".into(), Text, e.html.as_ref()));
    }
}
