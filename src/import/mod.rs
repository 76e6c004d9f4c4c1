//! `driftwatch import`: an Argo CD notifications configuration turned into driftwatch's.
//!
//! Reads `argocd-notifications-cm` (a ConfigMap, a bare `data:` map, a `List`, a
//! `kubectl get -o yaml` dump), `argocd-notifications-secret` (keys only) and the
//! `notifications:` section of argo-cd Helm values; writes `driftwatch.yaml`,
//! `triggers/*.yaml`, `templates/*.yaml` and a secrets skeleton; reports per item what
//! was converted and what needs a hand. Conditions go through [`expr`], templates
//! through [`gotmpl`]. An item that cannot be converted is written with a
//! `TODO(import)` comment naming its source file and line, which `driftwatch check`
//! (and `run`) refuse until a person resolves it: nothing is dropped silently.

pub mod expr;
pub mod flux;
pub mod gotmpl;
mod marks;
mod read;
pub mod refusal;
mod services;
mod subscriptions;
mod templates;
mod triggers;
mod write;
pub mod yaml;

pub use refusal::Refusal;
pub use write::render_report;

use read::{Entry, embedded, read};
use services::service;
use subscriptions::subscriptions;
use templates::template;
use triggers::trigger;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

/// The marker `driftwatch check` refuses.
pub const TODO_MARKER: &str = crate::source::IMPORT_TODO;

/// Input that could not be read at all (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

/// Per kind of item: how many were converted and how many need a hand.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub converted: usize,
    pub todo: usize,
}

/// One item that needs a hand (or, in `notes`, was converted with a caveat).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Todo {
    pub file: String,
    pub line: usize,
    pub item: String,
    pub reason: String,
}

/// What `driftwatch import` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub triggers: Counts,
    pub templates: Counts,
    pub services: Counts,
    pub subscriptions: Counts,
    pub todos: Vec<Todo>,
    /// Converted, with something worth knowing.
    pub notes: Vec<Todo>,
    /// Files written, relative to the output directory.
    pub written: Vec<String>,
}

impl Report {
    pub fn complete(&self) -> bool {
        self.todos.is_empty()
    }
}

/// The output being built.
struct Out {
    report: Report,
    config: Map<String, Value>,
    /// Lines appended to driftwatch.yaml (TODO comments).
    config_todos: Vec<String>,
    triggers: BTreeMap<String, String>,
    templates: BTreeMap<String, String>,
    secret_refs: BTreeMap<String, String>,
    /// Kinds of the services configured (`teams` for `service.teams`).
    service_kinds: std::collections::BTreeSet<String>,
    /// Templates the source defines (`template.<name>`).
    source_templates: std::collections::BTreeSet<String>,
    /// Services the source configures, by the name subscriptions use (`gmail` for
    /// `service.email.gmail`).
    source_services: std::collections::BTreeSet<String>,
    /// Triggers the source defines (`trigger.<name>`).
    source_triggers: std::collections::BTreeSet<String>,
}

impl Out {
    /// An empty output for `input`, knowing what the source defines.
    fn new(input: &read::Input) -> Out {
        Out {
            report: Report::default(),
            config: Map::new(),
            config_todos: Vec::new(),
            triggers: BTreeMap::new(),
            templates: BTreeMap::new(),
            secret_refs: BTreeMap::new(),
            service_kinds: input
                .entries
                .iter()
                .filter_map(|e| e.key.strip_prefix("service."))
                .map(|k| k.split('.').next().unwrap_or(k).to_string())
                .collect(),
            source_templates: input.entries.iter().filter_map(|e| e.key.strip_prefix("template.")).map(str::to_string).collect(),
            source_services: input
                .entries
                .iter()
                .filter_map(|e| e.key.strip_prefix("service."))
                .map(|k| k.split_once('.').map_or(k, |(_, name)| name).to_string())
                .collect(),
            source_triggers: input.entries.iter().filter_map(|e| e.key.strip_prefix("trigger.")).map(str::to_string).collect(),
        }
    }

    fn todo(&mut self, e: &Entry, item: &str, reason: &str) -> String {
        self.report.todos.push(Todo { file: e.file.clone(), line: e.line, item: item.to_string(), reason: reason.to_string() });
        format!("# {TODO_MARKER} {}:{}: {item}: {}", e.file, e.line, reason.replace('\n', " "))
    }

    /// Whether a trigger of this name exists once imported: the source's or the catalog's.
    fn trigger_known(&self, name: &str) -> bool {
        self.source_triggers.contains(name) || crate::config::catalog::TRIGGERS.iter().any(|(n, _, _)| *n == name)
    }

