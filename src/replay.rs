//! Reads Application snapshots from disk: one object for `trigger run` and `template
//! notify`, or a sequence (a directory of numbered files, or a multi-document YAML file)
//! for `run --replay`, which feeds them through the real pipeline in order.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::model::{App, ObjectError, Project};
use crate::source::{ConfigError, SourceFile};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{0}")]
    Parse(ConfigError),
    #[error("{path}{}: not an Application: {error}", doc.map(|d| format!(" (document {d})")).unwrap_or_default())]
    NotAnApplication { path: String, doc: Option<usize>, error: ObjectError },
}

/// Parses a YAML or JSON file into its documents. JSON goes through serde_json (exact
/// numbers, exact error positions); anything else through the YAML parser.
pub fn read_documents(path: &Path) -> Result<Vec<Value>, ReadError> {
    let text = std::fs::read_to_string(path).map_err(|e| ReadError::Io { path: path.display().to_string(), message: e.to_string() })?;
    parse_documents(&path.display().to_string(), &text)
}

pub fn parse_documents(name: &str, text: &str) -> Result<Vec<Value>, ReadError> {
    if name.ends_with(".json") {
        return serde_json::from_str::<Value>(text).map(|v| vec![v]).map_err(|e| {
            ReadError::Parse(ConfigError::new(
                Some(crate::source::Pos { file: name.into(), line: e.line() as u64, col: e.column() as u64 }),
                "document",
                e.to_string().split(" at line").next().unwrap_or("invalid JSON").to_string(),
            ))
        });
    }
    let file = SourceFile::new(name, text);
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| {
        let pos = e.location().and_then(|l| file.pos(&l));
        let msg = e.without_snippet().to_string();
        let msg = msg.lines().next().unwrap_or("invalid YAML");
        ReadError::Parse(ConfigError::new(pos, "document", msg.split(" at line").next().unwrap_or(msg)))
    })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Reads exactly one document from a YAML or JSON file; `what` names it in errors.
fn read_one(path: &Path, what: &str) -> Result<Value, ReadError> {
    let mut docs = read_documents(path)?;
    let name = path.display().to_string();
    match docs.len() {
        1 => Ok(docs.remove(0)),
        0 => Err(ReadError::Io { path: name, message: "the file holds no document".into() }),
        n => Err(ReadError::Io { path: name, message: format!("expected one {what}, found {n} documents") }),
    }
}

/// Reads exactly one Application from a YAML or JSON file.
pub fn read_app(path: &Path) -> Result<App, ReadError> {
    let doc = read_one(path, "Application")?;
    App::from_value(doc).map_err(|error| ReadError::NotAnApplication { path: path.display().to_string(), doc: None, error })
}

/// Reads exactly one AppProject from a YAML or JSON file.
pub fn read_project(path: &Path) -> Result<Project, ReadError> {
    let doc = read_one(path, "AppProject")?;
    Project::from_value(&doc).map_err(|e| ReadError::Io { path: path.display().to_string(), message: format!("not an AppProject: {e}") })
}

/// One entry of a replay.
#[derive(Debug, Clone)]
pub enum Snapshot {
    /// An Application as the API server would send it (added or modified).
    App(Box<App>),
    /// An Application that was deleted (a watch `DELETED` event).
    Deleted(Box<App>),
    Project(Box<Project>),
    /// A live object of a managed resource (any kind with `metadata.managedFields`): it
    /// stands in for what the daemon reads from the cluster to attribute drift.
    Live(Box<Value>),
    /// A document that is neither: skipped and counted, with the reason.
    Malformed(String),
}

/// A replay step: the file it came from and what it holds.
#[derive(Debug, Clone)]
pub struct Step {
    /// File name (and document number for multi-document files).
    pub label: String,
    pub snapshot: Snapshot,
}

