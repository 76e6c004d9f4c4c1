//! Retry decisions as data, in one place: what an attempt's result means
//! ([`classify_status`]), what an entry becomes after it ([`verdict`]: delivered,
//! retried after a backoff, or dead), and the per-service limits (attempts, deadline,
//! timeout, rate).

use std::time::Duration;

use rand::Rng;
use serde::Deserialize;

pub use crate::source::ConfigDuration;

/// The result of one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Try again; `after` is what the receiver asked for (`Retry-After`).
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    /// Trying again cannot help (a 400, an unknown channel, a rejected address).
    Permanent(String),
}

impl Outcome {
    pub fn retry(reason: impl Into<String>) -> Outcome {
        Outcome::Retry { reason: reason.into(), after: None }
    }

    /// Whether trying again cannot help: what [`verdict`] dead-letters at once
    /// ([`Verdict::Refused`]).
    pub fn is_permanent(&self) -> bool {
        matches!(self, Outcome::Permanent(_))
    }

    /// Why it was not delivered (empty when it was).
    pub fn reason(&self) -> &str {
        match self {
            Outcome::Delivered => "",
            Outcome::Retry { reason, .. } | Outcome::Permanent(reason) => reason,
        }
    }
}

/// Statuses that refuse the request but that a rotation in progress explains: a token
/// or key being rotated (401, 403), a proxy or ingress routing to the wrong backend
/// for a moment (404). Recording them as handled lost the notification for good, so
/// they are retried with backoff like an outage, within the service's `retry`
/// bounds (`maxAttempts`, `deadline`), and dead-lettered (visible, re-drivable with
/// `driftwatch deliveries retry`) only when those run out.
pub const REFUSALS_RETRIED: &[u16] = &[401, 403, 404];

/// HTTP status -> outcome: 2xx delivered; 408, 429, 5xx and [`REFUSALS_RETRIED`]
/// retried (honouring `Retry-After`); any other status (400, 405, 410, 413, 422, ...:
/// re-sending the same request gets the same answer) permanent.
pub fn classify_status(status: u16, retry_after: Option<Duration>, body: &str) -> Outcome {
    let snippet: String = body.chars().take(300).collect();
    match status {
        200..=299 => Outcome::Delivered,
        408 | 429 | 500..=599 => Outcome::Retry { reason: format!("HTTP {status}: {snippet}"), after: retry_after },
        s if REFUSALS_RETRIED.contains(&s) => Outcome::Retry { reason: format!("HTTP {status}: {snippet}"), after: retry_after },
        _ => Outcome::Permanent(format!("HTTP {status}: {snippet}")),
    }
}

/// Whether an error (or one of its sources) is a TLS certificate the client did not
/// accept, found by its type (`rustls::Error`, also inside an `io::Error` as
/// tokio-rustls reports it), not by its text. Such an error is retried: during a
/// certificate rotation the receiver presents an expired or not-yet-trusted one for a
/// while.
pub fn is_certificate_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    // Bounded: a chain is a handful of errors deep.
    for _ in 0..32 {
        let Some(err) = cur else { return false };
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return matches!(t, rustls::Error::InvalidCertificate(_) | rustls::Error::InvalidCertRevocationList(_));
        }
        // An io::Error's `source` skips the error it wraps (hyper wraps tokio-rustls's
        // io::Error in another): look at the wrapped one itself.
        cur = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    false
}

/// `Retry-After` as seconds or an HTTP date; capped at an hour.
pub fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    let d = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?.with_timezone(&chrono::Utc);
        (at - now).to_std().unwrap_or(Duration::ZERO)
    };
    Some(d.min(Duration::from_secs(3600)))
}

/// Per-service retry settings (`retry:` in a service's config).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RetrySettings {
    /// Attempts in all, the first included; 10 when absent.
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
    /// Wait after the first failure; doubles each time (with full jitter); 1s.
    #[serde(default = "defaults::initial_backoff")]
    pub initial_backoff: ConfigDuration,
    /// Longest wait between attempts; 5m.
    #[serde(default = "defaults::max_backoff")]
    pub max_backoff: ConfigDuration,
    /// Give up on a notification this long after it was decided; 1h.
    #[serde(default = "defaults::deadline")]
    pub deadline: ConfigDuration,
}

