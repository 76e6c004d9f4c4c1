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
pub mod gotmpl;
pub mod refusal;
pub mod yaml;

pub use refusal::Refusal;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value, json};

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

/// One entry of the notifications configuration (`trigger.on-x`, `service.slack`, ...)
/// with where it was found.
#[derive(Debug, Clone)]
struct Entry {
    file: String,
    line: usize,
    key: String,
    value: Value,
}

#[derive(Default)]
struct Input {
    entries: Vec<Entry>,
    secret_keys: BTreeMap<String, (String, usize)>,
    /// Files whose documents held nothing recognisable.
    unrecognised: Vec<String>,
}

/// The 1-based line of the first line that defines `key` (`key:`, `"key":`), or 1.
fn line_of(text: &str, key: &str) -> usize {
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start().trim_start_matches("- ");
        for form in [format!("{key}:"), format!("\"{key}\":"), format!("'{key}':")] {
            if t.starts_with(&form) {
                return i + 1;
            }
        }
    }
    1
}

fn is_notifications_key(k: &str) -> bool {
    ["trigger.", "template.", "service.", "triggers.", "templates.", "services.", "defaultTriggers"].iter().any(|p| k.starts_with(p))
        || matches!(k, "subscriptions" | "context")
}

/// The YAML files of `paths`: a file as given, a directory's `.yaml`/`.yml` files at
/// any depth in name order (Argo CD's catalog as argo-cd keeps it is a directory).
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Unreadable> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .and_then(|d| d.map(|e| e.map(|e| e.path())).collect())
            .map_err(|e| Unreadable(format!("{}: cannot read the directory: {e}", path.display())))?;
        entries.sort();
        let (dirs, plain): (Vec<PathBuf>, Vec<PathBuf>) = entries.into_iter().partition(|p| p.is_dir());
        files.extend(plain.into_iter().filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml")));
        files.extend(expand(&dirs)?);
    }
    Ok(files)
}

/// A file of Argo CD's catalog source (`triggers/<name>.yaml`: a list of conditions;
/// `templates/<name>.yaml`: a map of template fields), as the key it has in the
/// ConfigMap that argo-cd builds from them.
fn catalog_key(path: &Path, doc: &Value) -> Option<String> {
    let stem = path.file_stem()?.to_str()?;
    let dir = path.parent()?.file_name()?.to_str()?;
    match (dir, doc) {
        ("triggers", Value::Array(items)) if items.iter().all(|c| c.get("when").is_some() || c.get("send").is_some()) => {
            Some(format!("trigger.{stem}"))
        }
        ("templates", Value::Object(m)) if !m.contains_key("kind") && !m.contains_key("apiVersion") => Some(format!("template.{stem}")),
        _ => None,
    }
}

/// Reads the files into entries.
fn read(paths: &[PathBuf]) -> Result<Input, Unreadable> {
    let mut input = Input::default();
    for path in &expand(paths)? {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| Unreadable(format!("{name}: cannot read: {e}")))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| {
            let at = e.location().map(|l| format!("{}:{}: ", l.line(), l.column())).unwrap_or_default();
            Unreadable(format!("{name}:{at}not YAML: {}", e.without_snippet().to_string().lines().next().unwrap_or("")))
        })?;
        let before = input.entries.len() + input.secret_keys.len();
        match docs.as_slice() {
            [doc] if let Some(key) = catalog_key(path, doc) => {
                input.entries.push(Entry { file: name.clone(), line: 1, key, value: doc.clone() });
            }
            _ => {
                for doc in &docs {
                    document(doc, &name, &text, &mut input);
                }
            }
        }
        if input.entries.len() + input.secret_keys.len() == before {
            input.unrecognised.push(name);
        }
    }
    Ok(input)
}

