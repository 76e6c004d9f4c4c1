//! Google's access tokens for the Chronicle API, fetched when first needed, kept, and
//! fetched again before they expire or at once after the API answered 401
//! ([`crate::deliver::oauth`]). Two credentials:
//!
//! - A service account key (the JSON key file: `client_email`, `private_key`,
//!   `private_key_id`, `token_uri`): a JWT it signs (RS256; `iss` the account,
//!   `scope` the Chronicle API's, `aud` the token URI, `iat` now, `exp` an hour on,
//!   the most Google takes) exchanged at `token_uri` with the JWT bearer grant
//!   (RFC 7523: `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`,
//!   `assertion=<jwt>`). Google's "Using OAuth 2.0 for Server to Server Applications"
//!   describes the claims and the exchange.
//! - The metadata server (GKE Workload Identity, a Compute Engine VM's attached
//!   account): `GET /computeMetadata/v1/instance/service-accounts/default/token` with
//!   `Metadata-Flavor: Google`, which answers a token of the workload's own service
//!   account (Compute Engine's "Authenticate workloads" documents the request; GKE's
//!   metadata server serves the same API to a pod).
//!
//! Both answer `{"access_token", "expires_in", "token_type"}`. The scope is
//! `https://www.googleapis.com/auth/cloud-platform`, which `logs.import` requires.

use std::time::Duration;

use ring::signature::RsaKeyPair;
use serde::Deserialize;

use crate::deliver::kind::BuildError;
use crate::deliver::outcome::Outcome;
use crate::deliver::{http, jwt, oauth};
use crate::secret::Secret;

/// The OAuth scope `logs.import` requires.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's token endpoint, when a key file does not name one.
const TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The JWT bearer grant (RFC 7523 §2.1).
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// How long a signed assertion is valid: an hour, the most Google accepts.
const ASSERTION_LIFETIME: i64 = 3600;
/// The metadata server, when `metadataUrl` does not name another.
pub const METADATA_URL: &str = "http://metadata.google.internal";
/// What a token request's failure says it was.
const WHO: &str = "Google token";

/// The fields of a service account key file read here (it holds more).
#[derive(Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: String,
    private_key: String,
    private_key_id: Option<String>,
    token_uri: Option<String>,
}

/// A service account key, read from its key file.
pub struct ServiceAccount {
    email: String,
    key: RsaKeyPair,
    key_id: Option<String>,
    token_uri: String,
}

impl ServiceAccount {
    /// The account of a key file (`json`, the secret's value). Errors say what is
    /// wrong and where, never any of the file's text.
    pub fn parse(json: &Secret) -> Result<ServiceAccount, BuildError> {
        let bad = |m: String| BuildError::Setting(format!("credentials: {m}"));
        let file: KeyFile = serde_json::from_str(json.expose()).map_err(|e| {
            // serde's message can quote a value: only a missing field's is said whole.
            let what = e.to_string();
            match what.starts_with("missing field") {
                true => bad(format!("not a service account key file: {what}")),
                false => bad(format!("not a service account key file ({:?} error at line {}, column {})", e.classify(), e.line(), e.column())),
            }
        })?;
        if let Some(kind) = file.kind.as_deref().filter(|k| *k != "service_account") {
            return Err(bad(format!(
                "a {kind:?} credential is not a service account key (use workloadIdentity for the metadata server's token)"
            )));
        }
        let token_uri = file.token_uri.unwrap_or_else(|| TOKEN_URI.to_string());
        if let Some(why) = http::not_https(&token_uri) {
            return Err(bad(format!("the key file's token_uri {why}")));
        }
        let key = jwt::rsa_key(&file.private_key, "credentials: the key file's private_key")?;
        Ok(ServiceAccount { email: file.client_email, key, key_id: file.private_key_id, token_uri })
    }

    /// The assertion that asks for a token at `now` (unix seconds).
    fn assertion(&self, now: i64) -> Result<String, jwt::SigningFailed> {
        let claims = serde_json::json!({"iss": self.email, "scope": SCOPE, "aud": self.token_uri, "iat": now,
            "exp": now + ASSERTION_LIFETIME});
        jwt::rs256(&self.key, self.key_id.as_deref(), &claims)
    }
}

/// What proves the service's identity to Google.
pub enum Credential {
    Key(Box<ServiceAccount>),
    /// The metadata server's token URL.
    MetadataServer(String),
}

impl Credential {
    /// The metadata server at `base` (`metadataUrl`).
    pub fn metadata_server(base: &str) -> Credential {
        Credential::MetadataServer(format!(
            "{}/computeMetadata/v1/instance/service-accounts/default/token?scopes={SCOPE}",
            base.trim_end_matches('/')
        ))
    }
}

/// Where tokens come from, and the one kept.
pub struct Tokens {
    http: reqwest::Client,
    credential: Credential,
    kept: oauth::Kept,
}

impl Tokens {
    pub fn new(http: reqwest::Client, credential: Credential) -> Tokens {
        Tokens { http, credential, kept: oauth::Kept::default() }
    }

    /// Sends `req` with a token ([`oauth::Kept::send`]).
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Result<(Outcome, Option<String>), Outcome> {
        self.kept.send(req, || self.fetch()).await
    }

    /// The kept token as it would be `by` later.
    #[cfg(test)]
    pub async fn age(&self, by: Duration) {
        self.kept.age(by).await
    }

    /// One token request.
    async fn fetch(&self) -> Result<(Secret, Duration), Outcome> {
        match &self.credential {
            Credential::Key(account) => {
                let assertion = account
                    .assertion(chrono::Utc::now().timestamp())
                    .map_err(|e| Outcome::retry(format!("{WHO}: {e}")))?;
                let form = [("grant_type", JWT_BEARER), ("assertion", assertion.as_str())];
                oauth::form_request(&self.http, &account.token_uri, &form, WHO).await
            }
            Credential::MetadataServer(url) => oauth::request(self.http.get(url).header("Metadata-Flavor", "Google"), WHO).await,
        }
    }
}
