//! Compiling templates: errors, and the section field list against the definitions.
//! What each destination kind's payload looks like is tested with its encoder
//! (`deliver/encode/tests.rs`).

use super::*;
use crate::source::SourceFile;

#[test]
fn a_template_needs_some_field() {
    let file = SourceFile::new("t.yaml", "{}\n");
    let def: TemplateDef = file.parse("template t").unwrap();
    let e = TemplateSet::compile(&[("t".to_string(), def, file)]).unwrap_err();
    assert!(e[0].to_string().contains("a template needs a message"), "{e:?}");
}

/// `SECTION_FIELDS` (what `driftwatch import` maps onto) and the fields a definition
/// has are the same list, kinds included.
#[test]
fn the_section_field_list_matches_the_definitions() {
    let mut yaml = String::from("message: m\n");
    let mut sections: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (path, _) in SECTION_FIELDS {
        let (section, field) = path.split_once('.').unwrap();
        sections.entry(section).or_default().push(field);
    }
    for (section, fields) in &sections {
        yaml.push_str(&format!("{section}:\n"));
        for f in fields {
            yaml.push_str(&format!("  {f}: x\n"));
        }
    }
    let file = SourceFile::new("t.yaml", yaml.clone());
    let def: TemplateDef = file.parse("template t").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let got: std::collections::BTreeSet<(String, bool)> =
        def_fields(&def).into_iter().filter(|(p, _, _)| p.contains('.')).map(|(p, k, _)| (p, k == FieldKind::Json)).collect();
    let want: std::collections::BTreeSet<(String, bool)> =
        SECTION_FIELDS.iter().map(|(p, k)| (p.to_string(), *k == FieldKind::Json)).collect();
    assert_eq!(got, want);
    assert!(is_json_field("teams.facts") && !is_json_field("teams.title") && has_field("telegram.parseMode") && !has_field("teams.nope"));
}
