//! Test support: a real HTTP server on loopback whose answers a test scripts, a log
//! capture, and the compliance harness every destination kind runs: success, retryable
//! failure then success, permanent failure, timeout, rate limit honoured, and no secret
//! in logs, errors, dead letters or counters.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use super::deliverer::ServiceRuntime;
use super::env::Env;
use super::kind::{Kind, Spec};
use super::outcome::{ConfigDuration, DeliverySettings, RateSettings, RetrySettings};
use super::queue::Delivery;
use crate::model::Notification;
use crate::secret::Secrets;
use crate::state::Store;

/// One scripted HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Whether the receiver took the message (a 2xx, unless marked rejected: Slack
    /// answers 200 with `ok: false`).
    pub accepted: bool,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Duration,
}

impl Reply {
    pub fn new(status: u16, body: &str) -> Reply {
        Reply { accepted: (200..300).contains(&status), status, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
    }
    /// An answer that refuses the message despite its status.
    pub fn rejected(mut self) -> Reply {
        self.accepted = false;
        self
    }
    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.to_string(), v.to_string()));
        self
    }
    pub fn delayed(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
}

/// A request the server received, with the status it answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: BTreeMap<String, String>,
    pub body: String,
    pub accepted: bool,
}

/// An answer a stand-in decides from the request itself ([`HttpReceiver::answer_with`]).
type Check = Arc<dyn Fn(&Recorded) -> Option<Reply> + Send + Sync>;

struct HttpState {
    requests: Vec<Recorded>,
    /// Answers a request it finds fault with, before the rules and the script.
    check: Option<Check>,
    /// A request whose body holds the text gets the reply, before the script.
    rules: Vec<(String, Reply)>,
    script: VecDeque<Reply>,
    default: Reply,
}

/// A real HTTP/1.1 server (hyper) on 127.0.0.1 with a random port.
#[derive(Clone)]
pub struct HttpReceiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<HttpState>>,
}

impl HttpReceiver {
    pub async fn start(default: Reply) -> HttpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state =
            Arc::new(Mutex::new(HttpState { requests: Vec::new(), check: None, rules: Vec::new(), script: VecDeque::new(), default }));
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| handle(req, st.clone()));
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        HttpReceiver { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next answers, in order; then the default.
    pub fn script(&self, replies: Vec<Reply>) {
        let mut s = self.state.lock().expect("lock");
        s.script = replies.into();
    }

    /// Every request whose body contains `needle` is answered `reply` (a receiver that
    /// refuses what one record holds, whatever else the request carries); others as
    /// scripted.
    pub fn answer_when_body_contains(&self, needle: &str, reply: Reply) {
        self.state.lock().expect("lock").rules.push((needle.to_string(), reply));
    }

    /// Every request is first shown to `check`, which answers the ones it finds
    /// fault with (`Some`) as the real service would: a token endpoint that verifies
    /// the JWT it is sent, an API that checks the bearer token, path and body. The
    /// others are answered by the rules and the script. Kept by [`HttpReceiver::clear`]:
    /// it is what the service is, not a scenario.
    pub fn answer_with(&self, check: impl Fn(&Recorded) -> Option<Reply> + Send + Sync + 'static) {
        self.state.lock().expect("lock").check = Some(Arc::new(check));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().expect("lock").requests.clone()
    }

    pub fn clear(&self) {
        let mut s = self.state.lock().expect("lock");
        s.requests.clear();
        s.rules.clear();
        s.script.clear();
    }
}

async fn handle(req: Request<Incoming>, state: Arc<Mutex<HttpState>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let at = Instant::now();
    let method = req.method().to_string();
    let path = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers: BTreeMap<String, String> =
        req.headers().iter().map(|(k, v)| (k.as_str().to_lowercase(), v.to_str().unwrap_or_default().to_string())).collect();
    let body = req.into_body().collect().await.map(|b| String::from_utf8_lossy(&b.to_bytes()).to_string()).unwrap_or_default();
    let mut recorded = Recorded { at, method, path, headers, body, accepted: false };
    let check = state.lock().expect("lock").check.clone();
    // Outside the lock: a check may take its time (verifying a signature).
    let checked = check.and_then(|c| c(&recorded));
    let reply = {
        let mut s = state.lock().expect("lock");
        let ruled = s.rules.iter().find(|(needle, _)| recorded.body.contains(needle.as_str())).map(|(_, r)| r.clone());
        let r = match checked.or(ruled) {
            Some(r) => r,
            None => s.script.pop_front().unwrap_or_else(|| s.default.clone()),
        };
        recorded.accepted = r.accepted;
        s.requests.push(recorded);
        r
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut resp = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        resp = resp.header(k, v);
    }
    Ok(resp.body(Full::new(Bytes::from(reply.body))).expect("valid response"))
}