    /// The names of `list` that name no trigger, as a mark's reason (`None`: all do).
    fn unknown_triggers(&self, list: &[Value]) -> Option<String> {
        let unknown: Vec<String> =
            list.iter().filter_map(Value::as_str).filter(|t| !self.trigger_known(t)).map(|t| format!("{t:?}")).collect();
        (!unknown.is_empty()).then(|| {
            format!(
                "trigger(s) {} are defined neither in the source nor in driftwatch's catalog (Argo CD logs an error each time it would evaluate them)",
                unknown.join(", ")
            )
        })
    }

    fn note(&mut self, e: &Entry, item: &str, reason: &str) {
        self.report.notes.push(Todo { file: e.file.clone(), line: e.line, item: item.to_string(), reason: reason.to_string() });
    }

    /// A note for each file that held nothing to import.
    fn note_unrecognised(&mut self, files: &[String]) {
        for name in files {
            self.report.notes.push(Todo {
                file: name.clone(),
                line: 1,
                item: "file".into(),
                reason: "nothing to import was found in it".into(),
            });
        }
    }
}

/// `text` as YAML comment lines (the original of what was not converted).
fn commented(text: &str) -> String {
    text.lines().map(|l| format!("#   {l}\n")).collect()
}

/// Imports `files` into `out_dir`. Refuses to write over an existing `driftwatch.yaml`
/// unless `force`.
pub fn import(files: &[PathBuf], out_dir: &Path, force: bool) -> Result<Report, Unreadable> {
    let input = read(files)?;
    if input.entries.is_empty() && input.secret_keys.is_empty() {
        return Err(Unreadable(format!(
            "{}: no Argo CD notifications configuration found (expected the argocd-notifications-cm ConfigMap, its data map, a List, \
             the argocd-notifications-secret, or Helm values with a notifications: section)",
            input.unrecognised.join(", ")
        )));
    }
    refuse_overwrite(out_dir, force)?;
    let mut out = Out::new(&input);
    out.note_unrecognised(&input.unrecognised);
    for e in &input.entries {
        convert_entry(e, &mut out);
    }
    write::write(&write::Origin::argocd(&input), out, out_dir)
}

/// An existing `driftwatch.yaml` in `out_dir` is not replaced without `force`.
fn refuse_overwrite(out_dir: &Path, force: bool) -> Result<(), Unreadable> {
    let cfg_path = out_dir.join("driftwatch.yaml");
    if cfg_path.exists() && !force {
        return Err(Unreadable(format!("{} exists; import into an empty directory, or pass --force to replace it", cfg_path.display())));
    }
    Ok(())
}

fn convert_entry(e: &Entry, out: &mut Out) {
    let k = e.key.as_str();
    if let Some(name) = k.strip_prefix("trigger.") {
        trigger(e, name, out);
    } else if let Some(name) = k.strip_prefix("template.") {
        template(e, name, out);
    } else if let Some(rest) = k.strip_prefix("service.") {
        service(e, rest, out);
    } else if k == "subscriptions" {
        subscriptions(e, out);
    } else if k == "context" {
        match embedded(&e.value) {
            Ok(Value::Object(m)) => {
                out.config.insert("context".into(), Value::Object(m));
            }
            Ok(_) | Err(_) => {
                let line = out.todo(e, "context", "not a map of strings");
                out.config_todos.push(line);
            }
        }
    } else if k == "defaultTriggers" || k.starts_with("defaultTriggers.") {
        match embedded(&e.value) {
            Ok(Value::Array(names)) => {
                // A name that is no trigger is left out and marked: driftwatch refuses it.
                if let Some(reason) = out.unknown_triggers(&names) {
                    let line = out.todo(e, k, &format!("{reason}; left out of the list"));
                    out.config_todos.push(line);
                }
                let kept: Vec<Value> = names.into_iter().filter(|t| t.as_str().is_some_and(|t| out.trigger_known(t))).collect();
                out.config.insert(k.to_string(), Value::Array(kept));
            }
            _ => {
                let line = out.todo(e, k, "not a list of trigger names");
                out.config_todos.push(line);
            }
        }
    } else if let Some((plural, rest)) = ["triggers.", "templates.", "services."].iter().find_map(|p| k.strip_prefix(p).map(|r| (*p, r))) {
        let singular = &plural[..plural.len() - 2];
        let reason = format!("Argo CD ignores this key; did you mean `{singular}.{rest}`? Rename it and import again");
        let mut line = out.todo(e, k, &reason);
        line.push('\n');
        line.push_str(&commented(&display(&e.value)));
        out.config_todos.push(line);
    } else {
        out.note(e, k, "not a notifications setting; left out");
    }
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}
