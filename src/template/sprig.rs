//! The Go template and Sprig functions Argo CD templates use, as handlebars helpers
//! under the names those users know, with Sprig's argument order (the value last, as a
//! Go pipeline passes it): `(trunc 7 app.status.sync.revision)`. `driftwatch import`
//! translates to these; anyone may write them.
//!
//! Strings: `trunc n s` (negative `n`: the last `-n`), `substr start end s`,
//! `replace old new s`, `contains sub s`, `hasPrefix p s`, `hasSuffix p s`,
//! `trimPrefix p s`, `trimSuffix p s`, `trimAll cutset s`, `title s`, `quote x...`,
//! `squote x...`, `b64enc s`, `b64dec s`, `urlquery s`, `toString x`.
//! Lists and maps: `list x...`, `dict k v...`, `has x list`, `join sep list`.
//! JSON: `toJson x` (the same as `json`), `toPrettyJson x`.
//! Time: `now` (RFC 3339), `date layout t` (a Go layout such as `"2006-01-02 15:04"`;
//! `t` an RFC 3339 timestamp or Unix seconds), `toDate layout s` (parses `s` in a Go
//! layout), `unixEpoch t`.
//! Go's own: `printf format x...` (`%s %v %d %q %t %f %x %%`), `print x...`.
//! Logic: `ternary a b cond` (`a` when `cond` is truthy, else `b`).
//! Argo CD's: `repo_url_to_https url` (`call .repo.RepoURLToHTTPS`),
//! `repo_full_name url` (`call .repo.FullNameByRepoURL`), and `repo_unavailable what`,
//! the marked placeholder for what needs Argo CD's repo server.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use handlebars::{Handlebars, JsonValue as Json, handlebars_helper};

use crate::quote::{Dialect, quote};

/// `s.replace(old, new)`, built only up to `cap` bytes (a field is cut at
/// [`super::MAX_FIELD_BYTES`] anyway): an empty `old` on a long text from the cluster
/// would otherwise build gigabytes before the field's bound applies.
fn bounded_replace(s: &str, old: &str, new: &str, cap: usize) -> String {
    let mut out = String::new();
    for (i, part) in s.split(old).enumerate() {
        if i > 0 {
            out.push_str(new);
        }
        out.push_str(part);
        if out.len() > cap {
            break;
        }
    }
    out
}

fn display(v: &Json) -> String {
    match v {
        Json::Null => String::new(),
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn truthy(v: &Json) -> bool {
    match v {
        Json::Null => false,
        Json::Bool(b) => *b,
        Json::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Json::String(s) => !s.is_empty(),
        Json::Array(a) => !a.is_empty(),
        Json::Object(o) => !o.is_empty(),
    }
}

/// Sprig's `trunc`: the first `n` characters, or the last `-n`.
pub fn trunc(n: i64, s: &str) -> String {
    let len = s.chars().count();
    let k = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
    if n >= 0 { s.chars().take(k).collect() } else { s.chars().skip(len.saturating_sub(k)).collect() }
}

/// Sprig's `substr`: `start < 0` means from the beginning, `end < 0` or past the end
/// means to the end.
pub fn substr(start: i64, end: i64, s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let len = chars.len();
    let start = usize::try_from(start).unwrap_or(0).min(len);
    let end = usize::try_from(end).map_or(len, |e| e.min(len));
    if start >= end { String::new() } else { chars[start..end].iter().collect() }
}

/// A timestamp as `date` and `unixEpoch` take it: RFC 3339 text or Unix seconds.
fn time_of(v: &Json) -> Option<DateTime<Utc>> {
    match v {
        Json::String(s) => DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc)),
        Json::Number(n) => n.as_i64().and_then(|s| DateTime::from_timestamp(s, 0)),
        _ => None,
    }
}

