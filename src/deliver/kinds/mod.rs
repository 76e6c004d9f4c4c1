//! The registry of destination kinds: the one list of kinds (`model::destination_kinds`,
//! a line per kind naming its folder, the type that implements [`Kind`] there and its
//! name) expanded into the folders and their dispatch: services (parsing, building),
//! encoders, default limits, whether a kind pages or feeds a SIEM, and Argo CD's name
//! of a kind for `driftwatch import` (which maps template sections by what each kind's
//! section declares). Adding a kind is its folder plus its line in that list.

use std::sync::Arc;

use serde_json::Value;

use super::deliverer::Deliverer;
use super::env::Env;
use super::kind::{self, BuildError, Kind, Limits, SettingsError};
use crate::model::DestinationKind;
use crate::source::At;
use crate::template::{Encoder, FieldKind, Section};

macro_rules! registry {
    ($($(#[$doc:meta])* $module:ident :: $kind:ident = $name:literal $(| $alias:literal)?),* $(,)?) => {
        $(pub mod $module;)*

        /// The kind-specific configuration of one named service.
        #[derive(Debug, Clone, PartialEq)]
        pub enum ServiceConfig {
            $($kind(<$module::$kind as Kind>::Config)),*
        }

        impl ServiceConfig {
            /// The settings of a service of `kind` (the common keys removed), read and
            /// checked by the kind.
            pub fn parse(kind: DestinationKind, v: Value) -> Result<ServiceConfig, SettingsError> {
                match kind {
                    $(DestinationKind::$kind => kind::config::<$module::$kind>(v).map(ServiceConfig::$kind)),*
                }
            }

            pub fn kind(&self) -> DestinationKind {
                match self {
                    $(ServiceConfig::$kind(_) => <$module::$kind as Kind>::KIND),*
                }
            }

            /// Every string setting that may reference a `$secret`.
            pub fn strings(&self) -> Vec<&str> {
                match self {
                    $(ServiceConfig::$kind(c) => <$module::$kind as Kind>::secrets(c)),*
                }
            }

            /// The service's client.
            pub fn client(&self, name: &str, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
                match self {
                    $(ServiceConfig::$kind(c) => <$module::$kind as Kind>::client(name, c, env)),*
                }
            }
        }

        /// A template file: the `message`, its `severity`, and each kind's section as
        /// the kind defines it (`deliver/kinds/<kind>/template.rs`), under the kind's name.
        #[derive(Debug, Clone, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct TemplateDef {
            /// The text every destination falls back to.
            pub message: Option<At<String>>,
            /// `critical`, `error`, `warning` or `info` (default `info`): the SIEM
            /// record's severity and PagerDuty's when `pagerduty.severity` is absent.
            pub severity: Option<At<String>>,
            $(
                #[serde(rename = $name $(, alias = $alias)?)]
                pub $module: Option<<$module::$kind as Kind>::Template>,
            )*
        }

        impl crate::template::TemplateFields for TemplateDef {
            fn fields(&self) -> Vec<(String, FieldKind, &At<String>)> {
                let mut all: Vec<(String, FieldKind, Option<&At<String>>)> =
                    vec![("message".into(), FieldKind::Text, self.message.as_ref()), ("severity".into(), FieldKind::Text, self.severity.as_ref())];
                $(if let Some(t) = &self.$module {
                    t.fields(&mut all);
                })*
                all.into_iter().filter_map(|(path, kind, v)| v.map(|v| (path, kind, v))).collect()
            }

            fn settings(&self) -> crate::template::SectionSettings {
                let mut out = Vec::new();
                $(if let Some(t) = &self.$module && let Some(s) = t.settings() {
                    out.push(($name, s));
                })*
                out
            }
        }

        /// Every field of every kind's template section, and whether it renders to
        /// JSON; a `*` segment is a name the template chooses (`webhook.*.body`).
        pub fn section_fields() -> impl Iterator<Item = (&'static str, bool)> {
            [$(<<$module::$kind as Kind>::Template as Section>::FIELDS),*].into_iter().flatten().map(|(p, k)| (*p, *k == FieldKind::Json))
        }

        /// Every setting of a kind's template section that is not a template
        /// (`github.deployment.autoMerge`).
        pub fn section_settings() -> impl Iterator<Item = &'static str> {
            [$(<<$module::$kind as Kind>::Template as Section>::SETTINGS),*].into_iter().flatten().copied()
        }

        /// Whether a template may have a `section:`: a kind of that name (or other
        /// name) that has one.
        pub fn has_section(section: &str) -> bool {
            $(if <<$module::$kind as Kind>::Template as Section>::PRESENT && ($name == section $(|| $alias == section)?) {
                return true;
            })*
            false
        }

        /// `kind`'s default rate limit and concurrency.
        pub fn limits(kind: DestinationKind) -> Limits {
            match kind {
                $(DestinationKind::$kind => <$module::$kind as Kind>::LIMITS),*
            }
        }

        /// Whether `kind` wakes a person up (its `Kind::PAGES`).
        pub fn pages(kind: DestinationKind) -> bool {
            match kind {
                $(DestinationKind::$kind => <$module::$kind as Kind>::PAGES),*
            }
        }

        /// Whether `kind` feeds a SIEM (its `Kind::SIEM`).
        pub fn is_siem(kind: DestinationKind) -> bool {
            match kind {
                $(DestinationKind::$kind => <$module::$kind as Kind>::SIEM),*
            }
        }

        /// `kind`'s encoder: what shapes its payload from a template's fields.
        pub fn encoder(kind: DestinationKind) -> Encoder {
            match kind {
                $(DestinationKind::$kind => <$module::$kind as Kind>::ENCODE),*
            }
        }

        /// The kind Argo CD calls `argo_name` (`pagerdutyv2`), and how its settings
        /// become driftwatch's.
        pub fn argo_service(argo_name: &str) -> Option<(DestinationKind, kind::ArgoService, fn(&kind::ArgoService, &serde_json::Map<String, Value>) -> kind::Imported)> {
            $(if let Some(a) = <$module::$kind as Kind>::ARGO && a.name == argo_name {
                return Some((<$module::$kind as Kind>::KIND, a, <$module::$kind as Kind>::import));
            })*
            None
        }

        /// Argo CD's name of each kind Argo CD has, in the order of `DestinationKind::ALL`.
        #[cfg(test)]
        const ARGO_NAMES: &[Option<&str>] = &[$(match <$module::$kind as Kind>::ARGO { Some(a) => Some(a.name), None => None }),*];

        /// The folders registered, by name.
        pub const FOLDERS: &[&str] = &[$(stringify!($module)),*];
    };
}

