//! A Go template's nodes as handlebars with Go's meaning: the dot as a block parameter
//! in `range`/`with`, `@root` inside blocks, variables replaced by their values (and the
//! first-iteration flag as `@first`), functions as built-ins and `template::sprig`
//! helpers with the piped value last.

use std::collections::HashMap;

use super::literal::{is_literal, literal_text, number_literal, sanitize};
use super::parse::{Arg, Node, Pipe};
use crate::import::refusal::Refusal;

/// What a Go variable stands for where it is used.
#[derive(Debug, Clone)]
enum Binding {
    /// A handlebars expression valid anywhere below its definition.
    Expr(String),
    /// A literal whose value a `range` flips on its first iteration: read before the
    /// flip it is `(ternary before after @first)`, after it `after`.
    Flag { before: String, after: String, flipped: bool },
    /// Reassigned in a way that is not translated.
    Changed,
    /// Argo CD's repo-server lookups: every field is a marked placeholder.
    RepoCall(String),
}

#[derive(Debug, Clone, Default)]
struct Scope {
    /// The block parameter that is the dot here; `None` at the root.
    dot: Option<String>,
    vars: HashMap<String, Binding>,
}

pub(super) struct Emitter {
    scopes: Vec<Scope>,
    /// The byte offset of the action whose pipeline was entered last.
    at: usize,
    /// Handlebars context depth (`each`/`with` blocks).
    depth: usize,
    /// Block parameters named so far (for unique names).
    params: usize,
    notes: Vec<String>,
    /// Root paths as `@root.…` even at the top: while translating a variable's value,
    /// which may be read inside a block.
    absolute: bool,
    /// In a JSON field: whether the text so far ends inside a JSON string literal.
    json: Option<bool>,
}

/// A translated value: a path or literal usable as an argument, or a helper call.
struct Val {
    text: String,
    /// A helper call `(f …)`: at the top of an output it loses its parentheses.
    call: bool,
    /// A literal to write as text when output.
    literal: Option<String>,
}

impl Val {
    fn plain(text: String) -> Val {
        Val { text, call: false, literal: None }
    }
    fn call(text: String) -> Val {
        Val { text, call: true, literal: None }
    }
}

