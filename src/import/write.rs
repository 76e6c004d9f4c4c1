//! Writing the output: `driftwatch.yaml`, the trigger and template files, the secrets
//! skeleton; and the report as text.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::read::Input;
use super::{Out, Report, TODO_MARKER, Unreadable, yaml};

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

/// What the output says of its source: the files it came from, the secret keys they
/// hold (key, and the file and line of each), the opening comment of the secrets
/// skeleton and the comment under the first line of `driftwatch.yaml`.
pub(super) struct Origin<'a> {
    pub(super) sources: Vec<&'a str>,
    pub(super) secret_keys: &'a BTreeMap<String, (String, usize)>,
    pub(super) secrets_header: &'a str,
    pub(super) config_header: &'a str,
}

impl<'a> Origin<'a> {
    /// An Argo CD configuration's: the secret's keys are the same as the Secret's.
    pub(super) fn argocd(input: &'a Input) -> Origin<'a> {
        let mut sources: Vec<&str> = input.entries.iter().map(|e| e.file.as_str()).collect();
        sources.dedup();
        Origin {
            sources,
            secret_keys: &input.secret_keys,
            secrets_header: "# Secrets of the imported configuration: keys only, never values. Fill in each value,\n\
                             # or point secretsFile in driftwatch.yaml at the directory where the\n\
                             # argocd-notifications-secret Secret is mounted (the keys are the same).\n",
            config_header: "# Triggers are in triggers/, templates in templates/ (both read from next to this file).\n",
        }
    }
}

pub(super) fn write(origin: &Origin<'_>, mut out: Out, dir: &Path) -> Result<Report, Unreadable> {
    let mut report = std::mem::take(&mut out.report);
    let mut secret_keys: BTreeMap<String, String> = BTreeMap::new();
    for (k, (file, line)) in origin.secret_keys {
        secret_keys.insert(k.clone(), format!("from {file}:{line}"));
    }
    for (k, svc) in &out.secret_refs {
        secret_keys.entry(k.clone()).or_insert_with(|| format!("referenced by service {svc}"));
    }
    if !secret_keys.is_empty() {
        out.config.insert("secretsFile".into(), json!("secrets.yaml"));
        let mut text = origin.secrets_header.to_string();
        for (k, why) in &secret_keys {
            text.push_str(&format!("# {k}: \"\"   # {why}\n"));
        }
        write_file(dir, "secrets.yaml", &text, &mut report)?;
    }
    let mut cfg = format!("# Imported by `driftwatch import` from {}.\n", origin.sources.join(", "));
    cfg.push_str(origin.config_header);
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
