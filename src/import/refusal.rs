//! A construct the translators (`expr`, `gotmpl`) do not convert: why, and where.

/// Why a construct is not translated; `at` is the byte offset in the translated text
/// (a condition, a template) of the token or node refused, so a mark can name the line
/// and column of the source file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    pub at: usize,
    pub reason: String,
}

impl Refusal {
    pub fn new(at: usize, reason: impl Into<String>) -> Refusal {
        Refusal { at, reason: reason.into() }
    }
}