fn hbs_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Words Handlebars reads as something other than a field name (`{{else}}` is a branch,
/// `{{this}}` the context, `{{true}}` a literal).
const HBS_KEYWORDS: &[&str] = &["else", "this", "true", "false", "null", "undefined", "as"];

/// Handlebars path segments: plain names as they are, others (and keywords) in `[...]`.
fn segments(base: &str, fields: &[String]) -> String {
    let mut out = base.to_string();
    for f in fields {
        if !out.is_empty() {
            out.push('.');
        }
        if f.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !f.is_empty()
            && !f.starts_with(|c: char| c.is_ascii_digit())
            && !HBS_KEYWORDS.contains(&f.as_str())
        {
            out.push_str(f);
        } else {
            out.push_str(&format!("[{f}]"));
        }
    }
    out
}

/// Go and Sprig functions: (handlebars helper, how the arguments are reordered).
enum Shape {
    /// The same order.
    Same(&'static str),
    /// `default d x` -> `default x d`.
    Swap(&'static str),
    /// A binary comparison, Go allowing `eq a b c` (a == b or a == c).
    Compare(&'static str),
}

fn function(name: &str) -> Option<Shape> {
    use Shape::*;
    Some(match name {
        "eq" => Compare("eq"),
        "ne" => Same("ne"),
        "lt" => Same("lt"),
        "le" => Same("lte"),
        "gt" => Same("gt"),
        "ge" => Same("gte"),
        "and" => Same("and"),
        "or" => Same("or"),
        "not" => Same("not"),
        "len" => Same("len"),
        "printf" => Same("printf"),
        "print" => Same("print"),
        "urlquery" => Same("urlquery"),
        "default" => Swap("default"),
        "toJson" | "toRawJson" | "mustToJson" | "mustToRawJson" => Same("json"),
        "toPrettyJson" | "mustToPrettyJson" => Same("toPrettyJson"),
        "upper" | "lower" | "trim" | "trunc" | "substr" | "replace" | "contains" | "hasPrefix" | "hasSuffix" | "trimPrefix"
        | "trimSuffix" | "trimAll" | "title" | "quote" | "squote" | "b64enc" | "b64dec" | "toString" | "list" | "dict" | "has" | "join"
        | "now" | "date" | "unixEpoch" | "ternary" => Same(static_name(name)),
        _ => return None,
    })
}

fn static_name(name: &str) -> &'static str {
    const NAMES: &[&str] = &[
        "upper",
        "lower",
        "trim",
        "trunc",
        "substr",
        "replace",
        "contains",
        "hasPrefix",
        "hasSuffix",
        "trimPrefix",
        "trimSuffix",
        "trimAll",
        "title",
        "quote",
        "squote",
        "b64enc",
        "b64dec",
        "toString",
        "list",
        "dict",
        "has",
        "join",
        "now",
        "date",
        "unixEpoch",
        "ternary",
    ];
    NAMES.iter().find(|n| **n == name).copied().unwrap_or("toString")
}

/// The nodes as handlebars, and the notes on what was kept with a caveat; in a JSON
/// field (`json`) a value inside a JSON string is escaped.
pub(super) fn emit(nodes: &[Node], json: bool) -> Result<(String, Vec<String>), Refusal> {
    let mut e = Emitter {
        scopes: vec![Scope::default()],
        at: 0,
        depth: 0,
        params: 0,
        notes: Vec::new(),
        absolute: false,
        json: json.then_some(false),
    };
    let mut out = String::new();
    e.nodes(nodes, &mut out).map_err(|r| Refusal::new(e.at, r))?;
    Ok((out, e.notes))
}

impl Emitter {
    fn lookup(&self, var: &str) -> Option<&Binding> {
        self.scopes.iter().rev().find_map(|s| s.vars.get(var))
    }

    fn bind(&mut self, var: &str, b: Binding) {
        if let Some(s) = self.scopes.last_mut() {
            s.vars.insert(var.to_string(), b);
        }
    }

    /// The root as a path prefix: bare at the top, `@root` inside blocks.
    fn root(&self, fields: &[String]) -> String {
        if self.depth == 0 && !self.absolute && !fields.is_empty() { segments("", fields) } else { segments("@root", fields) }
    }

    fn dot(&self, fields: &[String]) -> String {
        match self.scopes.iter().rev().find_map(|s| s.dot.clone()) {
            Some(param) => segments(&param, fields),
            None => self.root(fields),
        }
    }

    fn new_param(&mut self, hint: &str) -> String {
        self.params += 1;
        format!("{hint}{}", self.params)
    }

    fn nodes(&mut self, nodes: &[Node], out: &mut String) -> Result<(), String> {
        for (i, n) in nodes.iter().enumerate() {
            // A text right before an action must not end in `\`, or handlebars reads
            // `\{{` as an escaped mustache.
            match n {
                Node::Text(t) => {
                    if let Some(in_string) = self.json.as_mut() {
                        let mut escaped = false;
                        for c in t.chars() {
                            match c {
                                '\\' if *in_string => escaped = !escaped,
                                '"' if !escaped => *in_string = !*in_string,
                                _ => escaped = false,
                            }
                            if c != '\\' {
                                escaped = false;
                            }
                        }
                    }
                    out.push_str(&t.replace("{{", "\\{{"));
                    if t.ends_with('\\') && i + 1 < nodes.len() {
                        out.push('\\');
                    }
                }
                Node::Out(p) => {
                    let mut v = self.pipe(p)?;
                    if self.json == Some(true) && v.literal.is_none() {
                        v = Val::call(format!("(json_escape {})", v.text));
                    }
                    if let Some(lit) = v.literal {
                        out.push_str(&lit.replace("{{", "\\{{"));
                    } else if v.call {
                        out.push_str(&format!("{{{{{}}}}}", &v.text[1..v.text.len() - 1]));
                    } else {
                        out.push_str(&format!("{{{{{}}}}}", v.text));
                    }
                }
                Node::Assign { var, declare, pipe } => {
                    // A refusal of the assignment itself points at it.
                    self.at = pipe.at;
                    self.assign(var, *declare, pipe)?
                }
                Node::If { branches, otherwise } => {
                    // Each branch starts in the JSON state the `if` starts in.
                    let json_at_start = self.json;
                    for (k, (cond, body)) in branches.iter().enumerate() {
                        self.json = json_at_start;
                        let c = self.pipe(cond)?;
                        out.push_str(&if k == 0 { format!("{{{{#if {}}}}}", c.text) } else { format!("{{{{else if {}}}}}", c.text) });
                        self.scoped(body, out)?;
                    }
                    if let Some(o) = otherwise {
                        self.json = json_at_start;
                        out.push_str("{{else}}");
                        self.scoped(o, out)?;
                    }
                    out.push_str("{{/if}}");
                }
                Node::Range { key, value, pipe, body, otherwise } => {
                    self.range(key.as_deref(), value.as_deref(), pipe, body, otherwise, out)?
                }
                Node::With { var, pipe, body, otherwise } => {
                    let v = self.pipe(pipe)?;
                    let param = match var {
                        Some(name) => sanitize(name, &mut self.params),
                        None => self.new_param("it"),
                    };
                    let mut vars = HashMap::new();
                    if let Some(name) = var {
                        vars.insert(name.clone(), Binding::Expr(param.clone()));
                    }
                    out.push_str(&format!("{{{{#with {} as |{param}|}}}}", v.text));
                    self.block(Some(param), vars, body, out)?;
                    if let Some(o) = otherwise {
                        out.push_str("{{else}}");
                        self.scoped(o, out)?;
                    }
                    out.push_str("{{/with}}");
                }
            }
        }
        Ok(())
    }

    /// Nodes in a new variable scope (an `if` branch), same dot and depth.
    fn scoped(&mut self, nodes: &[Node], out: &mut String) -> Result<(), String> {
        self.scopes.push(Scope::default());
        let r = self.nodes(nodes, out);
        self.scopes.pop();
        r
    }

    /// Nodes inside an `each`/`with` block whose dot is `param`.
    fn block(&mut self, param: Option<String>, vars: HashMap<String, Binding>, nodes: &[Node], out: &mut String) -> Result<(), String> {
        self.scopes.push(Scope { dot: param, vars });
        self.depth += 1;
        let r = self.nodes(nodes, out);
        self.depth -= 1;
        self.scopes.pop();
        r
    }

    fn assign(&mut self, var: &str, declare: bool, pipe: &Pipe) -> Result<(), String> {
        if declare {
            if let Some(b) = self.repo_call(pipe) {
                self.bind(var, b);
                return Ok(());
            }
            self.absolute = true;
            let v = self.pipe(pipe);
            self.absolute = false;
            // A literal may be the flag a later range flips; decided there.
            self.bind(var, Binding::Expr(v?.text));
            return Ok(());
        }
        match self.lookup(var).cloned() {
            Some(Binding::Flag { before, after, .. }) => {
                let v = self.pipe(pipe)?;
                if v.text != after {
                    return Err(format!("`${var}` is changed again inside the range; only a flag set once per iteration is translated"));
                }
                // From here on in this iteration the flag has its new value.
                self.set_flag(var, Binding::Flag { before, after, flipped: true });
                Ok(())
            }
            _ => Err(format!("`${var} = …` changes a variable; only the first-iteration flag idiom is translated")),
        }
    }

    fn set_flag(&mut self, var: &str, b: Binding) {
        for s in self.scopes.iter_mut().rev() {
            if let Some(slot) = s.vars.get_mut(var) {
                *slot = b;
                return;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn range(
        &mut self,
        key: Option<&str>,
        value: Option<&str>,
        pipe: &Pipe,
        body: &[Node],
        otherwise: &Option<Vec<Node>>,
        out: &mut String,
    ) -> Result<(), String> {
        let v = self.pipe(pipe)?;
        let item = match value {
            Some(n) => sanitize(n, &mut self.params),
            None => self.new_param("item"),
        };
        let mut vars = HashMap::new();
        if let Some(val) = value {
            vars.insert(val.to_string(), Binding::Expr(item.clone()));
        }
        let index = key.map(|k| sanitize(k, &mut self.params));
        if let (Some(k), Some(idx)) = (key, &index) {
            vars.insert(k.to_string(), Binding::Expr(idx.clone()));
        }
        // Flags: a variable bound to a literal outside, set to another literal at the top
        // level of this body.
        for n in body {
            if let Node::Assign { var, declare: false, pipe } = n
                && let Some(Binding::Expr(before)) = self.lookup(var).cloned()
                && is_literal(&before)
            {
                let after = self.pipe(pipe)?.text;
                if is_literal(&after) {
                    vars.insert(var.clone(), Binding::Flag { before, after, flipped: false });
                    // Read after the range, the value depends on whether it ran.
                    self.set_flag(var, Binding::Changed);
                }
            }
        }
        let params = match &index {
            Some(i) => format!("{item} {i}"),
            None => item.clone(),
        };
        out.push_str(&format!("{{{{#each {} as |{params}|}}}}", v.text));
        self.block(Some(item), vars, body, out)?;
        if let Some(o) = otherwise {
            out.push_str("{{else}}");
            self.scoped(o, out)?;
        }
        out.push_str("{{/each}}");
        Ok(())
    }

    fn is_repo_call(&self, pipe: &Pipe) -> bool {
        matches!(pipe.cmds.as_slice(), [cmd] if matches!(cmd.as_slice(),
            [Arg::Func(call), Arg::Dot(f), ..] if call == "call" && f.len() == 2 && f[0] == "repo" && (f[1] == "GetCommitMetadata" || f[1] == "GetAppDetails")))
    }

    /// `call .repo.GetCommitMetadata …` and friends: a marked placeholder.
    fn repo_call(&mut self, pipe: &Pipe) -> Option<Binding> {
        let [cmd] = pipe.cmds.as_slice() else { return None };
        match cmd.as_slice() {
            [Arg::Func(call), Arg::Dot(f), ..]
                if call == "call" && f.len() == 2 && f[0] == "repo" && (f[1] == "GetCommitMetadata" || f[1] == "GetAppDetails") =>
            {
                self.notes.push(format!("`call .repo.{}` needs Argo CD's repo server; its fields render as a marked placeholder", f[1]));
                Some(Binding::RepoCall(format!("repo.{}", f[1])))
            }
            _ => None,
        }
    }

    fn pipe(&mut self, pipe: &Pipe) -> Result<Val, String> {
        self.at = pipe.at;
        let mut prev: Option<Val> = None;
        for cmd in &pipe.cmds {
            prev = Some(self.command(cmd, prev)?);
        }
        prev.ok_or_else(|| "an empty pipeline".to_string())
    }

    fn command(&mut self, cmd: &[Arg], piped: Option<Val>) -> Result<Val, String> {
        let Some(first) = cmd.first() else { return Err("an empty command".into()) };
        match first {
            Arg::Func(name) => {
                let mut args: Vec<Val> = Vec::new();
                let rest = &cmd[1..];
                if name == "call" {
                    return self.call(rest, piped);
                }
                for a in rest {
                    args.push(self.arg(a)?);
                }
                if let Some(p) = piped {
                    args.push(p);
                }
                self.func(name, args)
            }
            // `(call .repo.GetAppDetails).Helm.GetParameterValueByName "image.tag"`: a
            // method of a repo-server result; the whole command is the placeholder.
            Arg::Sub(p, f) if self.is_repo_call(p) => self.arg(&Arg::Sub(p.clone(), f.clone())),
            // A time's `.Format "layout"` (after `.UTC` or `.Local`, which RFC 3339 text
            // makes moot): Sprig's `date`.
            Arg::Sub(_, f) | Arg::Var(_, f) if f.last().is_some_and(|l| l == "Format") && cmd.len() == 2 && piped.is_none() => {
                if !f[..f.len() - 1].iter().all(|x| x == "UTC" || x == "Local") {
                    return Err(format!("`.{}` on a time is not translated", f.join(".")));
                }
                let Arg::Str(layout) = &cmd[1] else { return Err("`.Format` takes a layout string".into()) };
                let time = match first {
                    Arg::Sub(p, _) => self.arg(&Arg::Sub(p.clone(), Vec::new()))?,
                    Arg::Var(v, _) => self.arg(&Arg::Var(v.clone(), Vec::new()))?,
                    _ => return Err("`.Format` of something other than a time".into()),
                };
                Ok(Val::call(format!("(date {} {})", hbs_string(layout), time.text)))
            }
            _ if cmd.len() == 1 && piped.is_none() => self.arg(first),
            _ => Err("a value cannot take arguments or be piped into".into()),
        }
    }

    fn func(&mut self, name: &str, args: Vec<Val>) -> Result<Val, String> {
        if name == "index" {
            let mut it = args.into_iter();
            let collection = it.next().ok_or("`index` needs a collection")?;
            let mut keys = it.peekable();
            if keys.peek().is_none() {
                // `index x` with no key is x itself.
                return Ok(collection);
            }
            let mut acc = collection.text;
            for k in keys {
                acc = format!("(lookup {acc} {})", k.text);
            }
            return Ok(Val::call(acc));
        }
        let texts: Vec<String> = args.into_iter().map(|a| a.text).collect();
        match function(name) {
            Some(Shape::Same(h)) => Ok(Val::call(format!("({h}{})", texts.iter().map(|t| format!(" {t}")).collect::<String>()))),
            Some(Shape::Swap(h)) if texts.len() == 2 => Ok(Val::call(format!("({h} {} {})", texts[1], texts[0]))),
            Some(Shape::Compare(h)) if texts.len() > 2 => {
                let alts: Vec<String> = texts[1..].iter().map(|t| format!("({h} {} {t})", texts[0])).collect();
                Ok(Val::call(format!("(or {})", alts.join(" "))))
            }
            Some(Shape::Compare(h)) => Ok(Val::call(format!("({h}{})", texts.iter().map(|t| format!(" {t}")).collect::<String>()))),
            _ => Err(format!("the function `{name}` is not translated")),
        }
    }

    /// `call .repo.X …`, `call .strings.X …`, `call .time.X …`.
    fn call(&mut self, rest: &[Arg], piped: Option<Val>) -> Result<Val, String> {
        let Some(Arg::Dot(f)) = rest.first() else { return Err("`call` of something other than an Argo CD function".into()) };
        let mut args = Vec::new();
        for a in &rest[1..] {
            args.push(self.arg(a)?.text);
        }
        if let Some(p) = piped {
            args.push(p.text);
        }
        let name = f.join(".");
        let one = |h: &str, args: &[String]| -> Result<Val, String> {
            match args {
                [a] => Ok(Val::call(format!("({h} {a})"))),
                _ => Err(format!("`call .{name}` takes one argument")),
            }
        };
        match name.as_str() {
            "repo.RepoURLToHTTPS" => one("repo_url_to_https", &args),
            "repo.FullNameByRepoURL" => one("repo_full_name", &args),
            "repo.GetCommitMetadata" | "repo.GetAppDetails" => {
                self.notes.push(format!("`call .{name}` needs Argo CD's repo server; it renders as a marked placeholder"));
                Ok(Val::call(format!("(repo_unavailable {})", hbs_string(&name))))
            }
            "strings.ToUpper" => one("upper", &args),
            "strings.ToLower" => one("lower", &args),
            "strings.TrimSpace" => one("trim", &args),
            "strings.ReplaceAll" => match args.as_slice() {
                [s, old, new] => Ok(Val::call(format!("(replace {old} {new} {s})"))),
                _ => Err("`call .strings.ReplaceAll` takes three arguments".into()),
            },
            "time.Now" if args.is_empty() => Ok(Val::call("(now)".into())),
            // A time as RFC 3339 text, which `date` formats (`.Format` below).
            "time.Parse" => one("toDate \"\"", &args),
            _ => Err(format!("`call .{name}` is not translated")),
        }
    }

    fn arg(&mut self, a: &Arg) -> Result<Val, String> {
        Ok(match a {
            Arg::Dot(f) => Val::plain(self.dot(f)),
            Arg::Var(v, f) if v.is_empty() => Val::plain(self.root(f)),
            Arg::Var(v, f) => match self.lookup(v).cloned() {
                Some(Binding::Expr(e)) if f.is_empty() => Val { call: e.starts_with('('), literal: literal_text(&e), text: e },
                Some(Binding::Expr(e)) if e.starts_with('(') => {
                    let mut acc = e;
                    for k in f {
                        acc = format!("(lookup {acc} {})", hbs_string(k));
                    }
                    Val::call(acc)
                }
                Some(Binding::Expr(e)) => Val::plain(segments(&e, f)),
                Some(Binding::Flag { before, after, flipped }) => {
                    if flipped {
                        Val { literal: literal_text(&after), text: after, call: false }
                    } else if before == "true" && after == "false" {
                        Val::plain("@first".into())
                    } else if before == "false" && after == "true" {
                        Val::call("(not @first)".into())
                    } else {
                        Val::call(format!("(ternary {before} {after} @first)"))
                    }
                }
                Some(Binding::RepoCall(m)) => {
                    let what = if f.is_empty() { m } else { format!("{m}.{}", f.join(".")) };
                    Val::call(format!("(repo_unavailable {})", hbs_string(&what)))
                }
                Some(Binding::Changed) => return Err(format!("`${v}` is read after a range changed it; this is not translated")),
                None => return Err(format!("`${v}` is not defined")),
            },
            Arg::Str(s) => Val { text: hbs_string(s), call: false, literal: Some(s.clone()) },
            Arg::Num(n) => {
                let text = number_literal(n).ok_or_else(|| format!("the number {n} is not translated"))?;
                Val { literal: Some(text.clone()), text, call: false }
            }
            Arg::Bool(b) => Val { text: b.to_string(), call: false, literal: Some(b.to_string()) },
            Arg::Nil => Val::plain("null".into()),
            Arg::Sub(p, f) => {
                if let Some(Binding::RepoCall(m)) = self.repo_call(p) {
                    let what = if f.is_empty() { m } else { format!("{m}.{}", f.join(".")) };
                    return Ok(Val::call(format!("(repo_unavailable {})", hbs_string(&what))));
                }
                let v = self.pipe(p)?;
                if f.is_empty() {
                    v
                } else {
                    let mut acc = v.text;
                    for k in f {
                        acc = format!("(lookup {acc} {})", hbs_string(k));
                    }
                    Val::call(acc)
                }
            }
            Arg::Func(name) => self.func(name, Vec::new())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hbs(src: &str) -> Result<String, Refusal> {
        let nodes = super::super::parse::parse(super::super::lex::split(src)?)?;
        emit(&nodes, false).map(|(text, _)| text)
    }

    #[test]
    fn the_dot_is_a_block_parameter_and_the_root_is_at_root_inside() {
        assert_eq!(hbs("{{.app.metadata.name}}").unwrap(), "{{app.metadata.name}}");
        assert_eq!(
            hbs("{{range .app.status.conditions}}{{.type}} of {{$.app.metadata.name}}{{end}}").unwrap(),
            "{{#each app.status.conditions as |item1|}}{{item1.type}} of {{@root.app.metadata.name}}{{/each}}"
        );
    }

    #[test]
    fn refusals_point_at_the_action_whose_pipeline_fails() {
        assert_eq!(hbs("{{.a}} and {{nosuch .b}}").unwrap_err(), Refusal::new(11, "the function `nosuch` is not translated"));
        assert_eq!(hbs("x\n{{$n := 0}}{{$n = 1}}").unwrap_err().at, 13);
    }

    #[test]
    fn go_numbers_become_literals_handlebars_reads() {
        for (go, hbs_text) in [("7", "7"), ("7.", "7"), ("+1", "1"), ("-2", "-2"), ("2.50", "2.5"), ("1e3", "1000"), ("1e300", "")] {
            let Some(text) = number_literal(go) else { panic!("{go} refused") };
            if !hbs_text.is_empty() {
                assert_eq!(text, hbs_text, "{go}");
            }
            assert!(crate::template::compiles(&format!("{{{{trunc {text} \"abc\"}}}}")).is_ok(), "{go} -> {text}");
        }
        for refused in ["-", "0x1F", "1_000", "-inf", "+nan", "7.x"] {
            assert_eq!(number_literal(refused), None, "{refused}");
        }
        assert_eq!(hbs("{{trunc 7. .x}}").unwrap(), "{{trunc 7 x}}");
    }

    #[test]
    fn index_without_a_key_is_its_collection() {
        assert_eq!(hbs("{{index .x}}").unwrap(), "{{x}}");
        assert_eq!(hbs("{{index \"s\"}}").unwrap(), "s");
        assert_eq!(hbs("{{.else}} {{.app.this}}").unwrap(), "{{[else]}} {{app.[this]}}");
        assert_eq!(hbs("{{index (index .x \"k\")}}").unwrap(), "{{lookup x \"k\"}}");
    }
}
