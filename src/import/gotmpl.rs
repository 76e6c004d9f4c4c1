//! Argo CD templates, written in Go's `text/template` with Sprig, translated to the
//! handlebars driftwatch renders. Hand-written (no crate parses Go templates in Rust):
//! a lexer that applies the trim markers to the text around them, a parser for the
//! actions (`if`/`else if`/`range`/`with`/variables/pipelines), and an emitter that
//! keeps Go's meaning:
//!
//! - `.x` is relative to the dot: the root at the top, the element inside `range` and
//!   the value inside `with`. Every `range`/`with` gets a block parameter, so the dot
//!   there is a name (`{{#each app.status.conditions as |c|}}…{{c.type}}`) and the
//!   root is `@root` inside blocks.
//! - `$x := pipeline` is replaced by its translation where `$x` is used; the one
//!   reassignment idiom Go templates have, a flag set in a `range`
//!   (`{{$first := true}}{{range}}{{if not $first}}, {{end}}{{$first = false}}…`), is
//!   read as `@first`. Any other reassignment is refused.
//! - Functions map to handlebars built-ins and the helpers in `template::sprig`, with
//!   the piped value as the last argument, as Go passes it.
//! - Trim markers are applied to the text; a block tag left alone on its line gets an
//!   empty comment before it, since handlebars would drop that line and Go keeps it.
//!
//! What cannot be kept is refused with a reason (see [`Translation::notes`] for what
//! is kept with a caveat).

use std::collections::HashMap;

/// A translated template: handlebars text, and caveats worth a line in the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    pub text: String,
    pub notes: Vec<String>,
}

/// Translates one Go template to handlebars, or says why it cannot.
pub fn to_handlebars(src: &str) -> Result<Translation, String> {
    translate(src, false)
}

/// As [`to_handlebars`], for a field that must render to JSON (Slack attachments, a
/// JSON webhook body): a value written inside a JSON string literal is escaped with
/// `json_escape`, so a quote or newline in, say, a condition message cannot break the
/// JSON (it does in Argo CD). Where the value has no such character the text is Go's.
pub fn to_handlebars_in_json(src: &str) -> Result<Translation, String> {
    translate(src, true)
}

fn translate(src: &str, json: bool) -> Result<Translation, String> {
    let pieces = split(src)?;
    let mut p = Parser { pieces, pos: 0, depth: 0 };
    let (nodes, end) = p.block(&[])?;
    if let Some(end) = end {
        return Err(format!("`{{{{{end}}}}}` without a matching `if`, `range` or `with`"));
    }
    let mut e =
        Emitter { scopes: vec![Scope::default()], depth: 0, params: 0, notes: Vec::new(), absolute: false, json: json.then_some(false) };
    let mut out = String::new();
    e.nodes(&nodes, &mut out)?;
    Ok(Translation { text: keep_standalone_lines(&out), notes: e.notes })
}

