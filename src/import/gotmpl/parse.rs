//! A Go template's structure: text, output actions, variables, `if`/`else if`/`else`,
//! `range` (with `$i, $v :=`), `with`, each action's pipeline; nesting bounded.

use super::lex::{Piece, Tok, is_go_space, lex_action};
use crate::import::refusal::Refusal;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Arg {
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

/// A pipeline, with the byte offset of the action it is in.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Pipe {
    pub cmds: Vec<Vec<Arg>>,
    pub at: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Text(String),
    Out(Pipe),
    Assign { var: String, declare: bool, pipe: Pipe },
    If { branches: Vec<(Pipe, Vec<Node>)>, otherwise: Option<Vec<Node>> },
    Range { key: Option<String>, value: Option<String>, pipe: Pipe, body: Vec<Node>, otherwise: Option<Vec<Node>> },
    With { var: Option<String>, pipe: Pipe, body: Vec<Node>, otherwise: Option<Vec<Node>> },
}

struct Parser {
    pieces: Vec<Piece>,
    pos: usize,
    /// The byte offset of the action read last: where a refusal points.
    at: usize,
    /// Nesting of blocks, bounded by [`MAX_DEPTH`].
    depth: usize,
}

/// Deeper than any real template; a bound keeps hostile input off the stack's end.
const MAX_DEPTH: usize = 64;

/// What ended a block: `end`, `else`, or `else if …`/`else with …` (with the rest).
pub(super) type BlockEnd = Option<String>;

/// The template's nodes; a refusal points at the action read last.
pub(super) fn parse(pieces: Vec<Piece>) -> Result<Vec<Node>, Refusal> {
    let mut p = Parser { pieces, pos: 0, at: 0, depth: 0 };
    let (nodes, end) = p.block(&[]).map_err(|r| Refusal::new(p.at, r))?;
    if let Some(end) = end {
        return Err(Refusal::new(p.at, format!("`{{{{{end}}}}}` without a matching `if`, `range` or `with`")));
    }
    Ok(nodes)
}

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
                Piece::Action(a, at) => {
                    self.at = at;
                    a
                }
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
                _ => nodes.push(action_node(&action, self.at)?),
            }
        }
        if open.is_empty() { Ok((nodes, None)) } else { Err(format!("`{{{{{}}}}}` is not closed with `{{{{end}}}}`", open[0])) }
    }

    fn if_(&mut self, cond: &str) -> Result<Node, String> {
        let mut branches = Vec::new();
        let mut cond = pipe_of(cond, self.at)?;
        loop {
            let (body, end) = self.block(&["if"])?;
            branches.push((cond, body));
            let end = end.unwrap_or_default();
            if end == "end" {
                return Ok(Node::If { branches, otherwise: None });
            }
            let rest = end.strip_prefix("else").unwrap_or("").trim();
            if let Some(c) = rest.strip_prefix("if").filter(|c| c.starts_with(is_go_space)) {
                cond = pipe_of(c.trim(), self.at)?;
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
        let pipe = parse_pipe(&toks, self.at)?;
        let (body, otherwise) = self.body_else("range")?;
        Ok(Node::Range { key, value, pipe, body, otherwise })
    }

    fn with(&mut self, rest: &str) -> Result<Node, String> {
        // `with $x := pipeline`: `$x` is the value, as the dot is.
        let toks = lex_action(rest)?;
        let (var, pipe) = match toks.as_slice() {
            [Tok::Var(v, f), Tok::Declare, tail @ ..] if f.is_empty() => (Some(v.clone()), parse_pipe(tail, self.at)?),
            _ => (None, pipe_of(rest, self.at)?),
        };
        let (body, otherwise) = self.body_else("with")?;
        Ok(Node::With { var, pipe, body, otherwise })
    }
}

fn pipe_of(src: &str, at: usize) -> Result<Pipe, String> {
    let toks = lex_action(src)?;
    if matches!(toks.as_slice(), [Tok::Var(..), Tok::Declare | Tok::Assign, ..]) {
        return Err("a variable declared in a condition is not translated".into());
    }
    parse_pipe(&toks, at)
}

fn action_node(src: &str, at: usize) -> Result<Node, String> {
    let toks = lex_action(src)?;
    match toks.as_slice() {
        [Tok::Var(v, f), op @ (Tok::Declare | Tok::Assign), tail @ ..] if f.is_empty() => {
            Ok(Node::Assign { var: v.clone(), declare: *op == Tok::Declare, pipe: parse_pipe(tail, at)? })
        }
        _ => Ok(Node::Out(parse_pipe(&toks, at)?)),
    }
}

fn parse_pipe(toks: &[Tok], at: usize) -> Result<Pipe, String> {
    let opens = toks.iter().filter(|t| **t == Tok::Open).count();
    if opens > MAX_DEPTH {
        return Err(format!("more than {MAX_DEPTH} parentheses in one action"));
    }
    let mut pos = 0;
    let pipe = parse_pipe_at(toks, &mut pos, at)?;
    if pos < toks.len() {
        return Err(format!("unexpected {:?} in an action", toks[pos]));
    }
    Ok(pipe)
}

fn parse_pipe_at(toks: &[Tok], pos: &mut usize, at: usize) -> Result<Pipe, String> {
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
                let inner = parse_pipe_at(toks, pos, at)?;
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
    Ok(Pipe { cmds, at })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(src: &str) -> Result<Vec<Node>, Refusal> {
        parse(super::super::lex::split(src)?)
    }

    #[test]
    fn blocks_and_branches() {
        let n = nodes("{{if .a}}x{{else if .b}}y{{else}}z{{end}}").unwrap();
        let [Node::If { branches, otherwise: Some(o) }] = n.as_slice() else { panic!("{n:?}") };
        assert_eq!(branches.len(), 2);
        assert_eq!(branches[1].0, Pipe { cmds: vec![vec![Arg::Dot(vec!["b".into()])]], at: 10 });
        assert_eq!(o, &[Node::Text("z".into())]);
        let n = nodes("{{range $i, $c := .xs}}{{$c}}{{else}}none{{end}}").unwrap();
        assert!(matches!(&n[0], Node::Range { key: Some(k), value: Some(v), otherwise: Some(_), .. } if k == "i" && v == "c"), "{n:?}");
        let n = nodes("{{$x := .a | upper}}").unwrap();
        assert!(matches!(&n[0], Node::Assign { var, declare: true, pipe } if var == "x" && pipe.cmds.len() == 2), "{n:?}");
    }

    #[test]
    fn refusals_point_at_the_action() {
        assert_eq!(nodes("ok {{if .a}}x").unwrap_err().reason, "`{if}` is not closed with `{end}`".replace('{', "{{").replace('}', "}}"));
        assert_eq!(nodes("ok {{end}}").unwrap_err(), Refusal::new(3, "`{{end}}` outside a block"));
        assert_eq!(nodes("a\n{{template \"x\" .}}").unwrap_err().at, 2);
        assert_eq!(nodes("{{if $x := .a}}{{end}}").unwrap_err().reason, "a variable declared in a condition is not translated");
        assert!(nodes(&"{{if .a}}".repeat(100)).unwrap_err().reason.contains("nested deeper than 64"));
    }
}
