//! Access tokens from an OAuth 2.0 token endpoint, for the kinds that send with one
//! (Sentinel's Entra ID, Google Security Operations' Google token endpoint or metadata
//! server): one token request turned into a token and how long it lasts
//! ([`request`], [`form_request`]), and the token kept between calls and fetched again
//! before it expires ([`Kept`]). A token endpoint's refusal is the notifications'
//! retry, never a dead letter.

use std::future::Future;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::http;
use super::outcome::{Outcome, classify_status};
use crate::secret::Secret;

/// A token is fetched again this long before it expires; one that lasts less than
/// twice this, at half its life ([`refresh_in`]).
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// What a token endpoint says a token lasts is taken within these bounds.
const MIN_LIFETIME: Duration = Duration::from_secs(60);
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// A token whose answer does not say how long it lasts is taken to last an hour (what
/// Entra ID and Google issue).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// RFC 6749 §5.1's successful answer, the fields read of it.
#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// The token a client sends while it is fresh, and when to fetch another. Owned by
/// the client; the lock is held across a fetch, so concurrent calls wait for the one
/// token request instead of each making their own.
#[derive(Default)]
pub struct Kept(tokio::sync::Mutex<Option<(Secret, Instant)>>);

impl Kept {
    /// The kept token while it is fresh, else the one `fetch` gets (then kept until
    /// [`refresh_in`] of its lifetime has passed). `Err` is the outcome of the
    /// notifications that needed it.
    pub async fn token<F, Fut>(&self, fetch: F) -> Result<Secret, Outcome>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(Secret, Duration), Outcome>>,
    {
        let mut kept = self.0.lock().await;
        if let Some((token, refresh_at)) = kept.as_ref()
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = fetch().await?;
        *kept = Some((token.clone(), Instant::now() + refresh_in(lifetime)));
        Ok(token)
    }

    /// Sends `req` with the token ([`Kept::token`]) as its bearer: the answer
    /// ([`http::send`]), or `Err` the token's failure (the service's, not the request's:
    /// a kind never splits a batch for it). A `401` forgets the token, so the retry
    /// fetches another.
    pub async fn send<F, Fut>(&self, req: reqwest::RequestBuilder, fetch: F) -> Result<(Outcome, Option<String>), Outcome>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(Secret, Duration), Outcome>>,
    {
        let token = self.token(fetch).await?;
        // `bearer_auth` marks the header sensitive (never indexed, never printed).
        let (outcome, body) = http::send(req.bearer_auth(token.expose())).await;
        if outcome.reason().starts_with("HTTP 401") {
            self.forget(&token).await;
        }
        Ok((outcome, body))
    }

    /// Forgets the kept token if it is still `refused` (the API answered 401 to it:
    /// revoked, or expired early); a newer one another call fetched meanwhile stays.
    pub async fn forget(&self, refused: &Secret) {
        let mut kept = self.0.lock().await;
        if kept.as_ref().is_some_and(|(t, _)| t == refused) {
            *kept = None;
        }
    }

    /// The kept token as it would be `by` later (tests of the refresh, which cannot
    /// wait an hour).
    #[cfg(test)]
    pub async fn age(&self, by: Duration) {
        if let Some((_, refresh_at)) = self.0.lock().await.as_mut() {
            *refresh_at = refresh_at.checked_sub(by).unwrap_or_else(Instant::now);
        }
    }
}

/// How long a token of `lifetime` is used: until [`REFRESH_MARGIN`] before it
/// expires, or half its life if that is later (a short-lived token is not fetched
/// again at once); always some time before it expires.
pub fn refresh_in(lifetime: Duration) -> Duration {
    lifetime.saturating_sub(REFRESH_MARGIN).max(lifetime / 2)
}

/// A token request posting `fields` as a form (`application/x-www-form-urlencoded`)
/// to `url`: [`request`].
pub async fn form_request(http: &reqwest::Client, url: &str, fields: &[(&str, &str)], who: &str) -> Result<(Secret, Duration), Outcome> {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={}", form_encode(v))).collect();
    let req = http.post(url).header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(body.join("&"));
    request(req, who).await
}

