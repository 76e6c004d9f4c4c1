//! The operations endpoints, served by axum: `/healthz` (the process is alive),
//! `/readyz` (initial lists done and configuration loaded), `/metrics` (OpenMetrics
//! text) and `/history` (the drift history as JSON, the same query as `driftwatch
//! history`, answered by the leader, which holds the state store open) and the web
//! view (`/ui`, see `ui.rs`: its assets open, its data behind the token). With
//! `operations.token` configured, everything but the first three needs
//! `Authorization: Bearer <token>` (401 otherwise, before anything is read).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::metrics::METRICS;

mod ui;
use crate::state::Store;

/// What the operations endpoints read, shared with the evaluation threads: the state
/// stores of the shards this replica holds (one without sharding; none while not
/// leading) and the token the protected endpoints require (the
/// running configuration's, swapped by a reload).
#[derive(Default)]
pub struct Shared {
    pub stores: std::sync::RwLock<std::collections::BTreeMap<u32, Arc<Store>>>,
    pub token: std::sync::RwLock<Option<crate::secret::Secret>>,
    /// `context.argocdUrl`, for the web view's links to Argo CD.
    pub argocd_url: std::sync::RwLock<String>,
    /// `operations.open`: without a token the protected endpoints answer anyone.
    pub open: std::sync::atomic::AtomicBool,
    /// History and web-view data requests being answered (each reads the store on the
    /// blocking pool): at most [`MAX_QUERIES`].
    pub queries: std::sync::atomic::AtomicUsize,
    /// The `/metrics` figures read from the state store, refreshed by one task.
    figures: Arc<Figures>,
}

/// The figures `/metrics` takes from the state store (queue depths, the oldest queued
/// entry, dead letters, open episodes) are read by one task, at most every
/// [`FIGURES_EVERY`], for every scrape waiting on them (review N7: a flood of scrapes
/// ran 4 store reads each on the blocking pool, outside [`MAX_QUERIES`]). A scrape
/// asks for figures read after it arrived, so a value it shows is never older than
/// the scrape.
struct Figures {
    /// A scrape wants figures newer than the last.
    wanted: tokio::sync::Notify,
    /// When the last figures were read (started).
    read_at: tokio::sync::watch::Sender<Option<tokio::time::Instant>>,
}

impl Default for Figures {
    fn default() -> Figures {
        Figures { wanted: tokio::sync::Notify::new(), read_at: tokio::sync::watch::Sender::new(None) }
    }
}

/// The least time between two reads of the `/metrics` figures.
const FIGURES_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// The longest a scrape waits for fresh figures before it answers with the last.
const FIGURES_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Store reads of one refresh of the figures, per store.
const FIGURES_READS: u64 = 4;

/// Every series the shipped dashboard and alert rules read, at 0, for the label values
/// `rt` and the program know: panels show 0, not "No data", before the first event.
fn prime_metrics(rt: &crate::config::Runtime) {
    use crate::model::DestinationKind;
    let kinds: Vec<&str> = DestinationKind::ALL.iter().map(|k| k.as_str()).collect();
    let services: Vec<&str> = rt.services.keys().map(String::as_str).collect();
    let triggers: Vec<&str> = rt.triggers.keys().map(String::as_str).collect();
    let mut audit_results = vec!["relevant"];
    audit_results.extend(crate::audit::event::Dropped::ALL.iter().map(|d| d.as_str()));
    let episode_events: Vec<&str> = crate::drift::episode::Event::ALL.iter().map(|e| e.as_str()).collect();
    let resolutions: Vec<&str> = crate::drift::episode::Resolution::ALL.iter().map(|r| r.as_str()).collect();
    METRICS.prime(&crate::metrics::Prime {
        kinds: &kinds,
        services: &services,
        triggers: &triggers,
        classes: crate::drift::classes::CLASSES,
        audit_results: &audit_results,
        break_glass_events: crate::drift::break_glass::EVENTS,
        episode_events: &episode_events,
        resolutions: &resolutions,
    });
}

