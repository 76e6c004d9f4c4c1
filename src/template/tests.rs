//! Compiling templates: errors, and the section field list against the definitions.
//! What each destination kind's payload looks like is tested with its encoder
//! (`deliver/encode/tests.rs`).

use super::*;
use crate::source::SourceFile;

/// A template with a message and nothing else, as a registry would define it (the
/// kinds' sections are tested with the registry, `deliver::kinds`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageOnly {
    message: Option<At<String>>,
}

impl TemplateFields for MessageOnly {
    fn fields(&self) -> Vec<(String, FieldKind, &At<String>)> {
        self.message.iter().map(|m| ("message".to_string(), FieldKind::Text, m)).collect()
    }
}

#[test]
fn a_template_needs_some_field() {
    let file = SourceFile::new("t.yaml", "{}\n");
    let def: MessageOnly = file.parse("template t").unwrap();
    let e = TemplateSet::compile(&[("t".to_string(), def, file)]).unwrap_err();
    assert!(e[0].to_string().contains("a template needs a message"), "{e:?}");
}
