//! Kubernetes audit events as an input: `POST /audit` on a listener of its own (the
//! API server's webhook backend, batch mode) and an audit log file followed as the API
//! server writes it. Both decode, filter ([`event`]) against the managed objects
//! ([`index`]) and hand the relevant events, as `drift::audit::Attempt`s, to a bounded
//! queue the daemon forwards to the evaluation thread; nothing here waits on the
//! evaluation or on a delivery.

pub mod event;
pub mod file;
pub mod inbox;
pub mod index;
pub mod listener;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tokio::sync::mpsc;

use crate::config::AuditSettings;
use crate::drift::audit::Attempt;
use crate::metrics::METRICS;
use crate::secret::Secret;

pub use self::index::ManagedIndex;

/// What the ingest shares with the evaluation thread: the managed objects (written as
/// Applications change), and the settings a reload may swap.
pub struct Shared {
    pub index: RwLock<ManagedIndex>,
    token: RwLock<Option<Secret>>,
    identities: RwLock<Arc<crate::config::ArgoIdentities>>,
    /// The spokes' feeds (`clusters[].auditToken`): a batch's cluster is the one whose
    /// token it carries.
    spokes: RwLock<Arc<Vec<crate::config::SpokeFeed>>>,
    mask: RwLock<Arc<crate::drift::mask::Masker>>,
    /// How far from now an event may be dated (`audit.maxEventAge`/`maxEventAhead`).
    times: RwLock<event::TimeBounds>,
    /// Relevant events queued and not yet taken by the evaluation thread.
    pending: AtomicUsize,
    /// Whether this replica evaluates (a standby refuses batches with 503).
    leading: AtomicBool,
    queue: usize,
    max_body: usize,
    /// What the running input was started with, which a reload cannot change.
    started: Started,
    /// Audit IDs (with their Application) already queued, oldest first: a replayed
    /// event is dropped, also long after `audit.window` (bounded: [`MAX_SEEN_IDS`]).
    seen: std::sync::Mutex<(std::collections::HashSet<String>, std::collections::VecDeque<String>)>,
}

/// Audit IDs remembered against replays (about 10 MB at most).
const MAX_SEEN_IDS: usize = 100_000;

/// The settings the running listener and file follower were built from: a reload that
/// changes any of them is refused, since the running input would go on accepting what
/// the old ones allowed until a restart.
#[derive(Debug, Clone, PartialEq)]
struct Started {
    listen: Option<std::net::SocketAddr>,
    tls: Option<crate::config::ServerTls>,
    file: Option<std::path::PathBuf>,
    queue: usize,
    max_body: usize,
}

impl Started {
    fn of(s: &AuditSettings) -> Started {
        Started { listen: s.listen, tls: s.tls.clone(), file: s.file.clone(), queue: s.queue, max_body: s.max_body_bytes }
    }

    /// Whether the running TLS configuration verifies a client certificate.
    fn client_certificate(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.client_ca.is_some())
    }
}

impl Shared {
    pub fn new(s: &AuditSettings) -> Arc<Shared> {
        Arc::new(Shared {
            index: RwLock::new(ManagedIndex::default()),
            token: RwLock::new(s.token.clone()),
            identities: RwLock::new(Arc::new(s.argocd_identities.clone())),
            spokes: RwLock::new(Arc::new(s.spokes.clone())),
            mask: RwLock::new(Arc::new(s.mask.clone())),
            times: RwLock::new(s.times),
            pending: AtomicUsize::new(0),
            leading: AtomicBool::new(false),
            queue: s.queue,
            max_body: s.max_body_bytes,
            started: Started::of(s),
            seen: std::sync::Mutex::new(Default::default()),
        })
    }

    /// Whether a reload to `s` can be applied to the running input, or why not. Only
    /// the token (a rotation) and the Argo CD identities can change while it runs; a
    /// reload that removes the audit input, or changes its listener, TLS files, file,
    /// or bounds, would leave the running listener accepting what the old settings
    /// allowed, so it is refused and the running configuration kept.
    pub fn reloadable(&self, s: &AuditSettings) -> Result<(), NotReloadable> {
        self.reloadable_text(s).map_err(NotReloadable)
    }