/// History and web-view data requests answered at once; past it, 503 (review M5: fifty
/// `/history?class=zz&limit=10000` must not take every blocking thread).
const MAX_QUERIES: usize = 4;

/// One of [`MAX_QUERIES`], given back when the answer is done.
struct Query<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Query<'a> {
    fn take(count: &'a std::sync::atomic::AtomicUsize) -> Option<Query<'a>> {
        use std::sync::atomic::Ordering;
        count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_QUERIES).then_some(n + 1)).ok().map(|_| Query(count))
    }
}

impl Drop for Query<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

pub type SharedState = Arc<Shared>;

impl Shared {
    /// The store of `shard` (0 without sharding) while this replica holds it.
    pub fn set_store(&self, shard: u32, store: Option<Arc<Store>>) {
        let mut stores = self.stores.write().unwrap_or_else(|p| p.into_inner());
        match store {
            Some(s) => stores.insert(shard, s),
            None => stores.remove(&shard),
        };
    }

    pub fn set_token(&self, token: Option<crate::secret::Secret>) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// What the endpoints take from the running configuration (at start, on reload):
    /// also the metric series a dashboard reads, at 0 before the first event.
    pub fn set_config(&self, rt: &crate::config::Runtime) {
        prime_metrics(rt);
        self.set_token(rt.operations_token.clone());
        self.open.store(rt.operations_open, std::sync::atomic::Ordering::Release);
        *self.argocd_url.write().unwrap_or_else(|p| p.into_inner()) = rt.context.get("argocdUrl").cloned().unwrap_or_default();
    }

    pub fn argocd_url(&self) -> String {
        self.argocd_url.read().map(|u| u.clone()).unwrap_or_default()
    }

    /// Whether `authorization` (the request's header) carries the token, compared in
    /// constant time; without a token, whether `operations.open` opened the endpoints.
    fn authorized(&self, authorization: Option<&[u8]>) -> Access {
        let token = self.token.read().unwrap_or_else(|p| p.into_inner());
        match token.as_ref() {
            Some(t) if t.is_bearer(authorization) => Access::Allowed,
            Some(_) => Access::NoToken,
            None if self.open.load(std::sync::atomic::Ordering::Acquire) => Access::Allowed,
            None => Access::Closed,
        }
    }
}

/// What a request to a protected endpoint gets.
#[derive(Debug, PartialEq, Eq)]
enum Access {
    Allowed,
    /// A token is configured and the request does not carry it.
    NoToken,
    /// No token is configured and `operations.open` is not set: closed to everyone.
    Closed,
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The stores this replica holds (one without sharding), none while it does not lead.
pub(super) fn stores(shared: &SharedState) -> Option<Vec<Arc<Store>>> {
    let stores: Vec<Arc<Store>> = shared.stores.read().map(|s| s.values().cloned().collect()).unwrap_or_default();
    (!stores.is_empty()).then_some(stores)
}

/// Why [`each_store`] read nothing.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadFailed {
    #[error("{0}")]
    Store(#[from] crate::state::StateError),
    /// The read on the blocking pool panicked or was cancelled.
    #[error("{0}")]
    Task(#[from] tokio::task::JoinError),
}

/// `read` of every store in `stores`, one after another, on the blocking pool: what
/// each shard holds, in shard order.
pub(super) async fn each_store<T: Send + 'static>(
    stores: Vec<Arc<Store>>,
    read: impl Fn(&Store) -> Result<T, crate::state::StateError> + Send + 'static,
) -> Result<Vec<T>, ReadFailed> {
    Ok(tokio::task::spawn_blocking(move || stores.iter().map(|s| read(s)).collect::<Result<Vec<T>, _>>()).await??)
}

/// Of the episodes several shards answered (each its newest `limit`, oldest first),
/// the newest `limit`, oldest first: what one store answers.
pub(super) fn newest(mut episodes: Vec<crate::drift::episode::Episode>, limit: usize) -> Vec<crate::drift::episode::Episode> {
    episodes.sort_by(|a, b| a.opened_at.cmp(&b.opened_at).then_with(|| a.id.cmp(&b.id)));
    episodes.split_off(episodes.len().saturating_sub(limit))
}

/// Refuses a request to a protected endpoint without the configured token, before
/// the handler reads anything.
async fn require_token(State(shared): State<SharedState>, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match shared.authorized(req.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes())) {
        Access::Allowed => match Query::take(&shared.queries) {
            Some(_held) => next.run(req).await,
            None => {
                METRICS.ops_queries_busy.inc();
                (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], "busy: too many history requests at once\n").into_response()
            }
        },
        Access::NoToken => {
            (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "a bearer token is required (operations.token)\n")
                .into_response()
        }
        Access::Closed => (
            StatusCode::FORBIDDEN,
            "closed: set operations.token (or operations.open: true to serve the history to anyone who reaches this port)\n",
        )
            .into_response(),
    }
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n".into(), "text/plain")
}

