//! Argo CD's `spec.ignoreDifferences` on an Application: which fields of which
//! resources are not drift. Pure: parsed from the Application once per read request,
//! applied to the desired and the live object before they are compared
//! (`drift::diff`), so an ignored field is neither shown nor counted.
//!
//! Each rule matches by `group` and `kind` (`*` matches any), optionally `name` and
//! `namespace`, and ignores `jsonPointers` (RFC 6901), `jqPathExpressions` and the
//! fields owned by `managedFieldsManagers`, as Argo CD does.
//!
//! `jqPathExpressions` are evaluated by a bounded subset of jq written here, not by a
//! jq crate: a jq program can loop (`def f: f; f`, `repeat(.)`, `range(1e18)`), and an
//! interpreter running on a thread cannot be stopped, so one Application's expression
//! could spin a core for ever. The subset — paths (`.a.b`, `."a-b"`, `.["a"]`, `[n]`,
//! `[]`, `[]?`), `|` and `select(...)` with `==`, `!=`, `startswith`, `endswith`,
//! `contains`, `test`, `and`, `or`, `not` — is what Argo CD's documentation and users
//! write, cannot loop, and visits each node at most once per stage; anything else is
//! refused with a note naming the expression, and that rule ignores nothing more.

use serde_json::Value;

use crate::json::Pointer;

/// At most this many rules are taken from one Application.
pub const MAX_RULES: usize = 64;
/// At most this many paths one expression may select in one object.
pub const MAX_SELECTED: usize = 10_000;
/// At most this many characters in one expression.
const MAX_EXPR_CHARS: usize = 1_000;

/// The `ignoreDifferences` rules of one Application.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IgnoreRules {
    rules: Vec<Rule>,
    /// Rules or expressions that could not be used, for the diff's note.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    group: String,
    kind: String,
    name: String,
    namespace: String,
    pointers: Vec<Vec<String>>,
    jq: Vec<Pipeline>,
    managers: Vec<String>,
}

/// What applies to one resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForResource {
    pointers: Vec<Vec<String>>,
    jq: Vec<Pipeline>,
    /// Field managers whose fields are ignored.
    pub managers: Vec<String>,
}

impl IgnoreRules {
    /// The rules of an Application (`spec.ignoreDifferences`); what cannot be used is
    /// noted, never fatal.
    pub fn of(app: &Value) -> IgnoreRules {
        let mut out = IgnoreRules::default();
        let Some(list) = app.at("/spec/ignoreDifferences").and_then(Value::as_array) else { return out };
        if list.len() > MAX_RULES {
            out.notes.push(format!("ignoreDifferences has {} rules; the first {MAX_RULES} are used", list.len()));
        }
        for (i, r) in list.iter().take(MAX_RULES).enumerate() {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            let strings = |k: &str| -> Vec<String> {
                r.get(k)
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default()
            };
            let mut rule = Rule {
                group: s("group"),
                kind: s("kind"),
                name: s("name"),
                namespace: s("namespace"),
                pointers: Vec::new(),
                jq: Vec::new(),
                managers: strings("managedFieldsManagers"),
            };
            for p in strings("jsonPointers") {
                match parse_pointer(&p) {
                    Some(segs) => rule.pointers.push(segs),
                    None => out.notes.push(format!("ignoreDifferences[{i}].jsonPointers: {p:?} is not a JSON pointer (it starts with /)")),
                }
            }
            for e in strings("jqPathExpressions") {
                match parse(&e) {
                    Ok(p) => rule.jq.push(p),
                    Err(why) => out.notes.push(format!("ignoreDifferences[{i}].jqPathExpressions: {e:?}: {why}")),
                }
            }
            out.rules.push(rule);
        }
        out
    }

    /// What applies to the resource `group`/`kind` `namespace`/`name`.
    pub fn for_resource(&self, group: &str, kind: &str, namespace: &str, name: &str) -> ForResource {
        let mut out = ForResource::default();
        for r in &self.rules {
            let matches = |want: &str, got: &str| want == "*" || want == got;
            if matches(&r.group, group)
                && matches(&r.kind, kind)
                && (r.name.is_empty() || r.name == name)
                && (r.namespace.is_empty() || r.namespace == namespace)
            {
                out.pointers.extend(r.pointers.iter().cloned());
                out.jq.extend(r.jq.iter().cloned());
                out.managers.extend(r.managers.iter().cloned());
            }
        }
        out
    }
}

