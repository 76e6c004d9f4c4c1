//! `driftwatch import --flux`: Flux notification-controller objects turned into
//! driftwatch's configuration.
//!
//! Reads `Provider`s and `Alert`s (`notification.toolkit.fluxcd.io/v1beta3`, and
//! v1beta2) and the key names of the `Secret`s they reference ([`read`]); each Provider
//! becomes a service of the kind its type matches ([`provider`], [`kinds`]), each
//! Alert a subscription per event source ([`alert`]); the output, the report and the
//! `TODO(import)` marks are the Argo CD import's (`write`, `Out`).

mod alert;
mod kinds;
mod provider;
mod read;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::read::{Entry, Input as ArgoInput};
use super::write::{Origin, write};
use super::{Out, Report, Unreadable, commented, refuse_overwrite, yaml};
use read::{Object, SecretKeys};

/// The secrets skeleton's opening comment.
const SECRETS_HEADER: &str = "# Secrets of the imported configuration: keys only, never values. Each key is the\n\
     # Flux Secret's name and its key (`<secret>-<key>`): fill in each value from that Secret,\n\
     # or set it in driftwatch's environment (DRIFTWATCH_SECRET_<KEY>, upper case, `-` and `.` as `_`).\n";

/// The comment under the first line of `driftwatch.yaml`.
const CONFIG_HEADER: &str = "# Services from the Providers, subscriptions from the Alerts (one per event source).\n";

/// The triggers driftwatch adds that Flux has no counterpart of.
const DRIFT_TRIGGERS: &str = "on-drift-attempt, on-security-drift, on-live-drift, on-drift-resolved";

/// The output being built: the Argo CD import's, and the keys of the Secrets read
/// that a service references (key, and the file and line of each).
struct Imported {
    out: Out,
    secret_keys: BTreeMap<String, (String, usize)>,
}

impl Imported {
    /// A mark in `driftwatch.yaml` and a line of the report.
    fn todo(&mut self, e: &Entry, item: &str, reason: &str) {
        let line = self.out.todo(e, item, reason);
        self.out.config_todos.push(line);
    }

    /// A mark with `original` kept commented out below it.
    fn todo_kept(&mut self, e: &Entry, item: &str, reason: &str, original: &str) {
        let mut line = self.out.todo(e, item, reason);
        line.push('\n');
        line.push_str(&commented(original));
        self.out.config_todos.push(line);
    }
}

/// The place of a mark: a line of the object's file.
fn at_line(obj: &Object, line: usize) -> Entry {
    Entry { file: obj.file.clone(), line, key: String::new(), value: Value::Null }
}

/// An object's spec as YAML (the original kept beside a mark).
fn yaml_of_spec(obj: &Object) -> String {
    yaml::to_yaml(&json!({ "spec": obj.spec() }))
}

/// Names unique across namespaces: each object's name, or `<namespace>-<name>` where
/// two namespaces have one of that name.
fn unique_names<'a>(ids: impl Iterator<Item = (&'a Option<String>, &'a str)> + Clone) -> BTreeMap<(Option<String>, String), String> {
    let mut namespaces: BTreeMap<&str, BTreeSet<&Option<String>>> = BTreeMap::new();
    for (ns, name) in ids.clone() {
        namespaces.entry(name).or_default().insert(ns);
    }
    ids.map(|(ns, name)| {
        let unique = namespaces.get(name).is_none_or(|n| n.len() < 2);
        let named = match ns {
            Some(ns) if !unique => format!("{ns}-{name}"),
            _ => name.to_string(),
        };
        ((ns.clone(), name.to_string()), named)
    })
    .collect()
}

