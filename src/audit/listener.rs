//! `POST /audit`: the API server's audit webhook backend. TLS (with a required client
//! certificate when `clientCAFile` is set) and the bearer token are checked before a
//! byte of the body is read. The body is read as it arrives, event by event
//! ([`items`]), never whole: a batch of any size is taken (review N6: a 413 makes the
//! API server drop the whole batch, everyone's events), an event over
//! `maxBodyBytes` keeps who did what without its object bodies, and what could not be
//! kept is counted. A body that is not an `EventList` gets 400, a full queue 503 (the
//! API server retries the batch), a body slower than 30 s 408; 200 once the relevant
//! events are queued. The handler never waits on the evaluation. With the state in
//! PostgreSQL every replica takes batches and writes them to the audit inbox before
//! its 200 ([`super::inbox`]).

mod items;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::net::TcpListener;

use super::{Shared, Sink, event};
use crate::metrics::METRICS;

/// A body must arrive whole within this (a caller with the credential cannot hold a
/// connection and a worker by trickling).
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Chunks of the body in flight from the connection to the thread that cuts them.
const CHUNKS_IN_FLIGHT: usize = 4;

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

/// What reading a body came to.
enum Read {
    /// The body ended.
    Whole,
    /// The connection failed before it ended.
    Cut,
    /// The thread cutting it stopped (a body that is not a list).
    Stopped,
}

/// Forwards the body's data, chunk by chunk, to the thread that cuts it into events.
async fn forward(mut body: Body, tx: tokio::sync::mpsc::Sender<Bytes>) -> Read {
    loop {
        match std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
            None => return Read::Whole,
            Some(Err(_)) => return Read::Cut,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && tx.send(data).await.is_err()
                {
                    return Read::Stopped;
                }
            }
        }
    }
}

impl Shared {
    /// Cuts the body arriving on `rx` into events, keeps those that could concern a
    /// unit whatever the index holds and writes them to the audit inbox through
    /// `relay`, a row whenever what is kept reaches [`super::inbox::MAX_ROW_BYTES`] and
    /// the rest at the end: what is held is one row and one event at most (CPU and
    /// blocking I/O: run it off the async workers). `Ok(false)`: the inbox is full.
    fn keep(
        &self,
        mut rx: tokio::sync::mpsc::Receiver<Bytes>,
        relay: &super::inbox::Relay,
        cluster: &str,
    ) -> Result<Result<bool, crate::state::StateError>, items::NotAList> {
        let mut scanner = items::Items::new(self.max_body);
        let (mut kept, mut cuts, mut elided) = (super::inbox::Kept::default(), Vec::new(), 0u64);
        let mut dropped = event::Batch::default();
        let (times, now) = (self.times(), chrono::Utc::now());
        let mut written = Ok(true);
        while let Some(chunk) = rx.blocking_recv() {
            scanner.feed(&chunk, &mut cuts)?;
            for cut in cuts.drain(..) {
                elided += u64::from(cut.elided);
                match event::admit_line(&cut.bytes, Some(times), now) {
                    Ok(Ok(event)) => kept.add(&event),
                    Ok(Err(d)) => dropped.dropped[d as usize] += 1,
                    Err(_) => dropped.dropped[event::Dropped::Malformed as usize] += 1,
                }
                // Once a row could not be written the rest is read, not written: the
                // API server sends the whole batch again.
                if kept.bytes() >= super::inbox::MAX_ROW_BYTES && matches!(written, Ok(true)) {
                    written = relay.write(std::mem::take(&mut kept), now, cluster);
                }
            }
        }
        scanner.finish()?;
        if matches!(written, Ok(true)) {
            written = relay.write(kept, now, cluster);
        }
        super::count(&dropped);
        METRICS.audit_dropped.add("objects-over-limit", elided);
        METRICS.audit_dropped.add("event-over-limit", scanner.over_limit);
        Ok(written)
    }

