//! Cutting text to a bound: by characters for what people read, by bytes for what a
//! store or a wire limits in bytes. Both cut on a character boundary, never inside one.

use std::borrow::Cow;

use sha2::Digest;

/// Past this many bytes, a value that goes into a state store key is cut and digested
/// ([`key_part`]). PostgreSQL's index refuses a key over 2,000 bytes, and a key is made
/// of a few such parts besides names the configuration chooses.
pub const MAX_KEY_PART_BYTES: usize = 256;

/// `s` as one part of a state store key. Up to [`MAX_KEY_PART_BYTES`] bytes it is kept
/// as it is, so the keys of every value that fitted before stay what they were (a
/// restart after an upgrade re-sends nothing); past it, a readable start, `#`, and 32
/// hex digits of the SHA-256 of the whole value, [`MAX_KEY_PART_BYTES`] bytes at most.
/// Two values that differ only past the start keep different keys.
pub fn key_part(s: &str) -> Cow<'_, str> {
    if s.len() <= MAX_KEY_PART_BYTES {
        return Cow::Borrowed(s);
    }
    Cow::Owned(with_digest(s, s, MAX_KEY_PART_BYTES))
}

/// Hex digits of the digest [`with_digest`] appends (128 bits of SHA-256).
pub const DIGEST_HEX: usize = 32;

/// The start of `shown`, `#`, and [`DIGEST_HEX`] hex digits of the SHA-256 of
/// `whole`, at most `max` bytes in all (`max` above [`DIGEST_HEX`]): what stands for a
/// value that had to be cut or changed, so that two values that differ anywhere
/// (past the start, or only in what was changed) stay different.
pub fn with_digest(shown: &str, whole: &str, max: usize) -> String {
    let digest = sha2::Sha256::digest(whole.as_bytes());
    let hex: String = digest.iter().take(DIGEST_HEX / 2).map(|b| format!("{b:02x}")).collect();
    let start = prefix(shown, max.saturating_sub(DIGEST_HEX + 1));
    format!("{start}#{hex}")
}

/// `s` cut to `max` characters (with `…`).
pub fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The longest start of `s` of at most `max` bytes that ends on a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_on_character_boundaries() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hé", 2), "hé");
        assert_eq!(prefix("héllo", 2), "h", "é is two bytes: not cut in half");
        assert_eq!(prefix("héllo", 3), "hé");
        assert_eq!(prefix("hé", 99), "hé");
        assert_eq!(prefix("é", 0), "");
    }

    #[test]
    fn key_parts_keep_short_values_and_digest_long_ones_within_the_bound() {
        let short = "x".repeat(MAX_KEY_PART_BYTES);
        assert!(matches!(key_part(&short), Cow::Borrowed(s) if s == short), "a value that fits is kept as it is");
        let long = format!("{}a", "é".repeat(1_500));
        let other = format!("{}b", "é".repeat(1_500));
        let (k, o) = (key_part(&long), key_part(&other));
        assert!(k.len() <= MAX_KEY_PART_BYTES, "{} bytes", k.len());
        assert!(k.starts_with("éé"), "a readable start: {k}");
        assert_ne!(k, o, "values that differ past the start keep different keys");
        assert_eq!(k, key_part(&long), "stable");
    }
}
