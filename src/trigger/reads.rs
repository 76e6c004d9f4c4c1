//! What of `app`, `unit`, `drift` and `episode` the compiled scripts can read, found in their
//! syntax trees, so that a pass converts only that into rhai values: converting the
//! whole Application was a tenth of a first pass's CPU (BENCHMARKS.md, "A first
//! pass's cost"), while the catalog's conditions read a handful of its fields.
//!
//! The analysis is conservative. A read the analysis cannot follow keeps the whole value
//! at the path where it stops: `app.status.resources.filter(...)` keeps all of
//! `status.resources`; `app[k]`, `let a = app`, `f(app)` or a closure capturing `app`
//! keep all of `app`. Only objects are pruned (an array or a string is converted whole,
//! so its getters such as `len` read what they always read), and a map keeps every
//! key a script names: what a script reads is the same value either way.

use std::collections::BTreeMap;

use rhai::{AST, ASTNode, Dynamic, Expr, Map};
use serde_json::Value;

use super::convert::to_dynamic;

/// The paths read below one value: all of it, or some of its object's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paths {
    whole: bool,
    children: BTreeMap<String, Paths>,
}

impl Paths {
    /// Everything below is read.
    pub fn all() -> Paths {
        Paths { whole: true, children: BTreeMap::new() }
    }

    /// Whether all of the value is read.
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Marks `path` (and everything below it) read.
    fn add(&mut self, path: &[&str]) {
        if self.whole {
            return;
        }
        match path.split_first() {
            None => {
                self.whole = true;
                self.children.clear();
            }
            Some((first, rest)) => self.children.entry((*first).to_string()).or_default().add(rest),
        }
    }

    fn merge(&mut self, other: &Paths) {
        if self.whole {
            return;
        }
        if other.whole {
            *self = Paths::all();
            return;
        }
        for (k, p) in &other.children {
            self.children.entry(k.clone()).or_default().merge(p);
        }
    }

    /// `v` as rhai values, with only what is read below an object.
    pub fn convert(&self, v: &Value) -> Dynamic {
        match v {
            Value::Object(fields) if !self.whole => {
                let map: Map = self.children.iter().filter_map(|(k, p)| fields.get(k).map(|v| (k.as_str().into(), p.convert(v)))).collect();
                Dynamic::from_map(map)
            }
            _ => to_dynamic(v),
        }
    }

    /// As [`Paths::convert`], with the value made only when something of it is read
    /// (`()` otherwise: no script names it).
    pub fn convert_with(&self, v: impl FnOnce() -> Value) -> Dynamic {
        match self.whole || !self.children.is_empty() {
            true => self.convert(&v()),
            false => Dynamic::UNIT,
        }
    }

    /// The paths `ast` reads of the variable `var`.
    fn of(ast: &AST, var: &str) -> Paths {
        let mut out = Paths::default();
        ast.walk(&mut |path: &[ASTNode]| {
            let Some((ASTNode::Expr(e @ Expr::Variable(v, ..)), parents)) = path.split_last() else { return true };
            if v.1.as_str() != var {
                return true;
            }
            match parents.last() {
                // `var.x.y…`: what the chain names, up to where it stops being one.
                Some(ASTNode::Expr(Expr::Dot(b, ..))) if std::ptr::eq(&b.lhs, *e) => {
                    let mut names = Vec::new();
                    chain(&b.rhs, &mut names);
                    out.add(&names);
                }
                // `var[k]`, `f(var)`, `let a = var`, a closure's capture: all of it.
                _ => out.add(&[]),
            }
            !out.whole
        });
        out
    }
}

/// The property names a chain reads before it indexes, calls a method or ends.
fn chain<'a>(e: &'a Expr, names: &mut Vec<&'a str>) {
    match e {
        Expr::Property(p, _) => names.push(p.2.as_str()),
        Expr::Dot(b, ..) => {
            if let Expr::Property(p, _) = &b.lhs {
                names.push(p.2.as_str());
                chain(&b.rhs, names);
            }
        }
        // `x.list[i]…`: all of `list` (the index may be any expression).
        Expr::Index(b, ..) => {
            if let Expr::Property(p, _) = &b.lhs {
                names.push(p.2.as_str());
            }
        }
        // A method call reads the whole value it is called on.
        _ => {}
    }
}

