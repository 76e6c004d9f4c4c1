//! Reading Flux objects: each file's YAML documents (single objects, `---` streams,
//! `kind: List`, `kubectl get -o yaml` dumps), the `Alert`s and `Provider`s of
//! notification-controller with the line each starts on, and the key names of the
//! `Secret`s (never their values).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use super::super::Unreadable;
use super::super::read::{Loaded, expand, load};

pub(super) use super::super::read::FLUX_GROUP as GROUP;

/// An `Alert` or a `Provider`: where it starts, its identity, the object, and its text
/// (for the line of a field).
#[derive(Debug, Clone)]
pub(super) struct Object {
    pub(super) file: String,
    /// The 1-based line of its `kind:`.
    pub(super) line: usize,
    pub(super) api_version: String,
    pub(super) name: String,
    pub(super) namespace: Option<String>,
    pub(super) value: Value,
    /// The lines of the file from its `kind:` line to the next object's.
    block: Vec<String>,
}

impl Object {
    /// `spec`, or an empty map.
    pub(super) fn spec(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.value.get("spec").and_then(Value::as_object).unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    /// `namespace/name` (`name` alone when it has no namespace).
    pub(super) fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }

    /// The line of the field at `path` (`["spec", "secretRef"]`): each key searched for
    /// below the one before; the object's line when not found.
    pub(super) fn line_of(&self, path: &[&str]) -> usize {
        let mut at = 0;
        for key in path {
            match (at..self.block.len()).find(|&i| defines(&self.block[i], key)) {
                Some(i) => at = i,
                None => return self.line,
            }
        }
        self.line + at
    }

    /// The line of each item of the list at `path` (`["spec", "eventSources"]`): the
    /// lines below it that open an item at the indentation of the first.
    pub(super) fn item_lines(&self, path: &[&str]) -> Vec<usize> {
        let start = self.line_of(path);
        if start == self.line && !path.is_empty() {
            return Vec::new();
        }
        let from = start - self.line;
        let Some(key_col) = self.block.get(from).map(|l| indent(l)) else { return Vec::new() };
        let mut dash_col = None;
        let mut out = Vec::new();
        for (i, l) in self.block.iter().enumerate().skip(from + 1) {
            let t = l.trim_start();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let col = indent(l);
            let dash = t.starts_with("- ") || t == "-";
            // A line left of the key, or beside it and not an item, ends the list.
            if col < key_col || (col == key_col && !dash) {
                break;
            }
            if dash && *dash_col.get_or_insert(col) == col {
                out.push(self.line + i);
            }
        }
        out
    }
}

/// The key names of a `Secret` (its `data` and `stringData`), each with its line; the
/// values are never read.
#[derive(Debug, Clone)]
pub(super) struct SecretKeys {
    pub(super) file: String,
    pub(super) line: usize,
    pub(super) name: String,
    pub(super) namespace: Option<String>,
    pub(super) keys: BTreeMap<String, usize>,
}

/// What the files hold.
#[derive(Debug, Default)]
pub(super) struct Input {
    pub(super) providers: Vec<Object>,
    pub(super) alerts: Vec<Object>,
    pub(super) secrets: Vec<SecretKeys>,
    /// Files with an object read from them, in order.
    pub(super) files: Vec<String>,
    /// Per file, the objects left out: `kind` (with its API version) and how many.
    pub(super) others: Vec<(String, BTreeMap<String, usize>)>,
    /// Files that held nothing of notification-controller's.
    pub(super) unrecognised: Vec<String>,
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Whether `line` defines `key` (`key:`, `- key:`, `"key":`).
fn defines(line: &str, key: &str) -> bool {
    let t = line.trim_start().trim_start_matches("- ");
    [format!("{key}:"), format!("\"{key}\":"), format!("'{key}':")].iter().any(|f| t.starts_with(f.as_str()))
}

/// The value of a `kind: X` line at `col` (or its `- kind: X` form), unquoted.
fn kind_at(line: &str, col: usize) -> Option<&str> {
    let item = col >= 2 && indent(line) == col - 2 && line[col - 2..].starts_with("- ");
    if indent(line) != col && !item {
        return None;
    }
    let rest = &line[col..];
    let v = rest.strip_prefix("kind:").or_else(|| rest.strip_prefix("\"kind\":"))?;
    let v = v.split(" #").next().unwrap_or(v).trim();
    Some(v.trim_matches(|c| c == '"' || c == '\''))
}

/// Finds, document by document, the line each object starts on.
struct Locator<'t> {
    lines: Vec<&'t str>,
    at: usize,
}

