//! expr's tree as rhai with expr's meaning: `nil` is `()`; `matches` and the string
//! operators become the engine's functions, false on nil; where expr's VM refuses a nil
//! operand and rhai would go on, the field is wrapped in `must(...)`; `a in b` is
//! `a in collection(b)`; `time.*`, `strings.*` and expr's builtins map to the engine's
//! functions (`parse_time`, `minutes`, `has_prefix`, ...); predicates become closures.

use std::fmt::Write as _;

use super::parse::E;
use crate::import::refusal::Refusal;
use crate::quote::{Dialect, quote};

/// The condition as rhai; a long `&&`/`||` chain one operand a line, as the catalog is
/// written.
pub(super) fn condition(e: &E) -> Result<String, Refusal> {
    let mut out = String::new();
    emit(e, &mut out, &mut Vec::new())?;
    if out.len() > 100
        && let E::Binary(op @ ("&&" | "||"), ..) = e
    {
        let mut operands = Vec::new();
        chain(e, op, &mut operands);
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
fn paren_in(e: &E, parent: &str, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
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
        E::Index(..) | E::Pointer(_) => true,
        _ => false,
    }
}

/// An operand of `parent`, wrapped in the engine's `must(...)` where `parent` refuses
/// nil and the operand may be absent; else as [`paren_in`].
fn operand(e: &E, parent: &str, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    if refuses_nil(parent) && may_be_nil(e) { strict(e, out, scope) } else { paren_in(e, parent, out, scope) }
}

/// An operand of `and`, `or` or `not` written as a literal that is not a boolean: expr's
/// type check refuses it when the condition is compiled, and so does rhai.
fn boolean_operand(word: &str, e: &E) -> Result<(), Refusal> {
    let what = match e {
        E::Array(_) => "an array",
        E::Map(_) => "a map",
        _ => match scalar_literal(e) {
            Some(what) => what,
            None => return Ok(()),
        },
    };
    Err(Refusal::new(0, format!("`{word}` of {what}: expr refuses it too, it needs a boolean")))
}

/// What a literal that is not a boolean, a collection or a path is, for a refusal.
fn scalar_literal(e: &E) -> Option<&'static str> {
    match e {
        E::Nil => Some("nil"),
        E::Int(_) | E::Float(_) => Some("a number"),
        E::Str(_) => Some("a string"),
        E::Unary("-" | "+", x) => scalar_literal(x),
        _ => None,
    }
}

/// `e`, as `must(e)` when it may be absent.
fn strict(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    if !may_be_nil(e) {
        return emit(e, out, scope);
    }
    out.push_str("must(");
    emit(e, out, scope)?;
    out.push(')');
    Ok(())
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
    out.push_str(&quote(s, Dialect::Rhai));
}

