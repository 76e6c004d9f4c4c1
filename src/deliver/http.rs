//! The one HTTP client every HTTP destination shares (rustls with the ring provider),
//! and the helper that turns a response into an [`Outcome`].

use std::time::Duration;

use super::outcome::{Outcome, classify_status, parse_retry_after};
use crate::secret::Secret;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("CA file {path}: {message}")]
    Ca { path: String, message: String },
    #[error("building the HTTP client: {0}")]
    Build(String),
}

/// Builds an HTTP client. The shared one has no extra settings; a service that needs
/// its own CA or (explicitly) no verification gets its own.
pub fn client(ca_file: Option<&str>, insecure_skip_verify: bool) -> Result<reqwest::Client, ClientError> {
    crate::tls::init_crypto();
    let mut b = reqwest::Client::builder()
        .user_agent(concat!("driftwatch/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(60))
        .redirect(redirect_policy());
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| ClientError::Ca { path: path.into(), message: e.to_string() })?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ClientError::Ca { path: path.into(), message: e.to_string() })?;
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    if insecure_skip_verify {
        b = b.danger_accept_invalid_certs(true);
    }
    b.build().map_err(|e| ClientError::Build(e.to_string()))
}

/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 3;

/// Redirects are followed only to the same origin (scheme, host and port) as the
/// request: the configured headers of a service (an API key, a bearer token, a
/// signature) must not reach another host. reqwest drops only `Authorization`,
/// `Cookie` and their kind on a cross-host redirect, not `X-Api-Key` or a webhook's
/// own headers. A redirect elsewhere is not followed: its 3xx answer is the outcome
/// (permanent: the configuration names the wrong URL).
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else {
            attempt.follow()
        }
    })
}

/// The shared client, unless the service needs its own CA or (explicitly) no
/// certificate verification.
pub fn client_for(
    shared: &reqwest::Client,
    ca_file: Option<&str>,
    insecure_skip_verify: bool,
) -> Result<reqwest::Client, super::kind::BuildError> {
    if ca_file.is_some() || insecure_skip_verify {
        client(ca_file, insecure_skip_verify).map_err(|e| super::kind::BuildError::Tls(e.to_string()))
    } else {
        Ok(shared.clone())
    }
}

/// Why `url` may not carry a token or a credential: not a URL, or `http://` to a host
/// that is not loopback (`None`: it may; loopback is for tests and port-forwards).
pub fn not_https(url: &str) -> Option<String> {
    let parsed = match reqwest::Url::parse(url) {
        Ok(u) => u,
        Err(e) => return Some(format!("is not a URL: {e}")),
    };
    let host = parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => None,
        "http" if loopback => None,
        other => Some(format!("must be https:// (it carries a token), not {other}://")),
    }
}

/// Sends a request and classifies the answer. Transport errors (refused, reset, TLS
/// handshake, a certificate not accepted, timeout) are retried.
pub async fn send(req: reqwest::RequestBuilder) -> (Outcome, Option<String>) {
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let retry_after = retry_after(&resp);
            let body = read_body(resp).await;
            (classify_status(status, retry_after, &body), Some(body))
        }
        Err(e) => (transport_error(e), None),
    }
}

/// How long a response's `Retry-After` (seconds or an HTTP date) asks to wait, if it does.
pub fn retry_after(resp: &reqwest::Response) -> Option<std::time::Duration> {
    let value = resp.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, chrono::Utc::now())
}

/// At most this much of a receiver's response body is read (it only feeds error
/// messages and Slack's `ok`/`ts`): a receiver cannot make driftwatch buffer more.
pub const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// A response's body, cut at [`MAX_RESPONSE_BODY`] bytes (the rest is not read), as
/// text; a body that breaks off is kept as far as it came.
pub async fn read_body(resp: reqwest::Response) -> String {
    String::from_utf8_lossy(&read_bytes(resp).await).into_owned()
}