/// What scripts read of each of a pass's variables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads {
    pub app: Paths,
    pub drift: Paths,
    pub episode: Paths,
    pub unit: Paths,
}

impl Reads {
    /// What `ast` reads.
    pub fn of(ast: &AST) -> Reads {
        Reads {
            app: Paths::of(ast, "app"),
            drift: Paths::of(ast, "drift"),
            episode: Paths::of(ast, "episode"),
            unit: Paths::of(ast, "unit"),
        }
    }

    /// Adds what `other` reads.
    pub fn merge(&mut self, other: &Reads) {
        self.app.merge(&other.app);
        self.drift.merge(&other.drift);
        self.episode.merge(&other.episode);
        self.unit.merge(&other.unit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(src: &str) -> Paths {
        let engine = super::super::engine::build();
        Paths::of(&engine.compile(src).unwrap(), "app")
    }

    fn with(children: &[(&str, Paths)]) -> Paths {
        Paths { whole: false, children: children.iter().map(|(k, p)| (k.to_string(), p.clone())).collect() }
    }

    #[test]
    fn property_chains_are_followed_until_an_index_or_a_method_call() {
        let sync = with(&[("status", with(&[("sync", with(&[("status", Paths::all())]))]))]);
        assert_eq!(paths("app.status.sync.status == \"OutOfSync\""), sync);
        assert_eq!(paths("app?.status?.sync?.status == \"OutOfSync\""), sync, "the elvis operator is a chain too");
        assert_eq!(paths("app.status.resources[0].kind"), with(&[("status", with(&[("resources", Paths::all())]))]));
        assert_eq!(
            paths("app.metadata.annotations.contains(\"x\") && app.status.health.status == \"Degraded\""),
            with(&[
                ("metadata", with(&[("annotations", Paths::all())])),
                ("status", with(&[("health", with(&[("status", Paths::all())]))]))
            ])
        );
        assert_eq!(paths("app.status.keys().len() > 0"), with(&[("status", Paths::all())]));
        assert_eq!(paths("`${app.metadata.name}`"), with(&[("metadata", with(&[("name", Paths::all())]))]));
        assert_eq!(
            paths("app.status.resources[app.spec.project.len()] == ()"),
            with(&[("spec", with(&[("project", Paths::all())])), ("status", with(&[("resources", Paths::all())]))]),
            "an index's own expression is read as any other"
        );
        assert_eq!(paths("drift.count > 0"), Paths::default(), "reads nothing of app");
    }

    #[test]
    fn any_other_use_of_the_variable_reads_all_of_it() {
        for src in [
            "app[\"status\"].sync.status == \"Synced\"",
            "let a = app; a.status.sync.status == \"Synced\"",
            "type_of(app) == \"map\"",
            "app.keys().len() > 0",
            "[app][0].status == ()",
            "let f = |x| app.status.sync.status == x; f.call(\"Synced\")",
        ] {
            assert!(paths(src).is_whole(), "{src}");
        }
    }

    #[test]
    fn a_pruned_value_keeps_what_is_read_and_converts_non_objects_whole() {
        let app = json!({"status": {"sync": {"status": "Synced", "revision": "r"}, "resources": [{"kind": "A"}], "health": {"status": "Healthy"}},
                         "spec": {"project": "p"}});
        let reads = paths("app.status.sync.status == \"Synced\" && app.status.resources.len() == 1 && app.spec.missing == ()");
        let map = reads.convert(&app).cast::<Map>();
        assert_eq!(map.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["spec", "status"]);
        let status = map["status"].clone().cast::<Map>();
        assert_eq!(status.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["resources", "sync"]);
        assert_eq!(status["sync"].clone().cast::<Map>().len(), 1, "only sync.status");
        assert_eq!(status["resources"].clone().cast::<rhai::Array>().len(), 1);
        assert!(map["spec"].clone().cast::<Map>().is_empty(), "a key read but absent stays absent");
        assert!(Paths::default().convert_with(|| panic!("a value nothing reads is not made")).is_unit());
        assert_eq!(reads.convert_with(|| app.clone()).cast::<Map>().len(), 2, "made when read");
        let mut all = Paths::default();
        all.merge(&reads);
        all.merge(&Paths::all());
        assert!(all.is_whole());
    }
}
