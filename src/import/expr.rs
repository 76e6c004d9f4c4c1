//! Argo CD trigger conditions, written in expr-lang, translated to the rhai driftwatch
//! evaluates. A hand-written Pratt parser: expr's grammar is small, and no crate parses
//! it in Rust. What it cannot translate it refuses with a reason, never guesses.
//!
//! Semantics carried over: `nil` is `()`; a missing map key is `()` in both; a member
//! access on nil is a runtime error in both (a condition whose evaluation fails counts
//! as false in both); `time.*`, `strings.*` and expr's builtins map to the engine's
//! functions (`parse_time`, `minutes`, `has_prefix`, ...).

use std::fmt::Write as _;

/// Translates one expr expression to rhai, or says why it cannot.
pub fn to_rhai(src: &str) -> Result<String, String> {
    let tokens = lex(src)?;
    let mut p = Parser { tokens, pos: 0, closures: 0, depth: 0 };
    let e = p.expr(0)?;
    if let Some(t) = p.peek() {
        return Err(format!("unexpected {} after the expression", t.describe()));
    }
    let mut out = String::new();
    emit(&e, &mut out, &mut Vec::new())?;
    if out.len() > 100
        && let E::Binary(op @ ("&&" | "||"), ..) = &e
    {
        // A long chain reads best one operand a line, as the catalog is written.
        let mut operands = Vec::new();
        chain(&e, op, &mut operands);
        let mut lines = Vec::new();
        for o in operands {
            let mut s = String::new();
            operand(o, op, &mut s, &mut Vec::new())?;
            lines.push(s);
        }
        out = lines.join(&format!(" {op}\n"));
    }
    Ok(out)
}

/// The operands of a chain of one operator (`a && b && c`).
fn chain<'a>(e: &'a E, op: &str, out: &mut Vec<&'a E>) {
    match e {
        E::Binary(o, a, b) if *o == op => {
            chain(a, op, out);
            chain(b, op, out);
        }
        other => out.push(other),
    }
}

/// An operand of `parent`: parenthesised unless it binds tighter anyway (a
/// comparison under `&&`/`||`) or is the same associative operator.
fn paren_in(e: &E, parent: &str, out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    if let E::Binary(op, ..) = e {
        let logical = matches!(parent, "&&" | "||");
        let comparison = matches!(*op, "==" | "!=" | "<" | ">" | "<=" | ">=" | "in");
        if logical && (comparison || *op == parent) {
            return emit(e, out, scope);
        }
    }
    paren(e, out, scope)
}

/// Operators expr's VM refuses a nil operand of (a runtime error, so the condition is
/// false) where rhai goes on: an ordering comparison with `()` is false, `"a" + ()` is
/// `"a"`, `() && x` is false. Under `not(...)` the two would part.
fn refuses_nil(op: &str) -> bool {
    matches!(op, "<" | ">" | "<=" | ">=" | "+" | "-" | "*" | "%" | "**" | "&&" | "||")
}

/// A value that can be absent when the condition runs: a field, an index, a
/// predicate's element (not `time.Minute`, which reads like a field).
fn may_be_nil(e: &E) -> bool {
    match e {
        E::Member(..) => dotted(e).is_none_or(|d| !DURATION_UNITS.iter().any(|(k, _)| *k == d)),
        E::Index(..) | E::Pointer => true,
        _ => false,
    }
}

/// An operand of `parent`, wrapped in the engine's `must(...)` where `parent` refuses
/// nil and the operand may be absent; else as [`paren_in`].
fn operand(e: &E, parent: &str, out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    if refuses_nil(parent) && may_be_nil(e) { strict(e, out, scope) } else { paren_in(e, parent, out, scope) }
}

/// `e`, as `must(e)` when it may be absent.
fn strict(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    if !may_be_nil(e) {
        return emit(e, out, scope);
    }
    out.push_str("must(");
    emit(e, out, scope)?;
    out.push(')');
    Ok(())
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Int(i64),
    Float(f64),
    Str(String),
    Op(&'static str),
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Int(n) => format!("`{n}`"),
            Tok::Float(n) => format!("`{n}`"),
            Tok::Str(s) => format!("{s:?}"),
            Tok::Op(o) => format!("`{o}`"),
        }
    }
}