/// Rate limit (`rateLimit:` in a service's config).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateSettings {
    pub per_second: f64,
    #[serde(default = "defaults::burst")]
    pub burst: u32,
}

mod defaults {
    use super::ConfigDuration;
    use std::time::Duration;
    pub fn max_attempts() -> u32 {
        10
    }
    pub fn initial_backoff() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(1))
    }
    pub fn max_backoff() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(300))
    }
    pub fn deadline() -> ConfigDuration {
        ConfigDuration(Duration::from_secs(3600))
    }
    pub fn burst() -> u32 {
        1
    }
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: defaults::max_attempts(),
            initial_backoff: defaults::initial_backoff(),
            max_backoff: defaults::max_backoff(),
            deadline: defaults::deadline(),
        }
    }
}

/// Delivery settings every service has, with defaults per kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeliverySettings {
    pub retry: RetrySettings,
    pub rate: RateSettings,
    /// One attempt's time limit.
    pub timeout: Duration,
    /// Deliveries in flight at once (never two for one Application and destination).
    pub concurrency: usize,
    /// While the destination is down, the wait before each probe: full jitter over a
    /// window that starts at the first value and doubles up to the second (250 ms,
    /// 1 s: a recovery is noticed within a second, and one request a second to a
    /// receiver that is down costs it and driftwatch nothing). Not a configuration key.
    pub probe_backoff: (Duration, Duration),
}

/// A notification this destination cannot take as rendered (an address that does not
/// parse, a state the API does not know): a permanent failure, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unsendable(pub String);

impl From<Unsendable> for Outcome {
    fn from(u: Unsendable) -> Outcome {
        Outcome::Permanent(u.0)
    }
}

impl DeliverySettings {
    /// The defaults with this rate limit and concurrency (a kind's own come from the
    /// registry, `deliver::kinds::default_settings`).
    pub fn with_limits(per_second: f64, burst: u32, concurrency: usize) -> DeliverySettings {
        DeliverySettings {
            retry: RetrySettings::default(),
            rate: RateSettings { per_second, burst },
            timeout: Duration::from_secs(10),
            concurrency,
            probe_backoff: (Duration::from_millis(250), Duration::from_secs(1)),
        }
    }

    /// Wait before the next probe of a destination that is down, after `failed`
    /// failed probes: full jitter over the [`DeliverySettings::probe_backoff`] window,
    /// at least `floor` (the receiver's `Retry-After`).
    pub fn probe_wait(&self, failed: u32, floor: Option<Duration>) -> Duration {
        jittered(self.probe_backoff.0, self.probe_backoff.1, failed.max(1)).max(floor.unwrap_or(Duration::ZERO))
    }

    /// Wait before attempt `attempt + 1` (attempt counts from 1): full jitter over an
    /// exponentially growing window, at least `floor` (the receiver's `Retry-After`).
    pub fn backoff(&self, attempt: u32, floor: Option<Duration>) -> Duration {
        jittered(self.retry.initial_backoff.0, self.retry.max_backoff.0, attempt).max(floor.unwrap_or(Duration::ZERO))
    }
}

/// A wait drawn from the upper half of a window that starts at `base` and doubles per
/// `attempt` (from 1) up to `cap`.
fn jittered(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let (base, cap) = (base.as_millis() as f64, cap.as_millis() as f64);
    let window = (base * 2f64.powi(attempt.saturating_sub(1).min(30) as i32)).min(cap).max(1.0);
    Duration::from_millis(rand::rng().random_range(window / 2.0..=window) as u64)
}

/// What one entry of a finished attempt becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Attempt number `attempt` failed; the next goes out `wait` later, at `next_ms`.
    Retry {
        attempt: u32,
        wait: Duration,
        next_ms: u64,
    },
    /// Out of attempts (`retry.maxAttempts`) or of time (`retry.deadline`): dead.
    GaveUp {
        attempts: u32,
    },
    /// Refused for good (a 400, an unknown channel): dead at once.
    Refused,
}