    #[cfg(test)]
    pub(super) fn keep_for_test(
        &self,
        rx: tokio::sync::mpsc::Receiver<Bytes>,
        relay: &super::inbox::Relay,
    ) -> Result<Result<bool, crate::state::StateError>, items::NotAList> {
        self.keep(rx, relay, "")
    }

    /// Cuts the body arriving on `rx` into events and filters each as it is complete
    /// (CPU: run it off the async workers). The index is read-locked per chunk, not for
    /// the whole body, so the evaluation thread is not held by a slow sender.
    fn take(&self, mut rx: tokio::sync::mpsc::Receiver<Bytes>, cluster: &str) -> Result<event::Batch, items::NotAList> {
        let mut scanner = items::Items::new(self.max_body);
        let (mut batch, mut cuts, mut elided) = (event::Batch::default(), Vec::new(), 0u64);
        while let Some(chunk) = rx.blocking_recv() {
            scanner.feed(&chunk, &mut cuts)?;
            if cuts.is_empty() {
                continue;
            }
            let (ids, mask, times) = (self.identities_in(cluster), self.mask(), self.times());
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            let f =
                event::Filter { argocd_identities: &ids, index: &index, now: chrono::Utc::now(), mask: &mask, times: Some(times), cluster };
            for cut in cuts.drain(..) {
                elided += u64::from(cut.elided);
                if event::parse_line(&cut.bytes, &f, &mut batch).is_err() {
                    batch.dropped[event::Dropped::Malformed as usize] += 1;
                }
            }
        }
        scanner.finish()?;
        super::count(&batch);
        // Read, but not whole: counted whether or not the event concerned a managed
        // object (that is only known from what was left out).
        METRICS.audit_dropped.add("objects-over-limit", elided);
        METRICS.audit_dropped.add("event-over-limit", scanner.over_limit);
        Ok(batch)
    }
}

async fn ingest(State(sink): State<Sink>, headers: HeaderMap, body: Body) -> Response {
    let arrived = std::time::Instant::now();
    let shared = sink.shared.clone();
    let Some(cluster) = shared.feed(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes())) else {
        return reply(StatusCode::UNAUTHORIZED, "a valid bearer token is required (audit.token, or a cluster's auditToken)");
    };
    let label = Shared::feed_label(&cluster).to_string();
    let answer = match sink.relay.clone() {
        Some(relay) => relayed(shared, relay, body, cluster).await,
        None => queued(&sink, shared, body, cluster, arrived).await,
    };
    if answer.status() == StatusCode::OK {
        METRICS.audit_last_batch.set(&label, crate::clock::wall_ms() / 1000);
    }
    answer
}

/// Reads the body as it arrives into `cut` (on a blocking thread): what `cut` made of
/// it, or the answer to a body that timed out, was cut off or is not a list.
async fn read_body<T: Send + 'static>(
    body: Body,
    cut: impl FnOnce(tokio::sync::mpsc::Receiver<Bytes>) -> Result<T, items::NotAList> + Send + 'static,
) -> Result<T, Response> {
    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
    let cutter = tokio::task::spawn_blocking(move || cut(rx));
    // On a timeout the sender is dropped with `forward`, which ends the cutter.
    let read = tokio::time::timeout(BODY_TIMEOUT, forward(body, tx)).await;
    match (read, cutter.await) {
        (Err(_), _) => Err(reply(StatusCode::REQUEST_TIMEOUT, "the body did not arrive within 30 s")),
        (_, Err(_)) => Err(reply(StatusCode::INTERNAL_SERVER_ERROR, "decoding the batch failed")),
        (_, Ok(Err(e))) => {
            tracing::warn!(error = %e, "refused an audit batch that is not an EventList");
            Err(reply(StatusCode::BAD_REQUEST, &e.to_string()))
        }
        (Ok(Read::Cut), _) => Err(reply(StatusCode::BAD_REQUEST, "the body was cut off")),
        (Ok(Read::Whole | Read::Stopped), Ok(Ok(taken))) => Ok(taken),
    }
}

