//! Durations as Argo CD users write them: Go's `time.ParseDuration` syntax (`90s`,
//! `1h30m`, `1.5h`, `250ms`, `10us`/`10µs`, `-5m`) plus days (`2d`), which Go lacks but
//! retention settings want. A leaf module: the configuration, the trigger engine and
//! the history all parse durations here. Hand-written because the duration crates
//! parse other syntaxes (humantime's `1h 30m`, ISO 8601), not Go's. Also the time
//! ranges the history's readers take (`--since 24h`, `/history?until=…`: a duration
//! back from now or an RFC 3339 instant).

use chrono::{DateTime, TimeDelta, Utc};

/// Nanoseconds per unit, longest unit names first so `ms` is not read as `m`.
const UNITS: &[(&str, i128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// Why a text is not a duration; each names the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("invalid duration {0:?}")]
    Invalid(String),
    #[error("invalid duration {0:?}: missing unit (ns, us, ms, s, m, h, d)")]
    MissingUnit(String),
    #[error("invalid duration {text:?}: unknown unit {unit:?}")]
    UnknownUnit { text: String, unit: String },
    #[error("duration {0:?} is out of range")]
    OutOfRange(String),
}

/// Parses a duration; out-of-range values are errors, never a wrap or a panic.
pub fn parse(s: &str) -> Result<TimeDelta, DurationError> {
    let text = s.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let (negative, mut rest) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(TimeDelta::zero());
    }
    if rest.is_empty() {
        return Err(DurationError::Invalid(s.to_string()));
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        // The number: digits, optionally a fraction.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Invalid(s.to_string()));
        }
        let Some((unit, per)) = UNITS.iter().filter(|(u, _)| after.starts_with(u)).max_by_key(|(u, _)| u.len()) else {
            let found: String = after.chars().take_while(|c| !c.is_ascii_digit() && *c != '.').collect();
            return Err(if found.is_empty() {
                DurationError::MissingUnit(s.to_string())
            } else {
                DurationError::UnknownUnit { text: s.to_string(), unit: found }
            });
        };
        let too_big = || DurationError::OutOfRange(s.to_string());
        let whole: i128 = if int_part.is_empty() { 0 } else { int_part.parse::<i128>().map_err(|_| too_big())? };
        let mut value = whole.checked_mul(*per).ok_or_else(too_big)?;
        // The fraction, to the nanosecond (Go keeps the same precision).
        let mut scale = *per;
        for d in frac_part.bytes().take(18) {
            scale /= 10;
            value = value.checked_add(i128::from(d - b'0') * scale).ok_or_else(too_big)?;
        }
        total = total.checked_add(value).ok_or_else(too_big)?;
        rest = &after[unit.len()..];
    }
    let out_of_range = || DurationError::OutOfRange(s.to_string());
    let secs = i64::try_from(total / 1_000_000_000).map_err(|_| out_of_range())?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| out_of_range())?;
    let d = TimeDelta::new(secs, nanos).ok_or_else(out_of_range)?;
    Ok(if negative { -d } else { d })
}

/// `1h2m3s`-style text, the inverse of [`parse`] at second precision.
pub fn format(d: TimeDelta) -> String {
    let mut secs = d.num_seconds();
    let sign = if secs < 0 { "-" } else { "" };
    secs = secs.abs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = sign.to_string();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.len() == sign.len() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// A time range's two ends (`since`, `until`), each open when absent.
pub type Window = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// Parses one end of a time range, named as the caller spells it (`--since`, `until`):
/// a duration back from now (`24h`, `7d`) or an RFC 3339 instant.
pub fn parse_time(name: &str, s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, SinceError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    let d = parse(s).map_err(|e| SinceError::Invalid(name.to_string(), e))?;
    now.checked_sub_signed(d).ok_or_else(|| SinceError::TooEarly(name.to_string(), s.to_string()))
}

/// Parses a time range — `history --since/--until`, `/history` and the web view's
/// `since=`/`until=` — each end `(name, value)`; `until` may not be before `since`.
pub fn parse_window(since: (&str, Option<&str>), until: (&str, Option<&str>), now: DateTime<Utc>) -> Result<Window, SinceError> {
    let end = |(name, v): (&str, Option<&str>)| v.map(|s| parse_time(name, s, now)).transpose();
    let (from, to) = (end(since)?, end(until)?);
    if let (Some(f), Some(t)) = (from, to)
        && t < f
    {
        return Err(SinceError::Reversed { since: since.0.to_string(), until: until.0.to_string() });
    }
    Ok((from, to))
}

/// Why a time range is refused, naming the parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinceError {
    #[error("{0}: {1}; expected a duration (24h) or an RFC 3339 time")]
    Invalid(String, DurationError),
    #[error("{0} {1:?} reaches before the earliest time driftwatch can represent")]
    TooEarly(String, String),
    #[error("{until} is before {since}")]
    Reversed { since: String, until: String },
}