/// Go's reference-time layout (`2006-01-02 15:04:05`) as a chrono format string.
pub fn go_layout(layout: &str) -> String {
    // Longest first, as Go's own layout scanner does.
    const TOKENS: &[(&str, &str)] = &[
        ("January", "%B"),
        ("Monday", "%A"),
        ("2006", "%Y"),
        ("Z07:00", "%:z"),
        ("-07:00", "%:z"),
        ("-0700", "%z"),
        (".000000000", "%.9f"),
        (".999999999", "%.f"),
        (".000000", "%.6f"),
        (".000", "%.3f"),
        ("Jan", "%b"),
        ("Mon", "%a"),
        ("MST", "%Z"),
        ("01", "%m"),
        ("02", "%d"),
        ("_2", "%e"),
        ("15", "%H"),
        ("03", "%I"),
        ("04", "%M"),
        ("05", "%S"),
        ("06", "%y"),
        ("PM", "%p"),
        ("pm", "%P"),
        ("1", "%-m"),
        ("2", "%-d"),
        ("3", "%-I"),
        ("4", "%-M"),
        ("5", "%-S"),
    ];
    let mut out = String::new();
    let mut rest = layout;
    'outer: while !rest.is_empty() {
        for (go, strf) in TOKENS {
            if let Some(r) = rest.strip_prefix(go) {
                out.push_str(strf);
                rest = r;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            if c == '%' {
                out.push_str("%%");
            } else {
                out.push(c);
            }
        }
        rest = chars.as_str();
    }
    out
}

/// Go's `%q` of a string.
fn go_quote(s: &str) -> String {
    quote(s, Dialect::Go)
}

/// Go's `%v` of a JSON value, close enough for messages (`<nil>` for null).
fn go_value(v: &Json) -> String {
    match v {
        Json::Null => "<nil>".into(),
        Json::String(s) => s.clone(),
        Json::Array(a) => format!("[{}]", a.iter().map(go_value).collect::<Vec<_>>().join(" ")),
        Json::Object(o) => format!("map[{}]", o.iter().map(|(k, v)| format!("{k}:{}", go_value(v))).collect::<Vec<_>>().join(" ")),
        other => other.to_string(),
    }
}

/// Go's `fmt.Sprintf` for the verbs templates use; width and flags are skipped.
pub fn printf(format: &str, args: &[&Json]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut precision: Option<usize> = None;
        let mut spec = String::new();
        while let Some(&f) = chars.peek() {
            if f.is_ascii_digit() || matches!(f, '.' | '-' | '+' | ' ' | '#' | '0') {
                spec.push(f);
                chars.next();
            } else {
                break;
            }
        }
        if let Some((_, p)) = spec.split_once('.') {
            precision = p.parse().ok();
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        match verb {
            // `%.7s`: at most 7 characters (the short-commit idiom).
            's' | 'v' if precision.is_some() => out.push_str(&trunc(precision.unwrap_or(0) as i64, &go_value(arg))),
            'q' => out.push_str(&go_quote(&display(arg))),
            'd' => out.push_str(&arg.as_i64().map_or_else(|| format!("%!d({})", go_value(arg)), |n| n.to_string())),
            'f' => match arg.as_f64() {
                Some(f) => out.push_str(&format!("{f:.*}", precision.unwrap_or(6))),
                None => out.push_str(&format!("%!f({})", go_value(arg))),
            },
            'x' => match arg {
                Json::Number(n) if n.as_i64().is_some() => out.push_str(&format!("{:x}", n.as_i64().unwrap_or(0))),
                other => out.push_str(&display(other).bytes().map(|b| format!("{b:02x}")).collect::<String>()),
            },
            _ => out.push_str(&go_value(arg)),
        }
    }
    out
}

/// Go's `fmt.Sprint`: operands side by side, a space between two that are not strings.
pub fn print(args: &[&Json]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !a.is_string() && !args[i - 1].is_string() {
            out.push(' ');
        }
        out.push_str(&go_value(a));
    }
    out
}

/// Argo CD's `repo.RepoURLToHTTPS`: a Git URL (scp-like `git@host:org/repo.git`,
/// `ssh://`, `git://`, `https://`) as an https URL without user.
pub fn repo_url_to_https(url: &str) -> String {
    let (host, path) = split_git_url(url);
    if host.is_empty() {
        return url.to_string();
    }
    format!("https://{host}/{}", path.trim_start_matches('/'))
}

