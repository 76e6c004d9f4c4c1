//! The module layering ARCHITECTURE.md promises: every top-level module of `src/` sits
//! in one layer and refers (`crate::<module>`) only to modules of lower layers, so the
//! dependency graph has no upward edge and no cycle. A new module must be placed here.

use std::collections::BTreeSet;
use std::path::Path;

/// Lowest first. A module may use the modules of the layers before its own, no other.
const LAYERS: &[&[&str]] = &[
    // Leaves: no crate dependency at all.
    &["duration", "clock", "exit", "tls", "secret", "metrics", "project", "quote", "serve", "text", "memory", "shard", "json"],
    // Deployment units: an Argo CD Application, a Flux Kustomization or HelmRelease, a
    // Fleet BundleDeployment, read into one shape; the identity of an object they manage.
    &["unit"],
    // The unit as the pipeline takes it, the AppProject as read (a project carries its
    // rule: `project`).
    &["model"],
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
    &["pipeline", "replay", "cluster", "import", "audit"],
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
    let found = uses("use crate::state::Store; // crate::daemon\nlet x = crate::model::App::new(); /// crate::cli");
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["model", "state"]);
}

/// The module path of a file under `src/` (`deliver/slack/client.rs` is
/// `[deliver, slack, client]`; a `mod.rs` is its folder's module).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().to_string()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_string();
        if stem != "mod" {
            parts.push(stem);
        }
    }
    parts
}

/// The modules a file refers to, as absolute paths from the crate root, each cut to its
/// first two segments (`[deliver, worker]`): `crate::a::b`, and `super::`/`self::`
/// paths resolved from the file's own module, including `use super::{a, b::c}`.
fn module_refs(own: &[String], text: &str) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let bytes = code.as_bytes();
        let mut i = 0;
        while i < code.len() {
            if !code.is_char_boundary(i) {
                i += 1;
                continue;
            }
            let rest = &code[i..];
            let starts_path = (rest.starts_with("crate::") || rest.starts_with("super::") || rest.starts_with("self::"))
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':'));
            if !starts_path {
                i += 1;
                continue;
            }
            let mut base: Vec<String> = own.to_vec();
            let mut r = rest;
            if let Some(after) = r.strip_prefix("crate::") {
                base.clear();
                r = after;
            } else {
                loop {
                    if let Some(after) = r.strip_prefix("super::") {
                        base.pop();
                        r = after;
                    } else if let Some(after) = r.strip_prefix("self::") {
                        r = after;
                    } else {
                        break;
                    }
                }
            }
            let consumed = rest.len() - r.len();
            continuation(&base, r, &mut out);
            i += consumed.max(1);
        }
    }
    out
}

/// Follows a path's continuation `r` from `base` until it names a module two segments
/// deep (inserted in `out`), through `{a, b::c}` groups.
fn continuation(base: &[String], r: &str, out: &mut BTreeSet<Vec<String>>) {
    let mut path = base.to_vec();
    let mut r = r;
    loop {
        if path.len() == 2 {
            out.insert(path);
            return;
        }
        if let Some(group) = r.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        continuation(&path, item.trim(), out);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            continuation(&path, item.trim(), out);
            return;
        }
        let seg: String = r.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if seg.is_empty() || seg == "self" {
            return;
        }
        r = &r[seg.len()..];
        path.push(seg);
        match r.strip_prefix("::") {
            Some(after) => r = after,
            None if path.len() == 2 => {}
            None => return,
        }
    }
}

