//! Builds the sandboxed rhai engine triggers run in, with the time and string helpers
//! conditions may call. The engine holds no per-Application state: one is shared by
//! every compiled trigger (and by the daemon's evaluation tasks, hence rhai's `sync`).

use chrono::{DateTime, TimeDelta, Utc};
use rhai::packages::Package;
use rhai::{Dynamic, Engine, EvalAltResult, ImmutableString, Position, Token};

/// Limits that keep a user trigger from hanging or exhausting the daemon. An endless
/// loop runs out of operations; a runaway string or array hits its size limit.
pub mod limits {
    /// Operations one condition may run (a catalog condition takes under 100).
    pub const MAX_OPERATIONS: u64 = 200_000;
    pub const MAX_CALL_LEVELS: usize = 32;
    pub const MAX_EXPR_DEPTH: usize = 64;
    pub const MAX_FN_EXPR_DEPTH: usize = 32;
    /// Large enough for an Application's biggest strings (a last-applied annotation).
    pub const MAX_STRING_SIZE: usize = 1 << 20;
    /// Large enough for `status.resources` of an app-of-apps with thousands of children.
    pub const MAX_ARRAY_SIZE: usize = 100_000;
    pub const MAX_MAP_SIZE: usize = 100_000;
    pub const MAX_VARIABLES: usize = 256;
}

/// Reserved words of rhai that are plain field names in an Application. `sync` is the one
/// every Argo CD user writes (`app.status.sync.status`); the others are reserved for
/// syntax rhai does not have, so treating them as identifiers cannot change the meaning
/// of a valid script. `nil` and `null` become identifiers too and are defined as `()`,
/// so `x != nil` reads as it does in Argo CD's expr.
const RESERVED_AS_IDENTIFIERS: &[&str] = &[
    "sync",
    "async",
    "shared",
    "var",
    "use",
    "case",
    "public",
    "protected",
    "package",
    "super",
    "spawn",
    "static",
    "default",
    "go",
    "goto",
    "exit",
    "match",
    "module",
    "new",
    "thread",
    "await",
    "yield",
    "void",
    "null",
    "nil",
    "with",
];

/// A point in time in a condition (`now()`, `parse_time(...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time(pub DateTime<Utc>);

/// A length of time in a condition (`minutes(1)`, `duration("1h30m")`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Duration(pub TimeDelta);

type Fallible<T> = Result<T, Box<EvalAltResult>>;

fn fail<T>(msg: String) -> Fallible<T> {
    Err(Box::new(EvalAltResult::ErrorRuntime(msg.into(), Position::NONE)))
}

fn parse_time(s: &str) -> Fallible<Time> {
    match DateTime::parse_from_rfc3339(s) {
        Ok(t) => Ok(Time(t.with_timezone(&Utc))),
        Err(e) => fail(format!("parse_time: {s:?} is not an RFC 3339 timestamp ({e})")),
    }
}

fn delta(unit: &str, n: i64) -> Fallible<Duration> {
    let d = match unit {
        "seconds" => TimeDelta::try_seconds(n),
        "minutes" => TimeDelta::try_minutes(n),
        "hours" => TimeDelta::try_hours(n),
        _ => TimeDelta::try_days(n),
    };
    d.map(Duration).map_or_else(|| fail(format!("{unit}({n}) is out of range")), Ok)
}

fn scale(d: Duration, n: i64) -> Fallible<Duration> {
    i32::try_from(n).ok().and_then(|n| d.0.checked_mul(n)).map(Duration).map_or_else(|| fail(format!("{n} * duration is out of range")), Ok)
}

fn add(t: Time, d: Duration) -> Fallible<Time> {
    t.0.checked_add_signed(d.0).map(Time).map_or_else(|| fail("time out of range".into()), Ok)
}

/// The rhai engine every trigger is compiled and evaluated with.
pub fn build() -> Engine {
    let mut engine = Engine::new_raw();
    // The standard packages without I/O: core language, arithmetic, strings, arrays,
    // maps, logic. `new_raw` plus these leaves out `print`/`debug` output and `eval`.
    engine.register_global_module(rhai::packages::StandardPackage::new().as_shared_module());
    engine.disable_symbol("eval");
    engine.on_print(|_| {});
    engine.on_debug(|_, _, _| {});

    engine.set_max_operations(limits::MAX_OPERATIONS);
    engine.set_max_call_levels(limits::MAX_CALL_LEVELS);
    engine.set_max_expr_depths(limits::MAX_EXPR_DEPTH, limits::MAX_FN_EXPR_DEPTH);
    engine.set_max_string_size(limits::MAX_STRING_SIZE);
    engine.set_max_array_size(limits::MAX_ARRAY_SIZE);
    engine.set_max_map_size(limits::MAX_MAP_SIZE);
    engine.set_max_variables(limits::MAX_VARIABLES);

    // `on_parse_token` is marked deprecated only to flag it as volatile (rhai's own
    // note); it is the one hook that lets `sync` be a field name.
    #[allow(deprecated)]
    engine.on_parse_token(|token, _pos, _state| match token {
        Token::Reserved(word) if RESERVED_AS_IDENTIFIERS.contains(&word.as_str()) => Token::Identifier(word),
        other => other,
    });

    register_time(&mut engine);
    register_strings(&mut engine);
    engine
}

