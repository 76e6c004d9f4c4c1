//! Argo CD templates, written in Go's `text/template` with Sprig, translated to the
//! handlebars driftwatch renders. Hand-written (no crate parses Go templates in Rust):
//! a lexer that applies the trim markers to the text around them, a parser for the
//! actions (`if`/`else if`/`range`/`with`/variables/pipelines), and an emitter that
//! keeps Go's meaning:
//!
//! - `.x` is relative to the dot: the root at the top, the element inside `range` and
//!   the value inside `with`. Every `range`/`with` gets a block parameter, so the dot
//!   there is a name (`{{#each app.status.conditions as |c|}}…{{c.type}}`) and the
//!   root is `@root` inside blocks.
//! - `$x := pipeline` is replaced by its translation where `$x` is used; the one
//!   reassignment idiom Go templates have, a flag set in a `range`
//!   (`{{$first := true}}{{range}}{{if not $first}}, {{end}}{{$first = false}}…`), is
//!   read as `@first`. Any other reassignment is refused.
//! - Functions map to handlebars built-ins and the helpers in `template::sprig`, with
//!   the piped value as the last argument, as Go passes it.
//! - Trim markers are applied to the text; a block tag left alone on its line gets an
//!   empty comment before it, since handlebars would drop that line and Go keeps it.
//!
//! What cannot be kept is refused with a reason (see [`Translation::notes`] for what
//! is kept with a caveat).

mod emit;
mod lex;
mod literal;
mod parse;

use crate::import::refusal::Refusal;

/// A translated template: handlebars text, and caveats worth a line in the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    pub text: String,
    pub notes: Vec<String>,
}

/// Translates one Go template to handlebars, or says why it cannot.
pub fn to_handlebars(src: &str) -> Result<Translation, Refusal> {
    translate(src, false)
}

/// As [`to_handlebars`], for a field that must render to JSON (Slack attachments, a
/// JSON webhook body): a value written inside a JSON string literal is escaped with
/// `json_escape`, so a quote or newline in, say, a condition message cannot break the
/// JSON (it does in Argo CD). Where the value has no such character the text is Go's.
pub fn to_handlebars_in_json(src: &str) -> Result<Translation, Refusal> {
    translate(src, true)
}

fn translate(src: &str, json: bool) -> Result<Translation, Refusal> {
    let nodes = parse::parse(lex::split(src)?)?;
    let (out, notes) = emit::emit(&nodes, json)?;
    Ok(Translation { text: keep_standalone_lines(&out), notes })
}

/// Handlebars removes a line that holds only a block tag (`{{#each}}`, `{{else}}`,
/// `{{/if}}`: a "standalone" tag), where Go keeps its whitespace and newline. An empty
/// comment before such a tag keeps the line as Go has it.
fn keep_standalone_lines(hbs: &str) -> String {
    let mut out = String::with_capacity(hbs.len());
    let mut rest = hbs;
    while let Some(open) = rest.find("{{") {
        // `\{{` is an escaped mustache, text.
        if rest[..open].ends_with('\\') && !rest[..open].ends_with("\\\\") {
            out.push_str(&rest[..open + 2]);
            rest = &rest[open + 2..];
            continue;
        }
        let Some(close) = rest[open..].find("}}").map(|c| open + c + 2) else { break };
        let tag = &rest[open..close];
        let block = tag.starts_with("{{#") || tag.starts_with("{{/") || tag.starts_with("{{else") || tag.starts_with("{{^");
        let blank = |t: &str| t.chars().all(|c| c == ' ' || c == '\t');
        let pre = &rest[..open];
        let alone_before = match pre.rfind('\n') {
            Some(i) => blank(&pre[i + 1..]),
            None => blank(pre) && blank(out.rfind('\n').map_or(out.as_str(), |i| &out[i + 1..])),
        };
        let after = &rest[close..];
        let line_end = after.find('\n').unwrap_or(after.len());
        let alone_after = after[..line_end].chars().all(|c| c == ' ' || c == '\t' || c == '\r');
        out.push_str(&rest[..open]);
        if block && alone_before && alone_after {
            out.push_str("{{!}}");
        }
        out.push_str(tag);
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;