fn classify(doc: Value, label: &str) -> Snapshot {
    // A watch event: `{type: ADDED|MODIFIED|DELETED, object: {...}}`.
    if let (Some(kind), Some(object)) = (doc.get("type").and_then(Value::as_str), doc.get("object")) {
        let deleted = kind == "DELETED";
        return match App::from_value(object.clone()) {
            Ok(app) if deleted => Snapshot::Deleted(Box::new(app)),
            Ok(app) => Snapshot::App(Box::new(app)),
            Err(e) => Snapshot::Malformed(format!("{label}: {e}")),
        };
    }
    if doc.get("kind").and_then(Value::as_str) == Some("AppProject") {
        return match Project::from_value(&doc) {
            Ok(p) => Snapshot::Project(Box::new(p)),
            Err(e) => Snapshot::Malformed(format!("{label}: {e}")),
        };
    }
    let is_argo = matches!(doc.get("apiVersion").and_then(Value::as_str), Some(v) if v.starts_with("argoproj.io/"));
    if !is_argo && doc.pointer("/metadata/managedFields").is_some_and(Value::is_array) {
        return Snapshot::Live(Box::new(doc));
    }
    match App::from_value(doc) {
        Ok(app) => Snapshot::App(Box::new(app)),
        Err(e) => Snapshot::Malformed(format!("{label}: not an Application: {e}")),
    }
}

/// The leading number of a file name (`010-deploy.yaml` -> 10), for numeric order.
fn leading_number(name: &str) -> Option<u64> {
    let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Reads a replay: a directory of numbered YAML/JSON files (in numeric order, each
/// possibly multi-document), or one multi-document YAML file. A file that does not parse
/// is an error; a document that is not an Application is a `Malformed` step.
pub fn read_replay(path: &Path) -> Result<Vec<Step>, ReadError> {
    let files: Vec<PathBuf> = if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| ReadError::Io { path: path.display().to_string(), message: e.to_string() })?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json"))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).and_then(leading_number).is_some())
            .collect();
        files.sort_by_key(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            (leading_number(&name), name)
        });
        if files.is_empty() {
            return Err(ReadError::Io { path: path.display().to_string(), message: "no numbered .yaml/.yml/.json snapshot files".into() });
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut steps = Vec::new();
    for file in files {
        let docs = read_documents(&file)?;
        let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let many = docs.len() > 1;
        for (i, doc) in docs.into_iter().enumerate() {
            let label = if many { format!("{name}#{}", i + 1) } else { name.clone() };
            steps.push(Step { snapshot: classify(doc, &label), label });
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_order_is_numeric() {
        let dir = tempfile::tempdir().unwrap();
        for (name, app) in [("10-c.yaml", "c"), ("2-b.yaml", "b"), ("1-a.json", "a"), ("README.md", "x")] {
            let body = if name.ends_with(".json") {
                format!(r#"{{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{{"name":"{app}"}}}}"#)
            } else {
                format!("apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {app}\n")
            };
            std::fs::write(dir.path().join(name), body).unwrap();
        }
        let steps = read_replay(dir.path()).unwrap();
        let labels: Vec<&str> = steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["1-a.json", "2-b.yaml", "10-c.yaml"]);
    }

    #[test]
    fn multi_document_file_with_events_projects_and_junk() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("replay.yaml");
        std::fs::write(
            &p,
            "kind: AppProject\napiVersion: argoproj.io/v1alpha1\nmetadata: {name: p}\n---\nkind: Application\nmetadata: {name: a}\n---\nkind: ConfigMap\n---\ntype: DELETED\nobject: {kind: Application, metadata: {name: a}}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, managedFields: []}\n",
        )
        .unwrap();
        let steps = read_replay(&p).unwrap();
        assert!(matches!(steps[0].snapshot, Snapshot::Project(_)));
        assert!(matches!(steps[1].snapshot, Snapshot::App(_)));
        assert!(matches!(&steps[2].snapshot, Snapshot::Malformed(m) if m.contains("replay.yaml#3")));
        assert!(matches!(steps[3].snapshot, Snapshot::Deleted(_)));
        assert!(matches!(steps[4].snapshot, Snapshot::Live(_)), "a live object with managed fields");
    }

    #[test]
    fn parse_errors_have_positions() {
        let e = parse_documents("bad.yaml", "kind: Application\nmetadata: [unclosed\n").unwrap_err().to_string();
        assert!(e.starts_with("bad.yaml:"), "{e}");
        let e = parse_documents("bad.json", "{\n  \"kind\": \n}").unwrap_err().to_string();
        assert!(e.starts_with("bad.json:3:1"), "{e}");
    }
}