    /// [`Self::reloadable`], its refusal as text.
    fn reloadable_text(&self, s: &AuditSettings) -> Result<(), String> {
        if !s.enabled() {
            return Err("audit: the new configuration has no audit input, but the running listener or file goes on until a \
                        restart; restart driftwatch to turn the audit input off"
                .into());
        }
        if Started::of(s) != self.started {
            return Err("audit.listen, audit.tls, audit.file, audit.maxBodyBytes or audit.queue changed: the running audit \
                        input was built from the old values and keeps them until a restart; restart driftwatch to apply them"
                .into());
        }
        let labels = |l: &[crate::config::SpokeFeed]| l.iter().map(|f| f.cluster.clone()).collect::<Vec<_>>();
        if labels(&s.spokes) != labels(&self.spokes.read().unwrap_or_else(|p| p.into_inner())) {
            return Err("the clusters with an auditToken changed: the running listener takes batches from the ones it started \
                        with until a restart (a token may be rotated by a reload)"
                .into());
        }
        if s.token.is_none() && self.started.listen.is_some() && !self.started.client_certificate() {
            return Err("audit.token removed while the running listener verifies no client certificate: it would accept anyone".into());
        }
        Ok(())
    }

    /// A reload already found [`reloadable`](Self::reloadable): the token and the
    /// identities follow.
    pub fn reload(&self, s: &AuditSettings) {
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = s.token.clone();
        *self.identities.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(s.argocd_identities.clone());
        *self.spokes.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(s.spokes.clone());
        *self.mask.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(s.mask.clone());
        *self.times.write().unwrap_or_else(|p| p.into_inner()) = s.times;
    }

