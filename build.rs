//! Embeds the built-in catalog (`triggers/` and `templates/`) in the binary, so the CLI
//! works with no configuration at all.
//!
//! The panics here are on the repository's own files at build time: a failure is a
//! broken checkout, reported by cargo, never a runtime condition.

use std::fmt::Write;
use std::path::Path;

fn list(dir: &str) -> Vec<(String, String)> {
    // Read when the script runs, not when it was compiled: a build script binary can be
    // reused for a checkout in another place (a shared target directory).
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join(dir);
    println!("cargo:rerun-if-changed={}", root.display());
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&root).unwrap_or_else(|e| panic!("reading {}: {e}", root.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("reading {}: {e}", root.display())).path();
        let is_yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
        if !is_yaml {
            continue;
        }
        println!("cargo:rerun-if-changed={}", path.display());
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_else(|| panic!("bad file name {}", path.display()));
        out.push((stem.to_string(), path.display().to_string()));
    }
    out.sort();
    out
}

fn main() {
    let mut code = String::new();
    for (konst, dir) in [("TRIGGERS", "triggers"), ("TEMPLATES", "templates")] {
        writeln!(code, "/// `(name, file, text)` of every built-in {dir} file.").unwrap();
        writeln!(code, "pub const {konst}: &[(&str, &str, &str)] = &[").unwrap();
        for (name, path) in list(dir) {
            let file = format!("builtin:{dir}/{}", Path::new(&path).file_name().unwrap().to_string_lossy());
            writeln!(code, "    ({name:?}, {file:?}, include_str!({path:?})),").unwrap();
        }
        writeln!(code, "];").unwrap();
    }
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("catalog.rs");
    std::fs::write(out, code).expect("writing catalog.rs");
}