crate::model::destination_kinds!(registry);

/// Whether `path` is an instance of `pattern` (whose `*` segments match any one
/// segment), or with `prefix`, lies above one (`github.status` above
/// `github.status.state`).
fn matches(pattern: &str, path: &str, prefix: bool) -> bool {
    let (mut p, mut q) = (pattern.split('.'), path.split('.'));
    loop {
        match (p.next(), q.next()) {
            (Some(a), Some(b)) if a == "*" || a == b => {}
            (None, None) => return true,
            (Some(_), None) => return prefix,
            _ => return false,
        }
    }
}

/// Whether `section.field` (`teams.facts`, `webhook.jira.body`) is a field of a
/// destination section.
pub fn has_field(path: &str) -> bool {
    section_fields().any(|(p, _)| matches(p, path, false))
}

/// Whether `section.field` must render to JSON.
pub fn is_json_field(path: &str) -> bool {
    section_fields().any(|(p, json)| json && matches(p, path, false))
}

/// What a path of a template section is, for `driftwatch import`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionPath {
    /// A template field; `true` when it renders to JSON.
    Field(bool),
    /// A setting that is not a template, kept as written.
    Setting,
    /// A map holding fields (`github.status`, `webhook.jira`).
    Map,
}

/// What `path` is in the kinds' template sections, if anything.
pub fn section_path(path: &str) -> Option<SectionPath> {
    if let Some((_, json)) = section_fields().find(|(p, _)| matches(p, path, false)) {
        return Some(SectionPath::Field(json));
    }
    if section_settings().any(|p| matches(p, path, false)) {
        return Some(SectionPath::Setting);
    }
    let above = section_fields().map(|(p, _)| p).chain(section_settings()).any(|p| matches(p, path, true));
    above.then_some(SectionPath::Map)
}