/// A batch for this replica's queue (the state in a file: the leader takes it).
async fn queued(sink: &Sink, shared: Arc<Shared>, body: Body, cluster: String, arrived: std::time::Instant) -> Response {
    if !shared.leading() {
        return reply(StatusCode::SERVICE_UNAVAILABLE, "this replica is on standby; the leader takes audit batches");
    }
    let of = cluster.clone();
    match read_body(body, move |rx| shared.take(rx, &of)).await {
        Err(answer) => answer,
        Ok(batch) => match sink.offer_from(arrived, batch.into(), &cluster) {
            true => reply(StatusCode::OK, "ok"),
            false => reply(StatusCode::SERVICE_UNAVAILABLE, "the audit queue is full; send the batch again later"),
        },
    }
}

/// A batch for the audit inbox, on any replica (a standby too): 200 once what could
/// concern a unit is written there, 503 when the inbox is full or cannot be written
/// (the API server sends the batch again).
async fn relayed(shared: Arc<Shared>, relay: super::inbox::Relay, body: Body, cluster: String) -> Response {
    match read_body(body, move |rx| shared.keep(rx, &relay, &cluster)).await {
        Err(answer) => answer,
        Ok(Ok(true)) => reply(StatusCode::OK, "ok"),
        Ok(Ok(false)) => {
            METRICS.audit_dropped.inc("inbox-full");
            reply(StatusCode::SERVICE_UNAVAILABLE, "the audit inbox is full; send the batch again later")
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "could not write an audit batch to the inbox");
            reply(StatusCode::SERVICE_UNAVAILABLE, "the audit inbox cannot be written now; send the batch again later")
        }
    }
}

fn router(sink: Sink) -> Router {
    Router::new()
        .route("/audit", post(ingest))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: POST /audit\n").into_response() })
        .with_state(sink)
        .layer(axum::middleware::map_response(close_unserved))
}

/// A connection whose request was not the API server's (no valid token, another path
/// or method) is closed after the answer: held with a request every few seconds it
/// would keep one of the listener's slots from the API server.
async fn close_unserved(mut r: Response) -> Response {
    if matches!(r.status(), StatusCode::UNAUTHORIZED | StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED) {
        r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    }
    r
}

/// The TLS server configuration of `audit.tls` ([`crate::tls::server_config`]); a
/// certificate refused for its name is counted.
pub fn tls_config(t: &crate::config::ServerTls) -> Result<rustls::ServerConfig, ListenError> {
    crate::tls::server_config(t, || METRICS.audit_requests.inc("client-name-refused"))
        .map_err(|e| ListenError::Tls { file: e.file, reason: e.reason })
}

/// What a closed-unserved connection counts as (`driftwatch_audit_requests_total{code}`).
fn count_dropped(d: crate::serve::Dropped) {
    use crate::serve::Dropped;
    METRICS.audit_requests.inc(match d {
        Dropped::Cap => "connection-cap",
        Dropped::PeerCap => "peer-cap",
        Dropped::Evicted => "handshake-evicted",
        Dropped::Handshake => "tls-refused",
    });
}

/// Binds `addr` and serves `POST /audit` into `sink` for as long as the process runs,
/// within [`crate::serve::Bounds`] (a connection cap, bounded TLS handshakes that a new
/// connection can evict, a header-read timeout). Returns the bound address.
pub async fn serve(addr: SocketAddr, tls: Option<rustls::ServerConfig>, sink: Sink) -> Result<SocketAddr, ListenError> {
    serve_within(addr, tls, sink, crate::serve::Bounds::default()).await
}