    /// How far from now an event may be dated.
    pub fn times(&self) -> event::TimeBounds {
        *self.times.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The masking rules (`diff.mask` follows a reload).
    pub fn mask(&self) -> Arc<crate::drift::mask::Masker> {
        self.mask.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_leading(&self, leading: bool) {
        self.leading.store(leading, Ordering::Release);
    }

    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    pub fn identities(&self) -> Arc<crate::config::ArgoIdentities> {
        self.identities.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `authorization` carries the token (constant time). Without a token only
    /// a running TLS configuration that verifies client certificates authenticates;
    /// "no token" never means "open".
    pub fn authorized(&self, authorization: Option<&[u8]>) -> bool {
        self.feed(authorization).is_some_and(|c| c.is_empty())
    }

    /// Whose audit feed `authorization` is: `""` for this cluster's API server (its
    /// token, or without a token a verified client certificate), a spoke's label for
    /// its `auditToken`; `None`: nobody's. Every token is compared (constant time each).
    pub fn feed(&self, authorization: Option<&[u8]>) -> Option<String> {
        let spokes = self.spokes.read().unwrap_or_else(|p| p.into_inner()).clone();
        let spoke = spokes.iter().filter(|f| f.token.is_bearer(authorization)).map(|f| f.cluster.clone()).next_back();
        let token = self.token.read().unwrap_or_else(|p| p.into_inner());
        match (token.as_ref(), spoke) {
            (Some(t), _) if t.is_bearer(authorization) => Some(String::new()),
            (_, Some(s)) => Some(s),
            // No token: a verified client certificate is this cluster's API server.
            (None, None) if self.started.client_certificate() => Some(String::new()),
            _ => None,
        }
    }

    /// Whose writes are the engines' in `cluster` (`""`: this one). A spoke no longer
    /// configured (a batch kept from before a restart) has none: every write there is
    /// judged as anyone's.
    pub fn identities_in(&self, cluster: &str) -> Arc<crate::config::ArgoIdentities> {
        if cluster.is_empty() {
            return self.identities();
        }
        let spokes = self.spokes.read().unwrap_or_else(|p| p.into_inner());
        Arc::new(spokes.iter().find(|f| f.cluster == cluster).map(|f| f.identities.clone()).unwrap_or_default())
    }

    /// The label a feed's batches are counted under (`in-cluster`: this one).
    pub fn feed_label(cluster: &str) -> &str {
        if cluster.is_empty() { "in-cluster" } else { cluster }
    }

    /// The feeds' labels, to prime their series.
    pub fn feed_labels(&self) -> Vec<String> {
        let spokes = self.spokes.read().unwrap_or_else(|p| p.into_inner());
        std::iter::once("in-cluster".to_string()).chain(spokes.iter().map(|f| f.cluster.clone())).collect()
    }

    /// Decodes and filters a batch (CPU: call it off the async workers).
    pub fn filter(&self, body: &[u8]) -> Result<event::Batch, event::Malformed> {
        let (ids, mask, times) = (self.identities(), self.mask(), self.times());
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        let f =
            event::Filter { argocd_identities: &ids, index: &index, now: chrono::Utc::now(), mask: &mask, times: Some(times), cluster: "" };
        let batch = event::parse_list(body, &f)?;
        count(&batch);
        Ok(batch)
    }
}

/// Counts what a batch held.
fn count(batch: &event::Batch) {
    METRICS.audit_events.add("relevant", (batch.attempts.len() + batch.break_glass.len()) as u64);
    for (d, n) in event::Dropped::ALL.iter().zip(batch.dropped) {
        if n > 0 {
            METRICS.audit_events.add(d.as_str(), n);
        }
    }
}

/// What a batch held that the evaluation needs: changes and refused attempts on
/// managed objects, and writes of the break-glass annotation on Applications.
#[derive(Debug, Default)]
pub struct Relevant {
    pub attempts: Vec<Attempt>,
    pub break_glass: Vec<crate::drift::break_glass::Write>,
}

impl Relevant {
    pub fn len(&self) -> usize {
        self.attempts.len() + self.break_glass.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<event::Batch> for Relevant {
    fn from(b: event::Batch) -> Self {
        Relevant { attempts: b.attempts, break_glass: b.break_glass }
    }
}

/// The queue from the ingest to the evaluation thread, bounded in events.
#[derive(Clone)]
pub struct Sink {
    shared: Arc<Shared>,
    tx: mpsc::Sender<(Instant, Relevant)>,
    /// With the state in PostgreSQL: batches go to the audit inbox, for every shard's
    /// leader, instead of this replica's queue ([`inbox`]).
    relay: Option<inbox::Relay>,
}

/// What of a bound (the audit queue, the audit inbox) the spokes' batches may fill: four
/// fifths, the rest kept for the batches of the cluster driftwatch runs in.
pub fn spokes_share(bound: usize) -> usize {
    bound / 5 * 4
}

/// The receiving end: what the daemon forwards to the evaluation thread.
pub struct Queue {
    shared: Arc<Shared>,
    rx: mpsc::Receiver<(Instant, Relevant)>,
}

/// A bounded queue of relevant events.
pub fn queue(shared: &Arc<Shared>) -> (Sink, Queue) {
    let (tx, rx) = mpsc::channel(shared.queue.max(1));
    (Sink { shared: shared.clone(), tx, relay: None }, Queue { shared: shared.clone(), rx })
}

impl Relevant {
    /// The replay key of each event: driftwatch's identity of it (a digest of the
    /// event, never the client's audit ID alone) with its Application (one event can
    /// concern two Applications).
    fn keys(&self) -> Vec<String> {
        let attempts = self.attempts.iter().map(|a| (&a.id, &a.app_key));
        let writes = self.break_glass.iter().map(|w| (&w.id, &w.app_key));
        attempts.chain(writes).filter(|(id, _)| !id.is_empty()).map(|(id, app)| format!("{id}\0{app}")).collect()
    }
}

impl Shared {
    /// Drops the events already queued once (a replayed batch, a batch the API server
    /// sent again after its 200 was lost); how many.
    fn drop_replayed(&self, r: &mut Relevant) -> usize {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let before = r.len();
        let known = |id: &str, app: &str| !id.is_empty() && seen.0.contains(&format!("{id}\0{app}"));
        r.attempts.retain(|a| !known(&a.id, &a.app_key));
        r.break_glass.retain(|w| !known(&w.id, &w.app_key));
        before - r.len()
    }

    /// Drops from `r` the events already taken and remembers the rest: a shard's
    /// leader reading the inbox again after a restart or a failed write.
    pub fn fresh(&self, r: &mut Relevant) {
        let replayed = self.drop_replayed(r);
        if replayed > 0 {
            METRICS.audit_dropped.add("replayed", replayed as u64);
        }
        self.remember(r.keys());
    }

    /// Remembers queued events against replays, forgetting the oldest past the bound.
    fn remember(&self, keys: Vec<String>) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for k in keys {
            if seen.0.insert(k.clone()) {
                seen.1.push_back(k);
            }
        }
        while seen.1.len() > MAX_SEEN_IDS {
            if let Some(old) = seen.1.pop_front() {
                seen.0.remove(&old);
            }
        }
    }
}

impl Sink {
    /// Batches the listener takes go to the audit inbox through `relay` (the file
    /// follower still queues here).
    pub fn relaying(self, relay: inbox::Relay) -> Sink {
        Sink { relay: Some(relay), ..self }
    }

    /// Queues a batch's relevant events whole, or refuses it whole when the queue has
    /// no room (counted): never waits.
    ///
    /// A batch larger than the whole queue could never be taken, and the API server
    /// would send it again until it gives up, losing everything in it (review L3): its
    /// first `audit.queue` events are taken like a batch that fits, and the rest are
    /// dropped and counted (`driftwatch_audit_dropped_total{reason="batch-over-queue"}`).
    pub fn offer(&self, arrived: Instant, attempts: Relevant) -> bool {
        self.offer_from(arrived, attempts, "")
    }

    /// [`Self::offer`] of a batch from the cluster `cluster` (`""`: this one): a spoke's
    /// batches may fill the queue only to [`spokes_share`], so that a spoke's token
    /// holder flooding it cannot keep the hub's batches out.
    pub fn offer_from(&self, arrived: Instant, mut attempts: Relevant, cluster: &str) -> bool {
        let cap = match cluster {
            "" => self.shared.queue,
            _ => spokes_share(self.shared.queue),
        };
        if attempts.len() > cap {
            let over = attempts.len() - cap;
            let keep_bg = attempts.break_glass.len().min(cap);
            attempts.break_glass.truncate(keep_bg);
            attempts.attempts.truncate(cap - keep_bg);
            METRICS.audit_dropped.add("batch-over-queue", over as u64);
        }
        let replayed = self.shared.drop_replayed(&mut attempts);
        if replayed > 0 {
            METRICS.audit_dropped.add("replayed", replayed as u64);
        }
        let n = attempts.len();
        if n == 0 {
            return true;
        }
        let keys = attempts.keys();
        let before = self.shared.pending.fetch_add(n, Ordering::AcqRel);
        if before.saturating_add(n) > cap || self.tx.try_send((arrived, attempts)).is_err() {
            self.shared.pending.fetch_sub(n, Ordering::AcqRel);
            METRICS.audit_dropped.add("queue-full", n as u64);
            return false;
        }
        self.shared.remember(keys);
        true
    }

    /// Queues a batch, waiting for room (the file follower: the file keeps what waits).
    pub fn send_blocking(&self, mut attempts: Relevant) -> bool {
        let replayed = self.shared.drop_replayed(&mut attempts);
        if replayed > 0 {
            METRICS.audit_dropped.add("replayed", replayed as u64);
        }
        let n = attempts.len();
        if n == 0 {
            return true;
        }
        let keys = attempts.keys();
        self.shared.pending.fetch_add(n, Ordering::AcqRel);
        let sent = self.tx.blocking_send((Instant::now(), attempts)).is_ok();
        if sent {
            self.shared.remember(keys);
        }
        sent
    }
}

impl Queue {
    /// The next batch, with when its request arrived (or its lines were read).
    pub async fn recv(&mut self) -> Option<(Instant, Relevant)> {
        let batch = self.rx.recv().await?;
        self.shared.pending.fetch_sub(batch.1.len(), Ordering::AcqRel);
        Some(batch)
    }
}

/// Why a reload cannot be applied to the running audit input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotReloadable(pub String);

impl From<NotReloadable> for String {
    fn from(e: NotReloadable) -> String {
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch goes in whole or not at all, and never past the bound in events; taking
    /// one out makes room.
    #[tokio::test]
    async fn the_queue_is_bounded_in_events_and_never_waits() {
        let shared = Shared::new(&AuditSettings { queue: 3, ..AuditSettings::default() });
        let (sink, mut queue) = queue(&shared);
        let batch = |n: usize| Relevant { attempts: vec![Attempt::default(); n], break_glass: Vec::new() };
        let now = Instant::now();
        assert!(sink.offer(now, batch(2)));
        assert!(!sink.offer(now, batch(2)), "2 + 2 > 3: refused whole");
        assert!(sink.offer(now, batch(1)));
        assert!(!sink.offer(now, batch(1)));
        assert_eq!(queue.recv().await.map(|b| b.1.len()), Some(2));
        assert!(sink.offer(now, batch(2)));
        assert!(sink.offer(now, Relevant::default()), "nothing to queue is no refusal");
        // A spoke's batch may fill four fifths of the queue only: the rest is the hub's.
        let wide = Shared::new(&AuditSettings { queue: 10, ..AuditSettings::default() });
        let (spoke_sink, _q) = super::queue(&wide);
        assert!(spoke_sink.offer_from(now, batch(8), "edge-1"));
        assert!(!spoke_sink.offer_from(now, batch(1), "edge-1"), "past the spokes' share");
        assert!(spoke_sink.offer_from(now, batch(2), ""), "the hub's batch still fits");
        // A batch larger than the whole queue: once the queue is empty, its first 3 are
        // taken and the rest counted, instead of a refusal on every retry.
        while queue.rx.try_recv().is_ok() {}
        shared.pending.store(0, Ordering::Release);
        assert!(sink.offer(now, batch(5)));
        assert_eq!(queue.recv().await.map(|b| b.1.len()), Some(3));
    }

    /// Review M4 and N4: an event queued once (by its digest, not the client-chosen
    /// audit ID) is dropped when it comes again (a replayed or
    /// re-sent batch), long after the window; a batch refused for room is not
    /// remembered, so the API server's retry of it is taken.
    #[tokio::test]
    async fn a_replayed_event_is_dropped() {
        let shared = Shared::new(&AuditSettings { queue: 2, ..AuditSettings::default() });
        let (sink, mut queue) = queue(&shared);
        let one = |id: &str| Relevant {
            // One client-chosen audit ID for all: the event's identity is its digest.
            attempts: vec![Attempt { id: id.into(), audit_id: "0bad".into(), app_key: "argocd/a@u".into(), ..Attempt::default() }],
            break_glass: Vec::new(),
        };
        let now = Instant::now();
        assert!(sink.offer(now, one("id-1")));
        assert!(sink.offer(now, one("id-1")), "nothing left to queue is no refusal");
        assert_eq!(queue.recv().await.map(|b| b.1.len()), Some(1));
        assert!(queue.rx.try_recv().is_err(), "the replay was dropped");
        assert!(sink.offer(now, one("id-2")) && sink.offer(now, one("id-3")), "other events under the same audit ID");
        assert!(!sink.offer(now, one("id-4")), "full: refused");
        assert_eq!(queue.recv().await.map(|b| b.1.len()), Some(1));
        assert!(sink.offer(now, one("id-4")), "the retry of a refused batch is taken");
    }

    /// "No token" is open only to a running listener that verifies client certificates;
    /// a reload may rotate the token but not drop it, nor change what the listener was
    /// built from.
    #[test]
    fn no_token_never_means_open_and_a_reload_cannot_weaken_the_listener() {
        let listen = Some("127.0.0.1:0".parse().unwrap());
        let token = Some(Secret::new("t0ken".into()));
        let files = |ca: Option<&str>| {
            Some(crate::config::ServerTls {
                cert: "c".into(),
                key: "k".into(),
                client_ca: ca.map(Into::into),
                client_names: vec!["kube-apiserver".into()],
            })
        };
        let tls = files(None);
        let running = Shared::new(&AuditSettings { listen, tls: tls.clone(), token: token.clone(), ..AuditSettings::default() });
        assert!(running.authorized(Some(b"Bearer t0ken")));
        assert!(!running.authorized(None));
        let rotated = AuditSettings { listen, tls: tls.clone(), token: Some(Secret::new("other".into())), ..AuditSettings::default() };
        assert_eq!(running.reloadable(&rotated), Ok(()));
        running.reload(&rotated);
        assert!(!running.authorized(Some(b"Bearer t0ken")));
        assert!(running.authorized(Some(b"Bearer other")));
        for weaker in [
            AuditSettings::default(),
            AuditSettings { listen, tls: tls.clone(), ..AuditSettings::default() },
            AuditSettings { listen, tls: files(Some("ca")), ..AuditSettings::default() },
        ] {
            assert!(running.reloadable(&weaker).is_err(), "{weaker:?}");
        }
        let open = Shared::new(&AuditSettings { listen, tls, ..AuditSettings::default() });
        assert!(!open.authorized(None), "no token and no client CA is not open");
        let mtls = Shared::new(&AuditSettings { listen, tls: files(Some("ca")), ..AuditSettings::default() });
        assert!(mtls.authorized(None), "the client certificate authenticated");
    }
}