/// An error's text for the open `/readyz`: what a parser quotes from the file (`invalid
/// type: string "…"`) may be a value written inline by mistake, a credential among them,
/// so each double-quoted part is hidden, but a `$key` reference; the log and `driftwatch
/// check` keep the whole text.
fn hide_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut parts = s.split('"');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    let mut inside = true;
    for part in parts {
        out.push('"');
        match inside && !part.starts_with('$') && !part.is_empty() {
            true => out.push('…'),
            false => out.push_str(part),
        }
        inside = !inside;
    }
    out
}

async fn readyz() -> Response {
    // A refused reload leaves the previous configuration running (still ready), and
    // says why here, as `driftwatch check` would.
    let ready = METRICS.ready.get() == 1;
    let mut body = if ready { "ready\n".to_string() } else { "not ready: initial lists not done\n".to_string() };
    let refused = METRICS.reload_errors();
    if !refused.is_empty() {
        body.push_str("the last configuration reload was refused; the previous configuration is running:\n");
        for e in refused {
            body.push_str(&format!("error: {}\n", hide_quoted(&e)));
        }
    }
    text(if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, body, "text/plain")
}

async fn metrics(State(shared): State<SharedState>) -> Response {
    // The figures from the store are read by `refresh_figures`, never here: a scrape
    // only waits (bounded) for a read that started after it arrived.
    if stores(&shared).is_some() {
        let arrived = tokio::time::Instant::now();
        let mut read_at = shared.figures.read_at.subscribe();
        shared.figures.wanted.notify_one();
        let fresh = read_at.wait_for(|at| at.is_some_and(|at| at >= arrived));
        // The watch's guard is dropped at once (it must not be held across an await).
        let read = tokio::time::timeout(FIGURES_WAIT, fresh).await.is_ok_and(|r| r.is_ok());
        if !read {
            tracing::debug!("the /metrics figures were not read in time; answering with the last");
        }
    }
    text(StatusCode::OK, METRICS.render(), crate::metrics::CONTENT_TYPE)
}

/// Reads the `/metrics` figures when a scrape wants them, at most every
/// [`FIGURES_EVERY`], until the endpoints' state is gone.
async fn refresh_figures(shared: std::sync::Weak<Shared>, figures: Arc<Figures>) {
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        figures.wanted.notified().await;
        if let Some(at) = last {
            tokio::time::sleep_until(at + FIGURES_EVERY).await;
        }
        let started = tokio::time::Instant::now();
        let Some(state) = shared.upgrade() else { return };
        read_figures(&state).await;
        drop(state);
        figures.read_at.send_replace(Some(started));
        last = Some(started);
    }
}