fn document(doc: &Value, file: &str, text: &str, input: &mut Input) {
    let Some(obj) = doc.as_object() else { return };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let mut push = |key: &str, value: Value| {
        input.entries.push(Entry { file: file.to_string(), line: line_of(text, key), key: key.to_string(), value });
    };
    match kind {
        "List" => {
            for item in obj.get("items").and_then(Value::as_array).into_iter().flatten() {
                document(item, file, text, input);
            }
        }
        "ConfigMap" => {
            let mut data = obj.get("data").and_then(Value::as_object).cloned().unwrap_or_default();
            if data.is_empty() {
                // `kubectl get -o yaml` of an object applied with kubectl: the data may
                // only be in the last-applied annotation.
                let last = obj
                    .get("metadata")
                    .and_then(|m| m.get("annotations"))
                    .and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"))
                    .and_then(Value::as_str)
                    .and_then(|s| serde_json::from_str::<Value>(s).ok());
                if let Some(d) = last.as_ref().and_then(|l| l.get("data")).and_then(Value::as_object) {
                    data = d.clone();
                }
            }
            for (k, v) in data {
                push(&k, v);
            }
        }
        "Secret" => {
            for section in ["data", "stringData"] {
                for k in obj.get(section).and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
                    input.secret_keys.insert(k.clone(), (file.to_string(), line_of(text, k)));
                }
            }
        }
        "" if obj.get("data").is_some_and(Value::is_object) && !obj.contains_key("notifications") => {
            // A bare `data:` map, as cut out of the ConfigMap.
            for (k, v) in obj.get("data").and_then(Value::as_object).into_iter().flatten() {
                push(k, v.clone());
            }
        }
        _ => {
            if let Some(n) = obj.get("notifications").and_then(Value::as_object) {
                helm(n, file, text, input);
            } else if obj.keys().any(|k| is_notifications_key(k)) {
                for (k, v) in obj {
                    push(k, v.clone());
                }
            }
        }
    }
}

/// The `notifications:` section of argo-cd Helm values.
fn helm(n: &Map<String, Value>, file: &str, text: &str, input: &mut Input) {
    let mut push = |key: String, value: Value| {
        input.entries.push(Entry { file: file.to_string(), line: line_of(text, &key), key, value });
    };
    for section in ["notifiers", "triggers", "templates"] {
        for (k, v) in n.get(section).and_then(Value::as_object).into_iter().flatten() {
            push(k.clone(), v.clone());
        }
    }
    let mut context = n.get("context").and_then(Value::as_object).cloned().unwrap_or_default();
    if let Some(url) = n.get("argocdUrl").and_then(Value::as_str) {
        context.entry("argocdUrl").or_insert_with(|| json!(url));
    }
    if !context.is_empty() {
        push("context".into(), Value::Object(context));
    }
    for key in ["subscriptions", "defaultTriggers"] {
        if let Some(v) = n.get(key).filter(|v| !v.is_null()) {
            push(key.into(), v.clone());
        }
    }
    for k in n.get("secret").and_then(|s| s.get("items")).and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
        input.secret_keys.insert(k.clone(), (file.to_string(), line_of(text, k)));
    }
}

