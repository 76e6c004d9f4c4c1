//! Entra ID's client-credentials flow for the Logs Ingestion API: a token fetched when
//! first needed, kept, and fetched again before it expires or at once after the API
//! answered 401 ([`crate::deliver::oauth`]). The credential is the application's client
//! secret, or a federated token read from a file at each request (workload identity).

use std::time::Duration;

use crate::deliver::oauth;
use crate::deliver::outcome::Outcome;
use crate::secret::Secret;

/// A federated token file is read up to this many bytes.
const MAX_ASSERTION_BYTES: u64 = 64 * 1024;
/// `client_assertion_type` for a federated token (RFC 7523).
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// What a token request's failure says it was.
const WHO: &str = "Entra ID token";

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
    kept: oauth::Kept,
}

impl Tokens {
    pub fn new(http: reqwest::Client, authority: &str, tenant: &str, client_id: &str, scope: &str, credential: Credential) -> Tokens {
        Tokens {
            http,
            url: format!("{}/{tenant}/oauth2/v2.0/token", authority.trim_end_matches('/')),
            client_id: client_id.to_string(),
            scope: scope.to_string(),
            credential,
            kept: oauth::Kept::default(),
        }
    }

    /// Sends `req` with a token ([`oauth::Kept::send`]).
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Result<(Outcome, Option<String>), Outcome> {
        self.kept.send(req, || self.fetch()).await
    }

    /// One token request.
    async fn fetch(&self) -> Result<(Secret, Duration), Outcome> {
        let mut form = vec![("grant_type", "client_credentials"), ("client_id", &self.client_id), ("scope", &self.scope)];
        let assertion;
        match &self.credential {
            Credential::Secret(s) => form.push(("client_secret", s.expose())),
            Credential::FederatedTokenFile(path) => {
                assertion = read_assertion(path).await?;
                form.push(("client_assertion_type", JWT_BEARER));
                form.push(("client_assertion", &assertion));
            }
        }
        oauth::form_request(&self.http, &self.url, &form, WHO).await
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