/// A form body (`application/x-www-form-urlencoded`) as its fields.
pub fn form(body: &str) -> std::collections::HashMap<String, String> {
    form_urlencoded::parse(body.as_bytes()).into_owned().collect()
}

/// Captures every log line written while it is installed on this thread.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Installs a subscriber at `debug` for this thread (a `#[tokio::test]` runs its
    /// tasks on this thread).
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        let w = self.clone();
        let sub = tracing_subscriber::fmt().with_max_level(tracing::Level::DEBUG).with_writer(move || w.clone()).finish();
        tracing::subscriber::set_default(sub)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).to_string()
    }
}

/// Settings that keep the harness fast: short backoff and timeout, no rate limit.
pub fn fast_settings(base: DeliverySettings) -> DeliverySettings {
    DeliverySettings {
        retry: RetrySettings {
            max_attempts: 5,
            initial_backoff: ConfigDuration(Duration::from_millis(50)),
            max_backoff: ConfigDuration(Duration::from_millis(200)),
            deadline: ConfigDuration(Duration::from_secs(30)),
        },
        rate: RateSettings { per_second: 1000.0, burst: 100 },
        timeout: base.timeout.min(Duration::from_millis(600)),
        concurrency: base.concurrency,
        probe_backoff: (Duration::from_millis(50), Duration::from_millis(200)),
    }
}

pub fn env(state: Arc<Store>, secrets: Secrets) -> Env {
    Env {
        http: super::http::client(None, false).expect("http client"),
        refs: state.message_refs(),
        secrets,
        context: [("argocdUrl".to_string(), "https://cd.example.com".to_string()), ("clusterName".to_string(), "prod".to_string())].into(),
    }
}

/// The scenarios of the compliance harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Success,
    RetryableThenSuccess,
    Permanent,
    TimeoutThenSuccess,
    RateLimitedThenSuccess,
}

/// What a destination test provides: a receiver it can script, and a way to build the
/// service against it.
pub trait Receiver {
    /// Prepares the receiver for a scenario; may return the recipient to use (e-mail
    /// decides by address).
    fn arrange(&self, s: Scenario) -> Option<String>;
    /// Messages the receiver accepted (delivered), in order.
    fn accepted(&self) -> Vec<String>;
    /// Times at which attempts reached the receiver, when it can tell.
    fn attempt_times(&self) -> Vec<Instant>;
}

impl Receiver for HttpReceiver {
    fn arrange(&self, _: Scenario) -> Option<String> {
        None
    }
    fn accepted(&self) -> Vec<String> {
        self.requests().into_iter().filter(|r| r.accepted).map(|r| r.body).collect()
    }
    fn attempt_times(&self) -> Vec<Instant> {
        self.requests().into_iter().map(|r| r.at).collect()
    }
}

/// Runs the five scenarios against an HTTP receiver with a kind's own answers: `ok`
/// (what the vendor answers on success; delayed past the timeout once) and `refused`
/// (a permanent refusal). A 503 and a 429 with `Retry-After: 1` are the same for all.
pub async fn check_all_scenarios(
    rx: &HttpReceiver,
    build: &dyn Fn(&Env) -> ServiceRuntime,
    n: &Notification,
    secrets: &Secrets,
    secret: &str,
    ok: Reply,
    refused: Reply,
) {
    for (scenario, replies) in [
        (Scenario::Success, vec![]),
        (Scenario::RetryableThenSuccess, vec![Reply::new(503, "busy")]),
        (Scenario::Permanent, vec![refused]),
        (Scenario::TimeoutThenSuccess, vec![ok.delayed(Duration::from_millis(1500))]),
        (Scenario::RateLimitedThenSuccess, vec![Reply::new(429, "slow down").header("Retry-After", "1")]),
    ] {
        rx.clear();
        rx.script(replies);
        check_scenario(scenario, rx, build, n, secrets, secret).await;
    }
}

/// How a kind's compliance test builds its service: from `config`, which must parse as
/// that kind's own configuration (through the kind, not the registry).
pub fn maker<K: Kind + 'static>(config: serde_json::Value) -> impl Fn(&Env) -> ServiceRuntime {
    let spec = Spec::<K>::parse(config).expect("the service configuration");
    move |env: &Env| spec.build(K::KIND.as_str(), env).expect("the service")
}

