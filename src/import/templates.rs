//! `template.<name>`: each field through [`super::gotmpl`], each destination's
//! section mapped to driftwatch's template fields.

use serde_json::{Map, Value, json};

use super::marks::Marks;
use super::read::{Entry, embedded};
use super::{Out, Refusal, commented, display, gotmpl, yaml};
use crate::deliver::kinds::{SectionPath, section_path};

/// The driftwatch section an Argo CD template section maps onto.
pub(super) fn target_section(section: &str) -> &str {
    match section {
        // Argo CD's `teams-workflows` fields are the `teams` ones, which both kinds read.
        "teams-workflows" => "teams",
        // A kind's other name (`pagerdutyv2`) is its section.
        other => crate::model::DestinationKind::parse(other).map_or(other, |k| k.as_str()),
    }
}

/// Destination kinds driftwatch does not have (yet): their template sections and
/// services are reported.
pub(super) const OTHER_KINDS: &[&str] = &["pagerduty", "awssqs", "gitlab", "nats", "pubsub", "kafka"];

struct TemplateWork<'a> {
    item: String,
    marks: Marks<'a>,
}

/// Fields whose rendered text must be JSON.
fn is_json_field(field: &str, src: &str) -> bool {
    let (section, rest) = field.split_once('.').unwrap_or((field, ""));
    crate::deliver::kinds::is_json_field(&format!("{}.{rest}", target_section(section)))
        || (section == "webhook" && field.ends_with(".body") && src.trim_start().starts_with(['{', '[']))
}

impl TemplateWork<'_> {
    fn translate(&mut self, out: &mut Out, field: &str, src: &str) -> Option<String> {
        let translated = if is_json_field(field, src) { gotmpl::to_handlebars_in_json(src) } else { gotmpl::to_handlebars(src) };
        // What is written must compile; a translation that does not is reported, not written.
        let translated = translated.and_then(|t| match crate::template::compiles(&t.text) {
            Ok(()) => Ok(t),
            Err(e) => Err(Refusal::new(0, format!("the translation does not compile ({e}); please report this as a driftwatch bug"))),
        });
        let path = format!("{}.{field}", self.item);
        let t = self.marks.translated(out, &path, src, translated)?;
        for n in t.notes {
            out.note(self.marks.e, &path, &n);
        }
        Some(t.text)
    }

    /// One map of a destination's section (`argo`: its path in Argo CD's template,
    /// `dw`: in driftwatch's), as the kind declares it: each field translated, each
    /// setting kept as written, each inner map converted in turn; what the kind does
    /// not have is kept commented out with a TODO.
    fn section(&mut self, out: &mut Out, argo: &str, dw: &str, fields: &Map<String, Value>) -> Map<String, Value> {
        let mut f = Map::new();
        for (k, v) in fields {
            let (argo_path, dw_path) = (format!("{argo}.{k}"), format!("{dw}.{k}"));
            match (section_path(&dw_path), v) {
                (Some(SectionPath::Field(_)), Value::String(src)) => {
                    if let Some(t) = self.translate(out, &argo_path, src) {
                        f.insert(k.clone(), json!(t));
                    }
                }
                // Lists and maps Argo CD takes as YAML (Opsgenie's tags, details):
                // driftwatch's fields are JSON text.
                (Some(SectionPath::Field(_)), v @ (Value::Array(_) | Value::Object(_))) => {
                    let src = serde_json::to_string_pretty(v).unwrap_or_default();
                    if let Some(t) = self.translate(out, &argo_path, &src) {
                        f.insert(k.clone(), json!(t));
                    }
                }
                (Some(SectionPath::Field(_)), v @ (Value::Number(_) | Value::Bool(_))) => {
                    f.insert(k.clone(), json!(v.to_string()));
                }
                (Some(SectionPath::Setting), v) => {
                    f.insert(k.clone(), v.clone());
                }
                (Some(SectionPath::Map), Value::Object(m)) => {
                    let inner = self.section(out, &argo_path, &dw_path, m);
                    f.insert(k.clone(), Value::Object(inner));
                }
                _ => self.not_in_kind(out, (argo, dw), k, v),
            }
        }
        f
    }

    /// A field of Argo CD's section that driftwatch's does not have.
    fn not_in_kind(&mut self, out: &mut Out, (argo, dw): (&str, &str), k: &str, v: &Value) {
        let path = format!("{argo}.{k}");
        match (argo, k, v) {
            ("slack", "notifyBroadcast", Value::Bool(false)) | ("slack", "deliveryPolicy", Value::String(_))
                if v.as_str().is_none_or(|p| p == "Post") =>
            {
                out.note(self.marks.e, &format!("{}.{path}", self.item), "Argo CD's default; driftwatch behaves the same");
            }
            ("slack", "deliveryPolicy" | "notifyBroadcast", _) => self.drop_section(
                out,
                &path,
                v,
                "driftwatch has no such Slack setting: it posts, and updates a message with `resolve: true` conditions",
            ),
            _ => self.drop_section(out, &path, v, &format!("driftwatch's {dw} template has no `{k}` field")),
        }
    }

    fn drop_section(&mut self, out: &mut Out, section: &str, v: &Value, reason: &str) {
        self.marks.mark_kept(out, &format!("{}.{section}", self.item), reason, &yaml::to_yaml(&json!({ section: v })));
    }
}

