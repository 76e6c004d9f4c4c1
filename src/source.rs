//! Source positions: turns YAML parse errors and errors inside an embedded rhai
//! expression or handlebars template into `file:line:col` in the file the user edits.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_saphyr::{Location, Spanned};

/// A position in a configuration file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    pub file: Arc<str>,
    pub line: u64,
    pub col: u64,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// One configuration problem. `key` is the dotted path of what is wrong
/// (`triggers.on-x[0].when`), so a reader knows which setting to fix even where the
/// position is approximate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{key}: {message}", pos.as_ref().map(|p| format!("{p}: ")).unwrap_or_default())]
pub struct ConfigError {
    pub pos: Option<Pos>,
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(pos: Option<Pos>, key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { pos, key: key.into(), message: message.into() }
    }
}

/// A file's text with its name, shared by every position that points into it.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub name: Arc<str>,
    pub text: Arc<str>,
}

impl SourceFile {
    pub fn new(name: impl Into<Arc<str>>, text: impl Into<Arc<str>>) -> Self {
        SourceFile { name: name.into(), text: text.into() }
    }

    /// The start of the file, for errors about the file as a whole.
    pub fn pos_at_start(&self) -> Option<Pos> {
        Some(Pos { file: self.name.clone(), line: 1, col: 1 })
    }

    pub fn pos(&self, loc: &Location) -> Option<Pos> {
        if loc.line() == 0 {
            return None;
        }
        Some(Pos { file: self.name.clone(), line: loc.line(), col: loc.column() })
    }

    /// Deserializes the whole file, or one error with the parser's position. `what` says
    /// what the file should hold ("a trigger", "the configuration") for the message.
    pub fn parse<T: DeserializeOwned>(&self, what: &str) -> Result<T, ConfigError> {
        serde_saphyr::from_str::<T>(&self.text).map_err(|e| self.yaml_error(&e, what))
    }

    fn yaml_error(&self, e: &serde_saphyr::Error, what: &str) -> ConfigError {
        let pos = e.location().and_then(|l| self.pos(&l));
        // The rendered error carries a source snippet; keep only its first line (the
        // message) since the position is reported separately.
        let rendered = e.without_snippet().to_string();
        let first = rendered.lines().next().unwrap_or("invalid YAML").trim();
        let first = strip_location_suffix(first);
        ConfigError::new(pos, what.to_string(), first.to_string())
    }

    /// The position of a character inside a scalar value: `line`/`col` are 1-based and
    /// relative to `value`, the scalar's text. Handles plain, quoted and block (`|`, `>`)
    /// styles; folded multi-line plain scalars are approximated to their first line. A
    /// position past the end (a parser's "unexpected end of input") is clamped to the
    /// end of the value's last line.
    pub fn pos_in_scalar(&self, value_loc: &Location, value: &str, line: usize, col: usize) -> Option<Pos> {
        let (line, col) = clamp_to_text(value, line.max(1), col.max(1));
        let start = self.pos(value_loc)?;
        let lines: Vec<&str> = self.text.lines().collect();
        let idx = usize::try_from(start.line).ok()?.checked_sub(1)?;
        let head = lines.get(idx)?;
        let col0 = usize::try_from(start.col).ok()?.saturating_sub(1);
        let at: String = head.chars().skip(col0).take(1).collect();
        match at.as_str() {
            "|" | ">" => {
                // Content starts on the next non-empty line; its indentation is the
                // block's indentation.
                let mut first = idx + 1;
                while lines.get(first).is_some_and(|l| l.trim().is_empty()) {
                    first += 1;
                }
                let indent = lines.get(first).map_or(0, |l| l.len() - l.trim_start().len());
                let target = first + line - 1;
                Some(Pos { file: self.name.clone(), line: target as u64 + 1, col: (indent + col) as u64 })
            }
            "\"" | "'" if line == 1 => Some(Pos { line: start.line, col: start.col + col as u64, ..start }),
            _ if line == 1 => Some(Pos { line: start.line, col: start.col + col as u64 - 1, ..start }),
            _ => Some(Pos { line: start.line + line as u64 - 1, ..start }),
        }
    }
}

/// What `driftwatch import` writes beside an item it could not convert.
pub const IMPORT_TODO: &str = "TODO(import)";