/// Handlebars removes a line that holds only a block tag (`{{#each}}`, `{{else}}`,
/// `{{/if}}`: a "standalone" tag), where Go keeps its whitespace and newline. An empty
/// comment before such a tag keeps the line as Go has it.
fn keep_standalone_lines(hbs: &str) -> String {
    let mut out = String::with_capacity(hbs.len());
    let mut rest = hbs;
    while let Some(open) = rest.find("{{") {
        // `\{{` is an escaped mustache, text.
        if rest[..open].ends_with('\\') && !rest[..open].ends_with("\\\\") {
            out.push_str(&rest[..open + 2]);
            rest = &rest[open + 2..];
            continue;
        }
        let Some(close) = rest[open..].find("}}").map(|c| open + c + 2) else { break };
        let tag = &rest[open..close];
        let block = tag.starts_with("{{#") || tag.starts_with("{{/") || tag.starts_with("{{else") || tag.starts_with("{{^");
        let blank = |t: &str| t.chars().all(|c| c == ' ' || c == '\t');
        let pre = &rest[..open];
        let alone_before = match pre.rfind('\n') {
            Some(i) => blank(&pre[i + 1..]),
            None => blank(pre) && blank(out.rfind('\n').map_or(out.as_str(), |i| &out[i + 1..])),
        };
        let after = &rest[close..];
        let line_end = after.find('\n').unwrap_or(after.len());
        let alone_after = after[..line_end].chars().all(|c| c == ' ' || c == '\t' || c == '\r');
        out.push_str(&rest[..open]);
        if block && alone_before && alone_after {
            out.push_str("{{!}}");
        }
        out.push_str(tag);
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

// ---- lexing: text and actions -------------------------------------------------------

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Action(String),
}

fn is_go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Splits the source into text and action bodies, applying `{{-` and `-}}` to the
/// neighbouring text and dropping comments.
fn split(src: &str) -> Result<Vec<Piece>, String> {
    let mut out: Vec<Piece> = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = rest[..open].to_string();
        if trim_next {
            text = text.trim_start_matches(is_go_space).to_string();
        }
        let mut body_start = open + 2;
        let after = &rest[body_start..];
        let trim_left = after.starts_with('-') && after[1..].starts_with(is_go_space);
        if trim_left {
            text = text.trim_end_matches(is_go_space).to_string();
            body_start += 1;
        }
        out.push(Piece::Text(text));
        let close = find_close(&rest[body_start..]).ok_or_else(|| "an action `{{` is not closed with `}}`".to_string())?;
        let mut body = &rest[body_start..body_start + close];
        trim_next = false;
        if body.ends_with('-') && body[..body.len() - 1].ends_with(is_go_space) {
            trim_next = true;
            body = &body[..body.len() - 1];
        }
        let trimmed = body.trim_matches(is_go_space);
        if !(trimmed.starts_with("/*") && trimmed.ends_with("*/")) {
            out.push(Piece::Action(trimmed.to_string()));
        }
        rest = &rest[body_start + close + 2..];
    }
    let mut text = rest.to_string();
    if trim_next {
        text = text.trim_start_matches(is_go_space).to_string();
    }
    out.push(Piece::Text(text));
    Ok(out)
}

/// The offset of the `}}` that closes an action, skipping string literals.
fn find_close(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'`' => {
                i += 1;
                while i < b.len() && b[i] != b'`' {
                    i += 1;
                }
            }
            b'}' if b.get(i + 1) == Some(&b'}') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

// ---- parsing actions ----------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Arg {
    /// `.a.b` relative to the dot (empty: the dot itself).
    Dot(Vec<String>),
    /// `$x.a.b`; `$` alone is the root.
    Var(String, Vec<String>),
    Func(String),
    Str(String),
    Num(String),
    Bool(bool),
    Nil,
    /// `(pipeline).a.b`
    Sub(Pipe, Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
struct Pipe {
    cmds: Vec<Vec<Arg>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Out(Pipe),
    Assign { var: String, declare: bool, pipe: Pipe },
    If { branches: Vec<(Pipe, Vec<Node>)>, otherwise: Option<Vec<Node>> },
    Range { key: Option<String>, value: Option<String>, pipe: Pipe, body: Vec<Node>, otherwise: Option<Vec<Node>> },
    With { var: Option<String>, pipe: Pipe, body: Vec<Node>, otherwise: Option<Vec<Node>> },
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(Vec<String>),
    Var(String, Vec<String>),
    Ident(String),
    Str(String),
    Num(String),
    Open,
    Close(Vec<String>),
    Pipe,
    Declare,
    Assign,
    Comma,
}

fn fields(chars: &[char], i: &mut usize) -> Vec<String> {
    let mut out = Vec::new();
    while *i < chars.len() && chars[*i] == '.' {
        let start = *i + 1;
        let mut j = start;
        while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
            j += 1;
        }
        if j == start {
            break;
        }
        out.push(chars[start..j].iter().collect());
        *i = j;
    }
    out
}

fn lex_action(src: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if is_go_space(c) => i += 1,
            '.' => {
                let f = fields(&chars, &mut i);
                if f.is_empty() {
                    i += 1;
                }
                out.push(Tok::Field(f));
            }
            '$' => {
                let start = i + 1;
                i = start;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                out.push(Tok::Var(name, fields(&chars, &mut i)));
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    let c = *chars.get(i).ok_or("unterminated string")?;
                    i += 1;
                    match c {
                        '"' => break,
                        '\\' => {
                            let e = *chars.get(i).ok_or("unterminated string")?;
                            i += 1;
                            s.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                other => other,
                            });
                        }
                        c => s.push(c),
                    }
                }
                out.push(Tok::Str(s));
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..].iter().position(|c| *c == '`').ok_or("unterminated raw string")? + start;
                out.push(Tok::Str(chars[start..end].iter().collect()));
                i = end + 1;
            }
            '(' => {
                out.push(Tok::Open);
                i += 1;
            }
            ')' => {
                i += 1;
                out.push(Tok::Close(fields(&chars, &mut i)));
            }
            '|' => {
                out.push(Tok::Pipe);
                i += 1;
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::Declare);
                i += 2;
            }
            '=' => {
                out.push(Tok::Assign);
                i += 1;
            }
            c if c.is_ascii_digit() || c == '-' || c == '+' => {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_') {
                    i += 1;
                }
                out.push(Tok::Num(chars[start..i].iter().collect()));
            }
            '\'' => {
                let end = chars[i + 1..].iter().position(|c| *c == '\'').ok_or("unterminated character")? + i + 1;
                let ch: String = chars[i + 1..end].iter().collect();
                out.push(Tok::Num(ch.chars().next().map_or(0, |c| c as u32).to_string()));
                i = end + 1;
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Tok::Ident(chars[start..i].iter().collect()));
            }
            other => return Err(format!("unexpected {other:?} in an action")),
        }
    }
    Ok(out)
}