/// [`check_all_scenarios`], then one more successful delivery of `n`: its request, for
/// the kind's own checks (method, path, authentication, body).
pub async fn check_http_kind(
    rx: &HttpReceiver,
    make: &dyn Fn(&Env) -> ServiceRuntime,
    n: &Notification,
    secrets: &Secrets,
    secret: &str,
    ok: Reply,
    refused: Reply,
) -> Recorded {
    check_all_scenarios(rx, make, n, secrets, secret, ok, refused).await;
    rx.clear();
    check_scenario(Scenario::Success, rx, make, n, secrets, secret).await;
    rx.requests().into_iter().next().expect("the successful delivery's request")
}

/// The service `make` builds, on a fresh state store (message references live there).
pub fn service(make: &dyn Fn(&Env) -> ServiceRuntime, secrets: &Secrets) -> ServiceRuntime {
    make(&env(Arc::new(Store::in_memory().expect("store")), secrets.clone()))
}

/// Delivers `n` alone, straight through the service's client (no outbox, no retry).
pub async fn deliver(service: &ServiceRuntime, n: &Notification) -> super::outcome::Outcome {
    service.deliverer.deliver(std::slice::from_ref(n)).await
}

/// Three notifications of `kind` for `service` ([`crate::deliver::ecs::tests::sample`]),
/// each with its own record key; the second's Application is named `poisoned`, which
/// no other text of the three holds (what a receiver scripted with
/// [`HttpReceiver::answer_when_body_contains`] refuses).
pub fn batch_with_a_poisoned_record(kind: crate::model::DestinationKind, service: &str) -> Vec<Notification> {
    ["good-0", "poisoned", "good-2"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut n = crate::deliver::ecs::tests::sample(kind, service);
            n.meta.name = (*name).to_string();
            if let Some(r) = n.record.as_mut() {
                r.key = format!("k{i}");
            }
            n
        })
        .collect()
}

/// Delivers `batch` through the outbox as one batch (enqueued before the worker
/// starts, so it finds them all due at once; the service's `batchSize` must hold
/// them), with [`fast_settings`]; returns the dead letters once all settled.
pub async fn deliver_as_one_batch(mut service: ServiceRuntime, state: Arc<Store>, batch: &[Notification]) -> Vec<crate::state::DeadLetter> {
    // Logged to a capture, as in `check_scenario`: tracing caches per call site, for
    // every thread, whether a line is wanted, and a worker logging with no
    // subscriber can leave a concurrent test's capture empty.
    let logs = LogCapture::default();
    let _guard = logs.install();
    service.settings = fast_settings(service.settings);
    state.enqueue(batch, 0).expect("enqueue");
    let delivery = Delivery::start(vec![service], state.clone());
    // A kind that writes files closes them at once rather than after their age.
    delivery.close_files();
    let settled = delivery.settle(Duration::from_secs(60), Duration::from_secs(20)).await;
    delivery.shutdown(Duration::from_secs(1)).await;
    assert!(settled, "the outbox did not drain: {:?}", state.outbox().entries(None));
    state.outbox().dead_letters().expect("dead letters")
}

/// `n`'s resolve.
pub fn resolve_of(n: &Notification) -> Notification {
    let mut r = n.clone();
    r.action = crate::model::Action::Resolve;
    r
}