impl ForResource {
    pub fn is_empty(&self) -> bool {
        self.pointers.is_empty() && self.jq.is_empty() && self.managers.is_empty()
    }

    /// Removes the ignored pointers and jq paths from `obj`; notes what could not be
    /// applied (an expression that selects too much).
    pub fn strip(&self, obj: &mut Value, notes: &mut Vec<String>) {
        for p in &self.pointers {
            remove(obj, &p.iter().map(|s| Step::Key(s.clone())).collect::<Vec<_>>());
        }
        for e in &self.jq {
            let mut paths = Vec::new();
            let mut over = false;
            e.paths(obj, &mut paths, &mut over);
            if over {
                notes.push(format!("ignoreDifferences: {:?} selects more than {MAX_SELECTED} fields; the rest are compared", e.source));
            }
            remove_all(obj, paths);
        }
    }
}

/// `/spec/replicas` -> `["spec", "replicas"]` (`~1` is `/`, `~0` is `~`).
fn parse_pointer(p: &str) -> Option<Vec<String>> {
    if p.is_empty() {
        return Some(Vec::new());
    }
    let rest = p.strip_prefix('/')?;
    Some(rest.split('/').map(|s| s.replace("~1", "/").replace("~0", "~")).collect())
}

/// One step of a concrete path: an object key (or, on an array, an index written as
/// digits, as a JSON pointer writes it) or an array index.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// Removes the node at `path`, if there is one.
pub fn remove(obj: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else { return };
    let mut node = obj;
    for s in parent {
        node = match (node, s) {
            (Value::Object(m), Step::Key(k)) => match m.get_mut(k) {
                Some(n) => n,
                None => return,
            },
            (Value::Array(a), Step::Index(i)) => match a.get_mut(*i) {
                Some(n) => n,
                None => return,
            },
            (Value::Array(a), Step::Key(k)) => match k.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(n) => n,
                None => return,
            },
            _ => return,
        };
    }
    match (node, last) {
        (Value::Object(m), Step::Key(k)) => {
            m.shift_remove(k);
        }
        (Value::Array(a), Step::Index(i)) if *i < a.len() => {
            a.remove(*i);
        }
        (Value::Array(a), Step::Key(k)) => {
            if let Some(i) = k.parse::<usize>().ok().filter(|i| *i < a.len()) {
                a.remove(i);
            }
        }
        _ => {}
    }
}

/// Removes every path of `paths`, array items from the highest index down so that
/// earlier removals do not shift later ones.
pub fn remove_all(obj: &mut Value, mut paths: Vec<Vec<Step>>) {
    paths.sort_by(|a, b| cmp_paths(b, a));
    paths.dedup();
    for p in paths {
        remove(obj, &p);
    }
}

fn cmp_paths(a: &[Step], b: &[Step]) -> std::cmp::Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (Step::Index(i), Step::Index(j)) => i.cmp(j),
            (Step::Key(i), Step::Key(j)) => i.cmp(j),
            (Step::Key(_), Step::Index(_)) => std::cmp::Ordering::Less,
            (Step::Index(_), Step::Key(_)) => std::cmp::Ordering::Greater,
        };
        if o.is_ne() {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// A parsed jq path expression: stages joined by `|`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    source: String,
    stages: Vec<Stage>,
}

#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// `.a`, `."a"`, `.["a"]`
    Field(String),
    /// `[n]`
    Index(usize),
    /// `[]` (`optional`: `[]?`, no error on a non-array — the subset never errors)
    Each,
    /// `select(cond)`
    Select(Cond),
}

#[derive(Debug, Clone, PartialEq)]
enum Cond {
    Cmp { path: Vec<Stage>, eq: bool, value: Value },
    Call { path: Vec<Stage>, func: Func, arg: String },
    Exists(Vec<Stage>),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
}

#[derive(Debug, Clone)]
enum Func {
    StartsWith,
    EndsWith,
    Contains,
    Test(regex::Regex),
}