pub(super) fn template(e: &Entry, name: &str, out: &mut Out) {
    let item = format!("template {name}");
    let mut w = TemplateWork { item: item.clone(), marks: Marks::new(e) };
    if name.contains('.') {
        out.note(e, &item, "a dotted template name is kept as it is; subscriptions and triggers must name it exactly");
    }
    let parsed = match embedded(&e.value) {
        Ok(Value::Object(m)) => m,
        Ok(_) => {
            out.report.templates.todo += 1;
            let line = out.todo(e, &item, "not a map of template fields");
            out.templates.insert(name.to_string(), format!("{line}\n{}{{}}\n", commented(&display(&e.value))));
            return;
        }
        Err(reason) => {
            out.report.templates.todo += 1;
            let line = out.todo(e, &item, &reason);
            out.templates.insert(name.to_string(), format!("{line}\n{}{{}}\n", commented(&display(&e.value))));
            return;
        }
    };
    let mut def = Map::new();
    for (section, v) in &parsed {
        match (section.as_str(), v) {
            ("message", Value::String(s)) => {
                if let Some(t) = w.translate(out, "message", s) {
                    def.insert("message".into(), json!(t));
                }
            }
            ("title", Value::String(s)) => {
                // Old argocd-notifications templates: the e-mail subject.
                if let Some(t) = w.translate(out, "title", s) {
                    def.entry("email").or_insert_with(|| json!({})).as_object_mut().map(|m| m.insert("subject".into(), json!(t)));
                }
            }
            // A kind's section, as the kind declares its fields (not Argo CD's
            // `pagerduty:`, its v1 service, which driftwatch does not have).
            (s, Value::Object(fields)) if !OTHER_KINDS.contains(&s) && section_path(target_section(s)) == Some(SectionPath::Map) => {
                let target = target_section(s);
                let f = w.section(out, s, target, fields);
                if let Some(existing) = def.get_mut(target).and_then(Value::as_object_mut) {
                    existing.extend(f);
                } else if !f.is_empty() {
                    def.insert(target.into(), Value::Object(f));
                }
            }
            (s, v) if OTHER_KINDS.contains(&s) && out.service_kinds.contains(s) => {
                w.drop_section(out, s, v, &format!("driftwatch has no {s} destination; the Argo CD fields are kept below, commented out"))
            }
            (s, v) if OTHER_KINDS.contains(&s) => {
                // No such service is configured: the section could not be sent in Argo
                // CD either. Kept for the record, not a TODO.
                out.note(
                    e,
                    &format!("{item}.{s}"),
                    &format!("no {s} service is configured (and driftwatch has no {s} destination); kept commented out"),
                );
                w.marks
                    .comments
                    .push_str(&format!("# Not imported: no {s} service is configured, and driftwatch has no {s} destination.\n"));
                w.marks.comments.push_str(&commented(&yaml::to_yaml(&json!({ s: v }))));
            }
            (s, v) => w.drop_section(out, s, v, &format!("`{s}` is not a template field driftwatch knows")),
        }
    }
    if w.marks.todo {
        out.report.templates.todo += 1;
    } else {
        out.report.templates.converted += 1;
    }
    let mut text = format!("# Imported by `driftwatch import` from {}:{} ({}).\n", e.file, e.line, e.key);
    text.push_str(&w.marks.comments);
    text.push_str(&if def.is_empty() { "{}\n".to_string() } else { yaml::to_yaml(&Value::Object(def)) });
    out.templates.insert(name.to_string(), text);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(yaml: &str) -> Out {
        let e = Entry { file: "cm.yaml".into(), line: 1, key: "template.t".into(), value: Value::String(yaml.into()) };
        let input = super::super::read::Input { entries: vec![e.clone()], ..Default::default() };
        let mut out = Out::new(&input);
        template(&e, "t", &mut out);
        out
    }

    /// Argo CD's section names map onto the kinds' sections; Argo CD's `pagerduty:`
    /// (its v1 service, which driftwatch lacks) is not read as driftwatch's PagerDuty.
    #[test]
    fn argo_cd_sections_map_onto_the_kinds() {
        let out = convert("message: m\npagerdutyv2:\n  summary: s\nteams-workflows:\n  title: t\n");
        let text = &out.templates["t"];
        assert!(text.contains("pagerduty:\n  summary: s"), "{text}");
        assert!(text.contains("teams:\n  title: t"), "{text}");
        assert!(out.report.todos.is_empty(), "{:?}", out.report.todos);
        // No pagerduty (v1) service configured: kept commented out and noted, as Argo CD
        // could not send it either; not mapped onto driftwatch's fields and marked.
        let out = convert("message: m\npagerduty:\n  title: t\n");
        assert!(out.report.todos.is_empty(), "{:?}", out.report.todos);
        assert!(out.report.notes.iter().any(|n| n.reason.contains("driftwatch has no pagerduty destination")), "{:?}", out.report.notes);
    }

    /// Nested sections follow what each kind declares: a name the template chooses
    /// (`alertmanager.labels.<name>`, `webhook.<service>`), settings kept as written,
    /// a field the kind lacks kept commented out with a TODO naming it.
    #[test]
    fn nested_sections_follow_the_kinds_declarations() {
        let out = convert(concat!(
            "alertmanager:\n  labels:\n    team: \"{{.app.metadata.name}}\"\n    tier: 1\n  generatorURL: u\n",
            "github:\n  deployment:\n    state: success\n    autoMerge: false\n    requiredContexts: [ci]\n    colour: red\n",
            "webhook:\n  jira:\n    body: b\n    retries: 3\n",
        ));
        let text = &out.templates["t"];
        for want in ["team: \"{{app.metadata.name}}\"", "tier: \"1\"", "generatorURL: u", "autoMerge: false", "- ci", "body: b"] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        let todos: Vec<&str> = out.report.todos.iter().map(|t| t.reason.as_str()).collect();
        assert_eq!(
            todos,
            ["driftwatch's github.deployment template has no `colour` field", "driftwatch's webhook.jira template has no `retries` field"]
        );
    }
}
