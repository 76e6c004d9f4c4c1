//! The operations endpoints: `/healthz` (the process is alive), `/readyz` (initial
//! lists done and configuration loaded) and `/metrics` (Prometheus text).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use crate::daemon::SharedState;
use crate::metrics::METRICS;
use crate::state::StateStore;

fn text(status: u16, body: String, content_type: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn handle(req: Request<Incoming>, shared: SharedState) -> Result<Response<Full<Bytes>>, Infallible> {
    let state: Option<Arc<StateStore>> = shared.read().map(|s| s.clone()).unwrap_or(None);
    Ok(match req.uri().path() {
        "/healthz" => text(200, "ok\n".into(), "text/plain"),
        "/readyz" if METRICS.ready.load(Ordering::Relaxed) == 1 => text(200, "ready\n".into(), "text/plain"),
        "/readyz" => text(503, "not ready: initial lists not done\n".into(), "text/plain"),
        "/metrics" => {
            // Queue depth is read from the outbox at scrape time: it is the truth.
            if let Some(Ok(entries)) = state.as_ref().map(|s| s.outbox(None)) {
                let mut depth: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
                for e in entries {
                    *depth.entry(e.notification.destination.service).or_default() += 1;
                }
                for (service, _) in METRICS.queue_depth_services() {
                    METRICS.queue_depth.set(&service, depth.get(&service).copied().unwrap_or(0));
                }
                for (service, n) in depth {
                    METRICS.queue_depth.set(&service, n);
                }
            }
            text(200, METRICS.render(), "text/plain; version=0.0.4")
        }
        _ => text(404, "not found\n".into(), "text/plain"),
    })
}

/// Serves the endpoints until the task is dropped. Returns the bound address.
pub async fn serve(addr: SocketAddr, state: SharedState) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(req, state.clone()));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(bound)
}