impl Locator<'_> {
    /// The 1-based line of the next `kind: <kind>` at column `col` (the cursor moves past
    /// it); where none is found (JSON, flow style), the cursor's line.
    fn next(&mut self, kind: &str, col: usize) -> usize {
        match (self.at..self.lines.len()).find(|&i| kind_at(self.lines[i], col) == Some(kind)) {
            Some(i) => {
                self.at = i + 1;
                i + 1
            }
            None => self.at.max(1),
        }
    }

    /// The column of the items of the `items:` list at column 0 below the cursor.
    fn items_column(&self) -> usize {
        let Some(start) = (self.at..self.lines.len()).find(|&i| self.lines[i].starts_with("items:")) else { return 2 };
        self.lines
            .iter()
            .skip(start + 1)
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .filter(|l| l.trim_start().starts_with("- "))
            .map_or(2, |l| indent(l) + 2)
    }
}

/// Reads the files (a directory: its `.yaml`/`.yml` files at any depth).
pub(super) fn read(paths: &[PathBuf]) -> Result<Input, Unreadable> {
    let mut input = Input::default();
    for path in &expand(paths)? {
        let Loaded { name, text, docs } = load(path)?;
        let mut found = Found::default();
        let mut locator = Locator { lines: text.lines().collect(), at: 0 };
        for doc in &docs {
            if doc.get("kind").and_then(Value::as_str) == Some("List") {
                let col = locator.items_column();
                for item in doc.get("items").and_then(Value::as_array).into_iter().flatten() {
                    found.object(item, &mut locator, col);
                }
            } else {
                found.object(doc, &mut locator, 0);
            }
        }
        let before = input.providers.len() + input.alerts.len() + input.secrets.len();
        found.into_input(&name, &locator.lines, &mut input);
        if input.providers.len() + input.alerts.len() + input.secrets.len() > before {
            input.files.push(name);
        } else {
            input.unrecognised.push(name);
        }
    }
    Ok(input)
}

/// The objects of one file, each with its start line.
#[derive(Default)]
struct Found {
    /// (start line, kind, the object), every object of the file in order.
    starts: Vec<(usize, String, Option<Value>)>,
    secrets: Vec<(usize, Value)>,
    others: BTreeMap<String, usize>,
}

impl Found {
    fn object(&mut self, doc: &Value, locator: &mut Locator<'_>, col: usize) {
        let Some(kind) = doc.get("kind").and_then(Value::as_str) else { return };
        let line = locator.next(kind, col);
        let api = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        match kind {
            "Alert" | "Provider" if api.starts_with(GROUP) => self.starts.push((line, kind.to_string(), Some(doc.clone()))),
            "Secret" if api == "v1" || api.is_empty() => {
                self.starts.push((line, kind.to_string(), None));
                // Only the key names are kept: the values never leave this function.
                let keys: Map<String, Value> = ["data", "stringData"]
                    .iter()
                    .filter_map(|s| doc.get(*s).and_then(Value::as_object))
                    .flat_map(|m| m.keys().map(|k| (k.clone(), Value::Null)))
                    .collect();
                let meta = doc.get("metadata").cloned().unwrap_or(Value::Null);
                self.secrets.push((line, serde_json::json!({"metadata": meta_identity(&meta), "keys": keys})));
            }
            _ => {
                self.starts.push((line, kind.to_string(), None));
                *self.others.entry(format!("{kind} ({api})")).or_default() += 1;
            }
        }
    }

    fn into_input(self, file: &str, lines: &[&str], input: &mut Input) {
        let ends: Vec<usize> = self.starts.iter().skip(1).map(|(l, ..)| l.saturating_sub(1)).chain([lines.len()]).collect();
        for ((line, kind, doc), end) in self.starts.into_iter().zip(ends) {
            let Some(value) = doc else { continue };
            let block = lines.get(line.saturating_sub(1)..end.max(line)).unwrap_or_default().iter().map(|l| l.to_string()).collect();
            let (name, namespace) = identity(&value);
            let api_version = value.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
            let o = Object { file: file.to_string(), line, api_version, name, namespace, value, block };
            if kind == "Alert" { input.alerts.push(o) } else { input.providers.push(o) }
        }
        for (line, s) in self.secrets {
            let (name, namespace) = identity(&s);
            let keys = s
                .get("keys")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|m| m.keys())
                .map(|k| {
                    let at = lines.iter().skip(line).position(|l| defines(l, k)).map_or(line, |i| line + i + 1);
                    (k.clone(), at)
                })
                .collect();
            input.secrets.push(SecretKeys { file: file.to_string(), line, name, namespace, keys });
        }
        if !self.others.is_empty() {
            input.others.push((file.to_string(), self.others));
        }
    }
}