async fn serve_within(
    addr: SocketAddr,
    tls: Option<rustls::ServerConfig>,
    sink: Sink,
    bounds: crate::serve::Bounds,
) -> Result<SocketAddr, ListenError> {
    let listener = TcpListener::bind(addr).await.map_err(|error| ListenError::Bind { addr, error })?;
    let bound = listener.local_addr().map_err(|error| ListenError::Bind { addr, error })?;
    let app = router(sink);
    tokio::spawn(crate::serve::run(listener, tls.map(Arc::new), app, bounds, count_dropped, std::future::pending()));
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
        tenant_pem: String,
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
        let tkey = rcgen::KeyPair::generate().unwrap();
        let tenant = rcgen::CertificateParams::new(vec!["tenant-a.example".to_string()]).unwrap().signed_by(&tkey, &ca).unwrap();
        Pki {
            ca_pem: ca.pem(),
            client_pem: format!("{}{}", client.pem(), ckey.serialize_pem()),
            tenant_pem: format!("{}{}", tenant.pem(), tkey.serialize_pem()),
            dir,
        }
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
    /// The fresh review's finding 7: a connection that is not the API server's (no
    /// token, another path) is closed after its answer, so it cannot be held open with
    /// a request every few seconds; the API server's own keeps alive.
    #[tokio::test]
    async fn a_connection_without_the_token_is_closed_after_its_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let shared = crate::audit::Shared::new(&AuditSettings {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            token: Some(crate::secret::Secret::new("t".into())),
            ..AuditSettings::default()
        });
        shared.set_leading(true);
        let (sink, _queue) = crate::audit::queue(&shared);
        let addr = serve_within("127.0.0.1:0".parse().unwrap(), None, sink, crate::serve::Bounds::default()).await.unwrap();
        for request in [
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST /audit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: 2\r\n\r\n{}",
            "GET /audit HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(request.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            let ended = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut got)).await;
            assert!(ended.is_ok(), "held open after {request:?}: {}", String::from_utf8_lossy(&got));
            assert!(String::from_utf8_lossy(&got).to_ascii_lowercase().contains("connection: close"), "{request:?}");
        }
        // The API server's batch: answered, and the connection stays for the next one.
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let batch = "{\"items\": []}";
        let request =
            format!("POST /audit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nContent-Length: {}\r\n\r\n{batch}", batch.len());
        c.write_all(request.as_bytes()).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = c.read(&mut buf).await.unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        assert!(answer.starts_with("http/1.1 200") && !answer.contains("connection: close"), "{answer}");
        c.write_all(request.as_bytes()).await.unwrap();
        let n = c.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "the second batch on the same connection");
    }

    #[tokio::test]
    async fn a_client_certificate_is_required_when_a_client_ca_is_set() {
        let p = pki();
        let d = p.dir.path();
        let tls = files(d, true, &[]);
        let cfg = tls_config(&tls).unwrap();
        let shared = crate::audit::Shared::new(&AuditSettings {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            tls: Some(tls),
            ..AuditSettings::default()
        });
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

    fn files(d: &std::path::Path, client_ca: bool, names: &[&str]) -> crate::config::ServerTls {
        crate::config::ServerTls {
            cert: d.join("tls.crt"),
            key: d.join("tls.key"),
            client_ca: client_ca.then(|| d.join("ca.crt")),
            client_names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// Review M4: with `clientNames`, a certificate the same CA signed for a tenant
    /// (a shared cert-manager issuer) does not get past the handshake; the API server's,
    /// named `kube-apiserver`, does.
    #[tokio::test]
    async fn a_client_certificate_must_carry_a_pinned_name() {
        let p = pki();
        let tls = files(p.dir.path(), true, &["kube-apiserver"]);
        let cfg = tls_config(&tls).unwrap();
        let shared = crate::audit::Shared::new(&AuditSettings {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            tls: Some(tls),
            ..AuditSettings::default()
        });
        shared.set_leading(true);
        let (sink, _queue) = crate::audit::queue(&shared);
        let addr = serve("127.0.0.1:0".parse().unwrap(), Some(cfg), sink).await.unwrap();
        let client = |pem: &str| {
            let root = reqwest::Certificate::from_pem(p.ca_pem.as_bytes()).unwrap();
            reqwest::Client::builder()
                .add_root_certificate(root)
                .identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap())
                .build()
                .unwrap()
        };
        let before = METRICS.audit_requests.get("client-name-refused");
        assert!(post(&client(&p.tenant_pem), addr, "{\"items\": []}", None).await.is_err(), "a tenant's certificate was let in");
        assert_eq!(METRICS.audit_requests.get("client-name-refused"), before + 1);
        assert_eq!(post(&client(&p.client_pem), addr, "{\"items\": []}", None).await.unwrap(), 200);
    }

    #[test]
    fn bad_tls_files_are_named() {
        let p = pki();
        let d = p.dir.path();
        let mut t = files(d, false, &[]);
        t.cert = d.join("missing.crt");
        let e = tls_config(&t).unwrap_err().to_string();
        assert!(e.contains("missing.crt"), "{e}");
        t.cert = d.join("tls.key");
        let e = tls_config(&t).unwrap_err().to_string();
        assert!(e.contains("tls.key") && e.contains("no certificate"), "{e}");
    }

    /// Review M1: 200 sockets (from four addresses) that never send a ClientHello do not
    /// stop the listener (a new connection evicts the oldest silent handshake); a client trickling its
    /// headers is dropped by the header-read timeout; past the connection cap a new
    /// connection is closed at once. (Each wait is bounded only so that a regression
    /// fails instead of hanging.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hostile_clients_cannot_hold_the_listener() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let p = pki();
        let d = p.dir.path();
        let cfg = tls_config(&files(d, false, &[])).unwrap();
        let listen = Some("127.0.0.1:0".parse().unwrap());
        let tls = Some(files(d, false, &[]));
        let shared = crate::audit::Shared::new(&AuditSettings {
            listen,
            tls,
            token: Some(crate::secret::Secret::new("t".into())),
            ..AuditSettings::default()
        });
        shared.set_leading(true);
        let (sink, _queue) = crate::audit::queue(&shared);
        // Handshakes may take a minute: only eviction lets the client below through.
        let bounds = crate::serve::Bounds { handshake_timeout: Duration::from_secs(60), ..crate::serve::Bounds::default() };
        let addr = serve_within("127.0.0.1:0".parse().unwrap(), Some(cfg), sink, bounds).await.unwrap();
        // From four addresses other than the client's: one address alone gets at most
        // 64 connections (review N7).
        let mut silent = Vec::new();
        for n in 0..200 {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(format!("127.0.0.{}:0", 2 + n % 4).parse().unwrap()).unwrap();
            silent.push(s.connect(addr).await.unwrap());
        }
        let root = reqwest::Certificate::from_pem(p.ca_pem.as_bytes()).unwrap();
        let client = reqwest::Client::builder().add_root_certificate(root).timeout(Duration::from_secs(20)).build().unwrap();
        assert_eq!(post(&client, addr, "{\"items\": []}", Some("t")).await.unwrap(), 200, "heard despite 200 silent sockets");
        drop(silent);

        // Plain (loopback), short header timeout, a cap of 2 connections.
        let shared = crate::audit::Shared::new(&AuditSettings {
            listen,
            token: Some(crate::secret::Secret::new("t".into())),
            ..AuditSettings::default()
        });
        let (sink, _queue) = crate::audit::queue(&shared);
        let bounds = crate::serve::Bounds { header_timeout: Duration::from_millis(300), ..crate::serve::Bounds::default() };
        let addr = serve_within("127.0.0.1:0".parse().unwrap(), None, sink, bounds).await.unwrap();
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"POST /audit HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let mut buf = Vec::new();
        // The server closes it (possibly after a 408): the read ends, it does not hang.
        let ended = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut buf)).await;
        assert!(ended.is_ok(), "a trickling client was not dropped");
        // A cap of 2, and headers may take a minute: only the cap closes the third.
        let shared = crate::audit::Shared::new(&AuditSettings {
            listen,
            token: Some(crate::secret::Secret::new("t".into())),
            ..AuditSettings::default()
        });
        let (sink, _queue) = crate::audit::queue(&shared);
        let bounds =
            crate::serve::Bounds { max_connections: 2, header_timeout: Duration::from_secs(60), ..crate::serve::Bounds::default() };
        let addr = serve_within("127.0.0.1:0".parse().unwrap(), None, sink, bounds).await.unwrap();
        let _a = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _b = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(30), third.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the third connection was served: {closed:?}");
    }
}
