//! Go-template literals and names as handlebars needs them: a literal's text, Go's
//! numbers as JSON numbers handlebars reads, and variable names made into block
//! parameters.

/// A Go variable name as a block parameter (`$i` -> `i`), unique if it is a keyword.
pub(super) fn sanitize(name: &str, counter: &mut usize) -> String {
    if name.is_empty() || matches!(name, "this" | "true" | "false" | "null" | "else" | "as") {
        *counter += 1;
        format!("v{counter}")
    } else {
        name.to_string()
    }
}

pub(super) fn is_literal(text: &str) -> bool {
    literal_text(text).is_some() || text == "null"
}

/// The text a literal value prints as.
pub(super) fn literal_text(text: &str) -> Option<String> {
    if text == "true" || text == "false" || text.parse::<f64>().is_ok() {
        return Some(text.to_string());
    }
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    Some(inner.replace("\\\"", "\"").replace("\\\\", "\\"))
}

/// A Go number as a literal Handlebars reads back as the same value: Go writes `7.`, `+1`
/// and `1e3`, Handlebars reads none of them. Hexadecimal, octal, underscores and anything
/// not finite are refused rather than guessed at.
pub(super) fn number_literal(go: &str) -> Option<String> {
    if !go.trim_start_matches(['-', '+']).starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let v: f64 = go.parse().ok().filter(|v: &f64| v.is_finite())?;
    // Within ±2^53 an integral value is exact as an integer literal.
    if v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_992.0 {
        return Some(format!("{}", v as i64));
    }
    // Display never uses an exponent, and always gives digits around a dot.
    let text = format!("{v}");
    Some(if text.contains('.') { text } else { format!("{text}.0") })
}