impl PartialEq for Func {
    fn eq(&self, other: &Func) -> bool {
        match (self, other) {
            (Func::Test(a), Func::Test(b)) => a.as_str() == b.as_str(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl Pipeline {
    /// The concrete paths this expression selects in `obj` (at most [`MAX_SELECTED`]).
    fn paths(&self, obj: &Value, out: &mut Vec<Vec<Step>>, over: &mut bool) {
        let mut cur: Vec<(Vec<Step>, &Value)> = vec![(Vec::new(), obj)];
        for stage in &self.stages {
            let mut next = Vec::new();
            for (path, v) in cur {
                step(stage, path, v, &mut next);
                if next.len() > MAX_SELECTED {
                    next.truncate(MAX_SELECTED);
                    *over = true;
                    break;
                }
            }
            cur = next;
        }
        out.extend(cur.into_iter().filter(|(p, _)| !p.is_empty()).map(|(p, _)| p));
    }
}

fn step<'a>(stage: &Stage, path: Vec<Step>, v: &'a Value, next: &mut Vec<(Vec<Step>, &'a Value)>) {
    let with = |s: Step| {
        let mut p = path.clone();
        p.push(s);
        p
    };
    match stage {
        Stage::Field(k) => {
            if let Some(c) = v.get(k.as_str()) {
                next.push((with(Step::Key(k.clone())), c));
            }
        }
        Stage::Index(i) => {
            if let Some(c) = v.as_array().and_then(|a| a.get(*i)) {
                next.push((with(Step::Index(*i)), c));
            }
        }
        Stage::Each => match v {
            Value::Array(a) => next.extend(a.iter().enumerate().map(|(i, c)| (with(Step::Index(i)), c))),
            Value::Object(m) => next.extend(m.iter().map(|(k, c)| (with(Step::Key(k.clone())), c))),
            _ => {}
        },
        Stage::Select(c) => {
            if holds(c, v) {
                next.push((path, v));
            }
        }
    }
}

/// The value a relative path (`.name`, `.a.b`) reaches from `v`.
fn resolve<'a>(path: &[Stage], v: &'a Value) -> Option<&'a Value> {
    let mut node = v;
    for s in path {
        node = match s {
            Stage::Field(k) => node.get(k.as_str())?,
            Stage::Index(i) => node.as_array()?.get(*i)?,
            Stage::Each | Stage::Select(_) => return None,
        };
    }
    Some(node)
}

fn holds(c: &Cond, v: &Value) -> bool {
    match c {
        Cond::Cmp { path, eq, value } => (resolve(path, v).unwrap_or(&Value::Null) == value) == *eq,
        Cond::Call { path, func, arg } => {
            let Some(s) = resolve(path, v).and_then(Value::as_str) else { return false };
            match func {
                Func::StartsWith => s.starts_with(arg.as_str()),
                Func::EndsWith => s.ends_with(arg.as_str()),
                Func::Contains => s.contains(arg.as_str()),
                Func::Test(re) => re.is_match(s),
            }
        }
        Cond::Exists(path) => resolve(path, v).is_some_and(|x| !x.is_null() && *x != Value::Bool(false)),
        Cond::And(a, b) => holds(a, v) && holds(b, v),
        Cond::Or(a, b) => holds(a, v) || holds(b, v),
        Cond::Not(a) => !holds(a, v),
    }
}

/// Parses a jq path expression of the subset, or says what is outside it.
fn parse(src: &str) -> Result<Pipeline, String> {
    if src.chars().count() > MAX_EXPR_CHARS {
        return Err(format!("longer than {MAX_EXPR_CHARS} characters"));
    }
    let mut p = Parser { s: src.as_bytes(), i: 0 };
    let stages = p.pipeline()?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.unsupported());
    }
    if stages.is_empty() {
        return Err("selects nothing (an empty path)".into());
    }
    Ok(Pipeline { source: src.to_string(), stages })
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, t: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(t.as_bytes()) {
            self.i += t.len();
            true
        } else {
            false
        }
    }

    fn unsupported(&self) -> String {
        let rest = String::from_utf8_lossy(&self.s[self.i..]);
        format!(
            "not in driftwatch's jq subset at column {} ({:?}): paths (.a, .\"a\", .[\"a\"], [n], [], []?), | and select() with ==, !=, startswith, endswith, contains, test, and, or, not",
            self.i + 1,
            rest.chars().take(20).collect::<String>()
        )
    }

    /// `path ('|' (path | select))*`; `.` alone is the identity.
    fn pipeline(&mut self) -> Result<Vec<Stage>, String> {
        let mut stages = Vec::new();
        loop {
            if self.eat("select(") {
                let c = self.cond()?;
                if !self.eat(")") {
                    return Err(self.unsupported());
                }
                stages.push(Stage::Select(c));
            } else {
                stages.extend(self.path()?);
            }
            if !self.eat("|") {
                return Ok(stages);
            }
        }
    }

    /// `.a.b[0][]?."c"` (a leading `.`; `.` alone is empty).
    fn path(&mut self) -> Result<Vec<Stage>, String> {
        let mut out = Vec::new();
        if !self.eat(".") {
            return Err(self.unsupported());
        }
        let mut after_dot = true;
        loop {
            match self.s.get(self.i).copied() {
                Some(b'[') => {
                    self.i += 1;
                    self.ws();
                    if self.eat("]") {
                        out.push(Stage::Each);
                        self.eat("?");
                    } else if self.peek() == Some(b'"') {
                        let k = self.string()?;
                        if !self.eat("]") {
                            return Err(self.unsupported());
                        }
                        out.push(Stage::Field(k));
                    } else {
                        let start = self.i;
                        while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                            self.i += 1;
                        }
                        let n = std::str::from_utf8(&self.s[start..self.i])
                            .ok()
                            .and_then(|d| d.parse().ok())
                            .ok_or_else(|| self.unsupported())?;
                        if !self.eat("]") {
                            return Err(self.unsupported());
                        }
                        out.push(Stage::Index(n));
                    }
                    after_dot = false;
                }
                Some(b'"') if after_dot => {
                    out.push(Stage::Field(self.string()?));
                    after_dot = false;
                }
                Some(c) if after_dot && (c.is_ascii_alphabetic() || c == b'_') => {
                    let start = self.i;
                    while self.s.get(self.i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
                        self.i += 1;
                    }
                    out.push(Stage::Field(String::from_utf8_lossy(&self.s[start..self.i]).into_owned()));
                    after_dot = false;
                }
                Some(b'.') if !after_dot => {
                    self.i += 1;
                    after_dot = true;
                }
                _ => return Ok(out),
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.ws();
        let start = self.i;
        let rest = std::str::from_utf8(&self.s[start..]).map_err(|_| "not UTF-8".to_string())?;
        // A JSON string literal: read up to the closing quote, then let serde unescape it.
        let mut escaped = false;
        for (n, c) in rest.char_indices().skip(1) {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    self.i = start + n + 1;
                    return serde_json::from_str(&rest[..=n]).map_err(|e| format!("a string that is not valid: {e}"));
                }
                _ => escaped = false,
            }
        }
        Err("a string that does not end".into())
    }

    fn cond(&mut self) -> Result<Cond, String> {
        let mut left = self.cond_and()?;
        while self.eat("or ") {
            left = Cond::Or(Box::new(left), Box::new(self.cond_and()?));
        }
        Ok(left)
    }

    fn cond_and(&mut self) -> Result<Cond, String> {
        let mut left = self.cond_atom()?;
        while self.eat("and ") {
            left = Cond::And(Box::new(left), Box::new(self.cond_atom()?));
        }
        Ok(left)
    }

    fn cond_atom(&mut self) -> Result<Cond, String> {
        if self.eat("(") {
            let c = self.cond()?;
            if !self.eat(")") {
                return Err(self.unsupported());
            }
            return self.maybe_not(c);
        }
        let path = self.path()?;
        if path.iter().any(|s| matches!(s, Stage::Each)) {
            return Err(self.unsupported());
        }
        let c = if self.eat("==") {
            Cond::Cmp { path, eq: true, value: self.literal()? }
        } else if self.eat("!=") {
            Cond::Cmp { path, eq: false, value: self.literal()? }
        } else if self.eat("|") {
            let func = if self.eat("startswith(") {
                Func::StartsWith
            } else if self.eat("endswith(") {
                Func::EndsWith
            } else if self.eat("contains(") {
                Func::Contains
            } else if self.eat("test(") {
                Func::Test(regex::Regex::new("^$").map_err(|e| e.to_string())?)
            } else {
                return Err(self.unsupported());
            };
            let arg = self.string()?;
            if !self.eat(")") {
                return Err(self.unsupported());
            }
            let func = match func {
                Func::Test(_) => Func::Test(
                    regex::RegexBuilder::new(&arg)
                        .size_limit(1 << 20)
                        .build()
                        .map_err(|e| format!("test({arg:?}) is not a regular expression: {e}"))?,
                ),
                f => f,
            };
            Cond::Call { path, func, arg }
        } else {
            Cond::Exists(path)
        };
        self.maybe_not(c)
    }

    fn maybe_not(&mut self, c: Cond) -> Result<Cond, String> {
        if self.eat("|") {
            if self.eat("not") {
                return Ok(Cond::Not(Box::new(c)));
            }
            return Err(self.unsupported());
        }
        Ok(c)
    }

    fn literal(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'"') => self.string().map(Value::String),
            _ => {
                let start = self.i;
                while self.s.get(self.i).is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'+')) {
                    self.i += 1;
                }
                let word = String::from_utf8_lossy(&self.s[start..self.i]);
                serde_json::from_str::<Value>(&word).ok().filter(|v| !v.is_object() && !v.is_array()).ok_or_else(|| self.unsupported())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(list: Value) -> IgnoreRules {
        IgnoreRules::of(&json!({"spec": {"ignoreDifferences": list}}))
    }

    fn deployment() -> Value {
        json!({"spec": {"replicas": 5, "template": {"spec": {
            "initContainers": [{"name": "istio-init", "image": "i"}, {"name": "setup", "image": "s"}],
            "containers": [{"name": "app", "image": "a", "env": [{"name": "X", "value": "1"}]}, {"name": "istio-proxy", "image": "p"}]}}}})
    }

    #[test]
    fn pointers_and_jq_paths_remove_what_they_select() {
        let r = rules(json!([
            {"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"],
             "jqPathExpressions": [".spec.template.spec.initContainers[] | select(.name | startswith(\"istio\"))",
                                   ".spec.template.spec.containers[] | select(.name == \"istio-proxy\")"]},
            {"group": "*", "kind": "ConfigMap", "jsonPointers": ["/data"]},
            {"group": "apps", "kind": "Deployment", "name": "other", "jsonPointers": ["/spec/template"]}
        ]));
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let f = r.for_resource("apps", "Deployment", "shop", "web");
        let mut d = deployment();
        let mut notes = Vec::new();
        f.strip(&mut d, &mut notes);
        assert!(notes.is_empty());
        assert_eq!(d.at("/spec/replicas"), None);
        assert_eq!(d.at("/spec/template/spec/initContainers"), Some(&json!([{"name": "setup", "image": "s"}])));
        assert_eq!(d.at("/spec/template/spec/containers/1"), None);
        assert_eq!(d.at("/spec/template/spec/containers/0/name"), Some(&json!("app")), "the rule for another name did not apply");
        assert!(r.for_resource("", "ConfigMap", "a", "b").pointers.len() == 1, "a wildcard group");
        assert!(r.for_resource("", "Secret", "a", "b").is_empty());
    }

    #[test]
    fn the_forms_users_write_parse_and_everything_else_is_refused_with_a_note() {
        for ok in [
            ".metadata.annotations[\"argocd.argoproj.io/x\"]",
            ".metadata.\"labels\"",
            ".spec.template.spec.containers[0].image",
            ".webhooks[]?.clientConfig.caBundle",
            ".spec.template.spec.containers[] | select(.name == \"a\" or (.name | test(\"^sidecar-\"))) | .image",
            ".spec.x[] | select(.enabled == true and (.name | contains(\"b\") | not))",
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok));
        }
        for (bad, why) in [
            ("def f: f; f", "subset"),
            ("repeat(.)", "subset"),
            (".a | .b[", "subset"),
            (".a[] | select(.x | test(\"(\"))", "regular expression"),
            (".a | select(.b == \"x)", "does not end"),
            ("", "subset"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let r = rules(json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["spec"], "jqPathExpressions": ["range(1e18)"]}]));
        assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
        assert!(r.notes[1].contains("range(1e18)"), "names the expression: {:?}", r.notes);
    }

    #[test]
    fn an_expression_that_selects_too_much_is_bounded() {
        let big: Vec<Value> = (0..MAX_SELECTED + 5).map(|i| json!({"n": i})).collect();
        let mut obj = json!({"items": big});
        let r = rules(json!([{"group": "", "kind": "List", "jqPathExpressions": [".items[]"]}]));
        let mut notes = Vec::new();
        r.for_resource("", "List", "", "x").strip(&mut obj, &mut notes);
        assert_eq!(obj["items"].as_array().unwrap().len(), 5);
        assert_eq!(notes.len(), 1);
    }
}
