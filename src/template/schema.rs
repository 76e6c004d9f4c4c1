//! Finds `app.…` paths in a template that cannot exist in an Argo CD Application, by
//! walking the tree of property names derived from Argo CD's CRD
//! (`tools/gen_app_schema.py` makes `app_schema.json`). A missing variable renders empty
//! at run time, as in Argo CD, so a typo would otherwise go unnoticed.

use std::sync::OnceLock;

use serde_json::Value;

static SCHEMA: OnceLock<Value> = OnceLock::new();

fn schema() -> &'static Value {
    SCHEMA.get_or_init(|| {
        // The file is generated and embedded at compile time; a test parses it, so
        // failing here would be a build defect, not bad input. Fall back to "anything
        // goes" rather than panic.
        serde_json::from_str(include_str!("app_schema.json")).unwrap_or(Value::Null)
    })
}

/// Whether `path` (segments after `app`) can exist in an Application.
pub fn path_exists(segments: &[&str]) -> bool {
    let mut node = schema();
    if node.is_null() {
        return true;
    }
    for seg in segments {
        let Some(map) = node.as_object() else { return false };
        if map.contains_key("*") {
            return true;
        }
        if let Some(items) = map.get("[]") {
            // `app.status.resources.[0].kind` or `app.spec.sources.0.repoURL`.
            let index = seg.trim_start_matches('[').trim_end_matches(']');
            if index.parse::<usize>().is_ok() {
                node = items;
                continue;
            }
            // A property of the array itself (`length` in handlebars).
            return *seg == "length";
        }
        match map.get(*seg) {
            Some(next) => node = next,
            None => return false,
        }
    }
    true
}

/// A path that does not exist, with its 1-based line and column in the template text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPath {
    pub path: String,
    pub line: usize,
    pub col: usize,
}

/// Scans the mustaches of a template for absolute `app.` paths (also `@root.app.` and
/// `../app.`) and reports the ones the schema does not have. Paths relative to an
/// `#each` block are not checked.
pub fn unknown_paths(src: &str) -> Vec<UnknownPath> {
    let mut out = Vec::new();
    let mut rest = src;
    let mut offset = 0;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open..].find("}}") else { break };
        let inner = &rest[open + 2..open + close];
        let inner_start = offset + open + 2;
        for (tok_start, tok) in tokens(inner) {
            let path = tok.trim_start_matches("@root.").trim_start_matches("../");
            let Some(after) = path.strip_prefix("app.") else { continue };
            let segments: Vec<&str> = after.split('.').filter(|s| !s.is_empty()).collect();
            if !path_exists(&segments) {
                let (line, col) = line_col(src, inner_start + tok_start);
                out.push(UnknownPath { path: path.to_string(), line, col });
            }
        }
        offset += open + close + 2;
        rest = &src[offset..];
    }
    out
}

fn tokens(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        let part_of_path = c.is_alphanumeric() || matches!(c, '.' | '_' | '@' | '[' | ']' | '/' | '-');
        match (part_of_path, start) {
            (true, None) => start = Some(i),
            (false, Some(b)) => {
                out.push((b, &s[b..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(b) = start {
        out.push((b, &s[b..]));
    }
    // Quoted strings are literals, not paths.
    out.retain(|(i, _)| !s[..*i].ends_with('"') && !s[..*i].ends_with('\''));
    out
}

fn line_col(src: &str, byte: usize) -> (usize, usize) {
    let before = &src[..byte.min(src.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_schema_parses() {
        assert!(serde_json::from_str::<Value>(include_str!("app_schema.json")).is_ok());
    }

    #[test]
    fn known_and_unknown_paths() {
        assert!(path_exists(&["status", "sync", "status"]));
        assert!(path_exists(&["status", "operationState", "syncResult", "revision"]));
        assert!(path_exists(&["metadata", "annotations", "anything"]));
        assert!(path_exists(&["spec", "sources", "0", "repoURL"]));
        assert!(!path_exists(&["status", "sync", "statuss"]));
        assert!(!path_exists(&["spec", "sourcee"]));
    }

    #[test]
    fn finds_typos_with_positions() {
        let src = "ok {{app.metadata.name}}\n{{#if app.status.helth.status}}x{{/if}} {{default app.spec.project \"d\"}}";
        let found = unknown_paths(src);
        assert_eq!(found, vec![UnknownPath { path: "app.status.helth.status".into(), line: 2, col: 7 }]);
    }
}