/// Argo CD's `repo.FullNameByRepoURL`: `org/repo` of a Git URL.
pub fn repo_full_name(url: &str) -> String {
    let (_, path) = split_git_url(url);
    path.trim_start_matches('/').trim_end_matches(".git").to_string()
}

/// (host with port, path) of a Git URL; the host is empty when it is not one.
fn split_git_url(url: &str) -> (String, String) {
    if let Some((scheme, rest)) = url.split_once("://") {
        let _ = scheme;
        let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        return (host.to_string(), format!("/{path}"));
    }
    // scp-like: [user@]host:path
    if let Some((left, path)) = url.split_once(':') {
        let host = left.rsplit_once('@').map_or(left, |(_, h)| h);
        if !host.is_empty() && !host.contains('/') {
            return (host.to_string(), format!("/{path}"));
        }
    }
    (String::new(), url.to_string())
}

handlebars_helper!(trunc_helper: |n: i64, s: Json| trunc(n, &display(s)));
handlebars_helper!(substr_helper: |start: i64, end: i64, s: Json| substr(start, end, &display(s)));
handlebars_helper!(replace_helper: |old: Json, new: Json, s: Json| bounded_replace(&display(s), &display(old), &display(new), super::MAX_FIELD_BYTES + 1));
handlebars_helper!(contains_helper: |sub: Json, s: Json| display(s).contains(&display(sub)));
handlebars_helper!(has_prefix_helper: |p: Json, s: Json| display(s).starts_with(&display(p)));
handlebars_helper!(has_suffix_helper: |p: Json, s: Json| display(s).ends_with(&display(p)));
handlebars_helper!(trim_prefix_helper: |p: Json, s: Json| { let s = display(s); let p = display(p); s.strip_prefix(p.as_str()).unwrap_or(&s).to_string() });
handlebars_helper!(trim_suffix_helper: |p: Json, s: Json| { let s = display(s); let p = display(p); s.strip_suffix(p.as_str()).unwrap_or(&s).to_string() });
handlebars_helper!(trim_all_helper: |cut: Json, s: Json| { let cut = display(cut); display(s).trim_matches(|c| cut.contains(c)).to_string() });
handlebars_helper!(title_helper: |s: Json| {
    display(s).split(' ').map(|w| { let mut c = w.chars(); c.next().map_or_else(String::new, |f| f.to_uppercase().chain(c).collect()) }).collect::<Vec<_>>().join(" ")
});
handlebars_helper!(quote_helper: |*args| args.iter().filter(|a| !a.is_null()).map(|a| go_quote(&display(a))).collect::<Vec<_>>().join(" "));
handlebars_helper!(squote_helper: |*args| args.iter().filter(|a| !a.is_null()).map(|a| format!("'{}'", display(a))).collect::<Vec<_>>().join(" "));
handlebars_helper!(b64enc_helper: |s: Json| base64::engine::general_purpose::STANDARD.encode(display(s)));
handlebars_helper!(b64dec_helper: |s: Json| {
    base64::engine::general_purpose::STANDARD.decode(display(s)).ok().and_then(|b| String::from_utf8(b).ok()).unwrap_or_default()
});
handlebars_helper!(urlquery_helper: |s: Json| form_urlencoded::byte_serialize(display(s).as_bytes()).collect::<String>());
handlebars_helper!(to_string_helper: |v: Json| display(v));
handlebars_helper!(list_helper: |*args| Json::Array(args.into_iter().cloned().collect()));
handlebars_helper!(dict_helper: |*args| {
    let mut m = serde_json::Map::new();
    for pair in args.chunks(2) {
        m.insert(display(pair[0]), pair.get(1).map_or(Json::Null, |v| (*v).clone()));
    }
    Json::Object(m)
});
handlebars_helper!(has_helper: |needle: Json, list: Json| list.as_array().is_some_and(|l| l.contains(needle)));
handlebars_helper!(join_helper: |sep: Json, list: Json| match list {
    Json::Array(items) => items.iter().map(display).collect::<Vec<_>>().join(&display(sep)),
    other => display(other),
});
handlebars_helper!(to_pretty_json_helper: |v: Json| serde_json::to_string_pretty(&super::helpers::json_restore(v)).unwrap_or_default());
handlebars_helper!(now_helper: | | crate::clock::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
handlebars_helper!(date_helper: |layout: Json, t: Json| {
    match time_of(t) {
        Some(t) => {
            use std::fmt::Write;
            let mut out = String::new();
            if write!(out, "{}", t.format(&go_layout(&display(layout)))).is_err() { display(&t_json(t)) } else { out }
        }
        None => String::new(),
    }
});
handlebars_helper!(to_date_helper: |layout: Json, s: Json| {
    // Sprig's `toDate layout s`: the time as RFC 3339, which `date` and `unixEpoch` take.
    let text = display(s);
    let parsed = DateTime::parse_from_rfc3339(&text).map(|t| t.with_timezone(&Utc)).ok().or_else(|| {
        let fmt = go_layout(&display(layout));
        DateTime::parse_from_str(&text, &fmt)
            .map(|t| t.with_timezone(&Utc))
            .ok()
            .or_else(|| chrono::NaiveDateTime::parse_from_str(&text, &fmt).ok().map(|n| n.and_utc()))
            .or_else(|| chrono::NaiveDate::parse_from_str(&text, &fmt).ok().and_then(|d| d.and_hms_opt(0, 0, 0)).map(|n| n.and_utc()))
    });
    parsed.map(t_json).unwrap_or(Json::Null)
});
handlebars_helper!(unix_epoch_helper: |t: Json| time_of(t).map(|t| t.timestamp().to_string()).unwrap_or_default());
handlebars_helper!(printf_helper: |format: Json, *args| printf(&display(format), &args[1..]));
handlebars_helper!(print_helper: |*args| print(&args));
handlebars_helper!(ternary_helper: |a: Json, b: Json, cond: Json| if truthy(cond) { a.clone() } else { b.clone() });
handlebars_helper!(repo_url_to_https_helper: |url: Json| repo_url_to_https(&display(url)));
handlebars_helper!(repo_full_name_helper: |url: Json| repo_full_name(&display(url)));
handlebars_helper!(repo_unavailable_helper: |what: Json| format!("[{}: not available, driftwatch has no Argo CD repo server]", display(what)));

fn t_json(t: DateTime<Utc>) -> Json {
    Json::String(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("trunc", Box::new(trunc_helper));
    hb.register_helper("substr", Box::new(substr_helper));
    hb.register_helper("replace", Box::new(replace_helper));
    hb.register_helper("contains", Box::new(contains_helper));
    hb.register_helper("hasPrefix", Box::new(has_prefix_helper));
    hb.register_helper("hasSuffix", Box::new(has_suffix_helper));
    hb.register_helper("trimPrefix", Box::new(trim_prefix_helper));
    hb.register_helper("trimSuffix", Box::new(trim_suffix_helper));
    hb.register_helper("trimAll", Box::new(trim_all_helper));
    hb.register_helper("title", Box::new(title_helper));
    hb.register_helper("quote", Box::new(quote_helper));
    hb.register_helper("squote", Box::new(squote_helper));
    hb.register_helper("b64enc", Box::new(b64enc_helper));
    hb.register_helper("b64dec", Box::new(b64dec_helper));
    hb.register_helper("urlquery", Box::new(urlquery_helper));
    hb.register_helper("toString", Box::new(to_string_helper));
    hb.register_helper("list", Box::new(list_helper));
    hb.register_helper("dict", Box::new(dict_helper));
    hb.register_helper("has", Box::new(has_helper));
    hb.register_helper("join", Box::new(join_helper));
    hb.register_helper("toJson", Box::new(super::helpers::json_helper));
    hb.register_helper("toPrettyJson", Box::new(to_pretty_json_helper));
    hb.register_helper("now", Box::new(now_helper));
    hb.register_helper("date", Box::new(date_helper));
    hb.register_helper("unixEpoch", Box::new(unix_epoch_helper));
    hb.register_helper("toDate", Box::new(to_date_helper));
    hb.register_helper("printf", Box::new(printf_helper));
    hb.register_helper("print", Box::new(print_helper));
    hb.register_helper("ternary", Box::new(ternary_helper));
    hb.register_helper("repo_url_to_https", Box::new(repo_url_to_https_helper));
    hb.register_helper("repo_full_name", Box::new(repo_full_name_helper));
    hb.register_helper("repo_unavailable", Box::new(repo_unavailable_helper));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(src: &str, data: Json) -> String {
        let mut hb = Handlebars::new();
        hb.register_escape_fn(handlebars::no_escape);
        super::super::register_helpers(&mut hb);
        hb.render_template(src, &data).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    #[test]
    fn strings_as_sprig_does_them() {
        let d = json!({"rev": "0123456789abcdef", "s": "  a-b-c  ", "url": "git@github.com:argoproj/argo-cd.git"});
        assert_eq!(render("{{trunc 7 rev}}|{{trunc -3 rev}}|{{trunc 99 \"ab\"}}", d.clone()), "0123456|def|ab");
        assert_eq!(render("{{substr 2 5 rev}}|{{substr -1 3 rev}}|{{substr 14 99 rev}}", d.clone()), "234|012|ef");
        assert_eq!(
            render("{{replace \"-\" \"_\" s}}|{{trimAll \" \" s}}|{{trimSuffix \"-c\" \"a-b-c\"}}", d.clone()),
            "  a_b_c  |a-b-c|a-b"
        );
        assert_eq!(render("{{#if (hasPrefix \"git@\" url)}}ssh{{/if}} {{contains \"argo\" url}}", d.clone()), "ssh true");
        assert_eq!(
            render("{{title \"hello big world\"}} {{quote \"a\\\"b\" 1}} {{squote \"x\"}}", d.clone()),
            "Hello Big World \"a\\\"b\" \"1\" 'x'"
        );
        assert_eq!(
            render("{{b64enc \"user:pw\"}}|{{b64dec \"dXNlcjpwdw==\"}}|{{urlquery \"a b&c\"}}", d.clone()),
            "dXNlcjpwdw==|user:pw|a+b%26c"
        );
        assert_eq!(
            render("{{repo_url_to_https url}} {{repo_full_name url}}", d.clone()),
            "https://github.com/argoproj/argo-cd.git argoproj/argo-cd"
        );
        assert_eq!(repo_url_to_https("ssh://git@gitlab.example.com:2222/team/app.git"), "https://gitlab.example.com:2222/team/app.git");
        assert_eq!(repo_full_name("https://github.com/org/repo"), "org/repo");
    }

    #[test]
    fn lists_json_time_and_printf() {
        let d = json!({"t": "2026-03-02T03:12:04Z", "m": {"a": 1}, "n": 42});
        assert_eq!(render("{{join \", \" (list \"a\" \"b\" n)}}|{{#if (has 2 (list 1 2))}}yes{{/if}}", d.clone()), "a, b, 42|yes");
        assert_eq!(render("{{toJson (dict \"k\" \"v\" \"n\" n)}}|{{toJson m}}", d.clone()), r#"{"k":"v","n":42}|{"a":1}"#);
        assert_eq!(
            render("{{date \"2006-01-02 15:04:05 MST\" t}}|{{date \"Jan _2 3:04PM\" t}}|{{unixEpoch t}}", d.clone()),
            "2026-03-02 03:12:04 UTC|Mar  2 3:12AM|1772421124"
        );
        assert_eq!(render("{{printf \"%s is %d (%q) %.2f %v%%\" \"x\" n \"q\" 1.5 m}}", d.clone()), "x is 42 (\"q\") 1.50 map[a:1]%");
        assert_eq!(render("{{print \"a\" 1 2 \"b\"}}", d.clone()), "a1 2b");
        assert_eq!(render("{{printf \"%.7s\" \"0123456789\"}}", d.clone()), "0123456");
        assert_eq!(render("{{date \"Jan 02\" (toDate \"2006-01-02\" \"2026-05-07\")}}", d.clone()), "May 07");
        assert_eq!(render("{{ternary \"on\" \"off\" n}}|{{ternary \"on\" \"off\" 0}}", d), "on|off");
    }
}