/// One token request: the access token of its answer and how long it lasts (within
/// bounds). Any failure is retried and names `who` ("Entra ID token: HTTP 400: …"):
/// a token endpoint answers a credential being rotated, an expired assertion or an
/// identity not yet granted with a `400` or `401`, which is the service's state, not
/// the notifications' (they wait, within `retry`). Its error bodies
/// (`invalid_client`, `invalid_grant`) name no secret.
pub async fn request(req: reqwest::RequestBuilder, who: &str) -> Result<(Secret, Duration), Outcome> {
    let resp = req.send().await.map_err(|e| failed(who, http::transport_error(e)))?;
    let status = resp.status().as_u16();
    let retry_after = http::retry_after(&resp);
    let body = http::read_body(resp).await;
    if !(200..300).contains(&status) {
        return Err(failed(who, classify_status(status, retry_after, &body)));
    }
    let parsed: TokenResponse = serde_json::from_str(&body).map_err(|e| Outcome::retry(format!("{who}: not a token response: {e}")))?;
    if parsed.access_token.is_empty() {
        return Err(Outcome::retry(format!("{who}: the response holds no access_token")));
    }
    let lifetime = parsed.expires_in.map_or(DEFAULT_LIFETIME, Duration::from_secs).clamp(MIN_LIFETIME, MAX_LIFETIME);
    Ok((Secret::new(parsed.access_token), lifetime))
}

/// A token request's failure as the notifications' outcome, saying whose token, and
/// always retried.
fn failed(who: &str, o: Outcome) -> Outcome {
    match o {
        Outcome::Retry { reason, after } => Outcome::Retry { reason: format!("{who}: {reason}"), after },
        Outcome::Permanent(reason) => Outcome::retry(format!("{who}: {reason}")),
        Outcome::Delivered => Outcome::Delivered,
    }
}

/// `v` for an `application/x-www-form-urlencoded` body: unreserved characters as they
/// are, every other byte `%XX` (reqwest's form support is a feature left out).
fn form_encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens are used until five minutes before they expire, a short-lived one until
    /// half its life: never at or past expiry.
    #[test]
    fn a_token_is_used_until_some_time_before_it_expires() {
        let secs = |s: u64| Duration::from_secs(s);
        assert_eq!(refresh_in(secs(3600)), secs(3300));
        assert_eq!(refresh_in(secs(600)), secs(300));
        assert_eq!(refresh_in(secs(60)), secs(30));
        for l in [60, 61, 299, 300, 301, 599, 601, 86_400] {
            assert!(refresh_in(secs(l)) < secs(l), "{l}");
        }
    }

    /// The kept token is reused until its refresh time, then fetched again; a 401's
    /// forget drops only the token it refused.
    #[tokio::test]
    async fn the_kept_token_is_reused_then_fetched_again() {
        let kept = Kept::default();
        let fetches = std::sync::atomic::AtomicUsize::new(0);
        let fetch = || async {
            let n = fetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            Ok((Secret::new(format!("token-{n}")), Duration::from_secs(3600)))
        };
        assert_eq!(kept.token(fetch).await.unwrap().expose(), "token-1");
        assert_eq!(kept.token(fetch).await.unwrap().expose(), "token-1");
        kept.age(Duration::from_secs(3299)).await;
        assert_eq!(kept.token(fetch).await.unwrap().expose(), "token-1", "still five minutes and more before it expires");
        kept.age(Duration::from_secs(2)).await;
        assert_eq!(kept.token(fetch).await.unwrap().expose(), "token-2", "fetched again before it expires");
        kept.forget(&Secret::new("token-1".into())).await;
        assert_eq!(kept.token(fetch).await.unwrap().expose(), "token-2", "a stale 401 does not drop the newer token");
        kept.forget(&Secret::new("token-2".into())).await;
        assert_eq!(kept.token(fetch).await.unwrap().expose(), "token-3");
        let refused = kept.token(|| async { Err(Outcome::retry("down")) });
        assert_eq!(refused.await.unwrap().expose(), "token-3", "a fresh token is not fetched again");
    }

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(form_encode("a b+c/=é~"), "a%20b%2Bc%2F%3D%C3%A9~");
    }
}
