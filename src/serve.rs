//! HTTP/1.1 listeners a hostile client cannot hold: the audit webhook and the
//! operations endpoints are served here instead of `axum::serve`, which builds hyper
//! without a timer (so hyper's header-read timeout is off) and caps nothing.
//!
//! - A connection cap, and a cap per peer address: past [`Bounds::max_connections`],
//!   or past [`Bounds::max_per_peer`] from one address, a new connection is closed at
//!   once (counted), so sockets and memory stay bounded and one address cannot take
//!   every slot.
//! - A lane for the probes ([`Probes`]): a connection the caps refuse is still taken
//!   into a few reserved slots that answer only the probe paths, one request each,
//!   with a short header timeout; a new one evicts the oldest. So a full cap cannot
//!   fail the kubelet's `/healthz` (review N7).
//! - TLS handshakes run after `accept`, each in a task of its own, at most
//!   [`Bounds::max_handshakes`] at a time: a new connection evicts the oldest handshake
//!   still in progress, so silent sockets cannot stop the listener; a handshake that
//!   takes longer than [`Bounds::handshake_timeout`] is dropped.
//! - A header-read timeout (which is also the idle timeout between requests of a
//!   kept-alive connection): a client that sends a byte a minute is dropped.
//! - A maximum age and a maximum number of requests per connection: hyper restarts
//!   the header timeout on every request of a kept-alive connection, so without these
//!   a request every few seconds held a slot forever (review N7). Past its age a
//!   connection finishes the request in progress and is closed; its last allowed
//!   response says `Connection: close`.
//!
//! The body's total time is bounded by the handler that reads it.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// What one listener accepts.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// What the logs call the listener's connections (`an audit connection`).
    pub what: &'static str,
    pub max_connections: usize,
    /// Connections from one peer address at once (within `max_connections`).
    pub max_per_peer: usize,
    pub max_handshakes: usize,
    pub handshake_timeout: Duration,
    /// From a connection's start (or the end of the previous response) to a request's
    /// complete headers.
    pub header_timeout: Duration,
    /// From a connection's start to its close (the request in progress is finished).
    pub max_age: Duration,
    /// Requests one connection may make.
    pub max_requests: usize,
    /// The probes' reserved lane, if the listener serves probes.
    pub probes: Option<Probes>,
}

/// A few slots for the probe paths only, taken when the caps refuse a connection.
#[derive(Debug, Clone, Copy)]
pub struct Probes {
    pub slots: usize,
    pub paths: &'static [&'static str],
    pub header_timeout: Duration,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            what: "audit",
            max_connections: 256,
            max_per_peer: 64,
            max_handshakes: 64,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            max_age: Duration::from_secs(300),
            max_requests: 1000,
            probes: None,
        }
    }
}

/// How long a connection past its age may take to finish the request in progress (a
/// body may take 30 s to arrive).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(40);

/// Why a connection was closed unserved, for the caller's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Over the connection cap.
    Cap,
    /// Over the cap of its peer address.
    PeerCap,
    /// Evicted by a newer connection while its TLS handshake was in progress, or from
    /// the probes' lane.
    Evicted,
    /// Its TLS handshake took too long or failed.
    Handshake,
}

/// A connection task that a newer one may evict: cancelled unless it has finished.
struct Pending {
    id: u64,
    done: Arc<AtomicBool>,
    abort: tokio::task::AbortHandle,
}

/// Tasks of which at most `max` run: adding one evicts the oldest still running.
#[derive(Default)]
struct Lane(Mutex<VecDeque<Pending>>);

impl Lane {
    fn admit(&self, max: usize, p: Pending, dropped: fn(Dropped)) {
        let mut list = self.0.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|p| !p.done.load(Ordering::Acquire));
        while list.len() >= max {
            let Some(oldest) = list.pop_front() else { break };
            if !oldest.done.load(Ordering::Acquire) {
                oldest.abort.abort();
                dropped(Dropped::Evicted);
            }
        }
        if !p.done.load(Ordering::Acquire) {
            list.push_back(p);
        }
    }

    fn finished(&self, id: u64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).retain(|p| p.id != id);
    }
}

/// A connection's place among the peer's: given back when the connection ends.
struct PeerSlot {
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = peers.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                peers.remove(&self.ip);
            }
        }
    }
}

/// A listener's shared state.
struct Listener {
    bounds: Bounds,
    app: axum::Router,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    dropped: fn(Dropped),
    connections: Arc<tokio::sync::Semaphore>,
    /// Connections per peer address (at most `max_connections` entries).
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    handshakes: Lane,
    probes: Lane,
    ids: AtomicU64,
}

/// Which requests a connection may make.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Full,
    /// The probes' lane: only these paths, one request.
    Probes(Probes),
}