/// "45 s", "14 min", "2 h 5 min", "3 d 4 h".
pub fn human_duration(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => match (s / 3600, (s % 3600) / 60) {
            (h, 0) => format!("{h} h"),
            (h, m) => format!("{h} h {m} min"),
        },
        s => match (s / 86_400, (s % 86_400) / 3600) {
            (d, 0) => format!("{d} d"),
            (d, h) => format!("{d} d {h} h"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_human_wrote_them() {
        assert_eq!(human_duration(45), "45 s");
        assert_eq!(human_duration(14 * 60 + 5), "14 min");
        assert_eq!(human_duration(2 * 3600 + 5 * 60), "2 h 5 min");
        assert_eq!(human_duration(3600), "1 h");
        assert_eq!(human_duration(3 * 86_400 + 4 * 3600), "3 d 4 h");
    }

    #[test]
    fn go_syntax_and_days() {
        let ok = |s: &str| parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("90s"), TimeDelta::seconds(90));
        assert_eq!(ok("1h30m"), TimeDelta::minutes(90));
        assert_eq!(ok("1.5h"), TimeDelta::minutes(90));
        assert_eq!(ok(".5s"), TimeDelta::milliseconds(500));
        assert_eq!(ok("250ms"), TimeDelta::milliseconds(250));
        assert_eq!(ok("1m30.25s"), TimeDelta::milliseconds(90_250));
        assert_eq!(ok("10us"), TimeDelta::microseconds(10));
        assert_eq!(ok("10µs"), TimeDelta::microseconds(10));
        assert_eq!(ok("7ns"), TimeDelta::nanoseconds(7));
        assert_eq!(ok("2d"), TimeDelta::days(2));
        assert_eq!(ok("-1.5h"), -TimeDelta::minutes(90));
        assert_eq!(ok("+5m"), TimeDelta::minutes(5));
        assert_eq!(ok("0"), TimeDelta::zero());
        assert_eq!(ok("1h0m0s"), TimeDelta::hours(1));
    }

    #[test]
    fn bad_text_is_refused_with_a_reason() {
        assert_eq!(parse("").unwrap_err(), DurationError::Empty);
        assert_eq!(parse("5").unwrap_err(), DurationError::MissingUnit("5".into()));
        assert_eq!(parse("5x").unwrap_err(), DurationError::UnknownUnit { text: "5x".into(), unit: "x".into() });
        assert_eq!(parse("h").unwrap_err().to_string(), "invalid duration \"h\"");
        assert!(parse("-").is_err());
        assert!(parse("1.h2").is_err());
        assert!(matches!(parse("99999999999999999999999999999999999h").unwrap_err(), DurationError::OutOfRange(_)));
        assert_eq!(parse("300000000h").unwrap(), TimeDelta::hours(300_000_000), "longer than i64 nanoseconds still parses");
        assert!(matches!(parse("9999999999999999h").unwrap_err(), DurationError::OutOfRange(_)), "past what a TimeDelta holds");
    }

    #[test]
    fn formats_back() {
        assert_eq!(format(TimeDelta::minutes(14)), "14m");
        assert_eq!(format(TimeDelta::zero()), "0s");
        assert_eq!(format(TimeDelta::seconds(3723)), "1h2m3s");
        assert_eq!(format(-TimeDelta::seconds(5)), "-5s");
    }
}