/// The retry-or-dead-letter decision for an entry that had `attempts_before` attempts
/// and was queued at `enqueued_ms`, given its latest `outcome`, at `now_ms`: the one
/// place it is made (the worker counts, logs and writes what this says).
pub fn verdict(outcome: &Outcome, attempts_before: u32, enqueued_ms: u64, s: &DeliverySettings, now_ms: u64) -> Verdict {
    match outcome {
        Outcome::Delivered => Verdict::Delivered,
        Outcome::Permanent(_) => Verdict::Refused,
        Outcome::Retry { after, .. } => {
            let attempts = attempts_before.saturating_add(1);
            let age = Duration::from_millis(now_ms.saturating_sub(enqueued_ms));
            if attempts >= s.retry.max_attempts || age >= s.retry.deadline.0 {
                return Verdict::GaveUp { attempts };
            }
            let wait = s.backoff(attempts, *after);
            Verdict::Retry {
                attempt: attempts,
                wait,
                next_ms: now_ms.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX / 2)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict: delivered, refused at once, retried with a backoff no shorter than
    /// `Retry-After`, and given up at the last attempt or past the deadline.
    #[test]
    fn the_verdict_retries_until_the_attempts_or_the_deadline_run_out() {
        let s = DeliverySettings::with_limits(10.0, 20, 16);
        let (max, deadline) = (s.retry.max_attempts, s.retry.deadline.0);
        let retry = Outcome::Retry { reason: "503".into(), after: Some(Duration::from_secs(7)) };
        assert_eq!(verdict(&Outcome::Delivered, 3, 0, &s, 1_000), Verdict::Delivered);
        assert_eq!(verdict(&Outcome::Permanent("400".into()), 0, 0, &s, 1_000), Verdict::Refused);
        match verdict(&retry, 0, 0, &s, 1_000) {
            Verdict::Retry { attempt, wait, next_ms } => {
                assert_eq!(attempt, 1);
                assert!(wait >= Duration::from_secs(7), "Retry-After is a floor: {wait:?}");
                assert_eq!(next_ms, 1_000 + wait.as_millis() as u64);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(verdict(&retry, max - 1, 0, &s, 1_000), Verdict::GaveUp { attempts: max });
        let past = u64::try_from(deadline.as_millis()).unwrap() + 1;
        assert_eq!(verdict(&retry, 0, 0, &s, past), Verdict::GaveUp { attempts: 1 });
    }
    use chrono::TimeZone;

    #[test]
    fn status_classification() {
        assert_eq!(classify_status(200, None, ""), Outcome::Delivered);
        assert_eq!(classify_status(202, None, ""), Outcome::Delivered);
        for s in [408, 429, 500, 502, 503] {
            assert!(matches!(classify_status(s, None, "x"), Outcome::Retry { .. }), "{s}");
        }
        for s in [400, 405, 410, 413, 422] {
            assert!(matches!(classify_status(s, None, "x"), Outcome::Permanent(_)), "{s}");
        }
        // A token or a route being rotated: retried, not recorded as handled.
        for s in [401, 403, 404] {
            assert!(matches!(classify_status(s, None, "x"), Outcome::Retry { .. }), "{s}");
        }
        assert_eq!(
            classify_status(429, Some(Duration::from_secs(2)), "slow down"),
            Outcome::Retry { reason: "HTTP 429: slow down".into(), after: Some(Duration::from_secs(2)) }
        );
    }

    #[test]
    fn certificate_errors_are_found_by_type_not_text() {
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        assert!(is_certificate_error(&cert));
        // As tokio-rustls reports it: an io::Error around the rustls error.
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, cert);
        assert!(is_certificate_error(&io));
        // Text alone does not make one.
        let text = std::io::Error::other("the word certificate in a message");
        assert!(!is_certificate_error(&text));
        assert!(!is_certificate_error(&rustls::Error::DecryptError));
    }

    #[test]
    fn retry_after_forms() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Sun, 01 Mar 2026 12:00:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("999999", now), Some(Duration::from_secs(3600)));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn backoff_grows_is_capped_and_honours_retry_after() {
        let s = DeliverySettings::with_limits(10.0, 20, 16);
        for _ in 0..50 {
            let first = s.backoff(1, None);
            assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1), "{first:?}");
            let tenth = s.backoff(10, None);
            assert!(tenth >= Duration::from_secs(150) && tenth <= Duration::from_secs(300), "{tenth:?}");
            assert!(s.backoff(1, Some(Duration::from_secs(30))) >= Duration::from_secs(30));
        }
    }
}