struct Parser {
    pieces: Vec<Piece>,
    pos: usize,
    /// Nesting of blocks, bounded by [`MAX_DEPTH`].
    depth: usize,
}

/// Deeper than any real template; a bound keeps hostile input off the stack's end.
const MAX_DEPTH: usize = 64;

/// What ended a block: `end`, `else`, or `else if …`/`else with …` (with the rest).
type BlockEnd = Option<String>;

impl Parser {
    /// Nodes up to an `end`/`else` action (returned) or the end of input.
    fn block(&mut self, open: &[&str]) -> Result<(Vec<Node>, BlockEnd), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("blocks nested deeper than {MAX_DEPTH} levels"));
        }
        let r = self.block_inner(open);
        self.depth -= 1;
        r
    }

    fn block_inner(&mut self, open: &[&str]) -> Result<(Vec<Node>, BlockEnd), String> {
        let mut nodes = Vec::new();
        while self.pos < self.pieces.len() {
            let piece = self.pieces[self.pos].clone();
            self.pos += 1;
            let action = match piece {
                Piece::Text(t) => {
                    if !t.is_empty() {
                        nodes.push(Node::Text(t));
                    }
                    continue;
                }
                Piece::Action(a) => a,
            };
            let (word, rest) = action.split_once(is_go_space).map_or((action.as_str(), ""), |(w, r)| (w, r.trim()));
            match word {
                "end" | "else" if !open.is_empty() => return Ok((nodes, Some(action.clone()))),
                "end" | "else" => return Err(format!("`{{{{{action}}}}}` outside a block")),
                "if" => nodes.push(self.if_(rest)?),
                "range" => nodes.push(self.range(rest)?),
                "with" => nodes.push(self.with(rest)?),
                "define" | "template" | "block" => {
                    return Err(format!("`{{{{{word}}}}}` (named templates) is not translated; inline the template"));
                }
                "break" | "continue" => return Err(format!("`{{{{{word}}}}}` in a range is not translated")),
                _ => nodes.push(action_node(&action)?),
            }
        }
        if open.is_empty() { Ok((nodes, None)) } else { Err(format!("`{{{{{}}}}}` is not closed with `{{{{end}}}}`", open[0])) }
    }

    fn if_(&mut self, cond: &str) -> Result<Node, String> {
        let mut branches = Vec::new();
        let mut cond = pipe_of(cond)?;
        loop {
            let (body, end) = self.block(&["if"])?;
            branches.push((cond, body));
            let end = end.unwrap_or_default();
            if end == "end" {
                return Ok(Node::If { branches, otherwise: None });
            }
            let rest = end.strip_prefix("else").unwrap_or("").trim();
            if let Some(c) = rest.strip_prefix("if").filter(|c| c.starts_with(is_go_space)) {
                cond = pipe_of(c.trim())?;
                continue;
            }
            if !rest.is_empty() {
                return Err(format!("`{{{{{end}}}}}` is not translated"));
            }
            let (body, end) = self.block(&["if"])?;
            if end.as_deref() != Some("end") {
                return Err("`{{else}}` must be the last branch of an `if`".into());
            }
            return Ok(Node::If { branches, otherwise: Some(body) });
        }
    }

    /// The body, and the `{{else}}` part, of a `range` or `with`.
    fn body_else(&mut self, what: &str) -> Result<(Vec<Node>, Option<Vec<Node>>), String> {
        let (body, end) = self.block(&[what])?;
        match end.as_deref() {
            Some("end") => Ok((body, None)),
            Some("else") => {
                let (otherwise, end) = self.block(&[what])?;
                if end.as_deref() != Some("end") {
                    return Err(format!("`{{{{else}}}}` must be the last branch of a `{what}`"));
                }
                Ok((body, Some(otherwise)))
            }
            other => Err(format!("`{{{{{}}}}}` in a `{what}` is not translated", other.unwrap_or_default())),
        }
    }

    fn range(&mut self, rest: &str) -> Result<Node, String> {
        let toks = lex_action(rest)?;
        let (key, value, toks) = match toks.as_slice() {
            [Tok::Var(k, kf), Tok::Comma, Tok::Var(v, vf), Tok::Declare, tail @ ..] if kf.is_empty() && vf.is_empty() => {
                (Some(k.clone()), Some(v.clone()), tail.to_vec())
            }
            [Tok::Var(v, vf), Tok::Declare, tail @ ..] if vf.is_empty() => (None, Some(v.clone()), tail.to_vec()),
            _ => (None, None, toks),
        };
        let pipe = parse_pipe(&toks)?;
        let (body, otherwise) = self.body_else("range")?;
        Ok(Node::Range { key, value, pipe, body, otherwise })
    }

    fn with(&mut self, rest: &str) -> Result<Node, String> {
        // `with $x := pipeline`: `$x` is the value, as the dot is.
        let toks = lex_action(rest)?;
        let (var, pipe) = match toks.as_slice() {
            [Tok::Var(v, f), Tok::Declare, tail @ ..] if f.is_empty() => (Some(v.clone()), parse_pipe(tail)?),
            _ => (None, pipe_of(rest)?),
        };
        let (body, otherwise) = self.body_else("with")?;
        Ok(Node::With { var, pipe, body, otherwise })
    }
}