/// [`read_body`] as the bytes sent (a protobuf answer).
pub async fn read_bytes(mut resp: reqwest::Response) -> Vec<u8> {
    let mut buf: Vec<u8> = Vec::new();
    while buf.len() < MAX_RESPONSE_BODY {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_RESPONSE_BODY - buf.len();
                buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    buf
}

/// A transport error as an outcome: always retried (refused, reset, timed out, or a
/// certificate not accepted, which a rotation explains: see
/// [`super::outcome::is_certificate_error`]). The URL is left out: it may carry a
/// secret (a Slack webhook URL is one).
pub fn transport_error(e: reqwest::Error) -> Outcome {
    let e = e.without_url();
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    if super::outcome::is_certificate_error(&e) {
        return Outcome::retry(format!("TLS certificate not accepted: {msg}"));
    }
    Outcome::retry(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers every request with `answer`, and records each request's head.
    async fn raw_server(answer: String) -> (std::net::SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                log.lock().unwrap().push(String::from_utf8_lossy(&buf[..n]).to_lowercase());
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        (addr, seen)
    }

    /// A receiver that redirects to another host does not get the service's secret
    /// headers sent there: the redirect is not followed, and its answer is the outcome.
    /// One to the same origin is followed.
    #[tokio::test]
    async fn a_redirect_to_another_host_does_not_carry_the_secret_headers() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".to_string();
        let (elsewhere, seen_elsewhere) = raw_server(ok.clone()).await;
        let to = |addr: std::net::SocketAddr, path: &str| {
            format!("HTTP/1.1 302 Found\r\nlocation: http://{addr}{path}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        };
        let (redirecting, seen_first) = raw_server(to(elsewhere, "/steal")).await;
        let c = client(None, false).unwrap();
        let (outcome, _) = send(c.post(format!("http://{redirecting}/hook")).header("X-Api-Key", "SECRET-KEY").body("{}")).await;
        assert!(matches!(&outcome, Outcome::Permanent(m) if m.starts_with("HTTP 302")), "{outcome:?}");
        assert_eq!(seen_first.lock().unwrap().len(), 1);
        assert!(seen_elsewhere.lock().unwrap().is_empty(), "nothing reached the other host");

        // The same origin: followed (a path moved on the same receiver).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (moved, ok2) = (to(addr, "/new"), ok.clone());
        tokio::spawn(async move {
            for answer in [moved, ok2] {
                let Ok((mut s, _)) = listener.accept().await else { return };
                let mut buf = vec![0u8; 8192];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer.as_bytes()).await;
            }
        });
        let (outcome, _) = send(c.get(format!("http://{addr}/old")).header("X-Api-Key", "SECRET-KEY")).await;
        assert_eq!(outcome, Outcome::Delivered);
    }

    /// A receiver answering with 10 MB: only the first 64 KiB are read.
    #[tokio::test]
    async fn a_huge_response_body_is_read_only_up_to_the_cap() {
        crate::tls::init_crypto();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = s.read(&mut request).await;
            let _ = s.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 10485760\r\n\r\n").await;
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..160 {
                if s.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        });
        let (outcome, body) = send(client(None, false).unwrap().get(format!("http://{addr}/"))).await;
        assert!(!matches!(outcome, Outcome::Delivered), "{outcome:?}");
        assert_eq!(body.unwrap().len(), MAX_RESPONSE_BODY);
    }
}

/// An HTTP request, before any client sees it (the webhook's, the signed webhook's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub url: String,
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: String,
}

/// HTTP basic authentication in a service's settings (webhook, Alertmanager).
#[derive(Debug, Clone, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    /// A `$secret` reference.
    pub password: String,
}

/// How a client authenticates its requests (`Authorization`).
pub enum Auth {
    None,
    Basic(Secret, Secret),
    /// `Authorization: <scheme> <secret>` (`Bearer`, Elasticsearch's `ApiKey`).
    Scheme(&'static str, Secret),
}

impl Auth {
    pub fn apply(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::None => req,
            Auth::Basic(u, p) => req.basic_auth(u.expose(), Some(p.expose())),
            Auth::Scheme(scheme, s) => req.header(reqwest::header::AUTHORIZATION, format!("{scheme} {}", s.expose())),
        }
    }
}

/// The header receivers de-duplicate by (the IETF draft's name, Stripe's and many
/// others'): the notification's outbox identity, the same for every attempt at it.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// Adds `Idempotency-Key` unless the configuration or the template set one (in any
/// case of the name).
pub fn add_idempotency_key(headers: &mut std::collections::BTreeMap<String, String>, n: &crate::model::Notification) {
    if let Some(key) = &n.idempotency_key
        && !headers.keys().any(|k| k.eq_ignore_ascii_case(IDEMPOTENCY_KEY))
    {
        headers.insert(IDEMPOTENCY_KEY.to_string(), key.clone());
    }
}
