//! The module layering ARCHITECTURE.md promises: every top-level module of `src/` sits
//! in one layer and refers (`crate::<module>`) only to modules of lower layers, so the
//! dependency graph has no upward edge and no cycle. A new module must be placed here.

use std::collections::BTreeSet;
use std::path::Path;

/// Lowest first. A module may use the modules of the layers before its own, no other.
const LAYERS: &[&[&str]] = &[
    // Leaves: no crate dependency at all.
    &["duration", "clock", "exit", "tls", "secret", "metrics", "model"],
    // Positions in configuration files (and configured durations).
    &["source"],
    // The typed records of what drifted, and the pure stages that read them: rhai
    // (trigger), handlebars (template), routing; the state store keeps episodes.
    &["drift"],
    &["trigger", "template", "route", "state"],
    // The outbox's deliverers, one folder per destination kind.
    &["deliver"],
    // Loading and compiling a configuration into a runtime.
    &["config"],
    // One evaluation pass, and the places snapshots and configurations come from.
    &["pipeline", "replay", "cluster", "import"],
    &["daemon"],
    &["cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top-level modules `text` refers to as `crate::<name>`, outside line comments.
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_depends_on_a_module_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    let mut checked = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let Some(own) = layer_of(&top) else {
            unplaced.insert(top);
            continue;
        };
        for used in uses(&std::fs::read_to_string(file).unwrap()) {
            if used == top {
                continue;
            }
            checked += 1;
            match layer_of(&used) {
                Some(l) if l < own => {}
                Some(_) => upward.push(format!("{} -> crate::{used}", rel.display())),
                None => {
                    unplaced.insert(used);
                }
            }
        }
    }
    assert!(unplaced.is_empty(), "modules missing from LAYERS: {unplaced:?}");
    assert!(upward.is_empty(), "edges to the same or a higher layer:\n{}", upward.join("\n"));
    assert!(checked > 100, "the scan found only {checked} edges: it is not reading the sources");
}

#[test]
fn the_scan_sees_an_edge_and_ignores_comments() {
    let found = uses("use crate::state::StateStore; // crate::daemon\nlet x = crate::model::App::new(); /// crate::cli");
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["model", "state"]);
}
