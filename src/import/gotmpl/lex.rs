//! Go template text split into text and actions (trim markers applied to the text
//! around them, comments dropped), and an action's body into tokens.

use crate::import::refusal::Refusal;

/// Text, or an action's body with the byte offset of its `{{`.
#[derive(Debug, Clone)]
pub(super) enum Piece {
    Text(String),
    Action(String, usize),
}

pub(super) fn is_go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Splits the source into text and action bodies, applying `{{-` and `-}}` to the
/// neighbouring text and dropping comments.
pub(super) fn split(src: &str) -> Result<Vec<Piece>, Refusal> {
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
        let at = src.len() - rest.len() + open;
        let close = find_close(&rest[body_start..]).ok_or_else(|| Refusal::new(at, "an action `{{` is not closed with `}}`"))?;
        let mut body = &rest[body_start..body_start + close];
        trim_next = false;
        if body.ends_with('-') && body[..body.len() - 1].ends_with(is_go_space) {
            trim_next = true;
            body = &body[..body.len() - 1];
        }
        let trimmed = body.trim_matches(is_go_space);
        if !(trimmed.starts_with("/*") && trimmed.ends_with("*/")) {
            out.push(Piece::Action(trimmed.to_string(), at));
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

/// A token of an action.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
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

/// Whether `c` goes on a name (`$name`, an identifier).
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The characters from `*i` while `keep` holds them, `*i` moved past them.
fn take_while(chars: &[char], i: &mut usize, keep: impl Fn(char) -> bool) -> String {
    let start = *i;
    while *i < chars.len() && keep(chars[*i]) {
        *i += 1;
    }
    chars[start..*i].iter().collect()
}

/// A double-quoted string from just after its opening quote (`*i`) to its closing
/// one, `*i` moved past it; `\n`, `\t`, `\r` read as Go reads them, any other
/// escaped character as itself.
fn quoted(chars: &[char], i: &mut usize) -> Result<String, String> {
    let mut s = String::new();
    loop {
        let c = *chars.get(*i).ok_or("unterminated string")?;
        *i += 1;
        match c {
            '"' => return Ok(s),
            '\\' => {
                let e = *chars.get(*i).ok_or("unterminated string")?;
                *i += 1;
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
}

pub(super) fn lex_action(src: &str) -> Result<Vec<Tok>, String> {
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
                i += 1;
                let name = take_while(&chars, &mut i, is_word);
                out.push(Tok::Var(name, fields(&chars, &mut i)));
            }
            '"' => {
                i += 1;
                out.push(Tok::Str(quoted(&chars, &mut i)?));
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
                i += 1;
                let rest = take_while(&chars, &mut i, |c| c.is_ascii_alphanumeric() || c == '.' || c == '_');
                out.push(Tok::Num(format!("{c}{rest}")));
            }
            '\'' => {
                let end = chars[i + 1..].iter().position(|c| *c == '\'').ok_or("unterminated character")? + i + 1;
                let ch: String = chars[i + 1..end].iter().collect();
                out.push(Tok::Num(ch.chars().next().map_or(0, |c| c as u32).to_string()));
                i = end + 1;
            }
            c if c.is_alphabetic() || c == '_' => out.push(Tok::Ident(take_while(&chars, &mut i, is_word))),
            other => return Err(format!("unexpected {other:?} in an action")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(src: &str) -> Vec<String> {
        split(src)
            .unwrap()
            .into_iter()
            .map(|p| match p {
                Piece::Text(t) => format!("T{t:?}"),
                Piece::Action(a, at) => format!("A{a:?}@{at}"),
            })
            .collect()
    }

    #[test]
    fn trim_markers_apply_to_the_text_and_comments_drop() {
        assert_eq!(pieces("a  {{- .x -}}\n b{{/* note */}}c"), ["T\"a\"", "A\".x\"@3", "T\"b\"", "T\"c\""]);
        // `{{-3}}` is a number, not a trim marker.
        assert_eq!(pieces("é{{-3}}"), ["T\"é\"", "A\"-3\"@2", "T\"\""]);
        // A `}}` inside a string does not close the action.
        assert_eq!(pieces("{{ \"}}\" }}"), ["T\"\"", "A\"\\\"}}\\\"\"@0", "T\"\""]);
    }

    #[test]
    fn an_unclosed_action_is_refused_where_it_opens() {
        assert_eq!(split("ok\n{{ .x ").unwrap_err(), Refusal::new(3, "an action `{{` is not closed with `}}`"));
    }

    #[test]
    fn action_tokens() {
        let toks = lex_action("$v := (.a.b).c | printf \"%d\" 3, $").unwrap();
        assert_eq!(
            toks,
            [
                Tok::Var("v".into(), vec![]),
                Tok::Declare,
                Tok::Open,
                Tok::Field(vec!["a".into(), "b".into()]),
                Tok::Close(vec!["c".into()]),
                Tok::Pipe,
                Tok::Ident("printf".into()),
                Tok::Str("%d".into()),
                Tok::Num("3".into()),
                Tok::Comma,
                Tok::Var("".into(), vec![]),
            ]
        );
    }
}