/// `metadata` cut to `name` and `namespace` (a Secret's annotations can hold its values).
fn meta_identity(meta: &Value) -> Value {
    let mut m = Map::new();
    for k in ["name", "namespace"] {
        if let Some(v) = meta.get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    Value::Object(m)
}

fn identity(v: &Value) -> (String, Option<String>) {
    let meta = v.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
    let namespace = meta.and_then(|m| m.get("namespace")).and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_string);
    (name, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::read::is_flux_notification;

    fn read_text(text: &str) -> Input {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("in.yaml");
        std::fs::write(&f, text).unwrap();
        read(&[f]).unwrap()
    }

    const STREAM: &str = "\
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata:
  name: slack
  namespace: flux-system
spec:
  type: slack
  secretRef:
    name: slack-token
---
apiVersion: v1
kind: Secret
metadata:
  name: slack-token
  namespace: flux-system
stringData:
  token: xoxb-not-a-real-token
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata:
  name: on-call
  namespace: flux-system
spec:
  providerRef:
    name: slack
  eventSources:
    - kind: GitRepository
      name: '*'
    - name: podinfo
      kind: Kustomization
";

    #[test]
    fn a_stream_gives_each_object_with_its_lines_and_a_secret_its_keys_only() {
        let input = read_text(STREAM);
        assert_eq!(input.providers.len(), 1);
        let p = &input.providers[0];
        assert_eq!((p.line, p.id().as_str()), (3, "flux-system/slack"));
        assert_eq!(p.line_of(&["spec", "secretRef"]), 9);
        assert_eq!(p.line_of(&["spec", "channel"]), 3, "absent: the object's line");
        let s = &input.secrets[0];
        assert_eq!((s.line, s.name.as_str()), (13, "slack-token"));
        assert_eq!(s.keys.iter().map(|(k, l)| (k.as_str(), *l)).collect::<Vec<_>>(), [("token", 18)]);
        assert!(!format!("{input:?}").contains("xoxb"), "a Secret's value is never kept");
        let a = &input.alerts[0];
        assert_eq!(a.line, 21);
        assert_eq!(a.item_lines(&["spec", "eventSources"]), [29, 31]);
    }

    #[test]
    fn a_kubectl_list_gives_its_items_with_their_lines() {
        let dump = "\
apiVersion: v1
items:
- apiVersion: notification.toolkit.fluxcd.io/v1beta2
  kind: Alert
  metadata:
    name: a
    namespace: apps
  spec:
    eventSources:
    - kind: HelmRelease
      name: web
    providerRef:
      name: p
- apiVersion: notification.toolkit.fluxcd.io/v1beta2
  kind: Provider
  metadata:
    name: p
    namespace: apps
  spec:
    type: generic
kind: List
metadata:
  resourceVersion: \"\"
";
        let input = read_text(dump);
        assert_eq!(input.alerts[0].line, 4);
        assert_eq!(input.alerts[0].item_lines(&["spec", "eventSources"]), [10]);
        assert_eq!(input.providers[0].line, 15);
        assert_eq!(input.providers[0].line_of(&["spec", "type"]), 20);
    }

    #[test]
    fn other_objects_are_counted_and_flux_objects_recognised() {
        let input = read_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n");
        assert_eq!(input.unrecognised.len(), 1);
        assert_eq!(input.others[0].1.get("Deployment (apps/v1)"), Some(&1));
        let list: Value =
            serde_json::json!({"kind": "List", "items": [{"apiVersion": "notification.toolkit.fluxcd.io/v1beta3", "kind": "Alert"}]});
        assert!(is_flux_notification(&list));
        assert!(!is_flux_notification(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap"})));
        assert!(!is_flux_notification(&serde_json::json!({"apiVersion": "notification.toolkit.fluxcd.io/v1", "kind": "Receiver"})));
    }
}