/// Queue depth comes from the outbox's per-service counters (kept in the transactions
/// that change the outbox): the truth, not a scan. Read on the blocking pool, as every
/// state store access outside the evaluation thread is. With shards, the sum of the
/// shards this replica holds.
async fn read_figures(shared: &SharedState) {
    let Some(stores) = stores(shared) else { return };
    METRICS.ops_store_reads.inc_by(FIGURES_READS.saturating_mul(stores.len() as u64));
    let Ok(per_shard) = each_store(stores, |s| {
        Ok((
            s.outbox().queue_depths()?,
            s.outbox().oldest_enqueued_ms()?,
            s.outbox().dead_letter_count()?,
            s.history().open_episodes_by_class()?,
        ))
    })
    .await
    else {
        return;
    };
    let (mut depths, mut oldest, mut dead, mut open) = (BTreeMap::<String, u64>::new(), None::<u64>, 0u64, BTreeMap::<String, u64>::new());
    for (d, o, n, classes) in per_shard {
        for (service, depth) in d {
            *depths.entry(service).or_default() += depth;
        }
        oldest = match (oldest, o) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        dead = dead.saturating_add(n);
        for (class, count) in classes {
            *open.entry(class).or_default() += count;
        }
    }
    METRICS.set_queue_depths(&depths);
    let now = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    METRICS.queue_oldest.set(oldest.map_or(0, |at| i64::try_from(now.saturating_sub(at) / 1000).unwrap_or(i64::MAX)));
    METRICS.dead_letters.set(i64::try_from(dead).unwrap_or(i64::MAX));
    METRICS.set_open_episodes(&open);
}

async fn history(State(shared): State<SharedState>, RawQuery(query): RawQuery) -> Response {
    // The newest `limit` episodes (1000 unless asked, at most 10000).
    let Some(stores) = stores(&shared) else {
        return text(StatusCode::SERVICE_UNAVAILABLE, "not leading: the leader holds the history\n".into(), "text/plain");
    };
    let q = match history_query(query.as_deref().unwrap_or_default()) {
        Ok(q) => q,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n"), "text/plain"),
    };
    let limit = q.limit.unwrap_or(DEFAULT_HISTORY_LIMIT);
    match each_store(stores, move |s| s.history().episodes(&q)).await {
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"), "text/plain"),
        Ok(per_shard) => {
            let eps = newest(per_shard.into_iter().flatten().collect(), limit);
            let now = chrono::Utc::now();
            let v: Vec<serde_json::Value> = eps.iter().map(|e| e.record(now)).collect();
            text(StatusCode::OK, serde_json::to_string(&v).unwrap_or_default(), "application/json")
        }
    }
}

/// Episodes `/history` returns unless asked (`limit=`), and at most.
const DEFAULT_HISTORY_LIMIT: usize = 1000;
const MAX_HISTORY_LIMIT: usize = 10_000;

/// `app=..&since=..&until=..&class=..&limit=..` (percent-encoded) as a history query.
fn history_query(query: &str) -> Result<crate::state::HistoryQuery, String> {
    let mut q = crate::state::HistoryQuery { limit: Some(DEFAULT_HISTORY_LIMIT), ..Default::default() };
    let (mut since, mut until) = (None, None);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        let v = v.into_owned();
        match k.as_ref() {
            "app" => q.app = Some(v),
            "class" => q.class = Some(v),
            "since" => since = Some(v),
            "until" => until = Some(v),
            "limit" => {
                let n: usize = v.parse().map_err(|_| format!("limit {v:?} is not a number"))?;
                q.limit = Some(n.clamp(1, MAX_HISTORY_LIMIT));
            }
            other => return Err(format!("unknown parameter {other:?} (app, since, until, class, limit)")),
        }
    }
    (q.since, q.until) = crate::duration::parse_window(("since", since.as_deref()), ("until", until.as_deref()), chrono::Utc::now())
        .map_err(|e| e.to_string())?;
    Ok(q)
}