/// A dotted name (`time.Now`, `strings.ToUpper`) when `e` is one.
fn dotted(e: &E) -> Option<String> {
    match e {
        E::Ident(n, _) => Some(n.clone()),
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

fn emit_args(args: &[E], out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        emit(a, out, scope)?;
    }
    Ok(())
}

fn paren(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    let simple = matches!(
        e,
        E::Nil
            | E::Bool(_)
            | E::Int(_)
            | E::Str(_)
            | E::Ident(..)
            | E::Pointer(_)
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
fn closure(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    let body = match e {
        E::Closure(b, _) => b.as_ref(),
        other => other,
    };
    let name = format!("it{}", scope.len());
    let _ = write!(out, "|{name}| ");
    scope.push(name);
    let r = emit(body, out, scope);
    scope.pop();
    r
}

fn emit(e: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
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
        E::Pointer(at) => match scope.last() {
            Some(n) => out.push_str(n),
            None => return Err(Refusal::new(*at, "`#` outside a predicate")),
        },
        E::Ident(name, at) => ident(name, *at, out)?,
        E::Member(obj, name, optional) => member(e, (obj, name, *optional), out, scope)?,
        E::Index(obj, idx, optional) => {
            paren(obj, out, scope)?;
            out.push_str(if *optional { "?[" } else { "[" });
            emit(idx, out, scope)?;
            out.push(']');
        }
        E::Call(func, args, at) => call(func, args, *at, out, scope)?,
        E::Unary(op, x) => unary(op, x, out, scope)?,
        E::Binary(op, a, b) => binary(op, a, b, out, scope)?,
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
        E::Map(items) => map(items, out, scope)?,
        E::Closure(_, at) => return Err(Refusal::new(*at, "a predicate (`{...}`) outside a builtin call")),
    }
    Ok(())
}

/// A variable: `app`, or one of Go's duration units.
fn ident(name: &str, at: usize, out: &mut String) -> Result<(), Refusal> {
    match name {
        "app" => out.push_str("app"),
        _ => {
            if let Some((_, d)) = DURATION_UNITS.iter().find(|(k, _)| *k == name) {
                out.push_str(d);
            } else {
                return Err(Refusal::new(at, format!("unknown variable `{name}` (a trigger sees `app`)")));
            }
        }
    }
    Ok(())
}

/// `obj.name` (or `obj?.name`; `e` is the whole member expression): a duration unit,
/// a field, or an index by string where the name is not a plain rhai identifier.
fn member(e: &E, (obj, name, optional): (&E, &str, bool), out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    if let Some(d) = dotted(e)
        && let Some((_, v)) = DURATION_UNITS.iter().find(|(k, _)| *k == d)
    {
        out.push_str(v);
        return Ok(());
    }
    if let Some(what) = scalar_literal(obj) {
        return Err(Refusal::new(0, format!("`.{name}` of {what}: expr refuses a field of it too")));
    }
    paren(obj, out, scope)?;
    if is_plain_ident(name) && !RHAI_KEYWORDS.contains(&name) {
        out.push_str(if optional { "?." } else { "." });
        out.push_str(name);
    } else {
        out.push_str(if optional { "?[" } else { "[" });
        rhai_string(name, out);
        out.push(']');
    }
    Ok(())
}

fn unary(op: &str, x: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    if op == "!" {
        boolean_operand("not", x)?;
    }
    out.push_str(op);
    // `- -x` and `- -1` would read as rhai's reserved `--`.
    let mut inner = String::new();
    paren(x, &mut inner, scope)?;
    if inner.starts_with(['-', '+']) {
        let _ = write!(out, "({inner})");
    } else {
        out.push_str(&inner);
    }
    Ok(())
}

/// `a op b`: expr's operators that rhai spells as functions or differently, and the
/// rest as they are.
fn binary(op: &str, a: &E, b: &E, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    match op {
        "matches" => {
            out.push_str("matches(");
            emit_args(&[a.clone(), b.clone()], out, scope)?;
            out.push(')');
        }
        "contains" | "startsWith" | "endsWith" => {
            out.push_str(match op {
                "contains" => "str_contains(",
                "startsWith" => "has_prefix(",
                _ => "has_suffix(",
            });
            emit_args(&[a.clone(), b.clone()], out, scope)?;
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
            if matches!(b, E::Array(_) | E::Map(_)) {
                emit(b, out, scope)?;
            } else {
                out.push_str("collection(");
                emit(b, out, scope)?;
                out.push(')');
            }
        }
        _ => {
            if matches!(op, "&&" | "||") {
                boolean_operand(if op == "&&" { "and" } else { "or" }, a)?;
                boolean_operand(if op == "&&" { "and" } else { "or" }, b)?;
            }
            operand(a, op, out, scope)?;
            let _ = write!(out, " {op} ");
            operand(b, op, out, scope)?;
        }
    }
    Ok(())
}

/// A map literal, its keys as rhai strings.
fn map(items: &[(String, E)], out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
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
    Ok(())
}

/// Method calls on a value that Go's time package has, with the engine's names.
const TIME_METHODS: &[(&str, &str)] =
    &[("Add", "add"), ("Sub", "sub"), ("Before", "before"), ("After", "after"), ("Unix", "unix"), ("Equal", "equal")];

fn call(func: &E, args: &[E], at: usize, out: &mut String, scope: &mut Vec<String>) -> Result<(), Refusal> {
    let name = dotted(func);
    let n = args.len();
    let simple = |f: &str, out: &mut String, scope: &mut Vec<String>| -> Result<(), Refusal> {
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
            return Err(Refusal::new(
                at,
                format!(
                    "`{other}` needs Argo CD's repo server, which driftwatch does not have; rewrite the condition on the Application's fields"
                ),
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
                    return Err(Refusal::new(at, format!("the method `{method}` is not translated")));
                }
            }
            _ => return Err(Refusal::new(at, format!("the function `{}` is not translated", name.unwrap_or_else(|| "?".into())))),
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rhai(src: &str) -> Result<String, Refusal> {
        condition(&super::super::parse::parse(super::super::lex::lex(src)?, src.len())?)
    }

    #[test]
    fn fields_where_expr_refuses_nil_are_wrapped_and_units_are_not() {
        assert_eq!(rhai("app.a > 1 and 1 * time.Minute > app.b").unwrap(), "must(app.a) > 1 && (1 * minutes(1)) > must(app.b)");
        assert_eq!(rhai("app.a == nil or app.a in app.b").unwrap(), "app.a == () || app.a in collection(app.b)");
        assert_eq!(rhai("len(app.a) + len([1])").unwrap(), "len(must(app.a)) + len([1])");
    }

    #[test]
    fn refusals_name_the_node() {
        assert_eq!(rhai("app.x == 1 and foo(app)").unwrap_err(), Refusal::new(15, "the function `foo` is not translated"));
        assert_eq!(rhai("app.x == secrets.y").unwrap_err().at, 9);
        assert_eq!(rhai("app.t.Weekday() == 1").unwrap_err(), Refusal::new(0, "the method `Weekday` is not translated"));
        assert_eq!(rhai("# == 1").unwrap_err(), Refusal::new(0, "`#` outside a predicate"));
    }
}