/// Imports `files` (Flux objects) into `out_dir`. Refuses to write over an existing
/// `driftwatch.yaml` unless `force`.
pub fn import(files: &[PathBuf], out_dir: &Path, force: bool) -> Result<Report, Unreadable> {
    let input = read::read(files)?;
    if input.providers.is_empty() && input.alerts.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(Unreadable(format!(
            "{}: no Flux notification objects found (expected Alert and Provider objects of notification.toolkit.fluxcd.io/v1beta3 or \
             v1beta2, and the Secrets they reference); an Argo CD notifications configuration is imported without --flux",
            names.join(", ")
        )));
    }
    refuse_overwrite(out_dir, force)?;
    let mut imp = Imported { out: Out::new(&ArgoInput::default()), secret_keys: BTreeMap::new() };
    imp.out.note_unrecognised(&input.unrecognised);
    let providers = last_of_each(&input.providers, &mut imp);
    let alerts = last_of_each(&input.alerts, &mut imp);
    let services = unique_names(providers.iter().map(|p| (&p.namespace, p.name.as_str())));
    let referenced: Vec<(Option<String>, String)> = providers
        .iter()
        .filter_map(|p| Some((p.namespace.clone(), p.spec().get("secretRef")?.get("name")?.as_str()?.to_string())))
        .collect();
    let prefixes = unique_names(referenced.iter().map(|(ns, n)| (ns, n.as_str())));
    let prefix_of =
        |ns: &Option<String>, name: &str| prefixes.get(&(ns.clone(), name.to_string())).cloned().unwrap_or_else(|| name.to_string());
    let secrets: BTreeMap<(Option<String>, String), (String, &SecretKeys)> =
        input.secrets.iter().map(|s| ((s.namespace.clone(), s.name.clone()), (s.file.clone(), s))).collect();
    let mut converted = alert::Providers::new();
    for p in &providers {
        let key = (p.namespace.clone(), p.name.clone());
        let service = services.get(&key).cloned().unwrap_or_else(|| p.name.clone());
        converted.insert(key, provider::provider(p, &service, &secrets, &prefix_of, &mut imp));
    }
    for a in &alerts {
        alert::alert(a, &converted, &mut imp);
    }
    notes(&input, &referenced, &alerts, &mut imp);
    let origin = Origin {
        sources: input.files.iter().map(String::as_str).collect(),
        secret_keys: &imp.secret_keys,
        secrets_header: SECRETS_HEADER,
        config_header: CONFIG_HEADER,
    };
    write(&origin, imp.out, out_dir)
}

/// Each object once: where the input has one twice (same namespace and name), the last,
/// as `kubectl apply` of the files in order would leave it, with a note. One without a
/// name is marked and left out.
fn last_of_each(objects: &[Object], imp: &mut Imported) -> Vec<Object> {
    let mut out: Vec<Object> = Vec::new();
    for o in objects {
        if o.name.is_empty() {
            let original = yaml_of_spec(o);
            imp.todo_kept(&at_line(o, o.line), "object", "it has no metadata.name (Kubernetes would refuse it); left out", &original);
            continue;
        }
        if let Some(i) = out.iter().position(|p| p.namespace == o.namespace && p.name == o.name) {
            let earlier = out.remove(i);
            let reason = format!("defined again at {}:{}; that one is imported", o.file, o.line);
            imp.out.note(&at_line(&earlier, earlier.line), &earlier.id(), &reason);
        }
        out.push(o.clone());
    }
    out
}

/// The notes of the whole input: API versions read as v1beta3, objects and Secrets
/// left out, and the drift triggers Flux has no counterpart of.
fn notes(input: &read::Input, referenced: &[(Option<String>, String)], alerts: &[Object], imp: &mut Imported) {
    for o in input.providers.iter().chain(&input.alerts) {
        let version = o.api_version.trim_start_matches(read::GROUP);
        if !matches!(version, "v1beta2" | "v1beta3") {
            let reason = format!("{} is read as v1beta3 (its fields are a subset)", o.api_version);
            imp.out.note(&at_line(o, o.line), &o.id(), &reason);
        }
    }
    for (file, kinds) in &input.others {
        let list: Vec<String> = kinds.iter().map(|(k, n)| if *n > 1 { format!("{k} x{n}") } else { k.clone() }).collect();
        let e = Entry { file: file.clone(), line: 1, key: String::new(), value: Value::Null };
        imp.out.note(&e, "file", &format!("not notification objects, left out: {}", list.join(", ")));
    }
    for s in input.secrets.iter().filter(|s| !referenced.contains(&(s.namespace.clone(), s.name.clone()))) {
        let e = Entry { file: s.file.clone(), line: s.line, key: String::new(), value: Value::Null };
        imp.out.note(&e, &format!("secret {}", s.name), "no Provider's secretRef names it; left out");
    }
    if let Some(a) = alerts.first() {
        let reason = format!(
            "the subscriptions have the triggers of Flux's events ({}, {}); driftwatch also tells of drift ({DRIFT_TRIGGERS}): add those \
             to a subscription's triggers to have them",
            alert::ON_FAILED,
            alert::ON_SUCCEEDED
        );
        imp.out.note(&at_line(a, a.line), "subscriptions", &reason);
    }
}

#[cfg(test)]
mod tests;
