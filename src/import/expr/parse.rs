//! expr's grammar: a Pratt parser over the tokens, after expr-lang's precedence table
//! (`or` 10, `and` 15, comparisons and `in`/`matches`/`contains`/... 20, `..` 25,
//! `+ -` 30, `* / %` 60, unary 50/90, `**` 100 right-associative, `??` 120), with
//! `not in`, ternaries, pipes (`x | f(a)` is `f(x, a)`), optional chaining and the
//! predicate builtins' closures (`{.ok}`, `#`, or bare `.ok`). Depth is bounded.

use super::lex::{OPS, Tok, Token};
use crate::import::refusal::Refusal;

/// An expr expression. Nodes the emitter may refuse carry their byte offset.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum E {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ident(String, usize),
    /// `#` (the element in a predicate), or `.x` at the start of a predicate.
    Pointer(usize),
    Member(Box<E>, String, bool),
    Index(Box<E>, Box<E>, bool),
    Call(Box<E>, Vec<E>, usize),
    Unary(&'static str, Box<E>),
    Binary(&'static str, Box<E>, Box<E>),
    Ternary(Box<E>, Box<E>, Box<E>),
    Array(Vec<E>),
    Map(Vec<(String, E)>),
    /// `{ ... }` as a predicate argument (`all(xs, {.ok})`).
    Closure(Box<E>, usize),
}

struct Parser {
    tokens: Vec<Token>,
    /// The length of the source: where "the end" is.
    end: usize,
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

/// The expression the tokens of a `src` of `end` bytes make, all of them.
pub(super) fn parse(tokens: Vec<Token>, end: usize) -> Result<E, Refusal> {
    let mut p = Parser { tokens, end, pos: 0, closures: 0, depth: 0 };
    let e = p.expr(0)?;
    if let Some(t) = p.peek() {
        return Err(p.refuse(format!("unexpected {} after the expression", t.describe())));
    }
    Ok(e)
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }

    fn peek_at(&self, ahead: usize) -> Option<&Tok> {
        self.tokens.get(self.pos + ahead).map(|t| &t.tok)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.peek().cloned();
        self.pos += 1;
        t
    }

    /// Where the next token starts (the end when there is none).
    fn here(&self) -> usize {
        self.tokens.get(self.pos).map_or(self.end, |t| t.at)
    }

    /// A refusal at the next token.
    fn refuse(&self, reason: impl Into<String>) -> Refusal {
        Refusal::new(self.here(), reason)
    }

    /// A refusal at the token just read.
    fn refuse_last(&self, reason: impl Into<String>) -> Refusal {
        let at = self.pos.checked_sub(1).and_then(|p| self.tokens.get(p)).map_or(self.end, |t| t.at);
        Refusal::new(at, reason)
    }

    fn eat(&mut self, op: &str) -> bool {
        if self.peek() == Some(&Tok::Op(leak(op))) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &str) -> Result<(), Refusal> {
        if self.eat(op) {
            Ok(())
        } else {
            Err(self.refuse(format!("expected `{op}`, found {}", self.peek().map_or("the end".into(), Tok::describe))))
        }
    }

    fn expr(&mut self, min: u8) -> Result<E, Refusal> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.refuse(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let r = self.expr_inner(min);
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self, min: u8) -> Result<E, Refusal> {
        let mut left = self.unary()?;
        loop {
            // `not in`
            if matches!(self.peek(), Some(Tok::Ident(w)) if w == "not") && matches!(self.peek_at(1), Some(Tok::Ident(w)) if w == "in") {
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
                    E::Call(func, mut args, at) => {
                        args.insert(0, left);
                        E::Call(func, args, at)
                    }
                    E::Ident(name, at) => E::Call(Box::new(E::Ident(name, at)), vec![left], at),
                    _ => return Err(self.refuse("a pipe (`|`) must be followed by a function call")),
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

    fn unary(&mut self) -> Result<E, Refusal> {
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

    fn postfix(&mut self) -> Result<E, Refusal> {
        let start = self.here();
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
                        return Err(self.refuse_last(format!(
                            "expected a field name after `.`, found {}",
                            other.map_or("the end".into(), |t| t.describe())
                        )));
                    }
                }
            } else if self.eat("[") {
                if self.eat(":") || self.slice_ahead() {
                    return Err(self.refuse("slices (`a[i:j]`) are not translated"));
                }
                let idx = self.expr(0)?;
                self.expect("]")?;
                e = E::Index(Box::new(e), Box::new(idx), false);
            } else if self.eat("(") {
                let mut args = Vec::new();
                // expr's predicate builtins take their predicate bare too: `any(xs, .ok)`.
                let predicate = matches!(&e, E::Ident(f, _) if PREDICATES.contains(&f.as_str()));
                if !self.eat(")") {
                    loop {
                        args.push(self.arg(predicate && !args.is_empty())?);
                        if self.eat(")") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                e = E::Call(Box::new(e), args, start);
            } else {
                break;
            }
        }
        Ok(e)
    }

    fn slice_ahead(&self) -> bool {
        let mut depth = 0usize;
        for t in &self.tokens[self.pos..] {
            match &t.tok {
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
    fn arg(&mut self, predicate: bool) -> Result<E, Refusal> {
        let at = self.here();
        if self.peek() == Some(&Tok::Op("{")) && !self.map_ahead() {
            self.pos += 1;
            self.closures += 1;
            let body = self.expr(0)?;
            self.closures -= 1;
            self.expect("}")?;
            return Ok(E::Closure(Box::new(body), at));
        }
        if predicate {
            self.closures += 1;
            let body = self.expr(0);
            self.closures -= 1;
            return Ok(E::Closure(Box::new(body?), at));
        }
        self.expr(0)
    }

    /// `{key: value}` (a map) rather than `{predicate}`.
    fn map_ahead(&self) -> bool {
        matches!((self.peek_at(1), self.peek_at(2)), (Some(Tok::Ident(_) | Tok::Str(_)), Some(Tok::Op(":"))))
            || self.peek_at(1) == Some(&Tok::Op("}"))
    }

    fn primary(&mut self) -> Result<E, Refusal> {
        let at = self.here();
        match self.next() {
            Some(Tok::Int(n)) => Ok(E::Int(n)),
            Some(Tok::Float(n)) => Ok(E::Float(n)),
            Some(Tok::Str(s)) => Ok(E::Str(s)),
            Some(Tok::Ident(w)) => Ok(match w.as_str() {
                "nil" => E::Nil,
                "true" => E::Bool(true),
                "false" => E::Bool(false),
                _ => E::Ident(w, at),
            }),
            Some(Tok::Op("#")) => Ok(E::Pointer(at)),
            Some(Tok::Op(".")) if self.closures > 0 => match self.next() {
                Some(Tok::Ident(name)) => Ok(E::Member(Box::new(E::Pointer(at)), name, false)),
                _ => Err(self.refuse_last("expected a field name after `.`")),
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
                            _ => return Err(self.refuse_last("expected a map key")),
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
            Some(t) => Err(self.refuse_last(format!("unexpected {}", t.describe()))),
            None => Err(self.refuse("unexpected end of the expression")),
        }
    }
}

/// expr's builtins whose second argument is a predicate.
pub(super) const PREDICATES: &[&str] = &["all", "any", "none", "one", "filter", "map", "count"];

/// Operator tokens are `&'static str`; this finds the static one equal to `op`.
pub(super) fn leak(op: &str) -> &'static str {
    OPS.iter().find(|o| **o == op).copied().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(src: &str) -> Result<E, Refusal> {
        parse(super::super::lex::lex(src)?, src.len())
    }

    fn id(name: &str, at: usize) -> Box<E> {
        Box::new(E::Ident(name.into(), at))
    }

    #[test]
    fn precedence_after_expr_lang() {
        // `or` 10 < `and` 15 < comparisons 20 < `+` 30 < `*` 60.
        let e = tree("a or b and c == 1 + 2 * 3").unwrap();
        let E::Binary("||", a, rest) = e else { panic!("{e:?}") };
        assert_eq!(*a, E::Ident("a".into(), 0));
        let E::Binary("&&", _, cmp) = *rest else { panic!() };
        let E::Binary("==", _, sum) = *cmp else { panic!() };
        assert_eq!(*sum, E::Binary("+", Box::new(E::Int(1)), Box::new(E::Binary("*", Box::new(E::Int(2)), Box::new(E::Int(3))))));
        // `**` is right-associative.
        assert_eq!(
            tree("2 ** 3 ** 2").unwrap(),
            E::Binary("**", Box::new(E::Int(2)), Box::new(E::Binary("**", Box::new(E::Int(3)), Box::new(E::Int(2)))))
        );
    }

    #[test]
    fn not_in_pipes_and_predicates() {
        assert_eq!(
            tree("a not in [1]").unwrap(),
            E::Unary("!", Box::new(E::Binary("in", id("a", 0), Box::new(E::Array(vec![E::Int(1)])))))
        );
        // `x | lower()` is `lower(x)`, the call placed where the function is.
        assert_eq!(tree("x | lower()").unwrap(), E::Call(id("lower", 4), vec![E::Ident("x".into(), 0)], 4));
        // A bare predicate, a braced one and `#` are the same closure.
        for src in ["any(xs, .ok)", "any(xs, {.ok})", "any(xs, #.ok)"] {
            let E::Call(_, args, 0) = tree(src).unwrap() else { panic!("{src}") };
            assert!(
                matches!(&args[1], E::Closure(body, _) if matches!(**body, E::Member(_, ref f, false) if f == "ok")),
                "{src}: {args:?}"
            );
        }
        assert!(matches!(tree("{a: 1}").unwrap(), E::Map(_)), "a map, not a predicate");
    }

    #[test]
    fn refusals_name_the_offset() {
        assert_eq!(tree("app.x[1:2]").unwrap_err(), Refusal::new(6, "slices (`a[i:j]`) are not translated"));
        assert_eq!(tree("app.x == 1 )").unwrap_err().at, 11);
        assert_eq!(tree("app.x ==").unwrap_err(), Refusal::new(8, "unexpected end of the expression"));
        assert_eq!(tree("app.").unwrap_err().at, 4);
        assert!(tree(&"(".repeat(100)).unwrap_err().reason.contains("nested deeper than 64"));
    }
}
