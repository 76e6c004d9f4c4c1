//! A string as a double-quoted literal of another language: rhai's (what `driftwatch
//! import` writes for a trigger) or Go's `%q` (what sprig's `quote` and `printf "%q"`
//! print in a template).

use std::fmt::Write;

/// Whose string literal to write. They differ only in how a control character other
/// than `\n`, `\t` and `\r` is escaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// rhai: `\u` and four hex digits.
    Rhai,
    /// Go's `%q`: `\x` and two hex digits.
    Go,
}

/// `s` between double quotes, with `"`, `\`, newlines, tabs, carriage returns and
/// other control characters escaped as `dialect` writes them.
pub fn quote(s: &str, dialect: Dialect) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                // Writing to a String does not fail.
                let _ = match dialect {
                    Dialect::Rhai => write!(out, "\\u{:04x}", c as u32),
                    Dialect::Go => write!(out, "\\x{:02x}", c as u32),
                };
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::{Dialect, quote};

    #[test]
    fn the_dialects_differ_only_in_other_control_characters() {
        for d in [Dialect::Rhai, Dialect::Go] {
            assert_eq!(quote("a \"b\" \\ c\n\t\r", d), r#""a \"b\" \\ c\n\t\r""#);
        }
        assert_eq!(quote("\u{1}", Dialect::Rhai), r#""\u0001""#);
        assert_eq!(quote("\u{1}", Dialect::Go), r#""\x01""#);
    }
}
