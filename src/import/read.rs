//! Reading the inputs: files and directories, YAML documents, and in them the entries of
//! a notifications configuration (ConfigMap data, a bare `data:` map, a `List`, Helm
//! values, Argo CD's catalog layout, the Secret's key names) with where each was found.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::Unreadable;

/// One entry of the notifications configuration (`trigger.on-x`, `service.slack`, ...)
/// with where it was found.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) file: String,
    pub(super) line: usize,
    pub(super) key: String,
    pub(super) value: Value,
}

#[derive(Default)]
pub(super) struct Input {
    pub(super) entries: Vec<Entry>,
    pub(super) secret_keys: BTreeMap<String, (String, usize)>,
    /// Files whose documents held nothing recognisable.
    pub(super) unrecognised: Vec<String>,
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
pub(super) fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Unreadable> {
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

/// The API group of Flux notification-controller's objects.
pub(super) const FLUX_GROUP: &str = "notification.toolkit.fluxcd.io/";

/// Whether a document is a notification-controller `Alert` or `Provider`, or a List
/// holding one.
pub(super) fn is_flux_notification(doc: &Value) -> bool {
    match doc.get("kind").and_then(Value::as_str) {
        Some("List") => doc.get("items").and_then(Value::as_array).is_some_and(|items| items.iter().any(is_flux_notification)),
        Some("Alert" | "Provider") => doc.get("apiVersion").and_then(Value::as_str).is_some_and(|v| v.starts_with(FLUX_GROUP)),
        _ => false,
    }
}

/// One input file read: its name as given, its text and its YAML documents.
pub(super) struct Loaded {
    pub(super) name: String,
    pub(super) text: String,
    pub(super) docs: Vec<Value>,
}

/// Reads and parses one file; an error names the file, and for YAML that does not
/// parse the line and column (never the parser's snippet, which could hold a secret).
pub(super) fn load(path: &Path) -> Result<Loaded, Unreadable> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Unreadable(format!("{name}: cannot read: {e}")))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| {
        let at = e.location().map(|l| format!("{}:{}: ", l.line(), l.column())).unwrap_or_default();
        Unreadable(format!("{name}:{at}not YAML: {}", e.without_snippet().to_string().lines().next().unwrap_or("")))
    })?;
    Ok(Loaded { name, text, docs })
}

/// Reads the files into entries. A file that holds Flux notification objects and
/// nothing of Argo CD's is refused with a pointer to `--flux`.
pub(super) fn read(paths: &[PathBuf]) -> Result<Input, Unreadable> {
    let mut input = Input::default();
    for path in &expand(paths)? {
        let Loaded { name, text, docs } = load(path)?;
        let entries_before = input.entries.len();
        let before = entries_before + input.secret_keys.len();
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
        if input.entries.len() == entries_before && docs.iter().any(is_flux_notification) {
            return Err(Unreadable(format!(
                "{name}: holds Flux notification-controller objects (Alert, Provider), not an Argo CD notifications \
                 configuration: import them with `driftwatch import --flux`"
            )));
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
pub(super) fn embedded(v: &Value) -> Result<Value, String> {
    match v {
        Value::String(s) => serde_saphyr::from_str::<Value>(s).map_err(|e| {
            let at = e.location().map(|l| format!(" (line {} of the value)", l.line())).unwrap_or_default();
            format!("not YAML{at}: {}", e.without_snippet().to_string().lines().next().unwrap_or(""))
        }),
        other => Ok(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(text: &str) -> Vec<(String, usize)> {
        let doc: Value = serde_saphyr::from_str(text).unwrap();
        let mut input = Input::default();
        document(&doc, "f.yaml", text, &mut input);
        input.entries.into_iter().map(|e| (e.key, e.line)).collect()
    }

    #[test]
    fn each_shape_gives_its_entries_with_the_line_of_the_key() {
        let cm = "kind: ConfigMap\ndata:\n  trigger.on-x: |\n    - when: 'true'\n  service.slack: |\n    token: $t\n";
        assert_eq!(entries(cm), [("trigger.on-x".to_string(), 3), ("service.slack".to_string(), 5)]);
        let bare = "data:\n  template.t: 'message: hi'\n";
        assert_eq!(entries(bare), [("template.t".to_string(), 2)]);
        let helm = "notifications:\n  argocdUrl: https://a\n  triggers:\n    trigger.on-y: '- when: \"true\"'\n";
        assert_eq!(entries(helm), [("trigger.on-y".to_string(), 4), ("context".to_string(), 1)]);
        assert!(entries("kind: Deployment\nspec: {}\n").is_empty());
    }

    #[test]
    fn the_catalog_layout_by_directory_and_shape() {
        let conditions: Value = serde_json::json!([{"when": "true", "send": ["x"]}]);
        let fields: Value = serde_json::json!({"message": "hi"});
        assert_eq!(catalog_key(Path::new("c/triggers/on-x.yaml"), &conditions).as_deref(), Some("trigger.on-x"));
        assert_eq!(catalog_key(Path::new("c/templates/app-x.yaml"), &fields).as_deref(), Some("template.app-x"));
        assert_eq!(catalog_key(Path::new("c/templates/app-x.yaml"), &conditions), None, "a template is a map");
        assert_eq!(catalog_key(Path::new("c/other/x.yaml"), &fields), None);
        assert_eq!(catalog_key(Path::new("templates/crd.yaml"), &serde_json::json!({"kind": "CustomResourceDefinition"})), None);
    }

    #[test]
    fn embedded_yaml_errors_name_the_line_of_the_value() {
        assert_eq!(embedded(&Value::String("a: [1".into())).unwrap_err().split(':').next(), Some("not YAML (line 1 of the value)"));
        assert_eq!(embedded(&serde_json::json!({"a": 1})).unwrap(), serde_json::json!({"a": 1}));
    }
}