/// A value that Argo CD holds as YAML text inside a string (every ConfigMap value);
/// Helm values may give it already parsed.
fn embedded(v: &Value) -> Result<Value, String> {
    match v {
        Value::String(s) => serde_saphyr::from_str::<Value>(s).map_err(|e| {
            let at = e.location().map(|l| format!(" (line {} of the value)", l.line())).unwrap_or_default();
            format!("not YAML{at}: {}", e.without_snippet().to_string().lines().next().unwrap_or(""))
        }),
        other => Ok(other.clone()),
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
    let cfg_path = out_dir.join("driftwatch.yaml");
    if cfg_path.exists() && !force {
        return Err(Unreadable(format!("{} exists; import into an empty directory, or pass --force to replace it", cfg_path.display())));
    }
    let mut out = Out {
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
    };
    for name in &input.unrecognised {
        out.report.notes.push(Todo {
            file: name.clone(),
            line: 1,
            item: "file".into(),
            reason: "nothing to import was found in it".into(),
        });
    }
    for e in &input.entries {
        convert_entry(e, &mut out);
    }
    write(&input, out, out_dir)
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

// ---- triggers -----------------------------------------------------------------------

/// The line of `needle` within an entry's value, as a line of the source file.
fn inner_line(e: &Entry, needle: &str) -> usize {
    let Value::String(s) = &e.value else { return e.line };
    let first = needle.lines().next().unwrap_or("").trim();
    if first.is_empty() {
        return e.line;
    }
    s.lines().position(|l| l.contains(first)).map_or(e.line, |i| e.line + i + 1)
}

/// The line of `e`'s file that holds byte `at` of `src`, a text inside the entry.
fn line_at(e: &Entry, src: &str, at: usize) -> usize {
    inner_line(e, src) + src.get(..at).map_or(0, |before| before.matches('\n').count())
}

/// An expr expression as rhai that compiles.
fn translate_expr(src: &str) -> Result<String, Refusal> {
    let rhai = expr::to_rhai(src)?;
    crate::trigger::compiles(&rhai)
        .map_err(|e| Refusal::new(0, format!("the translation does not compile ({e}); please report this as a driftwatch bug")))?;
    Ok(rhai)
}

fn trigger(e: &Entry, name: &str, out: &mut Out) {
    let item = format!("trigger {name}");
    let parsed = match embedded(&e.value) {
        Ok(v) => v,
        Err(reason) => {
            out.report.triggers.todo += 1;
            let line = out.todo(e, &item, &reason);
            out.triggers.insert(name.to_string(), format!("{line}\n{}[]\n", commented(&display(&e.value))));
            return;
        }
    };
    let conditions = match parsed {
        Value::Array(items) => items,
        Value::Object(m) => {
            out.note(e, &item, "written as a map; Argo CD expects a list of conditions (imported as a list of one)");
            vec![Value::Object(m)]
        }
        _ => {
            out.report.triggers.todo += 1;
            let line = out.todo(e, &item, "not a list of conditions");
            out.triggers.insert(name.to_string(), format!("{line}\n{}[]\n", commented(&display(&e.value))));
            return;
        }
    };
    let mut text = format!("# Imported by `driftwatch import` from {}:{} ({}).\n", e.file, e.line, e.key);
    let mut todo = false;
    let mut written = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let Some(c) = c.as_object() else {
            todo = true;
            text.push_str(&out.todo(e, &format!("{item}[{i}]"), "a condition must be a map"));
            text.push('\n');
            continue;
        };
        let mut cond = Map::new();
        let mut comments = String::new();
        let when = c.get("when").or_else(|| c.get("condition"));
        match when {
            Some(Value::Bool(b)) => {
                cond.insert("when".into(), json!(b));
            }
            Some(Value::String(src)) if src.trim().is_empty() => {
                // notifications-engine compiles an empty condition as `false`.
                out.note(e, &format!("{item}[{i}].when"), "empty: Argo CD evaluates it as false, so the condition never sends");
                cond.insert("when".into(), json!(false));
            }
            Some(Value::String(src)) => match translate_expr(src) {
                Ok(rhai) => {
                    cond.insert("when".into(), json!(rhai));
                }
                Err(refused) => {
                    todo = true;
                    let at = Entry { line: line_at(e, src, refused.at), ..e.clone() };
                    comments.push_str(&out.todo(&at, &format!("{item}[{i}].when"), &refused.reason));
                    comments.push('\n');
                    comments.push_str(&commented(src));
                    cond.insert("when".into(), json!(false));
                }
            },
            None | Some(Value::Null) => {
                out.note(e, &format!("{item}[{i}]"), "has no `when`: Argo CD evaluates it as false, so the condition never sends");
                cond.insert("when".into(), json!(false));
            }
            Some(_) => {
                todo = true;
                comments.push_str(&out.todo(e, &format!("{item}[{i}].when"), "not an expression"));
                comments.push('\n');
                cond.insert("when".into(), json!(false));
            }
        }
        if let Some(d) = c.get("description").and_then(Value::as_str) {
            cond.insert("description".into(), json!(d));
        }
        let mut send: Vec<Value> = match c.get("send") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::String(s)) => vec![json!(s)],
            _ => Vec::new(),
        };
        if let Some(t) = c.get("template").and_then(Value::as_str) {
            // Old argocd-notifications trigger items named one template.
            send.push(json!(t));
        }
        if send.is_empty() {
            // Argo CD accepts it and sends nothing; so does driftwatch (check warns).
            out.note(e, &format!("{item}[{i}].send"), "empty: the condition sends nothing, as in Argo CD");
        }
        let mut kept = Vec::new();
        for t in send {
            let name = t.as_str().unwrap_or_default();
            let builtin = crate::config::catalog::TEMPLATES.iter().any(|(n, _, _)| *n == name);
            if out.source_templates.contains(name) || builtin {
                kept.push(t);
            } else {
                // Argo CD logs an error when it would send it and carries on; driftwatch
                // refuses a configuration naming a template that does not exist. Left out
                // of `send`, named in the mark.
                todo = true;
                let reason = format!(
                    "sends template {name:?}, which the source does not define (Argo CD logs an error each time it would send it), left out of `send`: define it and add it back, or leave it out"
                );
                comments.push_str(&out.todo(e, &format!("{item}[{i}].send"), &reason));
                comments.push('\n');
            }
        }
        cond.insert("send".into(), Value::Array(kept));
        match c.get("oncePer") {
            Some(Value::String(src)) if !src.trim().is_empty() => match translate_expr(src) {
                Ok(rhai) => {
                    cond.insert("oncePer".into(), json!(rhai));
                }
                Err(refused) => {
                    todo = true;
                    let at = Entry { line: line_at(e, src, refused.at), ..e.clone() };
                    comments.push_str(&out.todo(&at, &format!("{item}[{i}].oncePer"), &refused.reason));
                    comments.push('\n');
                    comments.push_str(&commented(src));
                }
            },
            Some(other) if !other.is_null() && other.as_str().is_none() => {
                todo = true;
                comments.push_str(&out.todo(e, &format!("{item}[{i}].oncePer"), "not an expression"));
                comments.push('\n');
            }
            _ => {}
        }
        for k in c.keys() {
            if !matches!(k.as_str(), "when" | "condition" | "description" | "send" | "template" | "oncePer") {
                let reason = match k.as_str() {
                    "enabled" | "name" | "title" => "a field of old argocd-notifications triggers; not needed".to_string(),
                    _ => format!("`{k}` is not a trigger field Argo CD knows; left out"),
                };
                out.note(e, &format!("{item}[{i}].{k}"), &reason);
            }
        }
        text.push_str(&comments);
        written.push(Value::Object(cond));
        let _ = i;
    }
    // Each condition, with its TODO comments above it.
    let body = yaml::to_yaml(&Value::Array(written));
    text.push_str(&body);
    if todo {
        out.report.triggers.todo += 1;
    } else {
        out.report.triggers.converted += 1;
    }
    out.triggers.insert(name.to_string(), text);
}