fn register_time(engine: &mut Engine) {
    engine.register_type_with_name::<Time>("Time");
    engine.register_type_with_name::<Duration>("Duration");
    engine.register_fn("now", || Time(crate::clock::now()));
    engine.register_fn("parse_time", |s: ImmutableString| parse_time(&s));
    engine.register_fn("parse_time", |_: ()| -> Fallible<Time> { fail("parse_time: the value is () (the field is missing)".into()) });
    engine.register_fn("duration", |s: ImmutableString| -> Fallible<Duration> {
        crate::duration::parse(&s).map(Duration).or_else(|e| fail(e.to_string()))
    });
    for unit in ["seconds", "minutes", "hours", "days"] {
        engine.register_fn(unit, move |n: i64| delta(unit, n));
    }
    engine.register_fn("add", add);
    engine.register_fn("+", add);
    engine.register_fn("-", |t: Time, d: Duration| add(t, Duration(-d.0)));
    engine.register_fn("-", |a: Time, b: Time| Duration(a.0 - b.0));
    engine.register_fn("sub", |a: Time, b: Time| Duration(a.0 - b.0));
    engine.register_fn("before", |a: Time, b: Time| a < b);
    engine.register_fn("after", |a: Time, b: Time| a > b);
    engine.register_fn("<", |a: Time, b: Time| a < b);
    engine.register_fn(">", |a: Time, b: Time| a > b);
    engine.register_fn("<=", |a: Time, b: Time| a <= b);
    engine.register_fn(">=", |a: Time, b: Time| a >= b);
    engine.register_fn("==", |a: Time, b: Time| a == b);
    engine.register_fn("!=", |a: Time, b: Time| a != b);
    engine.register_fn("<", |a: Duration, b: Duration| a < b);
    engine.register_fn(">", |a: Duration, b: Duration| a > b);
    engine.register_fn("<=", |a: Duration, b: Duration| a <= b);
    engine.register_fn(">=", |a: Duration, b: Duration| a >= b);
    engine.register_fn("==", |a: Duration, b: Duration| a == b);
    // `5 * time.Minute` as `driftwatch import` translates it.
    engine.register_fn("*", |n: i64, d: Duration| scale(d, n));
    engine.register_fn("*", |d: Duration, n: i64| scale(d, n));
    engine.register_fn("equal", |a: Time, b: Time| a == b);
    engine.register_fn("+", |a: Duration, b: Duration| -> Fallible<Duration> {
        a.0.checked_add(&b.0).map(Duration).map_or_else(|| fail("duration out of range".into()), Ok)
    });
    engine.register_fn("-", |a: Duration, b: Duration| -> Fallible<Duration> {
        a.0.checked_sub(&b.0).map(Duration).map_or_else(|| fail("duration out of range".into()), Ok)
    });
    engine.register_fn("unix", |t: Time| t.0.timestamp());
    engine.register_fn("format", |t: Time, fmt: ImmutableString| -> Fallible<String> {
        use std::fmt::Write;
        let mut out = String::new();
        match write!(out, "{}", t.0.format(&fmt)) {
            Ok(()) => Ok(out),
            Err(_) => fail(format!("format: invalid format string {fmt:?}")),
        }
    });
    engine.register_fn("to_string", |t: Time| t.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    engine.register_fn("to_string", |d: Duration| crate::duration::format(d.0));
    engine.register_fn("seconds", |d: Duration| d.0.num_seconds());
    engine.register_fn("minutes", |d: Duration| d.0.num_minutes());
    engine.register_fn("hours", |d: Duration| d.0.num_hours());
}

fn register_strings(engine: &mut Engine) {
    // Argo CD's expr has these as functions; rhai's own methods (`contains`,
    // `starts_with`, `ends_with`, `to_lower`, `split`, `trim`) cover the rest.
    engine.register_fn("has_prefix", |s: ImmutableString, p: ImmutableString| s.starts_with(p.as_str()));
    engine.register_fn("has_suffix", |s: ImmutableString, p: ImmutableString| s.ends_with(p.as_str()));
    engine.register_fn("lower", |s: ImmutableString| s.to_lowercase());
    engine.register_fn("upper", |s: ImmutableString| s.to_uppercase());
    // `string(x)` stringifies anything the way an `oncePer` value is stringified.
    engine.register_fn("string", |v: Dynamic| stringify(&v));
    // `()` has no length in rhai; in a condition a missing list is an empty one.
    engine.register_fn("len", |_: ()| 0_i64);
    // Pure forms of expr's string operators (rhai's `trim` and `replace` change a
    // variable in place), for `driftwatch import` and for anyone.
    engine.register_fn("str_contains", |s: ImmutableString, sub: ImmutableString| s.contains(sub.as_str()));
    engine.register_fn("trim_space", |s: ImmutableString| s.trim().to_string());
    engine.register_fn("replace_all", |s: ImmutableString, from: ImmutableString, to: ImmutableString| replace_all(&s, &from, &to));
    engine.register_fn("split_all", |s: ImmutableString, sep: ImmutableString| split_all(&s, &sep));
    engine.register_fn("to_float", |f: f64| f);
    engine.register_fn("matches", |s: ImmutableString, re: ImmutableString| -> Fallible<bool> { regex_matches(&s, &re) });
    // expr's `matches`, `contains`, `startsWith` and `endsWith` are false when either
    // side is nil (a field that is absent), not an error: `not(app.x matches "...")`
    // holds for an Application without `x`, as in Argo CD.
    for name in ["matches", "str_contains", "has_prefix", "has_suffix"] {
        engine.register_fn(name, |_: (), _: ImmutableString| false);
        engine.register_fn(name, |_: ImmutableString, _: ()| false);
        engine.register_fn(name, |_: (), _: ()| false);
    }
    // Where expr's VM refuses nil and rhai carries on (an ordering comparison with `()`
    // is false, `"a" + ()` is "a", `len(())` is 0, `() && x` is false), `driftwatch
    // import` wraps the operand: `must(x)` is `x`, or an evaluation error when `x` is
    // absent, so the condition is false as in Argo CD and `not(...)` of it is too.
    engine.register_fn("must", |v: Dynamic| -> Fallible<Dynamic> {
        if v.is_unit() { fail("must: the value is () (the field is missing)".into()) } else { Ok(v) }
    });
    // expr's `in`: a list (element equality) or a map (key present); nil holds nothing;
    // anything else (a string among them: `"a" in "abc"`) is an error, where rhai's
    // `in` would look for a substring.
    engine.register_fn("collection", |v: Dynamic| -> Fallible<Dynamic> {
        if v.is_unit() {
            Ok(Dynamic::from_array(rhai::Array::new()))
        } else if v.is_array() || v.is_map() {
            Ok(v)
        } else {
            fail(format!("collection: `in` needs a list or a map, not {}", v.type_name()))
        }
    });
}

/// How many times `from` occurs in `s` as `str::replace` and `str::split` see it (an
/// empty pattern matches between every character and at both ends).
fn occurrences(s: &str, from: &str) -> usize {
    if from.is_empty() { s.chars().count() + 1 } else { s.matches(from).count() }
}

/// `replace_all`, refused before anything is built when the result would pass rhai's
/// string size limit: the engine checks sizes after a function returns, by which time
/// `"x" * 1 MiB` with an empty pattern replaced by a long text has allocated gigabytes.
fn replace_all(s: &str, from: &str, to: &str) -> Fallible<String> {
    let n = occurrences(s, from);
    let size = n.checked_mul(to.len()).and_then(|added| (s.len() - n.saturating_mul(from.len()).min(s.len())).checked_add(added));
    match size {
        Some(size) if size <= limits::MAX_STRING_SIZE => Ok(s.replace(from, to)),
        _ => fail(format!("replace_all: the result would be longer than the string limit ({} bytes)", limits::MAX_STRING_SIZE)),
    }
}

/// `split_all`, refused before anything is built when it would make more parts than
/// rhai's array size limit.
fn split_all(s: &str, sep: &str) -> Fallible<rhai::Array> {
    let parts = occurrences(s, sep) + usize::from(!sep.is_empty());
    if parts > limits::MAX_ARRAY_SIZE {
        return fail(format!("split_all: more than {} parts", limits::MAX_ARRAY_SIZE));
    }
    Ok(s.split(sep).map(|p| Dynamic::from(p.to_string())).collect())
}

/// Compiled patterns of `matches`, per thread: conditions use a handful, each is
/// compiled once (bounded: past [`MAX_PATTERNS`] the cache starts over).
const MAX_PATTERNS: usize = 64;

thread_local! {
    static PATTERNS: std::cell::RefCell<std::collections::HashMap<String, regex::Regex>> = std::cell::RefCell::default();
}

/// expr's `matches` (Go's RE2 syntax, which Rust's regex shares); a pattern that does
/// not compile is a runtime error, as in Argo CD.
fn regex_matches(s: &str, pattern: &str) -> Fallible<bool> {
    PATTERNS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(re) = cache.get(pattern) {
            return Ok(re.is_match(s));
        }
        let re = regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
            .or_else(|e| fail(format!("matches: bad pattern {pattern:?}: {e}")))?;
        if cache.len() >= MAX_PATTERNS {
            cache.clear();
        }
        let hit = re.is_match(s);
        cache.insert(pattern.to_string(), re);
        Ok(hit)
    })
}

/// How a condition's value becomes an `oncePer` key: as Go's `fmt.Sprintf("%v")` does in
/// Argo CD, so `()` (Go's nil) is `<nil>` and still acts as a key.
pub fn stringify(v: &Dynamic) -> String {
    if v.is_unit() {
        "<nil>".to_string()
    } else if let Some(t) = v.clone().try_cast::<Time>() {
        t.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    } else if let Some(d) = v.clone().try_cast::<Duration>() {
        crate::duration::format(d.0)
    } else {
        v.to_string()
    }
}
