//! expr's tokens: identifiers, numbers, strings in three quotes, operators (longest
//! first), each with the byte offset it starts at.

use crate::import::refusal::Refusal;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Ident(String),
    Int(i64),
    Float(f64),
    Str(String),
    Op(&'static str),
}

impl Tok {
    pub(super) fn describe(&self) -> String {
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
pub(super) const OPS: &[&str] = &[
    "?.", "??", "==", "!=", "<=", ">=", "&&", "||", "**", "..", "<", ">", "+", "-", "*", "/", "%", "^", "!", "(", ")", "[", "]", "{", "}",
    ",", ".", "?", ":", "#", "|",
];

/// A token and the byte offset it starts at.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    pub at: usize,
}

/// The tokens of `src`, or the first character that cannot start one.
pub(super) fn lex(src: &str) -> Result<Vec<Token>, Refusal> {
    let chars: Vec<char> = src.chars().collect();
    // Byte offset of each character, and of the end.
    let offsets: Vec<usize> = src.char_indices().map(|(b, _)| b).chain(std::iter::once(src.len())).collect();
    let mut out = Vec::new();
    let push = |tok: Tok, start: usize, out: &mut Vec<Token>| out.push(Token { tok, at: offsets[start] });
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
            let bad = || Refusal::new(offsets[start], format!("bad number {text}"));
            let tok = if let Ok(n) = text.parse::<i64>() {
                Tok::Int(n)
            } else if let Some(hex) = text.strip_prefix("0x") {
                Tok::Int(i64::from_str_radix(hex, 16).map_err(|_| bad())?)
            } else {
                Tok::Float(text.parse().map_err(|_| bad())?)
            };
            push(tok, start, &mut out);
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$') {
                i += 1;
            }
            push(Tok::Ident(chars[start..i].iter().collect()), start, &mut out);
        } else if c == '\'' || c == '"' || c == '`' {
            let (s, next) = string(&chars, i).map_err(|r| Refusal::new(offsets[i], r))?;
            push(Tok::Str(s), i, &mut out);
            i = next;
        } else if let Some(op) = OPS.iter().find(|op| op.chars().enumerate().all(|(k, oc)| chars.get(i + k) == Some(&oc))) {
            // `?.` followed by a digit is `? .5`, not optional chaining.
            push(Tok::Op(op), i, &mut out);
            i += op.chars().count();
        } else {
            return Err(Refusal::new(offsets[i], format!("unexpected character {c:?}")));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<(Tok, usize)> {
        lex(src).unwrap_or_else(|r| panic!("{src}: {r:?}")).into_iter().map(|t| (t.tok, t.at)).collect()
    }

    #[test]
    fn tokens_carry_byte_offsets_past_multibyte_text() {
        let got = toks("'é' == app.x");
        assert_eq!(
            got,
            vec![
                (Tok::Str("é".into()), 0),
                (Tok::Op("=="), 5),
                (Tok::Ident("app".into()), 8),
                (Tok::Op("."), 11),
                (Tok::Ident("x".into()), 12)
            ]
        );
    }

    #[test]
    fn longest_operator_first_and_ranges_are_not_floats() {
        let ops: Vec<Tok> = toks("a?.b ?? c ** 2 1..3").into_iter().map(|(t, _)| t).collect();
        assert!(ops.contains(&Tok::Op("?.")) && ops.contains(&Tok::Op("??")) && ops.contains(&Tok::Op("**")), "{ops:?}");
        assert_eq!(ops[ops.len() - 3..], [Tok::Int(1), Tok::Op(".."), Tok::Int(3)]);
    }

    #[test]
    fn numbers_and_strings() {
        let got: Vec<Tok> = toks(r#"1_000 0x1f 1.5 "a\n\u00e9" `raw\n` 'it\'s'"#).into_iter().map(|(t, _)| t).collect();
        assert_eq!(
            got,
            [Tok::Int(1000), Tok::Int(31), Tok::Float(1.5), Tok::Str("a\né".into()), Tok::Str("raw\\n".into()), Tok::Str("it's".into())]
        );
    }

    #[test]
    fn refusals_name_the_offset() {
        assert_eq!(lex("app.x == 1 ; 2").unwrap_err(), Refusal::new(11, "unexpected character ';'"));
        assert_eq!(lex("app.x == 'open").unwrap_err().at, 9);
        assert_eq!(lex("1.2.3").unwrap_err().reason, "bad number 1.2.3");
    }
}