fn pipe_of(src: &str) -> Result<Pipe, String> {
    let toks = lex_action(src)?;
    if matches!(toks.as_slice(), [Tok::Var(..), Tok::Declare | Tok::Assign, ..]) {
        return Err("a variable declared in a condition is not translated".into());
    }
    parse_pipe(&toks)
}

fn action_node(src: &str) -> Result<Node, String> {
    let toks = lex_action(src)?;
    match toks.as_slice() {
        [Tok::Var(v, f), op @ (Tok::Declare | Tok::Assign), tail @ ..] if f.is_empty() => {
            Ok(Node::Assign { var: v.clone(), declare: *op == Tok::Declare, pipe: parse_pipe(tail)? })
        }
        _ => Ok(Node::Out(parse_pipe(&toks)?)),
    }
}

fn parse_pipe(toks: &[Tok]) -> Result<Pipe, String> {
    let opens = toks.iter().filter(|t| **t == Tok::Open).count();
    if opens > MAX_DEPTH {
        return Err(format!("more than {MAX_DEPTH} parentheses in one action"));
    }
    let mut pos = 0;
    let pipe = parse_pipe_at(toks, &mut pos)?;
    if pos < toks.len() {
        return Err(format!("unexpected {:?} in an action", toks[pos]));
    }
    Ok(pipe)
}

fn parse_pipe_at(toks: &[Tok], pos: &mut usize) -> Result<Pipe, String> {
    let mut cmds = vec![Vec::new()];
    while let Some(t) = toks.get(*pos) {
        *pos += 1;
        let arg = match t {
            Tok::Close(_) => {
                *pos -= 1;
                break;
            }
            Tok::Pipe => {
                cmds.push(Vec::new());
                continue;
            }
            Tok::Field(f) => Arg::Dot(f.clone()),
            Tok::Var(v, f) => Arg::Var(v.clone(), f.clone()),
            Tok::Str(s) => Arg::Str(s.clone()),
            Tok::Num(n) => Arg::Num(n.clone()),
            Tok::Ident(w) => match w.as_str() {
                "true" => Arg::Bool(true),
                "false" => Arg::Bool(false),
                "nil" => Arg::Nil,
                _ => Arg::Func(w.clone()),
            },
            Tok::Open => {
                let inner = parse_pipe_at(toks, pos)?;
                match toks.get(*pos) {
                    Some(Tok::Close(f)) => {
                        *pos += 1;
                        Arg::Sub(inner, f.clone())
                    }
                    _ => return Err("`(` is not closed".into()),
                }
            }
            other => return Err(format!("unexpected {other:?} in a pipeline")),
        };
        if let Some(cmd) = cmds.last_mut() {
            cmd.push(arg);
        }
    }
    if cmds.iter().any(Vec::is_empty) {
        return Err("an empty command in a pipeline".into());
    }
    Ok(Pipe { cmds })
}