/// Runs one scenario and checks what every destination kind must do in it. `build`
/// makes the service under test; `secret` is a secret value its configuration uses.
pub async fn check_scenario(
    scenario: Scenario,
    receiver: &dyn Receiver,
    build: &dyn Fn(&Env) -> ServiceRuntime,
    notification: &Notification,
    secrets: &Secrets,
    secret: &str,
) {
    let logs = LogCapture::default();
    let _guard = logs.install();
    let state = Arc::new(Store::in_memory().expect("store"));
    let env = env(state.clone(), secrets.clone());
    let mut service = build(&env);
    service.settings = fast_settings(service.settings);
    let name = service.name.clone();
    let mut n = notification.clone();
    n.destination.service = name.clone();
    if let Some(r) = receiver.arrange(scenario) {
        n.destination.recipient = r;
    }
    let before = receiver.accepted().len();
    let delivery = Delivery::start(vec![service], state.clone());
    delivery.submit(std::slice::from_ref(&n)).expect("submit");
    delivery.close_files();
    let settled = delivery.settle(Duration::from_secs(60), Duration::from_secs(20)).await;
    let stats = delivery.stats(&name).expect("stats");
    delivery.shutdown(Duration::from_secs(2)).await;
    assert!(settled, "{scenario:?}: the outbox did not drain: {:?}", state.outbox().entries(None));
    let accepted = receiver.accepted().len() - before;
    let dead = state.outbox().dead_letters().expect("dead letters");
    let attempts = stats.attempts.load(Ordering::Relaxed);
    let record = n.record.as_ref().expect("test notifications carry a record");
    match scenario {
        Scenario::Success => {
            assert_eq!(accepted, 1, "{scenario:?}");
            assert!(dead.is_empty(), "{scenario:?}: {dead:?}");
            assert_eq!(attempts, 1, "{scenario:?}");
            assert!(state.pass().is_notified(&record.app_key, &record.key).expect("state"), "{scenario:?}: recorded after success");
        }
        Scenario::RetryableThenSuccess | Scenario::TimeoutThenSuccess => {
            assert!(accepted >= 1, "{scenario:?}: delivered in the end");
            assert!(dead.is_empty(), "{scenario:?}: {dead:?}");
            assert!(attempts >= 2, "{scenario:?}: retried ({attempts} attempts)");
            assert!(stats.retried.load(Ordering::Relaxed) >= 1, "{scenario:?}");
            assert!(state.pass().is_notified(&record.app_key, &record.key).expect("state"), "{scenario:?}");
        }
        Scenario::Permanent => {
            assert_eq!(accepted, 0, "{scenario:?}");
            assert_eq!(attempts, 1, "{scenario:?}: a permanent failure is not retried");
            assert_eq!(dead.len(), 1, "{scenario:?}");
            assert!(dead[0].permanent, "{scenario:?}");
            assert!(!dead[0].error.is_empty());
        }
        Scenario::RateLimitedThenSuccess => {
            assert_eq!(accepted, 1, "{scenario:?}");
            let times = receiver.attempt_times();
            let times = &times[times.len() - 2..];
            let gap = times[1].duration_since(times[0]);
            assert!(gap >= Duration::from_millis(990), "{scenario:?}: retried after {gap:?}, Retry-After said 1s");
        }
    }
    let leaked = |what: &str, text: &str| assert!(!text.contains(secret), "{scenario:?}: the secret appears in {what}: {text}");
    // The log check only means something if the worker's logs were captured.
    let log_text = logs.text();
    let expected = match scenario {
        Scenario::Permanent => "dead-lettered",
        Scenario::Success => "delivered",
        _ => "will retry",
    };
    assert!(log_text.contains(expected), "{scenario:?}: no {expected:?} in the captured logs:\n{log_text}");
    leaked("the logs", &log_text);
    leaked("the dead letters", &serde_json::to_string(&dead).expect("json"));
    leaked("the outbox", &serde_json::to_string(&state.outbox().entries(None).expect("outbox")).expect("json"));
    leaked("the counters", &format!("{stats:?}"));
}

/// A private CA and a server certificate it signed for `localhost` and `127.0.0.1`.
pub struct TestTls {
    /// The CA certificate, PEM, in a file (what `caFile` settings point at).
    pub ca_file: tempfile::NamedTempFile,
    pub server: Arc<rustls::ServerConfig>,
    /// The server certificate and key as PEM (for external servers such as the SMTP one).
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn test_tls() -> TestTls {
    crate::tls::init_crypto();
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "driftwatch test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let leaf_params = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).expect("params");
    let leaf = leaf_params.signed_by(&leaf_key, &ca).expect("leaf");
    let certs = vec![leaf.der().clone()];
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).expect("key der");
    let server = rustls::ServerConfig::builder().with_no_client_auth().with_single_cert(certs, key).expect("server config");
    let mut ca_file = tempfile::NamedTempFile::new().expect("temp file");
    std::io::Write::write_all(&mut ca_file, ca.pem().as_bytes()).expect("write CA");
    TestTls { ca_file, server: Arc::new(server), cert_pem: leaf.pem(), key_pem: leaf_key.serialize_pem() }
}

/// An HTTPS server (hyper over rustls) answering `default`; returns it and its TLS.
pub async fn https_server(default: Reply) -> (HttpsServer, TestTls) {
    let tls = test_tls();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
    let state = Arc::new(Mutex::new(HttpState { requests: Vec::new(), check: None, rules: Vec::new(), script: VecDeque::new(), default }));
    let st = state.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (st, acceptor) = (st.clone(), acceptor.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else { return };
                let service = hyper::service::service_fn(move |req| handle(req, st.clone()));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (HttpsServer { inner: HttpReceiver { addr, state } }, tls)
}

pub struct HttpsServer {
    pub inner: HttpReceiver,
}

impl HttpsServer {
    pub fn port(&self) -> u16 {
        self.inner.addr.port()
    }
}