/// The endpoints' routes.
fn router(state: SharedState) -> Router {
    // Probes and the scrape stay open (a kubelet and Prometheus carry no token); what
    // names resources, managers and recipients does not.
    let protected = Router::new()
        .route("/history", get(history))
        .route("/ui/api/fleet", get(ui::fleet_handler))
        .route("/ui/api/app", get(ui::app_handler))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        // The web view's page, script and style hold no data: open, so a browser can
        // load them before it has the token.
        .route("/ui", get(ui::index))
        .route("/ui/", get(ui::index))
        .route("/ui/app.js", get(ui::script))
        .route("/ui/app.css", get(ui::style))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(protected)
        .fallback(|| async { text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain") })
        .with_state(state)
}

/// The paths the probes' lane answers when the connection caps are reached.
const PROBE_PATHS: &[&str] = &["/healthz", "/readyz"];

/// The operations listener's bounds: 128 connections, 32 from one address, a
/// connection at most 5 minutes and 1,000 requests, and 8 reserved slots for the
/// probes (2 s for their headers, one request each) so that held connections cannot
/// fail the kubelet's probes (review N7).
fn bounds() -> crate::serve::Bounds {
    crate::serve::Bounds {
        what: "operations",
        max_connections: 128,
        max_per_peer: 32,
        probes: Some(crate::serve::Probes { slots: 8, paths: PROBE_PATHS, header_timeout: std::time::Duration::from_secs(2) }),
        ..crate::serve::Bounds::default()
    }
}

/// Serves the endpoints until `shutdown` completes (connections in progress are left
/// to finish), within [`bounds`], with the task that reads the `/metrics` figures.
/// Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    state: SharedState,
    tls: Option<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let dropped: fn(crate::serve::Dropped) = |_| {
        METRICS.ops_connections_refused.inc();
    };
    tokio::spawn(refresh_figures(Arc::downgrade(&state), state.figures.clone()));
    tokio::spawn(crate::serve::run(listener, tls.map(Arc::new), router(state), bounds(), dropped, shutdown));
    Ok(bound)
}
#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Review L-e: the open `/readyz` does not repeat what a parser quoted from the
    /// file (a value written inline, a credential among them); references and the rest
    /// of the message stay. (Before: the whole message.)
    #[test]
    fn readyz_hides_what_a_parser_quoted() {
        assert_eq!(
            hide_quoted(r#"services.hook.token: invalid type: string "hunter2", expected a map"#),
            r#"services.hook.token: invalid type: string "…", expected a map"#
        );
        assert_eq!(hide_quoted("services.hook: secret $hook-token is not set"), "services.hook: secret $hook-token is not set");
        assert_eq!(hide_quoted(r#"a "$ref" and "x" and "" end"#), r#"a "$ref" and "…" and "" end"#);
        assert_eq!(hide_quoted(r#"unterminated "secret"#), r#"unterminated "…"#);
    }

    /// Review M5: at most four history or web-view data requests are answered at
    /// once; one done makes room for the next.
    #[test]
    fn history_requests_are_answered_a_few_at_a_time() {
        let count = std::sync::atomic::AtomicUsize::new(0);
        let held: Vec<_> = (0..MAX_QUERIES).map(|_| Query::take(&count).expect("room")).collect();
        assert!(Query::take(&count).is_none(), "a fifth is refused");
        drop(held);
        assert_eq!(count.load(std::sync::atomic::Ordering::Acquire), 0);
        assert!(Query::take(&count).is_some());
    }

    async fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> u16 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
    }

    /// Past the requests running at once, `/history` answers 503 with Retry-After and
    /// counts it as busy, not as a refused connection.
    /// Two shards' answers (each oldest first) become one: the newest `limit`, oldest
    /// first, whichever shard each came from.
    #[test]
    fn the_shards_histories_merge_into_the_newest_of_them_all() {
        let ep = |name: &str, min: u32| -> crate::drift::episode::Episode {
            serde_json::from_value(serde_json::json!({
                "id": format!("argocd/{name}@{min}"), "appKey": format!("argocd/{name}@u"), "namespace": "argocd", "name": name,
                "project": "default", "cluster": "in-cluster", "openedAt": format!("2026-12-06T10:{min:02}:00Z"),
                "severity": "warning", "direction": "live", "revision": "r1", "outOfSync": true, "degraded": false,
                "classes": [], "resources": [], "attribution": []}))
            .unwrap()
        };
        let shard_0 = vec![ep("a", 1), ep("a", 4), ep("a", 9)];
        let shard_1 = vec![ep("b", 2), ep("b", 7)];
        let merged = newest(shard_0.into_iter().chain(shard_1).collect(), 3);
        let ids: Vec<&str> = merged.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["argocd/a@4", "argocd/b@7", "argocd/a@9"]);
        assert_eq!(newest(vec![ep("c", 3)], 10).len(), 1);
    }

    #[tokio::test]
    async fn a_busy_history_answers_503_and_counts_it() {
        let shared: SharedState = Arc::new(Shared::default());
        shared.set_store(0, Some(Arc::new(Store::in_memory().unwrap())));
        shared.set_token(Some(crate::secret::Secret::new("s3cret-ops-token".into())));
        let addr = serve("127.0.0.1:0".parse().unwrap(), shared.clone(), None, std::future::pending()).await.unwrap();
        let auth = Some("Bearer s3cret-ops-token");
        assert_eq!(get(addr, "/history", auth).await, 200);
        let held: Vec<_> = (0..MAX_QUERIES).map(|_| Query::take(&shared.queries).expect("room")).collect();
        let (busy, refused) = (METRICS.ops_queries_busy.get(), METRICS.ops_connections_refused.get());
        assert_eq!(get(addr, "/history", auth).await, 503);
        assert_eq!(METRICS.ops_queries_busy.get(), busy + 1);
        assert_eq!(METRICS.ops_connections_refused.get(), refused, "a busy answer is not a refused connection");
        drop(held);
        assert_eq!(get(addr, "/history", auth).await, 200);
    }

    /// With a token configured, `/history` answers only a request that carries it;
    /// without one it is closed unless `operations.open`; the probes and the scrape stay
    /// open.
    #[tokio::test]
    async fn the_history_needs_the_token_the_probes_do_not() {
        let shared: SharedState = Arc::new(Shared::default());
        shared.set_store(0, Some(Arc::new(Store::in_memory().unwrap())));
        shared.set_token(Some(crate::secret::Secret::new("s3cret-ops-token".into())));
        let addr = serve("127.0.0.1:0".parse().unwrap(), shared.clone(), None, std::future::pending()).await.unwrap();
        assert_eq!(get(addr, "/history", None).await, 401);
        assert_eq!(get(addr, "/history", Some("Bearer wrong-token-000000")).await, 401);
        assert_eq!(get(addr, "/history", Some("Basic czNjcmV0LW9wcy10b2tlbg==")).await, 401);
        assert_eq!(get(addr, "/history?limit=nope", None).await, 401, "refused before the query is read");
        assert_eq!(get(addr, "/history", Some("Bearer s3cret-ops-token")).await, 200);
        assert_eq!(get(addr, "/ui/api/fleet", None).await, 401, "the web view's data needs it");
        assert_eq!(get(addr, "/ui/api/app?app=argocd%2Fweb", None).await, 401);
        assert_eq!(get(addr, "/ui/api/fleet?limit=0", Some("Bearer s3cret-ops-token")).await, 400);
        assert_eq!(get(addr, "/ui/api/fleet", Some("Bearer s3cret-ops-token")).await, 200);
        for open in ["/healthz", "/metrics", "/ui", "/ui/app.js", "/ui/app.css"] {
            assert_eq!(get(addr, open, None).await, 200, "{open}");
        }
        assert_eq!(get(addr, "/readyz", None).await / 100, 5, "not ready, but answered without a token");
        // Review M5: no token is closed, not open, unless operations.open says so.
        shared.set_token(None);
        assert_eq!(get(addr, "/history", None).await, 403, "no token configured: closed");
        assert_eq!(get(addr, "/ui/api/fleet", None).await, 403);
        assert_eq!(get(addr, "/healthz", None).await, 200);
        shared.open.store(true, std::sync::atomic::Ordering::Release);
        assert_eq!(get(addr, "/history", None).await, 200, "opened explicitly");
    }

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
        let window = history_query("since=2026-12-01T00:00:00Z&until=2026-12-02T00:00:00Z").unwrap();
        assert_eq!(window.until.map(|t| t.to_rfc3339()).as_deref(), Some("2026-12-02T00:00:00+00:00"));
        assert!(history_query("until=soon").unwrap_err().starts_with("until: "), "named by its own parameter");
        assert_eq!(history_query("since=1h&until=2h").unwrap_err(), "until is before since");
    }
}