/// Longest first, so `?.` is not read as `?` then `.`.
const OPS: &[&str] = &[
    "?.", "??", "==", "!=", "<=", ">=", "&&", "||", "**", "..", "<", ">", "+", "-", "*", "/", "%", "^", "!", "(", ")", "[", "]", "{", "}",
    ",", ".", "?", ":", "#", "|",
];

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                // `1..3` is a range, not a float.
                if chars[i] == '.' && chars.get(i + 1) == Some(&'.') {
                    break;
                }
                i += 1;
            }
            let text: String = chars[start..i].iter().filter(|c| **c != '_').collect();
            if let Ok(n) = text.parse::<i64>() {
                out.push(Tok::Int(n));
            } else if let Some(hex) = text.strip_prefix("0x") {
                out.push(Tok::Int(i64::from_str_radix(hex, 16).map_err(|_| format!("bad number {text}"))?));
            } else {
                out.push(Tok::Float(text.parse().map_err(|_| format!("bad number {text}"))?));
            }
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$') {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else if c == '\'' || c == '"' || c == '`' {
            let (s, next) = string(&chars, i)?;
            out.push(Tok::Str(s));
            i = next;
        } else if let Some(op) = OPS.iter().find(|op| op.chars().enumerate().all(|(k, oc)| chars.get(i + k) == Some(&oc))) {
            // `?.` followed by a digit is `? .5`, not optional chaining.
            out.push(Tok::Op(op));
            i += op.chars().count();
        } else {
            return Err(format!("unexpected character {c:?}"));
        }
    }
    Ok(out)
}

fn string(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let quote = chars[start];
    let mut s = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        let c = chars[i];
        if c == quote {
            return Ok((s, i + 1));
        }
        if c == '\\' && quote != '`' {
            let e = chars.get(i + 1).copied().ok_or("unterminated string")?;
            i += 2;
            match e {
                'n' => s.push('\n'),
                't' => s.push('\t'),
                'r' => s.push('\r'),
                '\\' | '\'' | '"' | '`' => s.push(e),
                'u' => {
                    let hex: String = chars.get(i..i + 4).ok_or("bad \\u escape")?.iter().collect();
                    let n = u32::from_str_radix(&hex, 16).map_err(|_| "bad \\u escape")?;
                    s.push(char::from_u32(n).ok_or("bad \\u escape")?);
                    i += 4;
                }
                other => return Err(format!("unsupported escape \\{other} in a string")),
            }
            continue;
        }
        s.push(c);
        i += 1;
    }
    Err("unterminated string".into())
}

