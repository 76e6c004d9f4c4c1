//! Handlebars helpers available to every template.
//!
//! - `json v`: `v` as JSON text (a string with its quotes), for JSON fields.
//! - `json_escape s`: `s` escaped for use inside a JSON string literal you quote yourself.
//! - `slack_escape s`: escapes only `&`, `<`, `>` as Slack's mrkdwn requires.
//! - `truncate s n [suffix="…"]`: at most `n` characters, ending in `suffix` when cut
//!   (`truncate app.status.sync.revision 7 suffix=""` is a short commit hash).
//! - `default v fallback`: `v` unless it is missing, null or empty.
//! - `time_format ts fmt`: an RFC 3339 timestamp in a strftime format (`%H:%M UTC`).
//! - `upper s`, `lower s`, `trim s`.
//!
//! Handlebars' own `eq ne gt gte lt lte and or not len lookup` are built in; the Go
//! template and Sprig functions Argo CD users know are in [`super::sprig`].

use handlebars::{Handlebars, JsonValue as Json, handlebars_helper};

fn display(v: &Json) -> String {
    match v {
        Json::Null => String::new(),
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Escapes `s` as the body of a JSON string literal (no surrounding quotes).
pub fn json_escape(s: &str) -> String {
    let quoted = Json::String(s.to_string()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

/// Where the data of a JSON field keeps a character that would end or escape a JSON
/// string (see `template::json_safe`): in the private-use area, at U+E000 plus its code.
pub fn json_hidden(c: char) -> char {
    char::from_u32(0xE000 + u32::from(c)).unwrap_or(' ')
}

/// `s` with the characters [`json_hidden`] put back.
pub fn json_restore_str(s: &str) -> String {
    if !s.chars().any(|c| ('\u{E000}'..='\u{E0FF}').contains(&c)) {
        return s.to_string();
    }
    s.chars()
        .map(|c| match u32::from(c) {
            code @ 0xE000..=0xE0FF => char::from_u32(code - 0xE000).unwrap_or(c),
            _ => c,
        })
        .collect()
}

/// `v` with every string (and key) put back as [`json_restore_str`] does: what the
/// JSON helpers serialize.
pub fn json_restore(v: &Json) -> Json {
    match v {
        Json::String(s) => Json::String(json_restore_str(s)),
        Json::Array(items) => Json::Array(items.iter().map(json_restore).collect()),
        Json::Object(m) => Json::Object(m.iter().map(|(k, v)| (json_restore_str(k), json_restore(v))).collect()),
        other => other.clone(),
    }
}

/// Slack mrkdwn: only these three characters are control characters.
pub fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// At most `n` characters; the last one is `…` when the text was cut.
pub fn truncate(s: &str, n: usize) -> String {
    truncate_with(s, n, "…")
}

/// At most `n` characters, ending in `suffix` when the text was cut.
pub fn truncate_with(s: &str, n: usize, suffix: &str) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let keep = n.saturating_sub(suffix.chars().count());
    let mut out: String = s.chars().take(keep).collect();
    out.push_str(suffix);
    out
}

handlebars_helper!(json_helper: |v: Json| json_restore(v).to_string());
// The template's data hides `"`, `\` and control characters from JSON fields
// (`template::json_safe`): the helper puts them back, then escapes.
handlebars_helper!(json_escape_helper: |v: Json| json_escape(&json_restore_str(&display(v))));
handlebars_helper!(slack_escape_helper: |v: Json| slack_escape(&display(v)));
handlebars_helper!(truncate_helper: |v: Json, n: u64, {suffix: str = "…"}| {
    truncate_with(&display(v), usize::try_from(n).unwrap_or(usize::MAX), suffix)
});
handlebars_helper!(default_helper: |v: Json, fallback: Json| {
    let empty = match v { Json::Null => true, Json::String(s) => s.is_empty(), _ => false };
    if empty { fallback.clone() } else { v.clone() }
});
handlebars_helper!(time_format_helper: |v: Json, fmt: str| {
    let s = display(v);
    match chrono::DateTime::parse_from_rfc3339(&s) {
        Ok(t) => {
            use std::fmt::Write;
            let mut out = String::new();
            // An invalid format string renders the timestamp unchanged rather than
            // failing the whole notification.
            if write!(out, "{}", t.with_timezone(&chrono::Utc).format(fmt)).is_err() { s } else { out }
        }
        Err(_) => s,
    }
});
handlebars_helper!(upper_helper: |v: Json| display(v).to_uppercase());
handlebars_helper!(lower_helper: |v: Json| display(v).to_lowercase());
handlebars_helper!(trim_helper: |v: Json| display(v).trim().to_string());

pub fn register(hb: &mut Handlebars<'static>) {
    hb.register_helper("json", Box::new(json_helper));
    hb.register_helper("json_escape", Box::new(json_escape_helper));
    hb.register_helper("slack_escape", Box::new(slack_escape_helper));
    hb.register_helper("truncate", Box::new(truncate_helper));
    hb.register_helper("default", Box::new(default_helper));
    hb.register_helper("time_format", Box::new(time_format_helper));
    hb.register_helper("upper", Box::new(upper_helper));
    hb.register_helper("lower", Box::new(lower_helper));
    hb.register_helper("trim", Box::new(trim_helper));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(src: &str, data: Json) -> String {
        let mut hb = Handlebars::new();
        hb.register_escape_fn(handlebars::no_escape);
        register(&mut hb);
        hb.render_template(src, &data).unwrap()
    }

    #[test]
    fn helpers_escape_and_format() {
        let d = json!({"s": "a \"q\" <b> & c", "t": "2026-03-01T03:12:00Z", "n": null, "long": "abcdef"});
        assert_eq!(render("{{json s}}", d.clone()), r#""a \"q\" <b> & c""#);
        assert_eq!(render("\"{{json_escape s}}\"", d.clone()), r#""a \"q\" <b> & c""#);
        assert_eq!(render("{{slack_escape s}}", d.clone()), "a \"q\" &lt;b&gt; &amp; c");
        assert_eq!(render("{{truncate long 4}}", d.clone()), "abc…");
        assert_eq!(render("{{truncate long 3 suffix=\"\"}}", d.clone()), "abc");
        assert_eq!(render("{{truncate long 10}}", d.clone()), "abcdef");
        assert_eq!(render("{{default n \"none\"}}|{{default missing \"x\"}}|{{default s \"y\"}}", d.clone()), "none|x|a \"q\" <b> & c");
        assert_eq!(render("{{time_format t \"%H:%M UTC\"}}", d.clone()), "03:12 UTC");
        assert_eq!(render("{{upper long}}", d), "ABCDEF");
    }

    #[test]
    fn slack_links_are_not_html_escaped() {
        let d = json!({"url": "https://argocd.example.com/applications/x"});
        assert_eq!(render("<{{url}}|open>", d), "<https://argocd.example.com/applications/x|open>");
    }
}