/// Every `TODO(import)` mark in a file, as an error at its line: a configuration that
/// still has one is refused (by `check`, `run` and reloads) until a person resolves it,
/// so nothing the import could not convert is silently left out.
pub fn import_todos(file: &SourceFile) -> Vec<ConfigError> {
    let mut out = Vec::new();
    for (i, line) in file.text.lines().enumerate() {
        if let Some(col) = line.find(IMPORT_TODO) {
            let what = line[col + IMPORT_TODO.len()..].trim();
            out.push(ConfigError::new(
                Some(Pos { file: file.name.clone(), line: i as u64 + 1, col: col as u64 + 1 }),
                "import",
                format!("not converted by `driftwatch import`, resolve it and delete the mark: {what}"),
            ));
        }
    }
    out
}

/// Keeps a (line, col) inside `text`: past the last line means the end of the last line.
fn clamp_to_text(text: &str, line: usize, col: usize) -> (usize, usize) {
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return (1, 1);
    }
    if line > lines.len() {
        let last = lines.len();
        return (last, lines[last - 1].chars().count() + 1);
    }
    (line, col)
}

fn strip_location_suffix(msg: &str) -> &str {
    // Messages end in " at line N column M"; the position is reported on its own.
    match msg.rfind(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    }
}

/// A value with where it came from.
pub type At<T> = Spanned<T>;

/// A number a configuration gives, checked against its range: in range it is the
/// value, out of range it is an error at its position naming `key`, and `None`.
pub fn in_range(file: &SourceFile, key: &str, v: &At<usize>, min: usize, max: usize, errors: &mut Vec<ConfigError>) -> Option<usize> {
    if (min..=max).contains(&v.value) {
        return Some(v.value);
    }
    errors.push(ConfigError::new(file.pos(&v.referenced), key, format!("{} is out of range ({min} to {max})", v.value)));
    None
}

/// A duration in a config, trigger or template file, written as Argo CD users write
/// durations (`"250ms"`, `"30s"`, `"5m"`, `"1h30m"`, `"1.5h"`, `"2d"`; see
/// [`crate::duration`]); a bad one is a
/// deserialization error, reported at its position. At most [`MAX_CONFIG_DURATION`]:
/// every duration a configuration gives is added to a time somewhere (a repeat, a
/// hold-down, a retention cutoff), and nothing driftwatch waits for is decades away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub std::time::Duration);

/// The longest duration a configuration may give: ten years.
pub const MAX_CONFIG_DURATION: std::time::Duration = std::time::Duration::from_secs(3650 * 24 * 3600);

impl<'de> serde::Deserialize<'de> for ConfigDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let delta = crate::duration::parse(&s).map_err(serde::de::Error::custom)?;
        let d = delta.to_std().map_err(|_| serde::de::Error::custom(format!("duration {s:?} must not be negative")))?;
        if d > MAX_CONFIG_DURATION {
            return Err(serde::de::Error::custom(format!("duration {s:?} is longer than the maximum, 3650d (ten years)")));
        }
        Ok(ConfigDuration(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Doc {
        a: At<String>,
        b: At<String>,
        c: At<String>,
    }

    #[test]
    fn positions_inside_plain_quoted_and_block_scalars() {
        let text = "a: x + y\nb: \"x + y\"\nc: |\n    first\n    second line\n";
        let file = SourceFile::new("f.yaml", text);
        let doc: Doc = file.parse("test").unwrap();
        let p = file.pos_in_scalar(&doc.a.referenced, &doc.a.value, 1, 3).unwrap();
        assert_eq!((p.line, p.col), (1, 6));
        let p = file.pos_in_scalar(&doc.b.referenced, &doc.b.value, 1, 3).unwrap();
        assert_eq!((p.line, p.col), (2, 7));
        let p = file.pos_in_scalar(&doc.c.referenced, &doc.c.value, 2, 1).unwrap();
        assert_eq!((p.line, p.col), (5, 5));
    }

    #[test]
    fn yaml_errors_name_file_line_and_column() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Strict {
            a: String,
        }
        let file = SourceFile::new("cfg.yaml", "a: x\nbogus: 1\n");
        let err = file.parse::<Strict>("the configuration").unwrap_err();
        let pos = err.pos.clone().expect("position");
        assert_eq!((pos.line, pos.col), (2, 1), "{err}");
        assert!(err.to_string().starts_with("cfg.yaml:2:1: the configuration: "), "{err}");
        assert!(err.message.contains("bogus"), "{err}");
    }
}