// ---- templates ----------------------------------------------------------------------

/// The driftwatch section an Argo CD template section maps onto.
fn target_section(section: &str) -> &str {
    match section {
        "pagerdutyv2" => "pagerduty",
        // Argo CD's `teams-workflows` fields are the `teams` ones, which both kinds read.
        "teams-workflows" => "teams",
        other => other,
    }
}

/// Destination kinds driftwatch does not have (yet): their template sections and
/// services are reported.
const OTHER_KINDS: &[&str] = &["pagerduty", "awssqs", "gitlab", "nats", "pubsub", "kafka"];

struct TemplateWork<'a> {
    e: &'a Entry,
    item: String,
    todo: bool,
    comments: String,
}

/// Fields whose rendered text must be JSON.
fn is_json_field(field: &str, src: &str) -> bool {
    let (section, rest) = field.split_once('.').unwrap_or((field, ""));
    crate::template::is_json_field(&format!("{}.{rest}", target_section(section)))
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
        match translated {
            Ok(t) => {
                for n in t.notes {
                    out.note(self.e, &format!("{}.{field}", self.item), &n);
                }
                Some(t.text)
            }
            Err(refused) => {
                self.todo = true;
                let at = Entry { line: line_at(self.e, src, refused.at), ..self.e.clone() };
                self.comments.push_str(&out.todo(&at, &format!("{}.{field}", self.item), &refused.reason));
                self.comments.push('\n');
                self.comments.push_str(&commented(src));
                None
            }
        }
    }

    fn drop_section(&mut self, out: &mut Out, section: &str, v: &Value, reason: &str) {
        self.todo = true;
        self.comments.push_str(&out.todo(self.e, &format!("{}.{section}", self.item), reason));
        self.comments.push('\n');
        self.comments.push_str(&commented(&yaml::to_yaml(&json!({ section: v }))));
    }
}