// ---- emitting handlebars ------------------------------------------------------------

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

struct Emitter {
    scopes: Vec<Scope>,
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

/// Handlebars path segments: plain names as they are, others in `[...]`.
fn segments(base: &str, fields: &[String]) -> String {
    let mut out = base.to_string();
    for f in fields {
        if !out.is_empty() {
            out.push('.');
        }
        if f.chars().all(|c| c.is_alphanumeric() || c == '_') && !f.is_empty() && !f.starts_with(|c: char| c.is_ascii_digit()) {
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
                Node::Assign { var, declare, pipe } => self.assign(var, *declare, pipe)?,
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
        let texts: Vec<String> = args.into_iter().map(|a| a.text).collect();
        if name == "index" {
            let mut it = texts.into_iter();
            let mut acc = it.next().ok_or("`index` needs a collection")?;
            for k in it {
                acc = format!("(lookup {acc} {k})");
            }
            return Ok(Val::call(acc));
        }
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
                if n.parse::<f64>().is_err() {
                    return Err(format!("the number {n} is not translated"));
                }
                Val { text: n.clone(), call: false, literal: Some(n.clone()) }
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

/// A Go variable name as a block parameter (`$i` -> `i`), unique if it is a keyword.
fn sanitize(name: &str, counter: &mut usize) -> String {
    if name.is_empty() || matches!(name, "this" | "true" | "false" | "null" | "else" | "as") {
        *counter += 1;
        format!("v{counter}")
    } else {
        name.to_string()
    }
}

fn is_literal(text: &str) -> bool {
    literal_text(text).is_some() || text == "null"
}

/// The text a literal value prints as.
fn literal_text(text: &str) -> Option<String> {
    if text == "true" || text == "false" || text.parse::<f64>().is_ok() {
        return Some(text.to_string());
    }
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    Some(inner.replace("\\\"", "\"").replace("\\\\", "\\"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(src: &str) -> String {
        to_handlebars(src).unwrap_or_else(|e| panic!("{src}: {e}")).text
    }

    /// Translates and renders with driftwatch's handlebars setup.
    fn render(src: &str, data: serde_json::Value) -> String {
        let hbs = t(src);
        crate::template::render_text(&hbs, &data).unwrap_or_else(|e| panic!("{src} -> {hbs}: {e}"))
    }

    fn app() -> serde_json::Value {
        json!({
            "app": {"metadata": {"name": "guestbook", "labels": {"app.kubernetes.io/name": "gb"}},
                    "spec": {"sources": [{"repoURL": "https://a.example/x.git"}, {"repoURL": "git@b.example:org/y.git"}]},
                    "status": {"sync": {"status": "OutOfSync", "revision": "0123456789abcdef"},
                               "conditions": [{"type": "SyncError", "message": "boom"}, {"type": "Warn", "message": "meh"}],
                               "operationState": {"phase": "Failed", "message": "a \"quoted\" failure"}}},
            "context": {"argocdUrl": "https://argocd.example.com"},
            "serviceType": "slack",
            "recipient": "ops"
        })
    }

    #[test]
    fn paths_conditions_and_trim_markers() {
        assert_eq!(t("{{.app.metadata.name}}"), "{{app.metadata.name}}");
        assert_eq!(t("{{if eq .serviceType \"slack\"}}:x:{{end}}"), "{{#if (eq serviceType \"slack\")}}:x:{{/if}}");
        assert_eq!(render("a  {{- .app.metadata.name -}}  \n b", app()), "aguestbookb");
        assert_eq!(
            render("{{if eq .app.status.sync.status \"Synced\"}}ok{{else if .app.status.operationState}}op{{else}}no{{end}}", app()),
            "op"
        );
        assert_eq!(render("{{/* a comment */}}x{{- /* trimmed */ -}} y", app()), "xy");
        assert_eq!(render("{{ if and (ne .serviceType \"email\") (eq .recipient \"ops\") }}yes{{ end }}", app()), "yes");
        assert_eq!(render("{{if eq .serviceType \"x\" \"slack\"}}multi{{end}}", app()), "multi");
    }

    #[test]
    fn range_with_variables_and_root() {
        let src = "{{range $i, $c := .app.status.conditions}}{{if $i}}, {{end}}{{$c.type}}={{.message}} on {{$.app.metadata.name}}{{end}}";
        assert_eq!(render(src, app()), "SyncError=boom on guestbook, Warn=meh on guestbook");
        // The catalog's repository list, with trim markers inside a JSON string.
        let src = r#""value": {{- if .app.spec.source }} "{{ .app.spec.source.repoURL }}" {{- else if .app.spec.sources }} "{{- range $index, $source := .app.spec.sources }}{{ if $index }}\n{{ end }}:arrow_heading_up: {{ $source.repoURL }}{{- end }}" {{- end }},"#;
        assert_eq!(
            render(src, app()),
            r#""value": ":arrow_heading_up: https://a.example/x.git\n:arrow_heading_up: git@b.example:org/y.git","#
        );
        assert_eq!(render("{{range .app.status.missing}}x{{else}}none{{end}}", app()), "none");
        let nested = "{{range $s := .app.spec.sources}}{{range $.app.status.conditions}}{{$s.repoURL}}:{{.type}} {{end}}{{end}}";
        assert_eq!(
            render(nested, app()),
            "https://a.example/x.git:SyncError https://a.example/x.git:Warn git@b.example:org/y.git:SyncError git@b.example:org/y.git:Warn "
        );
        assert_eq!(render("{{with .app.status.operationState}}{{.phase}}: {{$.app.metadata.name}}{{end}}", app()), "Failed: guestbook");
        assert_eq!(render("{{with .app.status.nothing}}x{{else}}empty{{end}}", app()), "empty");
        assert_eq!(render("{{with $op := .app.status.operationState}}{{$op.phase}}/{{.phase}}{{end}}", app()), "Failed/Failed");
        let vars = "{{$name := .app.metadata.name}}{{$url := printf \"%s/applications/%s\" .context.argocdUrl $name}}{{range .app.status.conditions}}{{$name}}:{{$url}} {{end}}";
        assert_eq!(
            render(vars, app()),
            "guestbook:https://argocd.example.com/applications/guestbook guestbook:https://argocd.example.com/applications/guestbook "
        );
    }

    /// Handlebars drops a line holding only a block tag ("standalone"); Go keeps it.
    #[test]
    fn block_tags_alone_on_a_line_keep_their_lines() {
        let d = json!({"x": [1, 2], "app": {"a": true}});
        assert_eq!(render("A\n{{range .x}}\n- {{.}}\n{{end}}\nB\n", d.clone()), "A\n\n- 1\n\n- 2\n\nB\n");
        assert_eq!(render("A\n  {{if .app.a}}\n  yes\n  {{else}}\n  no\n  {{end}}\nB", d.clone()), "A\n  \n  yes\n  \nB");
        assert_eq!(render("{{with .app}}\n{{.a}}\n{{end}}\n", d), "\ntrue\n\n");
    }

    #[test]
    fn the_first_flag_idiom() {
        let src = "{{$first := true}}{{range .app.status.conditions}}{{if not $first}}, {{end}}{{$first = false}}{{.type}}{{end}}";
        assert_eq!(render(src, app()), "SyncError, Warn");
        let src = "{{- $sep := \"\" -}}{{range .app.status.conditions}}{{$sep}}{{.type}}{{$sep = \"; \"}}{{end}}";
        assert_eq!(render(src, app()), "SyncError; Warn");
        assert!(to_handlebars("{{$n := 0}}{{$n = 1}}").unwrap_err().contains("changes a variable"));
        assert!(to_handlebars("{{$f := true}}{{range .a}}{{$f = false}}{{end}}{{$f}}").unwrap_err().contains("after a range"));
    }

    #[test]
    fn functions_sprig_and_argo_calls() {
        let d = app();
        assert_eq!(render("{{.app.status.sync.revision | trunc 7}}", d.clone()), "0123456");
        assert_eq!(render("{{substr 0 7 .app.status.sync.revision}}", d.clone()), "0123456");
        assert_eq!(render("{{.app.status.missing | default \"none\"}}", d.clone()), "none");
        assert_eq!(render("{{toJson .app.status.operationState.message}}", d.clone()), r#""a \"quoted\" failure""#);
        assert_eq!(render("{{index .app.metadata.labels \"app.kubernetes.io/name\"}}", d.clone()), "gb");
        assert_eq!(render("{{len .app.status.conditions}}", d.clone()), "2");
        assert_eq!(render("{{ .app.metadata.name | upper | replace \"GUEST\" \"x\" }}", d.clone()), "xBOOK");
        assert_eq!(render("{{call .repo.RepoURLToHTTPS \"git@github.com:o/r.git\"}}", d.clone()), "https://github.com/o/r.git");
        assert_eq!(render("{{call .strings.ReplaceAll .app.metadata.name \"book\" \"\"}}", d.clone()), "guest");
        assert_eq!(
            render("{{(call .repo.GetCommitMetadata .app.status.sync.revision).Message}}", d.clone()),
            "[repo.GetCommitMetadata.Message: not available, driftwatch has no Argo CD repo server]"
        );
        assert_eq!(
            render("{{ (call .repo.GetAppDetails).Helm.GetParameterValueByName \"image.tag\" }}", d.clone()),
            "[repo.GetAppDetails.Helm.GetParameterValueByName: not available, driftwatch has no Argo CD repo server]"
        );
        let tr = to_handlebars("{{$c := call .repo.GetCommitMetadata .app.status.sync.revision}}{{$c.Author}}").unwrap();
        assert_eq!(tr.notes.len(), 1, "{tr:?}");
        assert_eq!(render("{{printf \"%s!\" .recipient}} {{\"lit\"}} {{42}}", d.clone()), "ops! lit 42");
        let mut t = d.clone();
        t["app"]["status"]["operationState"]["finishedAt"] = json!("2026-03-02T03:12:04Z");
        assert_eq!(
            render("{{ (call .time.Parse .app.status.operationState.finishedAt).UTC.Format \"15:04 Jan 2\" }}", t.clone()),
            "03:12 Mar 2"
        );
        assert_eq!(
            render("{{ $t := call .time.Parse .app.status.operationState.finishedAt }}{{ $t.Format \"2006-01-02\" }}", t),
            "2026-03-02"
        );
    }

    #[test]
    fn values_inside_json_strings_are_escaped() {
        let src = r#"[{"title": "{{.app.metadata.name}}", "n": {{len .app.status.conditions}}, "v": {{- if .app.spec.source }} "x" {{- else }} "{{range .app.status.conditions}}{{.message}};{{end}}" {{- end }}, "m": "{{.app.status.operationState.message}}"}]"#;
        let hbs = to_handlebars_in_json(src).unwrap().text;
        let text = crate::template::render_text(&hbs, &app()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{hbs}\n{text}\n{e}"));
        assert_eq!(v[0]["m"], "a \"quoted\" failure");
        assert_eq!(v[0]["n"], 2, "a value outside a string is as Go prints it");
        assert_eq!(v[0]["v"], "boom;meh;");
        assert_eq!(v[0]["title"], "guestbook");
    }

    #[test]
    fn refusals_say_why() {
        assert!(to_handlebars("{{template \"x\" .}}").unwrap_err().contains("named templates"));
        assert!(to_handlebars("{{if .a}}x").unwrap_err().contains("not closed"));
        assert!(to_handlebars("{{end}}").unwrap_err().contains("outside"));
        assert!(to_handlebars("{{frobnicate .a}}").unwrap_err().contains("frobnicate"));
        assert!(to_handlebars("{{.a").unwrap_err().contains("not closed"));
        assert!(to_handlebars("{{$x}}").unwrap_err().contains("not defined"));
        assert!(to_handlebars(&"{{if .a}}".repeat(10_000)).unwrap_err().contains("nested deeper"));
        assert!(to_handlebars(&format!("{{{{{}}}}}", "(".repeat(10_000))).unwrap_err().contains("parentheses"));
    }
}
