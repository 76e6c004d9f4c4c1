//! The one HTTP client every HTTP destination shares (rustls with the ring provider),
//! and the helper that turns a response into an [`Outcome`].

use std::time::Duration;

use super::outcome::{Outcome, classify_status, parse_retry_after};

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
        .redirect(reqwest::redirect::Policy::limited(3));
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

/// The shared client, unless the service needs its own CA or (explicitly) no
/// certificate verification.
pub fn client_for(shared: &reqwest::Client, ca_file: Option<&str>, insecure_skip_verify: bool) -> Result<reqwest::Client, String> {
    if ca_file.is_some() || insecure_skip_verify {
        client(ca_file, insecure_skip_verify).map_err(|e| e.to_string())
    } else {
        Ok(shared.clone())
    }
}

/// Sends a request and classifies the answer. Transport errors (refused, reset, TLS
/// handshake, a certificate not accepted, timeout) are retried.
pub async fn send(req: reqwest::RequestBuilder) -> (Outcome, Option<String>) {
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, chrono::Utc::now()));
            let body = read_body(resp).await;
            (classify_status(status, retry_after, &body), Some(body))
        }
        Err(e) => (transport_error(e), None),
    }
}

/// At most this much of a receiver's response body is read (it only feeds error
/// messages and Slack's `ok`/`ts`): a receiver cannot make driftwatch buffer more.
pub const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// A response's body, cut at [`MAX_RESPONSE_BODY`] bytes (the rest is not read), as
/// text; a body that breaks off is kept as far as it came.
pub async fn read_body(mut resp: reqwest::Response) -> String {
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
    String::from_utf8_lossy(&buf).into_owned()
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
