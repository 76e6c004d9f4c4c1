//! `POST /audit`: the API server's audit webhook backend. TLS (with a required client
//! certificate when `clientCAFile` is set) and the bearer token are checked before a
//! byte of the body is read; bodies past `maxBodyBytes` get 413, a body that is not an
//! `EventList` 400, a full queue 503 (the API server retries the batch); 200 once the
//! relevant events are queued. The handler never waits on the evaluation.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::Sink;
use crate::metrics::METRICS;

/// TLS handshakes in progress at most (more wait to be accepted).
const MAX_HANDSHAKES: usize = 64;
/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("audit.tls: {file}: {reason}")]
    Tls { file: String, reason: String },
    #[error("audit.listen {addr}: {error}")]
    Bind { addr: SocketAddr, error: std::io::Error },
}

fn reply(status: StatusCode, body: &str) -> Response {
    METRICS.audit_requests.inc(status.as_str());
    (status, [(header::CONTENT_TYPE, "text/plain")], format!("{body}\n")).into_response()
}

async fn ingest(State(sink): State<Sink>, headers: HeaderMap, body: Body) -> Response {
    let arrived = std::time::Instant::now();
    let shared = sink.shared.clone();
    if !shared.authorized(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes())) {
        return reply(StatusCode::UNAUTHORIZED, "a valid bearer token is required (audit.token)");
    }
    if !shared.leading() {
        return reply(StatusCode::SERVICE_UNAVAILABLE, "this replica is on standby; the leader takes audit batches");
    }
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > shared.max_body as u64) {
        return reply(StatusCode::PAYLOAD_TOO_LARGE, "the body is over audit.maxBodyBytes");
    }
    let bytes = match axum::body::to_bytes(body, shared.max_body).await {
        Ok(b) => b,
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, "the body is over audit.maxBodyBytes (or was cut off)"),
    };
    let filtered = tokio::task::spawn_blocking(move || shared.filter(&bytes)).await;
    match filtered {
        Err(_) => reply(StatusCode::INTERNAL_SERVER_ERROR, "decoding the batch failed"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "refused an audit batch that is not an EventList");
            reply(StatusCode::BAD_REQUEST, &e.to_string())
        }
        Ok(Ok(batch)) => {
            if sink.offer(arrived, batch.into()) {
                reply(StatusCode::OK, "ok")
            } else {
                reply(StatusCode::SERVICE_UNAVAILABLE, "the audit queue is full; send the batch again later")
            }
        }
    }
}

fn router(sink: Sink) -> Router {
    Router::new()
        .route("/audit", post(ingest))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: POST /audit\n").into_response() })
        .with_state(sink)
}

fn read(path: &Path) -> Result<Vec<u8>, ListenError> {
    std::fs::read(path).map_err(|e| ListenError::Tls { file: path.display().to_string(), reason: e.to_string() })
}

