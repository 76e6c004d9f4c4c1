//! Cutting text to a bound: by characters for what people read, by bytes for what a
//! store or a wire limits in bytes. Both cut on a character boundary, never inside one.

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
}
