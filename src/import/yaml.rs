//! A small YAML writer for what `driftwatch import` writes: maps, lists and strings,
//! multi-line strings as literal blocks (`|`) so translated templates read as the user
//! wrote them. Scalars that could be misread are written JSON-quoted (valid YAML).

use serde_json::Value;

/// `v` as a YAML document.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    value(v, 0, &mut out, true);
    out
}

fn pad(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// A key as YAML: plain when safe, else quoted.
fn key(k: &str) -> String {
    if plain_ok(k) { k.to_string() } else { Value::String(k.to_string()).to_string() }
}

/// Whether a string may be written unquoted and still read back as the same string.
fn plain_ok(s: &str) -> bool {
    if s.is_empty() || s.trim() != s {
        return false;
    }
    const RESERVED: &[&str] = &["true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"];
    if RESERVED.contains(&s.to_ascii_lowercase().as_str()) || s.parse::<f64>().is_ok() {
        return false;
    }
    let first = s.chars().next().unwrap_or(' ');
    if "-?:,[]{}#&*!|>'\"%@`$".contains(first) {
        return false;
    }
    !s.contains(": ") && !s.contains(" #") && !s.ends_with(':') && s.chars().all(|c| !c.is_control())
}

fn scalar_str(s: &str, indent: usize, out: &mut String) {
    let block_ok = s.contains('\n')
        && !s.starts_with([' ', '\t', '\n'])
        && s.chars().all(|c| c == '\n' || !c.is_control())
        && !s.lines().any(|l| l.ends_with([' ', '\t']))
        && !s.ends_with("\n\n");
    if block_ok {
        out.push_str(if s.ends_with('\n') { "|" } else { "|-" });
        for line in s.trim_end_matches('\n').split('\n') {
            out.push('\n');
            if !line.is_empty() {
                pad(out, indent);
                out.push_str(line);
            }
        }
        out.push('\n');
    } else if plain_ok(s) {
        out.push_str(s);
        out.push('\n');
    } else {
        out.push_str(&Value::String(s.to_string()).to_string());
        out.push('\n');
    }
}

fn value(v: &Value, indent: usize, out: &mut String, top: bool) {
    match v {
        Value::Object(m) if m.is_empty() => out.push_str("{}\n"),
        Value::Array(a) if a.is_empty() => out.push_str("[]\n"),
        Value::Object(m) => {
            if !top {
                out.push('\n');
            }
            for (k, v) in m {
                pad(out, indent);
                out.push_str(&key(k));
                out.push(':');
                if !matches!(v, Value::Object(m) if !m.is_empty()) && !matches!(v, Value::Array(a) if !a.is_empty()) {
                    out.push(' ');
                }
                value(v, indent + 2, out, false);
            }
        }
        Value::Array(items) => {
            if !top {
                out.push('\n');
            }
            for item in items {
                pad(out, indent);
                out.push_str("- ");
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        // The first key on the dash's line, the rest aligned under it.
                        let mut inner = String::new();
                        value(item, indent + 2, &mut inner, true);
                        out.push_str(inner.trim_start());
                        let _ = m;
                    }
                    other => value(other, indent + 2, out, false),
                }
            }
        }
        Value::String(s) => scalar_str(s, indent, out),
        other => {
            out.push_str(&other.to_string());
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_through_the_yaml_reader() {
        let v = json!({
            "plain": "text", "quoted": "a: b", "num": "42", "bool": "true", "empty": "", "dollar": "$slack-token",
            "block": "line one\n  indented {{x}}\n\nlast\n", "strip": "no newline\nat end", "lead": " spaced\nx",
            "list": ["a", {"when": "x == 1\n&& y", "send": ["t"]}, []], "map": {"k": {"deep": [1, true, null]}}, "e": {}
        });
        let text = to_yaml(&v);
        let back: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{text}\n{e}"));
        assert_eq!(back, v, "{text}");
        assert!(text.contains("block: |\n  line one\n    indented {{x}}\n\n  last\n"), "{text}");
    }
}