fn template(e: &Entry, name: &str, out: &mut Out) {
    let item = format!("template {name}");
    let mut w = TemplateWork { e, item: item.clone(), todo: false, comments: String::new() };
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
            ("webhook", Value::Object(hooks)) => {
                let mut converted = Map::new();
                for (svc, fields) in hooks {
                    let mut f = Map::new();
                    for (k, v) in fields.as_object().into_iter().flatten() {
                        match (k.as_str(), v.as_str()) {
                            ("method" | "path" | "body", Some(src)) => {
                                if let Some(t) = w.translate(out, &format!("webhook.{svc}.{k}"), src) {
                                    f.insert(k.clone(), json!(t));
                                }
                            }
                            _ => w.drop_section(out, &format!("webhook.{svc}.{k}"), v, "not a webhook template field (method, path, body)"),
                        }
                    }
                    converted.insert(svc.clone(), Value::Object(f));
                }
                def.insert("webhook".into(), Value::Object(converted));
            }
            ("github", Value::Object(fields)) => {
                let mut f = Map::new();
                for (k, v) in fields {
                    let subfields: &[&str] = match k.as_str() {
                        "status" => &["state", "label", "targetURL"],
                        "deployment" => &[
                            "state",
                            "environment",
                            "environmentURL",
                            "logURL",
                            "reference",
                            "requiredContexts",
                            "autoMerge",
                            "transientEnvironment",
                        ],
                        "pullRequestComment" => &["content", "commentTag"],
                        _ => &[],
                    };
                    match (k.as_str(), v) {
                        ("repoURLPath" | "revisionPath", Value::String(src)) => {
                            if let Some(t) = w.translate(out, &format!("github.{k}"), src) {
                                f.insert(k.clone(), json!(t));
                            }
                        }
                        (_, Value::Object(m)) if !subfields.is_empty() => {
                            let mut sub = Map::new();
                            for (sk, sv) in m {
                                match sv {
                                    _ if !subfields.contains(&sk.as_str()) => w.drop_section(
                                        out,
                                        &format!("github.{k}.{sk}"),
                                        sv,
                                        &format!("driftwatch's github.{k} has no `{sk}` field"),
                                    ),
                                    Value::String(src) => {
                                        if let Some(t) = w.translate(out, &format!("github.{k}.{sk}"), src) {
                                            sub.insert(sk.clone(), json!(t));
                                        }
                                    }
                                    other => {
                                        sub.insert(sk.clone(), other.clone());
                                    }
                                }
                            }
                            f.insert(k.clone(), Value::Object(sub));
                        }
                        _ => w.drop_section(
                            out,
                            &format!("github.{k}"),
                            v,
                            "not a github field driftwatch has (repoURLPath, revisionPath, status, deployment, pullRequestComment)",
                        ),
                    }
                }
                def.insert("github".into(), Value::Object(f));
            }
            ("alertmanager", Value::Object(fields)) => {
                let mut f = Map::new();
                for (k, v) in fields {
                    match (k.as_str(), v) {
                        ("labels" | "annotations", Value::Object(m)) => {
                            let mut converted = Map::new();
                            for (name, value) in m {
                                let src = value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
                                if let Some(t) = w.translate(out, &format!("alertmanager.{k}.{name}"), &src) {
                                    converted.insert(name.clone(), json!(t));
                                }
                            }
                            f.insert(k.clone(), Value::Object(converted));
                        }
                        ("generatorURL", Value::String(src)) => {
                            if let Some(t) = w.translate(out, "alertmanager.generatorURL", src) {
                                f.insert(k.clone(), json!(t));
                            }
                        }
                        _ => w.drop_section(
                            out,
                            &format!("alertmanager.{k}"),
                            v,
                            "not an alertmanager field (labels, annotations, generatorURL)",
                        ),
                    }
                }
                def.insert("alertmanager".into(), Value::Object(f));
            }
            (
                s @ ("email" | "slack" | "pagerdutyv2" | "teams" | "teams-workflows" | "opsgenie" | "googlechat" | "mattermost"
                | "telegram" | "pushover" | "newrelic" | "rocketchat"),
                Value::Object(fields),
            ) => {
                let target = target_section(s);
                let mut f = Map::new();
                for (k, v) in fields {
                    match (crate::template::has_field(&format!("{target}.{k}")).then_some(k.as_str()), v) {
                        (Some(dw), Value::String(src)) => {
                            if let Some(t) = w.translate(out, &format!("{s}.{k}"), src) {
                                f.insert(dw.into(), json!(t));
                            }
                        }
                        // Lists and maps Argo CD takes as YAML (Opsgenie's tags, details):
                        // driftwatch's fields are JSON text.
                        (Some(dw), v @ (Value::Array(_) | Value::Object(_))) => {
                            let src = serde_json::to_string_pretty(v).unwrap_or_default();
                            if let Some(t) = w.translate(out, &format!("{s}.{k}"), &src) {
                                f.insert(dw.into(), json!(t));
                            }
                        }
                        (Some(dw), v @ (Value::Number(_) | Value::Bool(_))) => {
                            f.insert(dw.into(), json!(v.to_string()));
                        }
                        _ => match (s, k.as_str(), v) {
                            ("slack", "notifyBroadcast", Value::Bool(false)) | ("slack", "deliveryPolicy", Value::String(_))
                                if v.as_str().is_none_or(|p| p == "Post") =>
                            {
                                out.note(e, &format!("{item}.{s}.{k}"), "Argo CD's default; driftwatch behaves the same");
                            }
                            ("slack", "deliveryPolicy", _) | ("slack", "notifyBroadcast", _) => w.drop_section(
                                out,
                                &format!("{s}.{k}"),
                                v,
                                "driftwatch has no such Slack setting: it posts, and updates a message with `resolve: true` conditions",
                            ),
                            _ => w.drop_section(out, &format!("{s}.{k}"), v, &format!("driftwatch's {target} template has no `{k}` field")),
                        },
                    }
                }
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
                w.comments.push_str(&format!("# Not imported: no {s} service is configured, and driftwatch has no {s} destination.\n"));
                w.comments.push_str(&commented(&yaml::to_yaml(&json!({ s: v }))));
            }
            (s, v) => w.drop_section(out, s, v, &format!("`{s}` is not a template field driftwatch knows")),
        }
    }
    if w.todo {
        out.report.templates.todo += 1;
    } else {
        out.report.templates.converted += 1;
    }
    let mut text = format!("# Imported by `driftwatch import` from {}:{} ({}).\n", e.file, e.line, e.key);
    text.push_str(&w.comments);
    text.push_str(&if def.is_empty() { "{}\n".to_string() } else { yaml::to_yaml(&Value::Object(def)) });
    out.templates.insert(name.to_string(), text);
}

