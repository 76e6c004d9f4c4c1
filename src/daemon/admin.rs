//! The operations endpoints: `/healthz` (the process is alive), `/readyz` (initial
//! lists done and configuration loaded), `/metrics` (Prometheus text) and `/history`
//! (the drift history as JSON, the same query as `driftwatch history`, answered by the
//! leader, which holds the state store open).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use crate::metrics::METRICS;
use crate::state::StateStore;

/// The state store the operations endpoints read (none while not leading).
pub type SharedState = Arc<std::sync::RwLock<Option<Arc<StateStore>>>>;

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
        "/readyz" => {
            // A refused reload leaves the previous configuration running (still ready),
            // and says why here, as `driftwatch check` would.
            let mut body = match METRICS.ready.load(Ordering::Relaxed) {
                1 => "ready\n".to_string(),
                _ => "not ready: initial lists not done\n".to_string(),
            };
            let refused = METRICS.reload_errors();
            if !refused.is_empty() {
                body.push_str("the last configuration reload was refused; the previous configuration is running:\n");
                for e in refused {
                    body.push_str(&format!("error: {e}\n"));
                }
            }
            let status = if METRICS.ready.load(Ordering::Relaxed) == 1 { 200 } else { 503 };
            text(status, body, "text/plain")
        }
        "/metrics" => {
            // Queue depth comes from the outbox's per-service counters at scrape time
            // (kept in the transactions that change the outbox): the truth, not a scan.
            // Read on the blocking pool, as every state store access outside the
            // evaluation thread is.
            let depths = match state {
                Some(s) => tokio::task::spawn_blocking(move || s.queue_depths()).await.ok(),
                None => None,
            };
            if let Some(Ok(depths)) = depths {
                let depth: std::collections::BTreeMap<String, u64> = depths.into_iter().collect();
                for (service, _) in METRICS.queue_depth_services() {
                    METRICS.queue_depth.set(&service, depth.get(&service).copied().unwrap_or(0));
                }
                for (service, n) in depth {
                    METRICS.queue_depth.set(&service, n);
                }
            }
            text(200, METRICS.render(), "text/plain; version=0.0.4")
        }
        "/history" => match state {
            // The newest `limit` episodes (1000 unless asked, at most 10000).
            None => text(503, "not leading: the leader holds the history\n".into(), "text/plain"),
            Some(s) => match history_query(req.uri().query().unwrap_or_default()) {
                Err(e) => text(400, format!("{e}\n"), "text/plain"),
                Ok(q) => match tokio::task::spawn_blocking(move || s.episodes(&q)).await {
                    Err(e) => text(500, format!("{e}\n"), "text/plain"),
                    Ok(Err(e)) => text(500, format!("{e}\n"), "text/plain"),
                    Ok(Ok(eps)) => {
                        let now = chrono::Utc::now();
                        let v: Vec<serde_json::Value> = eps.iter().map(|e| e.record(now)).collect();
                        text(200, serde_json::to_string(&v).unwrap_or_default(), "application/json")
                    }
                },
            },
        },
        _ => text(404, "not found\n".into(), "text/plain"),
    })
}

/// Episodes `/history` returns unless asked (`limit=`), and at most.
const DEFAULT_HISTORY_LIMIT: usize = 1000;
const MAX_HISTORY_LIMIT: usize = 10_000;

/// `app=..&since=..&class=..&limit=..` (percent-encoded) as a history query.
fn history_query(query: &str) -> Result<crate::state::HistoryQuery, String> {
    let mut q = crate::state::HistoryQuery { limit: Some(DEFAULT_HISTORY_LIMIT), ..Default::default() };
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v = v.into_owned();
        match k.as_ref() {
            "app" => q.app = Some(v),
            "class" => q.class = Some(v),
            "since" => q.since = Some(crate::state::parse_since(&v, chrono::Utc::now())?),
            "limit" => {
                let n: usize = v.parse().map_err(|_| format!("limit {v:?} is not a number"))?;
                q.limit = Some(n.clamp(1, MAX_HISTORY_LIMIT));
            }
            other => return Err(format!("unknown parameter {other:?} (app, since, class, limit)")),
        }
    }
    Ok(q)
}

/// Serves the endpoints until the task is dropped. Returns the bound address.
pub async fn serve(addr: SocketAddr, state: SharedState) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, a connection reset before it was
                    // accepted: the listener itself is fine. Go on (after a pause, so a
                    // full descriptor table is not a busy loop); `/healthz` must outlive it.
                    tracing::warn!(error = %e, "accepting an operations connection failed; going on");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(req, state.clone()));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_queries_are_decoded() {
        let q = history_query("app=argocd%2Fweb&class=rbac&since=24h").unwrap();
        assert_eq!((q.app.as_deref(), q.class.as_deref()), (Some("argocd/web"), Some("rbac")));
        assert!(q.since.is_some());
        assert_eq!(q.limit, Some(DEFAULT_HISTORY_LIMIT));
        assert_eq!(history_query("limit=99999999").unwrap().limit, Some(MAX_HISTORY_LIMIT));
        assert!(history_query("limit=many").unwrap_err().contains("many"));
        assert!(history_query("page=3").unwrap_err().contains("page"));
        assert_eq!(history_query("app=a%2Fb+c").unwrap().app.as_deref(), Some("a/b c"));
        assert!(history_query("since=100000000d").unwrap_err().contains("100000000d"), "a 400, not a panic of the connection task");
    }
}