/// Serves `app` on `listener` until `shutdown` completes (connections in progress are
/// then left to finish on their own). `dropped` is told of each connection closed
/// unserved.
pub async fn run(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: axum::Router,
    bounds: Bounds,
    dropped: fn(Dropped),
    shutdown: impl std::future::Future<Output = ()>,
) {
    let state = Arc::new(Listener {
        bounds,
        app,
        acceptor: tls.map(tokio_rustls::TlsAcceptor::from),
        dropped,
        connections: Arc::new(tokio::sync::Semaphore::new(bounds.max_connections)),
        peers: Arc::default(),
        handshakes: Lane::default(),
        probes: Lane::default(),
        ids: AtomicU64::new(0),
    });
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an {} connection failed; going on", bounds.what);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        state.clone().admit(tcp, peer);
    }
}

impl Listener {
    /// A place for a connection from `ip` within both caps, or why not.
    fn slot(&self, ip: IpAddr) -> Result<(tokio::sync::OwnedSemaphorePermit, PeerSlot), Dropped> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let n = peers.get(&ip).copied().unwrap_or(0);
        if n >= self.bounds.max_per_peer {
            return Err(Dropped::PeerCap);
        }
        let permit = self.connections.clone().try_acquire_owned().map_err(|_| Dropped::Cap)?;
        peers.insert(ip, n.saturating_add(1));
        Ok((permit, PeerSlot { peers: self.peers.clone(), ip }))
    }

    fn admit(self: Arc<Self>, tcp: tokio::net::TcpStream, peer: SocketAddr) {
        // Over a cap is counted either way; with a probes' lane the connection is
        // still answered there, for the probe paths only.
        let (slot, mode) = match (self.slot(peer.ip()), self.bounds.probes) {
            (Ok(slot), _) => (Some(slot), Mode::Full),
            (Err(why), Some(probes)) => {
                (self.dropped)(why);
                (None, Mode::Probes(probes))
            }
            (Err(why), None) => {
                (self.dropped)(why);
                return;
            }
        };
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        // Set once the connection may no longer be evicted: past its handshake in the
        // caps, at its end in the probes' lane.
        let done = Arc::new(AtomicBool::new(false));
        let (settled, this) = (done.clone(), self.clone());
        let task = tokio::spawn(async move {
            this.connection(tcp, peer, id, mode, &settled).await;
            if let Mode::Probes(_) = mode {
                settled.store(true, Ordering::Release);
                this.probes.finished(id);
            }
            drop(slot);
        });
        let pending = Pending { id, done, abort: task.abort_handle() };
        match mode {
            Mode::Probes(p) => self.probes.admit(p.slots, pending, self.dropped),
            // A connection in the caps is evicted only while in its handshake.
            Mode::Full => {
                if self.acceptor.is_some() {
                    self.handshakes.admit(self.bounds.max_handshakes, pending, self.dropped);
                }
            }
        }
    }

    async fn connection(&self, tcp: tokio::net::TcpStream, peer: SocketAddr, id: u64, mode: Mode, settled: &AtomicBool) {
        let Some(acceptor) = &self.acceptor else {
            return serve_connection(TokioIo::new(tcp), self.app.clone(), self.bounds, mode).await;
        };
        let shaken = tokio::time::timeout(self.bounds.handshake_timeout, acceptor.accept(tcp)).await;
        if let Mode::Full = mode {
            // Past its handshake, a connection is no longer evicted by newer ones.
            settled.store(true, Ordering::Release);
            self.handshakes.finished(id);
        }
        match shaken {
            Ok(Ok(stream)) => serve_connection(TokioIo::new(stream), self.app.clone(), self.bounds, mode).await,
            Ok(Err(e)) => {
                (self.dropped)(Dropped::Handshake);
                tracing::debug!(%peer, error = %e, "TLS handshake refused");
            }
            Err(_) => {
                (self.dropped)(Dropped::Handshake);
                tracing::debug!(%peer, "TLS handshake timed out");
            }
        }
    }
}

/// What a connection has made, for its last response's `Connection: close`.
#[derive(Clone)]
struct PerConnection {
    served: Arc<AtomicUsize>,
    max_requests: usize,
    probes_only: Option<&'static [&'static str]>,
}

async fn per_connection(
    axum::extract::State(c): axum::extract::State<PerConnection>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let close = HeaderValue::from_static("close");
    if let Some(paths) = c.probes_only
        && !paths.contains(&req.uri().path())
    {
        let busy = "busy: the connection cap is reached; only the probes are answered\n";
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1"), (header::CONNECTION, "close")], busy).into_response();
    }
    let n = c.served.fetch_add(1, Ordering::AcqRel).saturating_add(1);
    let mut response = next.run(req).await;
    if n >= c.max_requests {
        response.headers_mut().insert(header::CONNECTION, close);
    }
    response
}