// ---- services -----------------------------------------------------------------------

fn collect_refs(v: &Value, refs: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            for part in s.split('$').skip(1) {
                let key: String = part.chars().take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.')).collect();
                if !key.is_empty() {
                    refs.push(key);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, refs)),
        Value::Object(m) => m.values().for_each(|x| collect_refs(x, refs)),
        _ => {}
    }
}

fn service(e: &Entry, rest: &str, out: &mut Out) {
    let (kind, name) = rest.split_once('.').map_or((rest, rest), |(k, n)| (k, n));
    let item = format!("service {rest}");
    let cfg = match embedded(&e.value) {
        Ok(Value::Object(m)) => m,
        Ok(Value::Null) => Map::new(),
        Ok(_) | Err(_) => {
            out.report.services.todo += 1;
            let line = out.todo(e, &item, "not a map of settings");
            out.config_todos.push(line);
            return;
        }
    };
    let mut refs = Vec::new();
    collect_refs(&Value::Object(cfg.clone()), &mut refs);
    let mut svc = Map::new();
    let mut unknown: Vec<String> = Vec::new();
    let copy = |svc: &mut Map<String, Value>, from: &str, to: &str| {
        if let Some(v) = cfg.get(from) {
            svc.insert(to.into(), v.clone());
        }
    };
    let converted = match kind {
        "slack" => {
            for (from, to) in [("token", "token"), ("username", "username"), ("icon", "icon"), ("apiURL", "apiUrl")] {
                copy(&mut svc, from, to);
            }
            for k in cfg.keys() {
                match k.as_str() {
                    "token" | "username" | "icon" | "apiURL" => {}
                    "signingSecret" => {
                        out.note(e, &format!("{item}.signingSecret"), "used by Argo CD for incoming Slack requests only; not needed")
                    }
                    other => unknown.push(other.into()),
                }
            }
            true
        }
        "email" => {
            svc.insert("type".into(), json!("email"));
            for f in ["host", "port", "from", "username", "password"] {
                copy(&mut svc, f, f);
            }
            let port = cfg.get("port").and_then(|p| p.as_u64().or_else(|| p.as_str().and_then(|s| s.parse().ok())));
            // Argo CD (gomail) uses implicit TLS on 465 and STARTTLS elsewhere.
            svc.insert("tls".into(), json!(if port == Some(465) { "implicit" } else { "starttls" }));
            for k in cfg.keys() {
                match k.as_str() {
                    "host" | "port" | "from" | "username" | "password" => {}
                    "html" => out.note(e, &format!("{item}.html"), "driftwatch sends an HTML part when the template has `email.html`"),
                    other => unknown.push(other.into()),
                }
            }
            true
        }
        "webhook" => {
            svc.insert("type".into(), json!("webhook"));
            copy(&mut svc, "url", "url");
            copy(&mut svc, "basicAuth", "basicAuth");
            copy(&mut svc, "insecureSkipVerify", "insecureSkipVerify");
            if let Some(h) = cfg.get("headers").and_then(Value::as_array) {
                let mut headers = Map::new();
                for hd in h {
                    if let (Some(n), Some(v)) = (hd.get("name").and_then(Value::as_str), hd.get("value")) {
                        headers.insert(n.into(), json!(display(v)));
                    }
                }
                svc.insert("headers".into(), Value::Object(headers));
            }
            for k in cfg.keys() {
                match k.as_str() {
                    "url" | "basicAuth" | "insecureSkipVerify" | "headers" => {}
                    "retryWaitMin" | "retryWaitMax" | "retryMax" => {
                        out.note(e, &format!("{item}.{k}"), "driftwatch retries with its own backoff (see `retry:` in destinations.md)")
                    }
                    other => unknown.push(other.into()),
                }
            }
            true
        }
        k @ ("teams" | "opsgenie" | "alertmanager" | "googlechat" | "github" | "telegram" | "mattermost" | "grafana" | "webex"
        | "teams-workflows" | "pushover" | "newrelic" | "rocketchat") => {
            let allowed: &[&str] = match k {
                "rocketchat" => &["serverUrl", "email", "password"],
                "teams-workflows" => &["recipientUrls"],
                "newrelic" => &["apiURL", "apiKey"],
                "telegram" | "webex" | "pushover" => &["token"],
                "mattermost" => &["apiURL", "token", "insecureSkipVerify"],
                "grafana" => &["apiUrl", "apiKey", "insecureSkipVerify"],
                "github" => &["appID", "installationID", "privateKey", "enterpriseBaseURL"],
                "teams" => &["recipientUrls"],
                "opsgenie" => &["apiUrl", "apiKeys"],
                "alertmanager" => &["targets", "scheme", "apiPath", "basicAuth", "bearerToken", "insecureSkipVerify"],
                _ => &["webhooks"],
            };
            svc.insert("type".into(), json!(k));
            for (key, v) in &cfg {
                if allowed.contains(&key.as_str()) {
                    svc.insert(key.clone(), v.clone());
                } else {
                    unknown.push(key.clone());
                }
            }
            true
        }
        "pagerdutyv2" => {
            svc.insert("type".into(), json!("pagerduty"));
            copy(&mut svc, "serviceKeys", "routingKeys");
            for k in cfg.keys() {
                if k != "serviceKeys" {
                    unknown.push(k.clone());
                }
            }
            true
        }
        _ => false,
    };
    if !converted {
        out.report.services.todo += 1;
        let reason = if OTHER_KINDS.contains(&kind) {
            format!("driftwatch has no {kind} destination; subscriptions to `{name}` are reported until it is configured")
        } else {
            format!("unknown service type `{kind}`")
        };
        let mut line = out.todo(e, &item, &reason);
        line.push('\n');
        line.push_str(&commented(&display(&e.value)));
        out.config_todos.push(line);
        return;
    }
    if !unknown.is_empty() {
        out.report.services.todo += 1;
        let line = out.todo(e, &item, &format!("settings driftwatch's {kind} service does not have: {}", unknown.join(", ")));
        out.config_todos.push(line);
    } else {
        out.report.services.converted += 1;
    }
    for r in refs {
        out.secret_refs.entry(r).or_insert_with(|| name.to_string());
    }
    let services = out.config.entry("services").or_insert_with(|| json!({}));
    if let Some(m) = services.as_object_mut() {
        m.insert(name.to_string(), Value::Object(svc));
    }
}

