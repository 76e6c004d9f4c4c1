//! Argo CD trigger conditions, written in expr-lang, translated to the rhai driftwatch
//! evaluates: [`lex`] makes tokens with their offsets, [`parse`] a tree (a hand-written
//! Pratt parser: expr's grammar is small, and no crate parses it in Rust), [`emit`]
//! rhai with expr's meaning. What cannot be translated is refused with a reason and the
//! offset of the construct ([`Refusal`]), never guessed.
//!
//! Semantics carried over: `nil` is `()`; a missing map key is `()` in both; a member
//! access on nil is a runtime error in both (a condition whose evaluation fails counts
//! as false in both); where expr fails on nil and rhai would not, the translation
//! makes it fail (`must`, `collection`).

mod emit;
mod lex;
mod parse;

use crate::import::refusal::Refusal;

/// Translates one expr expression to rhai, or says why and where it cannot.
pub fn to_rhai(src: &str) -> Result<String, Refusal> {
    let tokens = lex::lex(src)?;
    let e = parse::parse(tokens, src.len())?;
    emit::condition(&e)
}

#[cfg(test)]
mod tests;