async fn serve_connection<I>(io: TokioIo<I>, app: axum::Router, bounds: Bounds, mode: Mode)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (header_timeout, limits) = match mode {
        Mode::Full => {
            (bounds.header_timeout, PerConnection { served: Arc::default(), max_requests: bounds.max_requests, probes_only: None })
        }
        Mode::Probes(p) => (p.header_timeout, PerConnection { served: Arc::default(), max_requests: 1, probes_only: Some(p.paths) }),
    };
    let app = app.layer(axum::middleware::from_fn_with_state(limits, per_connection));
    let service = TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        ended = conn.as_mut() => {
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended");
            }
            return;
        }
        () = tokio::time::sleep(bounds.max_age) => {}
    }
    // Past its age: the request in progress is finished, then the connection closed.
    conn.as_mut().graceful_shutdown();
    match tokio::time::timeout(SHUTDOWN_GRACE, conn).await {
        Ok(Err(e)) => tracing::debug!(error = %e, "connection ended"),
        Ok(Ok(())) => {}
        Err(_) => tracing::debug!("a connection past its age did not finish its request in time; closed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn app() -> axum::Router {
        axum::Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .route("/other", axum::routing::get(|| async { "other" }))
    }

    async fn start(bounds: Bounds) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(run(listener, None, app(), bounds, |_| {}, std::future::pending()));
        addr
    }

    /// A connection from `ip` (any loopback address) to `addr`.
    async fn from(ip: &str, addr: SocketAddr) -> tokio::net::TcpStream {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        s.connect(addr).await.unwrap()
    }

    /// Sends one keep-alive GET and reads its whole response (by Content-Length): the
    /// status, or 0 when the connection was closed.
    async fn get(s: &mut tokio::net::TcpStream, path: &str) -> (u16, String) {
        if s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.is_err() {
            return (0, String::new());
        }
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().unwrap_or(0)))
                    .unwrap_or(0);
                if body.len() >= len {
                    return (head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0), head.to_string());
                }
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return (0, String::new()),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    async fn closed(s: &mut tokio::net::TcpStream) -> bool {
        let mut rest = Vec::new();
        matches!(tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest)).await, Ok(Ok(0)) | Ok(Err(_)))
    }

    /// Review N7: a kept-alive connection is closed after its last allowed request
    /// (which says `Connection: close`), and one past its age is closed though it
    /// keeps sending.
    #[tokio::test]
    async fn a_connection_has_a_maximum_age_and_number_of_requests() {
        let addr = start(Bounds { max_requests: 3, ..Bounds::default() }).await;
        let mut s = from("127.0.0.1", addr).await;
        assert_eq!(get(&mut s, "/healthz").await.0, 200);
        assert_eq!(get(&mut s, "/healthz").await.0, 200);
        let (status, head) = get(&mut s, "/healthz").await;
        assert_eq!(status, 200);
        assert!(head.to_ascii_lowercase().contains("connection: close"), "{head}");
        assert!(closed(&mut s).await, "served past its requests");

        let addr = start(Bounds { max_age: Duration::from_millis(600), ..Bounds::default() }).await;
        let mut s = from("127.0.0.1", addr).await;
        let started = std::time::Instant::now();
        let mut served = 0;
        while get(&mut s, "/healthz").await.0 == 200 {
            served += 1;
            assert!(started.elapsed() < Duration::from_secs(20), "still open after {served} requests");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(served > 0 && started.elapsed() >= Duration::from_millis(600), "{served} in {:?}", started.elapsed());
    }

    /// Review N7: one address gets at most `max_per_peer` connections; another is
    /// still served.
    #[tokio::test]
    async fn one_address_cannot_take_every_slot() {
        let addr = start(Bounds { max_per_peer: 3, header_timeout: Duration::from_secs(60), ..Bounds::default() }).await;
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut s = from("127.0.0.1", addr).await;
            assert_eq!(get(&mut s, "/healthz").await.0, 200);
            held.push(s);
        }
        let mut fourth = from("127.0.0.1", addr).await;
        assert!(closed(&mut fourth).await, "a fourth connection from the same address was served");
        let mut other = from("127.0.0.2", addr).await;
        assert_eq!(get(&mut other, "/healthz").await.0, 200);
    }

    /// Review N7: with every slot held, the probes' lane still answers a probe (one
    /// request, then closed) and nothing else.
    #[tokio::test]
    async fn a_full_cap_still_answers_the_probes() {
        let probes = Probes { slots: 2, paths: &["/healthz"], header_timeout: Duration::from_secs(2) };
        let bounds = Bounds { max_connections: 4, max_per_peer: 2, probes: Some(probes), ..Bounds::default() };
        let addr = start(bounds).await;
        let mut held = Vec::new();
        for ip in ["127.0.0.3", "127.0.0.3", "127.0.0.4", "127.0.0.4"] {
            let mut s = from(ip, addr).await;
            assert_eq!(get(&mut s, "/other").await.0, 200);
            held.push(s);
        }
        let mut probe = from("127.0.0.5", addr).await;
        let (status, head) = get(&mut probe, "/healthz").await;
        assert_eq!(status, 200, "{head}");
        assert!(closed(&mut probe).await, "a probe's connection serves one request");
        let mut other = from("127.0.0.5", addr).await;
        assert_eq!(get(&mut other, "/other").await.0, 503, "only the probes, past the cap");
    }
}