// ---- subscriptions ------------------------------------------------------------------

fn subscriptions(e: &Entry, out: &mut Out) {
    let list = match embedded(&e.value) {
        Ok(Value::Array(a)) => a,
        _ => {
            out.report.subscriptions.todo += 1;
            let mut line = out.todo(e, "subscriptions", "not a list of subscriptions");
            line.push('\n');
            line.push_str(&commented(&display(&e.value)));
            out.config_todos.push(line);
            return;
        }
    };
    let mut converted = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let Some(m) = s.as_object() else {
            out.report.subscriptions.todo += 1;
            let line = out.todo(e, &format!("subscriptions[{i}]"), "not a map");
            out.config_todos.push(line);
            continue;
        };
        let mut sub = Map::new();
        let mut bad = Vec::new();
        // Argo CD's recipients are `service:recipient`; one without a service names none.
        let recipients: Vec<&str> = match m.get("recipients") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            Some(Value::String(r)) => vec![r.as_str()],
            _ => Vec::new(),
        };
        let triggers: Vec<Value> = match m.get("triggers") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::String(t)) => vec![json!(t)],
            _ => Vec::new(),
        };
        if let Some(reason) = out.unknown_triggers(&triggers) {
            out.report.subscriptions.todo += 1;
            let mut line = out.todo(e, &format!("subscriptions[{i}]"), &reason);
            line.push('\n');
            line.push_str(&commented(&yaml::to_yaml(s)));
            out.config_todos.push(line);
            continue;
        }
        let unnamed: Vec<&str> = recipients.iter().copied().filter(|r| !r.contains(':')).collect();
        let unknown: Vec<&str> = recipients
            .iter()
            .filter_map(|r| r.split_once(':').map(|(s, _)| s))
            .filter(|s| !out.source_services.contains(*s) && crate::model::DestinationKind::parse(s).is_none())
            .collect();
        if !unnamed.is_empty() || !unknown.is_empty() {
            out.report.subscriptions.todo += 1;
            let reason = if !unnamed.is_empty() {
                format!(
                    "recipient(s) {} name no service (Argo CD's form is `service:recipient`, e.g. `email:{}`)",
                    unnamed.join(", "),
                    unnamed[0]
                )
            } else {
                format!(
                    "service(s) {} are not configured in the source (Argo CD logs an error each time it would send): configure them, or remove the recipients",
                    unknown.join(", ")
                )
            };
            let mut line = out.todo(e, &format!("subscriptions[{i}]"), &reason);
            line.push('\n');
            line.push_str(&commented(&yaml::to_yaml(s)));
            out.config_todos.push(line);
            continue;
        }
        for (k, v) in m {
            match (k.as_str(), v) {
                ("recipients" | "triggers", Value::Array(_)) => {
                    sub.insert(k.clone(), v.clone());
                }
                ("recipients" | "triggers", Value::String(one)) => {
                    sub.insert(k.clone(), json!([one]));
                }
                ("selector", Value::String(sel)) => {
                    sub.insert("selector".into(), json!(sel));
                }
                _ => bad.push(k.clone()),
            }
        }
        if bad.is_empty() {
            out.report.subscriptions.converted += 1;
            converted.push(Value::Object(sub));
        } else {
            out.report.subscriptions.todo += 1;
            let mut line = out.todo(e, &format!("subscriptions[{i}]"), &format!("fields driftwatch does not have: {}", bad.join(", ")));
            line.push('\n');
            line.push_str(&commented(&yaml::to_yaml(s)));
            out.config_todos.push(line);
        }
    }
    if !converted.is_empty() {
        let all = out.config.entry("subscriptions").or_insert_with(|| json!([]));
        if let Some(a) = all.as_array_mut() {
            a.extend(converted);
        }
    }
}