/// The TLS server configuration of `audit.tls`.
pub fn tls_config(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<rustls::ServerConfig, ListenError> {
    let bad = |p: &Path, reason: String| ListenError::Tls { file: p.display().to_string(), reason };
    let certs: Vec<_> = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| bad(cert, format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(bad(cert, "holds no certificate".into()));
    }
    let key_der = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| bad(key, format!("not a PEM key: {e}")))?
        .ok_or_else(|| bad(key, "holds no private key".into()))?;
    let builder = rustls::ServerConfig::builder();
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls_pemfile::certs(&mut read(ca)?.as_slice()) {
                let c = c.map_err(|e| bad(ca, format!("not a PEM certificate: {e}")))?;
                roots.add(c).map_err(|e| bad(ca, e.to_string()))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).build().map_err(|e| bad(ca, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(certs, key_der).map_err(|e| bad(cert, e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Plain TCP (loopback only: the configuration refuses it elsewhere).
struct Plain(TcpListener);

impl axum::serve::Listener for Plain {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(a) => return a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an audit connection failed; going on");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// TLS: connections are accepted and their handshakes run in tasks of their own (a
/// client that stalls its handshake holds up nobody), and finished ones handed over.
struct Tls {
    ready: mpsc::Receiver<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for Tls {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor is gone: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

fn tls_listener(listener: TcpListener, cfg: rustls::ServerConfig) -> std::io::Result<Tls> {
    let local = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let (tx, ready) = mpsc::channel(MAX_HANDSHAKES);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = permits.clone().acquire_owned().await else { return };
            let (tcp, peer) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an audit connection failed; going on");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send((tls, peer)).await;
                    }
                    Ok(Err(e)) => {
                        METRICS.audit_requests.inc("tls-refused");
                        tracing::debug!(%peer, error = %e, "audit TLS handshake refused");
                    }
                    Err(_) => tracing::debug!(%peer, "audit TLS handshake timed out"),
                }
            });
        }
    });
    Ok(Tls { ready, local })
}

/// Binds `addr` and serves `POST /audit` into `sink` for as long as the process runs.
/// Returns the bound address.
pub async fn serve(addr: SocketAddr, tls: Option<rustls::ServerConfig>, sink: Sink) -> Result<SocketAddr, ListenError> {
    let listener = TcpListener::bind(addr).await.map_err(|error| ListenError::Bind { addr, error })?;
    let bound = listener.local_addr().map_err(|error| ListenError::Bind { addr, error })?;
    let app = router(sink);
    match tls {
        Some(cfg) => {
            let l = tls_listener(listener, cfg).map_err(|error| ListenError::Bind { addr, error })?;
            tokio::spawn(async move {
                if let Err(e) = axum::serve(l, app).await {
                    tracing::error!(error = %e, "the audit listener stopped");
                }
            });
        }
        None => {
            tokio::spawn(async move {
                if let Err(e) = axum::serve(Plain(listener), app).await {
                    tracing::error!(error = %e, "the audit listener stopped");
                }
            });
        }
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AuditSettings;

    struct Pki {
        dir: tempfile::TempDir,
        ca_pem: String,
        client_pem: String,
    }

    /// A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it.
    fn pki() -> Pki {
        crate::tls::init_crypto();
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &ca).unwrap();
        std::fs::write(dir.path().join("tls.crt"), server.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
        let ckey = rcgen::KeyPair::generate().unwrap();
        let client = rcgen::CertificateParams::new(vec!["kube-apiserver".to_string()]).unwrap().signed_by(&ckey, &ca).unwrap();
        Pki { ca_pem: ca.pem(), client_pem: format!("{}{}", client.pem(), ckey.serialize_pem()), dir }
    }

    async fn post(client: &reqwest::Client, addr: SocketAddr, body: &str, token: Option<&str>) -> Result<u16, reqwest::Error> {
        let mut req = client.post(format!("https://{addr}/audit?timeout=30s")).body(body.to_string());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        Ok(req.send().await?.status().as_u16())
    }

    /// With `clientCAFile`, a caller without a certificate the CA signed does not get
    /// past the handshake; with one it is heard. A standby replica answers 503.
    #[tokio::test]
    async fn a_client_certificate_is_required_when_a_client_ca_is_set() {
        let p = pki();
        let d = p.dir.path();
        let cfg = tls_config(&d.join("tls.crt"), &d.join("tls.key"), Some(&d.join("ca.crt"))).unwrap();
        let tls = Some((d.join("tls.crt"), d.join("tls.key"), Some(d.join("ca.crt"))));
        let shared =
            crate::audit::Shared::new(&AuditSettings { listen: Some("127.0.0.1:0".parse().unwrap()), tls, ..AuditSettings::default() });
        shared.set_leading(true);
        let (sink, mut queue) = crate::audit::queue(&shared);
        let addr = serve("127.0.0.1:0".parse().unwrap(), Some(cfg), sink).await.unwrap();
        let root = reqwest::Certificate::from_pem(p.ca_pem.as_bytes()).unwrap();
        let anonymous = reqwest::Client::builder().add_root_certificate(root.clone()).build().unwrap();
        assert!(post(&anonymous, addr, "{\"items\": []}", None).await.is_err(), "no client certificate: refused in the handshake");
        let identity = reqwest::Identity::from_pem(p.client_pem.as_bytes()).unwrap();
        let apiserver = reqwest::Client::builder().add_root_certificate(root).identity(identity).build().unwrap();
        assert_eq!(post(&apiserver, addr, "{\"items\": []}", None).await.unwrap(), 200);
        assert_eq!(post(&apiserver, addr, "{\"items\": [", None).await.unwrap(), 400);
        shared.set_leading(false);
        assert_eq!(post(&apiserver, addr, "{\"items\": []}", None).await.unwrap(), 503);
        assert!(queue.rx.try_recv().is_err(), "nothing relevant was queued");
    }

    #[test]
    fn bad_tls_files_are_named() {
        let p = pki();
        let d = p.dir.path();
        let e = tls_config(&d.join("missing.crt"), &d.join("tls.key"), None).unwrap_err().to_string();
        assert!(e.contains("missing.crt"), "{e}");
        let e = tls_config(&d.join("tls.key"), &d.join("tls.key"), None).unwrap_err().to_string();
        assert!(e.contains("tls.key") && e.contains("no certificate"), "{e}");
    }
}