/// `kind`'s delivery settings before a service overrides them.
pub fn default_settings(kind: DestinationKind) -> super::outcome::DeliverySettings {
    kind::default_settings(limits(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which kinds page and which feed a SIEM is declared by each kind (`Kind::PAGES`,
    /// `Kind::SIEM`), not by a list of names elsewhere: the paging kinds are the ones a
    /// break-glass exception holds back, the SIEM kinds the ones grouped routes still
    /// send one record per Application.
    #[test]
    fn each_kind_declares_whether_it_pages_or_feeds_a_siem() {
        let named = |f: fn(DestinationKind) -> bool| {
            DestinationKind::ALL.into_iter().filter(|k| f(*k)).map(DestinationKind::as_str).collect::<Vec<_>>()
        };
        assert_eq!(named(pages), ["pagerduty", "opsgenie", "alertmanager", "pushover"]);
        assert_eq!(
            named(is_siem),
            ["splunk", "signed-webhook", "syslog", "elasticsearch", "loki", "otlp", "sentinel", "secops", "securitylake"]
        );
    }

    /// Every folder here is in the list of kinds, and each is named after its kind.
    #[test]
    fn every_kind_folder_is_registered() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/deliver/kinds");
        let mut folders: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
            .collect();
        folders.sort();
        let mut registered: Vec<String> = FOLDERS.iter().map(|f| f.to_string()).collect();
        registered.sort();
        assert_eq!(folders, registered, "a folder of src/deliver/kinds that the list of kinds does not have");
        for (folder, kind) in FOLDERS.iter().zip(DestinationKind::ALL) {
            assert_eq!(folder.replace('_', "-"), kind.as_str(), "the folder is named after its kind");
        }
    }

    /// Every template section and field a kind's encoder reads is one a template can
    /// have: a section the schema does not define could never be written, so what the
    /// encoder reads there would silently be nothing.
    #[test]
    fn every_template_section_a_kind_reads_exists() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/deliver/kinds");
        let mut read = 0;
        for folder in FOLDERS {
            let Ok(text) = std::fs::read_to_string(dir.join(folder).join("payload.rs")) else { continue };
            for call in ["message_and_section(\"", "copy_section(\"", "text(\"", "json(\"", "severity_of(\""] {
                for (i, _) in text.match_indices(call) {
                    let rest = &text[i + call.len()..];
                    let lit = &rest[..rest.find('"').unwrap_or(0)];
                    let section = lit.split('.').next().unwrap_or_default();
                    let whole = call.starts_with("message_and_section") || call.starts_with("copy_section");
                    if whole || lit.contains('.') {
                        read += 1;
                        assert!(has_section(section), "{folder}/payload.rs reads template section {section:?}, which no template can have");
                        // A section of fixed field names (not one keyed by name, `webhook.<service>`).
                        let fixed = section_fields().any(|(p, _)| p.split('.').next() == Some(section));
                        if !whole && fixed {
                            assert!(has_field(lit), "{folder}/payload.rs reads template field {lit:?}, which no template can have");
                        }
                    }
                }
            }
        }
        assert!(read > 20, "the scan found only {read} reads: it is not reading the encoders");
    }

    /// Each kind's list of fixed template fields (what `driftwatch import` maps onto)
    /// is exactly what its section yields when a template has every one of them, kinds
    /// (text or JSON) included.
    #[test]
    fn each_kinds_template_field_list_matches_its_section() {
        use crate::template::TemplateFields as _;
        // Every field, a `*` segment named `w`, nested as a template writes it (JSON is
        // YAML).
        let named = |p: &str| p.split('.').map(|s| if s == "*" { "w" } else { s }).collect::<Vec<_>>().join(".");
        let mut doc = serde_json::json!({"message": "m"});
        for (path, _) in section_fields() {
            let mut at = &mut doc;
            let named = named(path);
            let mut segments = named.split('.').peekable();
            while let Some(seg) = segments.next() {
                let slot = at.as_object_mut().unwrap().entry(seg).or_insert_with(|| serde_json::json!({}));
                if segments.peek().is_none() {
                    *slot = serde_json::json!("x");
                }
                at = slot;
            }
        }
        let yaml = doc.to_string();
        let file = crate::source::SourceFile::new("t.yaml", yaml.clone());
        let def: TemplateDef = file.parse("template t").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let got: std::collections::BTreeSet<(String, bool)> =
            def.fields().into_iter().filter(|(p, _, _)| p.contains('.')).map(|(p, k, _)| (p, k == FieldKind::Json)).collect();
        let want: std::collections::BTreeSet<(String, bool)> = section_fields().map(|(p, j)| (named(p), j)).collect();
        assert_eq!(got, want);
        assert!(
            is_json_field("teams.facts") && !is_json_field("teams.title") && has_field("telegram.parseMode") && !has_field("teams.nope")
        );
        assert!(has_field("webhook.jira.body") && !has_field("webhook.jira") && !has_field("webhook.jira.body.x"));
        assert_eq!(section_path("github.status"), Some(SectionPath::Map));
        assert_eq!(section_path("github.deployment.autoMerge"), Some(SectionPath::Setting));
        assert_eq!(section_path("alertmanager.labels.team"), Some(SectionPath::Field(false)));
        assert_eq!(section_path("github.nope"), None);
        // Each setting is one the section reads: a template with it parses.
        for path in section_settings() {
            let (section, rest) = path.split_once('.').unwrap();
            let value = if path.ends_with("Contexts") { "[ci]" } else { "true" };
            let mut yaml = format!("message: m\n{section}:\n");
            let parts: Vec<&str> = rest.split('.').collect();
            for (depth, part) in parts.iter().enumerate() {
                let last = depth + 1 == parts.len();
                yaml.push_str(&format!("{}{part}:{}\n", "  ".repeat(depth + 1), if last { format!(" {value}") } else { String::new() }));
            }
            let file = crate::source::SourceFile::new("t.yaml", yaml.clone());
            file.parse::<TemplateDef>("template t").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        }
        // A section of a kind that reads none is refused, as is a kind that does not exist.
        for bad in ["message: m\ngrafana:\n  x: y\n", "message: m\nnosuch: {}\n"] {
            let file = crate::source::SourceFile::new("t.yaml", bad.to_string());
            assert!(file.parse::<TemplateDef>("template t").is_err(), "{bad}");
        }
        // Argo CD's name for PagerDuty's section is read too.
        let file = crate::source::SourceFile::new("t.yaml", "pagerdutyv2:\n  summary: s\n".to_string());
        let def: TemplateDef = file.parse("template t").unwrap();
        assert_eq!(def.fields().into_iter().map(|(p, _, _)| p).collect::<Vec<_>>(), ["pagerduty.summary"]);
    }

    /// A kind depends on the machinery, never on another kind: what two kinds share
    /// (an HTTP request, basic auth, the idempotency key) is machinery.
    #[test]
    fn no_kind_uses_another() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/deliver/kinds");
        let mut read = 0;
        for folder in FOLDERS {
            for entry in std::fs::read_dir(dir.join(folder)).unwrap() {
                let path = entry.unwrap().path();
                let text = std::fs::read_to_string(&path).unwrap();
                read += 1;
                for other in FOLDERS.iter().filter(|o| *o != folder) {
                    for form in [format!("kinds::{other}::"), format!("super::super::{other}::")] {
                        assert!(
                            !text.contains(&form),
                            "{} uses the {other} kind ({form}): move what they share to the machinery",
                            path.display()
                        );
                    }
                }
            }
        }
        assert!(read > 60, "the scan read only {read} files");
    }

    /// Each Argo CD service type maps to one kind, and back: `driftwatch import` finds
    /// every kind that declares one by that name, with its own kind and mapping.
    #[test]
    fn argo_cd_names_map_to_one_kind_each() {
        let names: Vec<&str> = ARGO_NAMES.iter().flatten().copied().collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "two kinds claim one Argo CD name: {names:?}");
        for (name, kind) in ARGO_NAMES.iter().zip(DestinationKind::ALL) {
            match name {
                Some(n) => {
                    let (found, argo, convert) = argo_service(n).unwrap_or_else(|| panic!("{n}"));
                    assert_eq!((found, argo.name), (kind, *n));
                    // Every Argo CD setting the table takes comes out under its driftwatch
                    // name; every one it does not need is noted; nothing is unknown.
                    let mut given = serde_json::Map::new();
                    for (from, _) in argo.settings.iter().chain(argo.not_needed) {
                        given.insert(from.to_string(), serde_json::json!("x"));
                    }
                    let got = convert(&argo, &given);
                    assert!(got.unknown.is_empty(), "{n}: {:?}", got.unknown);
                    assert_eq!(got.notes.len(), argo.not_needed.len(), "{n}");
                    for (from, to) in argo.settings {
                        assert!(got.settings.contains_key(*to), "{n}: {from} -> {to}: {:?}", got.settings);
                    }
                }
                None => {
                    assert!(
                        matches!(
                            kind.as_str(),
                            "console"
                                | "splunk"
                                | "signed-webhook"
                                | "syslog"
                                | "elasticsearch"
                                | "loki"
                                | "otlp"
                                | "sentinel"
                                | "secops"
                                | "securitylake"
                        ),
                        "{kind:?} has no Argo CD mapping"
                    )
                }
            }
        }
        assert!(argo_service("pagerduty").is_none(), "Argo CD's pagerduty (v1) is not driftwatch's pagerduty (Events v2)");
    }
}