// ---- writing ------------------------------------------------------------------------

fn write_file(dir: &Path, rel: &str, text: &str, report: &mut Report) -> Result<(), Unreadable> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Unreadable(format!("{}: cannot create: {e}", parent.display())))?;
    }
    std::fs::write(&path, text).map_err(|e| Unreadable(format!("{}: cannot write: {e}", path.display())))?;
    report.written.push(rel.to_string());
    Ok(())
}

/// A file name for a trigger or template name (`/` and other separators replaced).
fn file_name(name: &str) -> String {
    name.chars().map(|c| if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
}

fn write(input: &Input, mut out: Out, dir: &Path) -> Result<Report, Unreadable> {
    let mut report = std::mem::take(&mut out.report);
    let sources: Vec<&str> = {
        let mut s: Vec<&str> = input.entries.iter().map(|e| e.file.as_str()).collect();
        s.dedup();
        s
    };
    let mut secret_keys: BTreeMap<String, String> = BTreeMap::new();
    for (k, (file, line)) in &input.secret_keys {
        secret_keys.insert(k.clone(), format!("from {file}:{line}"));
    }
    for (k, svc) in &out.secret_refs {
        secret_keys.entry(k.clone()).or_insert_with(|| format!("referenced by service {svc}"));
    }
    if !secret_keys.is_empty() {
        out.config.insert("secretsFile".into(), json!("secrets.yaml"));
        let mut text = String::from(
            "# Secrets of the imported configuration: keys only, never values. Fill in each value,\n\
             # or point secretsFile in driftwatch.yaml at the directory where the\n\
             # argocd-notifications-secret Secret is mounted (the keys are the same).\n",
        );
        for (k, why) in &secret_keys {
            text.push_str(&format!("# {k}: \"\"   # {why}\n"));
        }
        write_file(dir, "secrets.yaml", &text, &mut report)?;
    }
    let mut cfg = format!("# Imported by `driftwatch import` from {}.\n", sources.join(", "));
    cfg.push_str("# Triggers are in triggers/, templates in templates/ (both read from next to this file).\n");
    if !out.config.is_empty() {
        cfg.push_str(&yaml::to_yaml(&Value::Object(std::mem::take(&mut out.config))));
    }
    for t in &out.config_todos {
        cfg.push_str(t);
        if !t.ends_with('\n') {
            cfg.push('\n');
        }
    }
    write_file(dir, "driftwatch.yaml", &cfg, &mut report)?;
    for (name, text) in &out.triggers {
        write_file(dir, &format!("triggers/{}.yaml", file_name(name)), text, &mut report)?;
    }
    for (name, text) in &out.templates {
        write_file(dir, &format!("templates/{}.yaml", file_name(name)), text, &mut report)?;
    }
    Ok(report)
}

/// The report as text, for a person.
pub fn render_report(r: &Report) -> String {
    let mut s = String::new();
    for (what, c) in
        [("triggers", &r.triggers), ("templates", &r.templates), ("services", &r.services), ("subscriptions", &r.subscriptions)]
    {
        s.push_str(&format!("{what:<14} {:>3} converted, {:>3} need a hand\n", c.converted, c.todo));
    }
    if !r.todos.is_empty() {
        s.push_str(&format!(
            "\n{} item(s) need a hand (marked {TODO_MARKER} in the output; `driftwatch check` fails until they are resolved):\n",
            r.todos.len()
        ));
        for t in &r.todos {
            s.push_str(&format!("  {}:{}: {}: {}\n", t.file, t.line, t.item, t.reason));
        }
    }
    if !r.notes.is_empty() {
        s.push_str("\nnotes:\n");
        for t in &r.notes {
            s.push_str(&format!("  {}:{}: {}: {}\n", t.file, t.line, t.item, t.reason));
        }
    }
    s.push_str(&format!("\nwrote: {}\n", r.written.join(", ")));
    s
}
