//! HTTP/1.1 listeners a hostile client cannot hold: the audit webhook and the
//! operations endpoints are served here instead of `axum::serve`, which builds hyper
//! without a timer (so hyper's header-read timeout is off) and caps nothing.
//!
//! - A connection cap: past [`Bounds::max_connections`] a new connection is closed at
//!   once (counted), so sockets and memory stay bounded.
//! - TLS handshakes run after `accept`, each in a task of its own, at most
//!   [`Bounds::max_handshakes`] at a time: a new connection evicts the oldest handshake
//!   still in progress, so silent sockets cannot stop the listener; a handshake that
//!   takes longer than [`Bounds::handshake_timeout`] is dropped.
//! - A header-read timeout (which is also the idle timeout between requests of a
//!   kept-alive connection): a client that sends a byte a minute is dropped.
//!
//! The body's total time is bounded by the handler that reads it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// What one listener accepts.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// What the logs call the listener's connections (`an audit connection`).
    pub what: &'static str,
    pub max_connections: usize,
    pub max_handshakes: usize,
    pub handshake_timeout: Duration,
    /// From a connection's start (or the end of the previous response) to a request's
    /// complete headers.
    pub header_timeout: Duration,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            what: "audit",
            max_connections: 256,
            max_handshakes: 64,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
        }
    }
}

/// Why a connection was closed unserved, for the caller's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Over the connection cap.
    Cap,
    /// Evicted by a newer connection while its TLS handshake was in progress.
    Evicted,
    /// Its TLS handshake took too long or failed.
    Handshake,
}

/// A TLS handshake in progress: cancelled when evicted, unless it has finished.
struct Pending {
    id: u64,
    done: Arc<AtomicBool>,
    abort: tokio::task::AbortHandle,
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
    let connections = Arc::new(tokio::sync::Semaphore::new(bounds.max_connections));
    let pending: Arc<Mutex<VecDeque<Pending>>> = Arc::new(Mutex::new(VecDeque::new()));
    let ids = AtomicU64::new(0);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
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
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            dropped(Dropped::Cap);
            drop(tcp);
            continue;
        };
        let app = app.clone();
        match &acceptor {
            None => {
                tokio::spawn(async move {
                    serve_connection(TokioIo::new(tcp), app, bounds).await;
                    drop(permit);
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let id = ids.fetch_add(1, Ordering::Relaxed);
                let done = Arc::new(AtomicBool::new(false));
                let (finished, list) = (done.clone(), pending.clone());
                let task = tokio::spawn(async move {
                    let shaken = tokio::time::timeout(bounds.handshake_timeout, acceptor.accept(tcp)).await;
                    finished.store(true, Ordering::Release);
                    list.lock().unwrap_or_else(|p| p.into_inner()).retain(|p| p.id != id);
                    match shaken {
                        Ok(Ok(stream)) => serve_connection(TokioIo::new(stream), app, bounds).await,
                        Ok(Err(e)) => {
                            dropped(Dropped::Handshake);
                            tracing::debug!(%peer, error = %e, "TLS handshake refused");
                        }
                        Err(_) => {
                            dropped(Dropped::Handshake);
                            tracing::debug!(%peer, "TLS handshake timed out");
                        }
                    }
                    drop(permit);
                });
                let mut list = pending.lock().unwrap_or_else(|p| p.into_inner());
                list.retain(|p| !p.done.load(Ordering::Acquire));
                while list.len() >= bounds.max_handshakes {
                    let Some(oldest) = list.pop_front() else { break };
                    if !oldest.done.load(Ordering::Acquire) {
                        oldest.abort.abort();
                        dropped(Dropped::Evicted);
                    }
                }
                if !done.load(Ordering::Acquire) {
                    list.push_back(Pending { id, done, abort: task.abort_handle() });
                }
            }
        }
    }
}

async fn serve_connection<I>(io: TokioIo<I>, app: axum::Router, bounds: Bounds)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        .serve_connection(io, service);
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "connection ended");
    }
}