#[derive(Debug, Clone, PartialEq)]
enum E {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ident(String),
    /// `#` (the element in a predicate), or `.x` at the start of a predicate.
    Pointer,
    Member(Box<E>, String, bool),
    Index(Box<E>, Box<E>, bool),
    Call(Box<E>, Vec<E>),
    Unary(&'static str, Box<E>),
    Binary(&'static str, Box<E>, Box<E>),
    Ternary(Box<E>, Box<E>, Box<E>),
    Array(Vec<E>),
    Map(Vec<(String, E)>),
    /// `{ ... }` as a predicate argument (`all(xs, {.ok})`).
    Closure(Box<E>),
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
    closures: usize,
    /// Nesting of the recursive descent, bounded by [`MAX_DEPTH`].
    depth: usize,
}

/// Deeper than any real condition; a bound keeps hostile input off the stack's end.
const MAX_DEPTH: usize = 64;

/// Binary operators: token, precedence, right-associative. After expr-lang's table.
fn binary(t: &Tok) -> Option<(&'static str, u8, bool)> {
    let op = match t {
        Tok::Op(o) => *o,
        Tok::Ident(w) => match w.as_str() {
            "or" => "||",
            "and" => "&&",
            "in" => "in",
            "matches" => "matches",
            "contains" => "contains",
            "startsWith" => "startsWith",
            "endsWith" => "endsWith",
            _ => return None,
        },
        _ => return None,
    };
    Some(match op {
        "||" => ("||", 10, false),
        "&&" => ("&&", 15, false),
        "==" | "!=" | "<" | ">" | "<=" | ">=" | "in" | "matches" | "contains" | "startsWith" | "endsWith" => (op, 20, false),
        ".." => ("..", 25, false),
        "+" | "-" => (op, 30, false),
        "*" | "/" | "%" => (op, 60, false),
        "**" | "^" => ("**", 100, true),
        "??" => ("??", 120, false),
        _ => return None,
    })
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn eat(&mut self, op: &str) -> bool {
        if self.peek() == Some(&Tok::Op(leak(op))) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), String> {
        if self.eat(op) { Ok(()) } else { Err(format!("expected `{op}`, found {}", self.peek().map_or("the end".into(), Tok::describe))) }
    }

    fn expr(&mut self, min: u8) -> Result<E, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        let r = self.expr_inner(min);
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self, min: u8) -> Result<E, String> {
        let mut left = self.unary()?;
        loop {
            // `not in`
            if matches!(self.peek(), Some(Tok::Ident(w)) if w == "not")
                && matches!(self.tokens.get(self.pos + 1), Some(Tok::Ident(w)) if w == "in")
            {
                if min > 20 {
                    break;
                }
                self.pos += 2;
                let right = self.expr(21)?;
                left = E::Unary("!", Box::new(E::Binary("in", Box::new(left), Box::new(right))));
                continue;
            }
            if self.peek() == Some(&Tok::Op("?")) {
                if min > 0 {
                    break;
                }
                self.pos += 1;
                let a = self.expr(0)?;
                self.expect(":")?;
                let b = self.expr(0)?;
                left = E::Ternary(Box::new(left), Box::new(a), Box::new(b));
                continue;
            }
            if self.peek() == Some(&Tok::Op("|")) {
                // The pipe operator: `x | f(a)` is `f(x, a)`.
                if min > 0 {
                    break;
                }
                self.pos += 1;
                let f = self.postfix()?;
                left = match f {
                    E::Call(func, mut args) => {
                        args.insert(0, left);
                        E::Call(func, args)
                    }
                    E::Ident(name) => E::Call(Box::new(E::Ident(name)), vec![left]),
                    _ => return Err("a pipe (`|`) must be followed by a function call".into()),
                };
                continue;
            }
            let Some((op, prec, right_assoc)) = self.peek().and_then(binary) else { break };
            if prec < min {
                break;
            }
            self.pos += 1;
            let right = self.expr(if right_assoc { prec } else { prec + 1 })?;
            left = E::Binary(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<E, String> {
        match self.peek() {
            Some(Tok::Op("!")) => {
                self.pos += 1;
                Ok(E::Unary("!", Box::new(self.expr(50)?)))
            }
            Some(Tok::Ident(w)) if w == "not" => {
                self.pos += 1;
                Ok(E::Unary("!", Box::new(self.expr(50)?)))
            }
            Some(Tok::Op("-")) => {
                self.pos += 1;
                Ok(E::Unary("-", Box::new(self.expr(90)?)))
            }
            Some(Tok::Op("+")) => {
                self.pos += 1;
                self.expr(90)
            }
            _ => self.postfix(),
        }
    }

    fn postfix(&mut self) -> Result<E, String> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") || self.peek() == Some(&Tok::Op("?.")) {
                let optional = self.eat("?.");
                if optional && self.eat("[") {
                    let idx = self.expr(0)?;
                    self.expect("]")?;
                    e = E::Index(Box::new(e), Box::new(idx), true);
                    continue;
                }
                match self.next() {
                    Some(Tok::Ident(name)) => e = E::Member(Box::new(e), name, optional),
                    other => {
                        return Err(format!("expected a field name after `.`, found {}", other.map_or("the end".into(), |t| t.describe())));
                    }
                }
            } else if self.eat("[") {
                if self.eat(":") || self.slice_ahead() {
                    return Err("slices (`a[i:j]`) are not translated".into());
                }
                let idx = self.expr(0)?;
                self.expect("]")?;
                e = E::Index(Box::new(e), Box::new(idx), false);
            } else if self.eat("(") {
                let mut args = Vec::new();
                // expr's predicate builtins take their predicate bare too: `any(xs, .ok)`.
                let predicate = matches!(&e, E::Ident(f) if PREDICATES.contains(&f.as_str()));
                if !self.eat(")") {
                    loop {
                        args.push(self.arg(predicate && !args.is_empty())?);
                        if self.eat(")") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                e = E::Call(Box::new(e), args);
            } else {
                break;
            }
        }
        Ok(e)
    }

    fn slice_ahead(&self) -> bool {
        let mut depth = 0usize;
        for t in &self.tokens[self.pos..] {
            match t {
                Tok::Op("[") | Tok::Op("(") => depth += 1,
                Tok::Op(")") => depth = depth.saturating_sub(1),
                Tok::Op("]") if depth == 0 => return false,
                Tok::Op("]") => depth -= 1,
                Tok::Op(":") if depth == 0 => return true,
                _ => {}
            }
        }
        false
    }

    /// A call argument: an expression, or a `{ predicate }` closure.
    fn arg(&mut self, predicate: bool) -> Result<E, String> {
        if self.peek() == Some(&Tok::Op("{")) && !self.map_ahead() {
            self.pos += 1;
            self.closures += 1;
            let body = self.expr(0)?;
            self.closures -= 1;
            self.expect("}")?;
            return Ok(E::Closure(Box::new(body)));
        }
        if predicate {
            self.closures += 1;
            let body = self.expr(0);
            self.closures -= 1;
            return Ok(E::Closure(Box::new(body?)));
        }
        self.expr(0)
    }

    /// `{key: value}` (a map) rather than `{predicate}`.
    fn map_ahead(&self) -> bool {
        matches!((self.tokens.get(self.pos + 1), self.tokens.get(self.pos + 2)), (Some(Tok::Ident(_) | Tok::Str(_)), Some(Tok::Op(":"))))
            || self.tokens.get(self.pos + 1) == Some(&Tok::Op("}"))
    }

    fn primary(&mut self) -> Result<E, String> {
        match self.next() {
            Some(Tok::Int(n)) => Ok(E::Int(n)),
            Some(Tok::Float(n)) => Ok(E::Float(n)),
            Some(Tok::Str(s)) => Ok(E::Str(s)),
            Some(Tok::Ident(w)) => Ok(match w.as_str() {
                "nil" => E::Nil,
                "true" => E::Bool(true),
                "false" => E::Bool(false),
                _ => E::Ident(w),
            }),
            Some(Tok::Op("#")) => Ok(E::Pointer),
            Some(Tok::Op(".")) if self.closures > 0 => match self.next() {
                Some(Tok::Ident(name)) => Ok(E::Member(Box::new(E::Pointer), name, false)),
                _ => Err("expected a field name after `.`".into()),
            },
            Some(Tok::Op("(")) => {
                let e = self.expr(0)?;
                self.expect(")")?;
                Ok(e)
            }
            Some(Tok::Op("[")) => {
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.expr(0)?);
                        if self.eat("]") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(E::Array(items))
            }
            Some(Tok::Op("{")) => {
                let mut items = Vec::new();
                if !self.eat("}") {
                    loop {
                        let key = match self.next() {
                            Some(Tok::Ident(k)) | Some(Tok::Str(k)) => k,
                            _ => return Err("expected a map key".into()),
                        };
                        self.expect(":")?;
                        items.push((key, self.expr(0)?));
                        if self.eat("}") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(E::Map(items))
            }
            Some(t) => Err(format!("unexpected {}", t.describe())),
            None => Err("unexpected end of the expression".into()),
        }
    }
}

/// expr's builtins whose second argument is a predicate.
const PREDICATES: &[&str] = &["all", "any", "none", "one", "filter", "map", "count"];

/// Operator tokens are `&'static str`; this finds the static one equal to `op`.
fn leak(op: &str) -> &'static str {
    OPS.iter().find(|o| **o == op).copied().unwrap_or("")
}

/// Words rhai reserves, which cannot follow `.` as a field name.
const RHAI_KEYWORDS: &[&str] = &[
    "true",
    "false",
    "let",
    "const",
    "if",
    "else",
    "switch",
    "do",
    "while",
    "until",
    "loop",
    "for",
    "in",
    "continue",
    "break",
    "return",
    "throw",
    "try",
    "catch",
    "fn",
    "private",
    "import",
    "export",
    "as",
    "global",
    "Fn",
    "call",
    "curry",
    "this",
    "is_def_var",
    "is_def_fn",
    "is_shared",
    "type_of",
    "print",
    "debug",
    "eval",
];

fn is_plain_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_') && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn rhai_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A dotted name (`time.Now`, `strings.ToUpper`) when `e` is one.
fn dotted(e: &E) -> Option<String> {
    match e {
        E::Ident(n) => Some(n.clone()),
        E::Member(obj, name, false) => Some(format!("{}.{name}", dotted(obj)?)),
        _ => None,
    }
}

const DURATION_UNITS: &[(&str, &str)] = &[
    ("time.Nanosecond", "duration(\"0s\")"),
    ("time.Microsecond", "duration(\"0s\")"),
    ("time.Millisecond", "duration(\"1ms\")"),
    ("time.Second", "seconds(1)"),
    ("time.Minute", "minutes(1)"),
    ("time.Hour", "hours(1)"),
];

fn emit_args(args: &[E], out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        emit(a, out, scope)?;
    }
    Ok(())
}

fn paren(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    let simple = matches!(
        e,
        E::Nil
            | E::Bool(_)
            | E::Int(_)
            | E::Str(_)
            | E::Ident(_)
            | E::Pointer
            | E::Member(..)
            | E::Index(..)
            | E::Call(..)
            | E::Array(_)
            | E::Map(_)
            | E::Unary(..)
    );
    if !simple {
        out.push('(');
    }
    emit(e, out, scope)?;
    if !simple {
        out.push(')');
    }
    Ok(())
}

/// A predicate's body as a rhai closure: `|it| body`, `#` and a leading `.x` meaning `it`.
fn closure(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    let body = match e {
        E::Closure(b) => b.as_ref(),
        other => other,
    };
    let name = format!("it{}", scope.len());
    let _ = write!(out, "|{name}| ");
    scope.push(name);
    let r = emit(body, out, scope);
    scope.pop();
    r
}

fn emit(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    match e {
        E::Nil => out.push_str("()"),
        E::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        E::Int(n) => {
            let _ = write!(out, "{n}");
        }
        E::Float(f) => {
            let s = format!("{f:?}");
            out.push_str(&s);
        }
        E::Str(s) => rhai_string(s, out),
        E::Pointer => match scope.last() {
            Some(n) => out.push_str(n),
            None => return Err("`#` outside a predicate".into()),
        },
        E::Ident(name) => match name.as_str() {
            "app" => out.push_str("app"),
            _ => {
                if let Some((_, d)) = DURATION_UNITS.iter().find(|(k, _)| *k == name) {
                    out.push_str(d);
                } else {
                    return Err(format!("unknown variable `{name}` (a trigger sees `app`)"));
                }
            }
        },
        E::Member(obj, name, optional) => {
            if let Some(d) = dotted(e)
                && let Some((_, v)) = DURATION_UNITS.iter().find(|(k, _)| *k == d)
            {
                out.push_str(v);
                return Ok(());
            }
            paren(obj, out, scope)?;
            if is_plain_ident(name) && !RHAI_KEYWORDS.contains(&name.as_str()) {
                out.push_str(if *optional { "?." } else { "." });
                out.push_str(name);
            } else {
                out.push_str(if *optional { "?[" } else { "[" });
                rhai_string(name, out);
                out.push(']');
            }
        }
        E::Index(obj, idx, optional) => {
            paren(obj, out, scope)?;
            out.push_str(if *optional { "?[" } else { "[" });
            emit(idx, out, scope)?;
            out.push(']');
        }
        E::Call(func, args) => call(func, args, out, scope)?,
        E::Unary(op, x) => {
            out.push_str(op);
            paren(x, out, scope)?;
        }
        E::Binary(op, a, b) => match *op {
            "matches" => {
                out.push_str("matches(");
                emit_args(&[(**a).clone(), (**b).clone()], out, scope)?;
                out.push(')');
            }
            "contains" | "startsWith" | "endsWith" => {
                out.push_str(match *op {
                    "contains" => "str_contains(",
                    "startsWith" => "has_prefix(",
                    _ => "has_suffix(",
                });
                emit_args(&[(**a).clone(), (**b).clone()], out, scope)?;
                out.push(')');
            }
            ".." => {
                paren(a, out, scope)?;
                out.push_str("..=");
                paren(b, out, scope)?;
            }
            "/" => {
                // expr divides as floats: 5 / 2 is 2.5.
                out.push_str("to_float(");
                emit(a, out, scope)?;
                out.push_str(") / ");
                paren(b, out, scope)?;
            }
            "in" => {
                // expr's `in` takes a list or a map; nil holds nothing; a string is an
                // error (rhai's `in` would look for a substring).
                paren_in(a, op, out, scope)?;
                out.push_str(" in ");
                if matches!(**b, E::Array(_) | E::Map(_)) {
                    emit(b, out, scope)?;
                } else {
                    out.push_str("collection(");
                    emit(b, out, scope)?;
                    out.push(')');
                }
            }
            _ => {
                operand(a, op, out, scope)?;
                let _ = write!(out, " {op} ");
                operand(b, op, out, scope)?;
            }
        },
        E::Ternary(c, a, b) => {
            out.push_str("if ");
            emit(c, out, scope)?;
            out.push_str(" { ");
            emit(a, out, scope)?;
            out.push_str(" } else { ");
            emit(b, out, scope)?;
            out.push_str(" }");
        }
        E::Array(items) => {
            out.push('[');
            emit_args(items, out, scope)?;
            out.push(']');
        }
        E::Map(items) => {
            out.push_str("#{");
            for (i, (k, v)) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                rhai_string(k, out);
                out.push_str(": ");
                emit(v, out, scope)?;
            }
            out.push('}');
        }
        E::Closure(_) => return Err("a predicate (`{...}`) outside a builtin call".into()),
    }
    Ok(())
}

/// Method calls on a value that Go's time package has, with the engine's names.
const TIME_METHODS: &[(&str, &str)] =
    &[("Add", "add"), ("Sub", "sub"), ("Before", "before"), ("After", "after"), ("Unix", "unix"), ("Equal", "equal")];

fn call(func: &E, args: &[E], out: &mut String, scope: &mut Vec<String>) -> Result<(), String> {
    let name = dotted(func);
    let n = args.len();
    let simple = |f: &str, out: &mut String, scope: &mut Vec<String>| -> Result<(), String> {
        out.push_str(f);
        out.push('(');
        emit_args(args, out, scope)?;
        out.push(')');
        Ok(())
    };
    match name.as_deref() {
        Some("time.Now") if n == 0 => out.push_str("now()"),
        Some("time.Parse") if n == 1 => simple("parse_time", out, scope)?,
        Some("time.ParseDuration") if n == 1 => simple("duration", out, scope)?,
        Some("time.Duration") if n == 1 => {
            // time.Duration(n) is n nanoseconds; only `time.Duration(n) * time.Unit` is
            // common, and `n * unit` means the same.
            paren(&args[0], out, scope)?;
        }
        Some("strings.ToUpper") | Some("upper") if n == 1 => simple("upper", out, scope)?,
        Some("strings.ToLower") | Some("lower") if n == 1 => simple("lower", out, scope)?,
        Some("strings.TrimSpace") | Some("trim") if n == 1 => simple("trim_space", out, scope)?,
        Some("strings.Contains") if n == 2 => simple("str_contains", out, scope)?,
        Some("strings.HasPrefix") | Some("hasPrefix") if n == 2 => simple("has_prefix", out, scope)?,
        Some("strings.HasSuffix") | Some("hasSuffix") if n == 2 => simple("has_suffix", out, scope)?,
        Some("strings.ReplaceAll") | Some("replace") if n == 3 => simple("replace_all", out, scope)?,
        Some("strings.Split") | Some("split") if n == 2 => simple("split_all", out, scope)?,
        Some("len") if n == 1 => {
            // expr's len(nil) is an error; the engine's `len(())` is 0.
            out.push_str("len(");
            strict(&args[0], out, scope)?;
            out.push(')');
        }
        Some("string") | Some("toString") if n == 1 => simple("string", out, scope)?,
        Some("now") if n == 0 => out.push_str("now()"),
        Some("duration") if n == 1 => simple("duration", out, scope)?,
        Some("date") if n == 1 => simple("parse_time", out, scope)?,
        Some("abs") if n == 1 => simple("abs", out, scope)?,
        Some("float") if n == 1 => simple("to_float", out, scope)?,
        Some(b @ ("all" | "any" | "none" | "one" | "filter" | "map" | "count")) if n == 2 => {
            let method = match b {
                "all" => "all",
                "any" | "none" => "some",
                "filter" | "count" | "one" => "filter",
                _ => "map",
            };
            if b == "none" {
                out.push('!');
            }
            paren(&args[0], out, scope)?;
            let _ = write!(out, ".{method}(");
            closure(&args[1], out, scope)?;
            out.push(')');
            match b {
                "count" => out.push_str(".len()"),
                "one" => out.push_str(".len() == 1"),
                _ => {}
            }
        }
        Some(other) if other.starts_with("repo.") => {
            return Err(format!(
                "`{other}` needs Argo CD's repo server, which driftwatch does not have; rewrite the condition on the Application's fields"
            ));
        }
        _ => match func {
            // A method call on a value: `t.Add(d)`, `d.Minutes()`.
            E::Member(obj, method, _) => {
                if let Some((_, m)) = TIME_METHODS.iter().find(|(k, _)| k == method) {
                    paren(obj, out, scope)?;
                    let _ = write!(out, ".{m}(");
                    emit_args(args, out, scope)?;
                    out.push(')');
                } else if n == 0 && matches!(method.as_str(), "Seconds" | "Minutes" | "Hours") {
                    // Go returns a float64 count; the engine's integer seconds, as a float.
                    let div = match method.as_str() {
                        "Seconds" => "1.0",
                        "Minutes" => "60.0",
                        _ => "3600.0",
                    };
                    out.push('(');
                    paren(obj, out, scope)?;
                    let _ = write!(out, ".seconds() / {div})");
                } else {
                    return Err(format!("the method `{method}` is not translated"));
                }
            }
            _ => return Err(format!("the function `{}` is not translated", name.unwrap_or_else(|| "?".into()))),
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Translates and compiles with the trigger engine.
    fn t(src: &str) -> String {
        let out = to_rhai(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        crate::trigger::compiles(&out).unwrap_or_else(|e| panic!("{src} -> {out}: {e}"));
        out
    }

    #[test]
    fn the_catalog_idioms() {
        assert_eq!(
            t("app.status.operationState != nil and app.status.operationState.phase in ['Running']"),
            r#"app.status.operationState != () && app.status.operationState.phase in ["Running"]"#
        );
        assert_eq!(t("app.status.operationState?.syncResult?.revision"), "app.status.operationState?.syncResult?.revision");
        assert_eq!(
            t(
                "!time.Parse(app.status.health.lastTransitionTime).Add(1 * time.Minute).Before(time.Parse(app.status.operationState.finishedAt))"
            ),
            "!parse_time(app.status.health.lastTransitionTime).add(1 * minutes(1)).before(parse_time(app.status.operationState.finishedAt))"
        );
        assert_eq!(t("app.metadata.deletionTimestamp != nil"), "app.metadata.deletionTimestamp != ()");
        assert_eq!(t("true"), "true");
    }

    /// Translates an expr condition and evaluates it on `app` with the real engine.
    fn holds(src: &str, app: serde_json::Value) -> bool {
        let rhai = t(src);
        let engine = crate::trigger::TriggerEngine::new();
        let yaml = format!("- when: {}\n  send: [x]\n", serde_json::to_string(&rhai).unwrap());
        let file = crate::source::SourceFile::new("t.yaml", yaml);
        let def: crate::trigger::TriggerDef = file.parse("trigger t").unwrap();
        let trigger = engine.compile("t", &def, &file).unwrap_or_else(|e| panic!("{rhai}: {e:?}"));
        let r = engine.run(&trigger, &mut engine.prepare(&app)).remove(0);
        assert!(r.error.is_none(), "{src} -> {rhai}: {r:?}");
        r.result
    }

    /// expr's nil semantics in the operators the translation maps to functions: a
    /// field that is absent neither matches, contains, starts nor ends with anything
    /// (expr's VM pushes false), so the negation of each holds, as Argo CD finds.
    #[test]
    fn absent_fields_give_argo_cds_results() {
        let app = serde_json::json!({"status": {"operationState": {"phase": "Succeeded"}}});
        assert!(holds("not(app.status.operationState.operationInitiatedBy matches \".*image-updater.*\")", app.clone()));
        assert!(!holds("app.status.operationState.operationInitiatedBy matches \".*\"", app.clone()));
        for op in ["contains", "startsWith", "endsWith"] {
            assert!(!holds(&format!("app.status.missing {op} 'a'"), app.clone()), "{op}");
            assert!(holds(&format!("not (app.status.missing {op} 'a')"), app.clone()), "{op}");
            assert!(!holds(&format!("app.status.operationState.phase {op} app.status.missing"), app.clone()), "{op}");
        }
        assert!(holds("app.status.missing == nil", app.clone()));
        assert!(!holds("app.status.missing == 'x'", app.clone()));
        assert!(holds("app.status.operationState.phase startsWith 'Succ'", app));
    }

    /// What Argo CD makes of a condition: `Some(result)`, or `None` when expr's VM fails
    /// on it or gives no boolean (notifications-engine counts either as false, and the
    /// negation of it as false too).
    fn outcome(src: &str, app: &serde_json::Value) -> Option<bool> {
        let rhai = t(src);
        let engine = crate::trigger::TriggerEngine::new();
        let yaml = format!("- when: {}\n  send: [x]\n", serde_json::to_string(&rhai).unwrap());
        let file = crate::source::SourceFile::new("t.yaml", yaml);
        let def: crate::trigger::TriggerDef = file.parse("trigger t").unwrap();
        let trigger = engine.compile("t", &def, &file).unwrap_or_else(|e| panic!("{rhai}: {e:?}"));
        let r = engine.run(&trigger, &mut engine.prepare(app)).remove(0);
        r.error.is_none().then_some(r.result)
    }

    /// Every operator and builtin the translation converts, on present, absent and
    /// nil values, with the result expr-lang gives in Argo CD. From expr's VM
    /// (vm/runtime): an ordering comparison, arithmetic, `len` and a member access or
    /// index on nil panic; `==` treats nil as a value and compares numbers across int
    /// and float; `in` on nil is false, on a string a panic; `&&`/`||` need a boolean
    /// on the left and pass the right through; `string(nil)` is "<nil>"; `matches`,
    /// `contains`, `startsWith`, `endsWith` push false for nil. Each case is also run
    /// negated: where expr fails, `not(...)` fails too, so a translation that gives
    /// false instead of failing is caught.
    #[test]
    fn nil_and_absent_fields_in_every_operator_as_expr_evaluates_them() {
        let app = serde_json::json!({
            "metadata": {"name": "web-1", "labels": {"team": "a"}},
            "status": {"sync": {"status": "Synced"}, "operationState": {"phase": "Succeeded", "retryCount": 2}, "conditions": [{"type": "A"}]}
        });
        const FAILS: Option<bool> = None;
        let cases: &[(&str, Option<bool>)] = &[
            // Ordering comparisons: nil panics.
            ("app.status.operationState.retryCount > 1", Some(true)),
            ("app.status.missing > 1", FAILS),
            ("1 < app.status.missing", FAILS),
            ("app.status.missing <= 0", FAILS),
            ("app.status.missing >= app.status.missing", FAILS),
            // Equality: nil is a value.
            ("app.status.missing == nil", Some(true)),
            ("nil == nil", Some(true)),
            ("app.status.missing != 'x'", Some(true)),
            ("app.status.missing == 0", Some(false)),
            ("app.status.operationState.retryCount == 2.0", Some(true)),
            // Member access and index.
            ("app.status.missing.phase == 'x'", FAILS),
            ("app.status.missing?.phase == nil", Some(true)),
            ("app.status.missing['k'] == nil", FAILS),
            ("app.metadata.labels['absent'] == nil", Some(true)),
            ("app.status.conditions[5].type == 'A'", FAILS),
            ("app.status.conditions[-1].type == 'A'", Some(true)),
            // in
            ("app.status.sync.status in ['Synced', 'OutOfSync']", Some(true)),
            ("app.status.missing in ['x']", Some(false)),
            ("nil in [nil]", Some(true)),
            ("'a' in app.status.missing", Some(false)),
            ("'x' not in app.status.missing", Some(true)),
            ("'team' in app.metadata.labels", Some(true)),
            ("'Syn' in app.status.sync.status", FAILS),
            // len
            ("len(app.status.conditions) == 1", Some(true)),
            ("len(app.metadata.labels) == 1", Some(true)),
            ("len(app.metadata.name) == 5", Some(true)),
            ("len(app.status.missing) == 0", FAILS),
            // Logic: a boolean on the left, the right passed through.
            ("app.status.missing and true", FAILS),
            ("true and app.status.missing", FAILS),
            ("app.status.missing or true", FAILS),
            ("false or app.status.missing", FAILS),
            ("not app.status.missing", FAILS),
            ("app.status.missing ? true : false", FAILS),
            // Arithmetic.
            ("app.status.missing + 1 > 0", FAILS),
            ("app.metadata.name + app.status.missing == 'web-1'", FAILS),
            ("app.status.operationState.retryCount * 2 == 4", Some(true)),
            ("app.status.operationState.retryCount / 4 == 0.5", Some(true)),
            ("-app.status.missing < 0", FAILS),
            ("app.status.missing % 2 == 0", FAILS),
            // String operators: false for nil.
            ("app.status.missing matches 'x'", Some(false)),
            ("app.metadata.name matches '^web-[0-9]+$'", Some(true)),
            ("app.status.missing contains 'x'", Some(false)),
            ("app.metadata.name startsWith app.status.missing", Some(false)),
            // Builtins.
            ("string(app.status.missing) == '<nil>'", Some(true)),
            ("upper(app.status.missing) == ''", FAILS),
            ("abs(app.status.missing) == 0", FAILS),
            ("app.status.missing ?? 'd' == 'd'", Some(true)),
            // Predicates.
            ("any(app.status.conditions, .type == 'A')", Some(true)),
            ("count(app.status.conditions, .type == 'A') == 1", Some(true)),
            ("all(app.status.missing, .ok)", FAILS),
            ("any(app.status.conditions, .missing > 1)", FAILS),
        ];
        for (src, want) in cases {
            assert_eq!(outcome(src, &app), *want, "{src} -> {}", t(src));
            let negated = format!("not ({src})");
            assert_eq!(outcome(&negated, &app), want.map(|b| !b), "{negated} -> {}", t(&negated));
        }
    }

    #[test]
    fn operators_and_precedence() {
        assert_eq!(t("app.b == 1 or not (app.c > 2 and app.d)"), "app.b == 1 || !(must(app.c) > 2 && must(app.d))");
        assert_eq!(t("app.x == 1 || app.y != 'z' && !app.w"), r#"app.x == 1 || (app.y != "z" && !app.w)"#);
        assert_eq!(t("any(app.xs, .ok)"), "app.xs.some(|it0| it0.ok)");
        assert_eq!(t("app.x not in ['a', \"b\"]"), r#"!(app.x in ["a", "b"])"#);
        assert_eq!(t("app.m.name matches '^web-'"), r#"matches(app.m.name, "^web-")"#);
        assert_eq!(t("app.m.name startsWith 'web'"), r#"has_prefix(app.m.name, "web")"#);
        assert_eq!(t("app.x ?? 'none'"), r#"app.x ?? "none""#);
        assert_eq!(t("app.x ? 1 : 2"), "if app.x { 1 } else { 2 }");
        assert_eq!(t("len(app.status.conditions) > 0"), "len(must(app.status.conditions)) > 0");
        assert_eq!(t("app.a.b > 1 and app.c"), "must(app.a.b) > 1 && must(app.c)");
        assert_eq!(t("app.a in app.b"), "app.a in collection(app.b)");
        assert_eq!(t("1 * time.Minute"), "1 * minutes(1)");
        assert_eq!(t("app.metadata.labels['app.kubernetes.io/name']"), r#"app.metadata.labels["app.kubernetes.io/name"]"#);
        t("app.status.sync.type == 'x'");
        assert_eq!(t("app.spec.fn"), r#"app.spec["fn"]"#);
        assert_eq!(t("2 ** 3 ** 2"), "2 ** (3 ** 2)");
    }

    #[test]
    fn predicates_strings_and_time() {
        assert_eq!(t("any(app.status.conditions, {.type == 'SyncError'})"), r#"app.status.conditions.some(|it0| it0.type == "SyncError")"#);
        assert_eq!(t("all(app.status.resources, # .status == 'Synced')"), r#"app.status.resources.all(|it0| it0.status == "Synced")"#);
        assert_eq!(t("none(app.x, #.y)"), "!app.x.some(|it0| it0.y)");
        assert_eq!(t("count(app.x, #.y) > 1"), "app.x.filter(|it0| it0.y).len() > 1");
        assert_eq!(t("strings.ToUpper(app.x) == 'A'"), r#"upper(app.x) == "A""#);
        assert_eq!(t("time.Now().Sub(time.Parse(app.x)).Minutes() > 5"), "(now().sub(parse_time(app.x)).seconds() / 60.0) > 5");
        assert_eq!(t("app.x | lower()"), "lower(app.x)");
    }

    #[test]
    fn refusals_say_why() {
        assert!(to_rhai("repo.GetCommitMetadata(app.status.sync.revision).Message == ''").unwrap_err().contains("repo server"));
        assert!(to_rhai("foo(app)").unwrap_err().contains("foo"));
        assert!(to_rhai("app.x ==").is_err());
        assert!(to_rhai("app.x[1:2]").unwrap_err().contains("slices"));
        assert!(to_rhai("'unterminated").is_err());
        assert!(to_rhai("secrets.x").unwrap_err().contains("unknown variable"));
        assert!(to_rhai(&"(".repeat(10_000)).unwrap_err().contains("nested deeper"));
        assert!(to_rhai(&"!".repeat(10_000)).unwrap_err().contains("nested deeper"));
    }
}
