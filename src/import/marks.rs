//! The TODO marks of one imported item: an entry's part that could not be converted
//! becomes a `# TODO(driftwatch import)` comment (with the source kept commented out
//! below it) and a line of the report; the item then counts as to do.

use super::read::Entry;
use super::{Out, Refusal, commented};

/// The line of `needle` within an entry's value, as a line of the source file.
fn inner_line(e: &Entry, needle: &str) -> usize {
    let serde_json::Value::String(s) = &e.value else { return e.line };
    let first = needle.lines().next().unwrap_or("").trim();
    if first.is_empty() {
        return e.line;
    }
    s.lines().position(|l| l.contains(first)).map_or(e.line, |i| e.line + i + 1)
}

/// The line of `e`'s file that holds byte `at` of `src`, a text inside the entry.
pub(super) fn line_at(e: &Entry, src: &str, at: usize) -> usize {
    inner_line(e, src) + src.get(..at).map_or(0, |before| before.matches('\n').count())
}

/// The marks written while one entry converts: whether any part needs a hand, and the
/// comments waiting to be written above the next converted part.
pub(super) struct Marks<'a> {
    /// The entry being converted (its file, line and key).
    pub e: &'a Entry,
    /// Whether anything in the entry was marked TODO.
    pub todo: bool,
    /// Comments not yet written out, each ending in a newline.
    pub comments: String,
}

impl<'a> Marks<'a> {
    pub fn new(e: &'a Entry) -> Self {
        Marks { e, todo: false, comments: String::new() }
    }

    /// Marks `path` TODO for `reason`, at the entry's line.
    pub fn mark(&mut self, out: &mut Out, path: &str, reason: &str) {
        self.todo = true;
        self.comments.push_str(&out.todo(self.e, path, reason));
        self.comments.push('\n');
    }

    /// Marks `path` TODO for `reason` and keeps `kept` (the source left out) commented
    /// out below the mark.
    pub fn mark_kept(&mut self, out: &mut Out, path: &str, reason: &str, kept: &str) {
        self.mark(out, path, reason);
        self.comments.push_str(&commented(kept));
    }

    /// A translation of `src`, or, when it was refused, `None` after a mark at the
    /// line of the refusal with `src` kept commented out.
    pub fn translated<T>(&mut self, out: &mut Out, path: &str, src: &str, translation: Result<T, Refusal>) -> Option<T> {
        match translation {
            Ok(t) => Some(t),
            Err(refused) => {
                self.todo = true;
                let at = Entry { line: line_at(self.e, src, refused.at), ..self.e.clone() };
                self.comments.push_str(&out.todo(&at, path, &refused.reason));
                self.comments.push('\n');
                self.comments.push_str(&commented(src));
                None
            }
        }
    }

    /// The comments written so far, leaving none.
    pub fn take_comments(&mut self) -> String {
        std::mem::take(&mut self.comments)
    }
}