/// Within each top-level module, its first-level submodules (`deliver::worker`,
/// `template::sprig`) refer to each other without a cycle: a sibling may use another
/// only if that one does not, directly or through others, use it back.
#[test]
fn no_cycle_among_the_first_level_submodules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = Default::default();
    let mut seen = 0;
    for file in &files {
        let own = module_path(file.strip_prefix(&src).unwrap());
        if own.len() < 2 {
            continue;
        }
        let from = own[..2].to_vec();
        for to in module_refs(&own, &std::fs::read_to_string(file).unwrap()) {
            // Only siblings: the same top-level module, another submodule that exists
            // as a file or folder (not an item of the parent's mod.rs).
            let is_module = src.join(&to[0]).join(format!("{}.rs", to[1])).exists() || src.join(&to[0]).join(&to[1]).is_dir();
            if to[0] == from[0] && to != from && is_module {
                seen += 1;
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search for a back edge; each cycle reported once by its smallest node.
    fn visit(
        n: &Vec<String>,
        edges: &std::collections::BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
        cycles: &mut BTreeSet<String>,
    ) {
        if done.contains(n) {
            return;
        }
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|p| p.join("::")).collect();
            let min = cycle.iter().enumerate().min_by_key(|(_, s)| (*s).clone()).map_or(0, |(i, _)| i);
            cycle.rotate_left(min);
            cycles.insert(cycle.join(" -> "));
            return;
        }
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            visit(m, edges, stack, done, cycles);
        }
        stack.pop();
        done.insert(n.clone());
    }
    let mut cycles = BTreeSet::new();
    let mut done = BTreeSet::new();
    for n in edges.keys() {
        visit(n, &edges, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "cycles among first-level submodules:\n{}", cycles.into_iter().collect::<Vec<_>>().join("\n"));
    assert!(seen > 50, "the scan found only {seen} sibling edges: it is not reading the sources");
}

#[test]
fn the_submodule_scan_resolves_super_and_groups() {
    let own: Vec<String> = vec!["deliver".into(), "slack".into(), "client".into()];
    let found = module_refs(
        &own,
        "use super::super::services::Env;\nuse crate::deliver::{http, worker::X};\nuse super::config; // super::super::outcome",
    );
    let got: Vec<String> = found.into_iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["deliver::http", "deliver::services", "deliver::slack", "deliver::worker"]);
}

/// A destination kind depends on the contract it implements (`deliver::deliverer`),
/// never on the queue that schedules it (`deliver::queue`): adding or changing a kind
/// cannot reach into the outbox's workers (issue 40).
#[test]
fn no_destination_kind_uses_the_queue() {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/deliver/kinds"), &mut files);
    assert!(files.len() > 40, "the scan found only {} files: it is not reading the kinds", files.len());
    let mut offenders = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains("deliver::queue") || code.contains("super::queue") || code.contains("deliver::worker") {
                offenders.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "kinds using the queue:\n{}", offenders.join("\n"));
}

/// A destination kind gets one face of the store, its chat message references
/// (`state::MessageRefs`, through `Env::refs`), never the store nor another face
/// (issue 53): its code (tests aside) names no `Store`, `PassStore`, `Outbox`,
/// `History` or `StateView`.
#[test]
fn no_destination_kind_names_the_store() {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/deliver/kinds"), &mut files);
    assert!(files.len() > 40, "the scan found only {} files: it is not reading the kinds", files.len());
    let faces = ["Store", "PassStore", "Outbox", "History", "StateView"];
    let mut offenders = Vec::new();
    for f in files.iter().filter(|f| f.file_name().is_some_and(|n| n != "tests.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines().take_while(|l| !l.trim_start().starts_with("#[cfg(test)]")) {
            let code = line.split("//").next().unwrap_or_default();
            let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            if code.contains("state::") && words.into_iter().any(|w| faces.contains(&w)) {
                offenders.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "kinds naming the store:\n{}", offenders.join("\n"));
}

/// No kube or k8s-openapi type outside `src/cluster/`: everything that talks to
/// Kubernetes is there, and the rest of the program sees plain data (ARCHITECTURE.md).
#[test]
fn no_kube_type_outside_the_cluster_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 200, "the scan found only {} files", files.len());
    let cluster = src.join("cluster");
    let mut offenders = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&cluster)) {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            if ["kube::", "k8s_openapi::", "use kube", "use k8s_openapi"].iter().any(|p| code.contains(p)) {
                offenders.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "kube types outside src/cluster/:\n{}", offenders.join("\n"));
}
