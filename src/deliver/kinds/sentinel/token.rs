//! Entra ID's client-credentials flow for the Logs Ingestion API: a token fetched when
//! first needed, kept, and fetched again before it expires (or at once after the API
//! answered 401). The credential is the application's client secret, or a federated
//! token read from a file at each request (workload identity).

use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::secret::Secret;

/// A token is fetched again this long before it expires; one that lasts less than
/// twice this, at half its life ([`refresh_in`]).
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// What Entra ID says a token lasts is taken within these bounds.
const MIN_LIFETIME: Duration = Duration::from_secs(60);
const MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// A federated token file is read up to this many bytes.
const MAX_ASSERTION_BYTES: u64 = 64 * 1024;
/// `client_assertion_type` for a federated token (RFC 7523).
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// What proves the application's identity to Entra ID.
pub enum Credential {
    Secret(Secret),
    FederatedTokenFile(String),
}

/// Where tokens come from, and the one kept.
pub struct Tokens {
    http: reqwest::Client,
    url: String,
    client_id: String,
    scope: String,
    credential: Credential,
    kept: tokio::sync::Mutex<Option<(Secret, Instant)>>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

impl Tokens {
    pub fn new(http: reqwest::Client, authority: &str, tenant: &str, client_id: &str, scope: &str, credential: Credential) -> Tokens {
        Tokens {
            http,
            url: format!("{}/{tenant}/oauth2/v2.0/token", authority.trim_end_matches('/')),
            client_id: client_id.to_string(),
            scope: scope.to_string(),
            credential,
            kept: tokio::sync::Mutex::new(None),
        }
    }

    /// The token to send: the kept one while it is fresh, else a new one. `Err` is the
    /// outcome of the notifications that needed it (retried as any HTTP answer is).
    pub async fn token(&self) -> Result<Secret, Outcome> {
        let mut kept = self.kept.lock().await;
        if let Some((token, refresh_at)) = kept.as_ref()
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        let (token, lifetime) = self.fetch().await?;
        *kept = Some((token.clone(), Instant::now() + refresh_in(lifetime)));
        Ok(token)
    }

    /// Forgets the kept token if it is still `refused` (the API answered 401 to it:
    /// revoked, or expired early); a newer one another call fetched meanwhile stays.
    pub async fn forget(&self, refused: &Secret) {
        let mut kept = self.kept.lock().await;
        if kept.as_ref().is_some_and(|(t, _)| t == refused) {
            *kept = None;
        }
    }

    /// One token request.
    async fn fetch(&self) -> Result<(Secret, Duration), Outcome> {
        let mut form = vec![
            ("grant_type", "client_credentials".to_string()),
            ("client_id", self.client_id.clone()),
            ("scope", self.scope.clone()),
        ];
        match &self.credential {
            Credential::Secret(s) => form.push(("client_secret", s.expose().to_string())),
            Credential::FederatedTokenFile(path) => {
                form.push(("client_assertion_type", JWT_BEARER.to_string()));
                form.push(("client_assertion", read_assertion(path).await?));
            }
        }
        let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={}", form_encode(v))).collect();
        let req = self.http.post(&self.url).header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded").body(body.join("&"));
        let resp = req.send().await.map_err(|e| token_failed(http::transport_error(e)))?;
        let status = resp.status().as_u16();
        let retry_after = http::retry_after(&resp);
        let body = http::read_body(resp).await;
        if !(200..300).contains(&status) {
            // Entra ID's error (`invalid_client`, `AADSTS…`) names no secret.
            return Err(token_failed(crate::deliver::outcome::classify_status(status, retry_after, &body)));
        }
        let parsed: TokenResponse =
            serde_json::from_str(&body).map_err(|e| Outcome::retry(format!("Entra ID token: not a token response: {e}")))?;
        if parsed.access_token.is_empty() {
            return Err(Outcome::retry("Entra ID token: the response holds no access_token"));
        }
        let lifetime = Duration::from_secs(parsed.expires_in.unwrap_or(3600)).clamp(MIN_LIFETIME, MAX_LIFETIME);
        Ok((Secret::new(parsed.access_token), lifetime))
    }
}

/// The federated token in `path`, bounded; a file that cannot be read is retried (the
/// kubelet rotates it).
async fn read_assertion(path: &str) -> Result<String, Outcome> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path).await.map_err(|e| Outcome::retry(format!("federated token file {path}: {e}")))?;
    let mut text = String::new();
    file.take(MAX_ASSERTION_BYTES)
        .read_to_string(&mut text)
        .await
        .map_err(|e| Outcome::retry(format!("federated token file {path}: {e}")))?;
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err(Outcome::retry(format!("federated token file {path} is empty")));
    }
    Ok(text)
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

/// How long a token of `lifetime` is used: until [`REFRESH_MARGIN`] before it
/// expires, or half its life if that is later (a short-lived token is not fetched
/// again at once); always some time before it expires.
pub fn refresh_in(lifetime: Duration) -> Duration {
    lifetime.saturating_sub(REFRESH_MARGIN).max(lifetime / 2)
}

/// A token request's failure as the notifications' outcome, saying it was the token,
/// and always retried: Entra ID answers a credential being rotated, an expired
/// federated assertion or a federation not yet set up with a `400` or `401`, which
/// is the service's state, not the notifications' (they wait, within `retry`).
fn token_failed(o: Outcome) -> Outcome {
    match o {
        Outcome::Retry { reason, after } => Outcome::Retry { reason: format!("Entra ID token: {reason}"), after },
        Outcome::Permanent(reason) => Outcome::retry(format!("Entra ID token: {reason}")),
        other => other,
    }
}
