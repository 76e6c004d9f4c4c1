//! Leader election with a `coordination.k8s.io/v1` Lease: of several replicas, the one
//! holding the lease sends. A holder that cannot renew steps down after two thirds of
//! the lease duration, so it has stopped sending before anyone else may take over.

use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::state::LeaseGeneration;

/// What one shard's election does at its next round (`shards::Load::decide`).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Decision {
    /// Try to acquire the Lease (not held here, and this replica is under its bound).
    Take,
    /// Renew it.
    Keep,
    /// Give it up: this replica holds more than its bound, and this is one of its
    /// highest shards.
    Release,
    /// Leave it: this replica is at its bound, or does not know yet how many replicas
    /// there are.
    Skip,
}

/// Decides, for an election that is one shard of several, whether its Lease is taken,
/// kept or given up, and hears whether it is held.
pub trait Gate: Send + Sync + 'static {
    fn decide(&self, holding: bool) -> Decision;
    fn held(&self, holding: bool);
    /// Changes whenever a decision could come out otherwise (the replicas counted
    /// anew, a shard given up, a claim that failed): an election that skipped decides
    /// again at once instead of a period later.
    fn changes(&self) -> watch::Receiver<u64>;
}

#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// This replica's identity (host name and process id).
    pub identity: String,
    pub duration: Duration,
}

pub(super) fn resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"))
}

/// Lease times are RFC 3339 with microseconds (`MicroTime`).
fn micro(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn parse(v: Option<&Value>) -> Option<DateTime<Utc>> {
    v.and_then(Value::as_str).and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|t| t.with_timezone(&Utc))
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// The Lease's creation time as the API server stamped it (unix seconds; 0 if absent).
fn created(lease: &DynamicObject) -> i64 {
    lease.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second())
}

/// What a round found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// This replica holds the Lease now, at this generation (the fencing token of the
    /// state in PostgreSQL: its count of holder changes grows with every change of
    /// holder, and a Lease deleted and created again is newer by its creation time).
    Held(LeaseGeneration),
    /// Another replica holds it: until `expires` unless it renews (as the Lease says,
    /// by the holder's clock), or `None` when another replica won it this instant.
    Elsewhere { expires: Option<DateTime<Utc>> },
}

/// One round: acquire the lease if free or expired, renew it if ours.
pub async fn try_acquire_or_renew(api: &Api<DynamicObject>, cfg: &LeaseConfig, now: DateTime<Utc>) -> Result<Acquired, kube::Error> {
    let secs = cfg.duration.as_secs().max(1);
    let spec = |acquire: DateTime<Utc>, transitions: u64| json!({"holderIdentity": cfg.identity, "leaseDurationSeconds": secs, "acquireTime": micro(acquire), "renewTime": micro(now), "leaseTransitions": transitions});
    let raced = Acquired::Elsewhere { expires: None };
    let Some(mut lease) = api.get_opt(&cfg.name).await? else {
        let mut obj = DynamicObject::new(&cfg.name, &resource()).within(&cfg.namespace);
        obj.data = json!({"spec": spec(now, 0)});
        return match api.create(&PostParams::default(), &obj).await {
            Ok(made) => Ok(Acquired::Held(LeaseGeneration { created: created(&made), transitions: 0 })),
            Err(e) if is_conflict(&e) => Ok(raced),
            Err(e) => Err(e),
        };
    };
    let born = created(&lease);
    let s = lease.data.get("spec").cloned().unwrap_or(Value::Null);
    let holder = s.get("holderIdentity").and_then(Value::as_str).unwrap_or_default();
    let duration = s.get("leaseDurationSeconds").and_then(Value::as_i64).unwrap_or(secs as i64);
    let renewed = parse(s.get("renewTime")).unwrap_or(DateTime::<Utc>::MIN_UTC);
    let transitions = s.get("leaseTransitions").and_then(Value::as_u64).unwrap_or(0);
    // The Lease comes from the cluster: an expiry that is not representable (a
    // nonsensical leaseDurationSeconds) counts as expired rather than panicking.
    let expiry = chrono::TimeDelta::try_seconds(duration).and_then(|d| renewed.checked_add_signed(d));
    let (new_spec, held) = if holder == cfg.identity {
        (spec(parse(s.get("acquireTime")).unwrap_or(now), transitions), transitions)
    } else if holder.is_empty() || expiry.is_none_or(|expiry| expiry < now) {
        (spec(now, transitions.saturating_add(1)), transitions.saturating_add(1))
    } else {
        return Ok(Acquired::Elsewhere { expires: expiry });
    };
    lease.data["spec"] = new_spec;
    // The replace carries the resourceVersion we read: a concurrent writer makes it 409.
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Acquired::Held(LeaseGeneration { created: born, transitions: held })),
        Err(e) if is_conflict(&e) => Ok(raced),
        Err(e) => Err(e),
    }
}

/// How long after its expiry a Lease is asked for again: the expiry is compared to the
/// clock strictly, and a round must not come a moment early.
const PAST_EXPIRY: Duration = Duration::from_millis(50);

/// When the next round starts, `now`: after a renewal `period`, or — while another
/// replica holds the Lease until `expires` — just past that expiry if it comes first,
/// so that a dead holder's Lease is taken as it expires rather than up to a period
/// later (a live holder renews it before then: the round finds it renewed and waits
/// again). Never less than [`PAST_EXPIRY`]: an expiry already past does not make a
/// busy loop.
pub(super) fn next_round(period: Duration, expires: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Duration {
    let Some(at) = expires else { return period };
    let until = (at - now).to_std().unwrap_or(Duration::ZERO).saturating_add(PAST_EXPIRY);
    until.clamp(PAST_EXPIRY.min(period), period)
}

/// Gives the Lease up if this replica holds it (`holderIdentity` emptied, as
/// client-go's `ReleaseOnCancel` does), so another replica takes it at its next round
/// instead of after the expiry.
pub async fn release(api: &Api<DynamicObject>, cfg: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&cfg.name).await? else { return Ok(()) };
    if lease.data.pointer("/spec/holderIdentity").and_then(Value::as_str) != Some(cfg.identity.as_str()) {
        return Ok(());
    }
    lease.data["spec"]["holderIdentity"] = Value::String(String::new());
    lease.data["spec"]["leaseDurationSeconds"] = json!(1);
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Asks the election to stand aside: while set (until the instant it holds), this
/// replica releases the Lease if it holds it and does not try to take it. A leader
/// that cannot send (its store will not open, its clients cannot be built) says so
/// here rather than hold the Lease while sending nothing.
#[derive(Clone)]
pub struct StandAside {
    aside: std::sync::Arc<watch::Sender<Option<tokio::time::Instant>>>,
    /// The Lease's generation in the last round that held it.
    generation: std::sync::Arc<std::sync::Mutex<LeaseGeneration>>,
    identity: String,
}

impl StandAside {
    pub fn until(&self, at: tokio::time::Instant) {
        self.aside.send_replace(Some(at));
    }

    /// The Lease's generation when this replica last held it: what the state in
    /// PostgreSQL is taken over with.
    pub fn lease_generation(&self) -> LeaseGeneration {
        *self.generation.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This replica's identity in the Lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }
}

/// Runs the election until the receiver side is dropped; the channel says whether this
/// replica leads.
///
/// A round renews every third of the duration. The Lease's `renewTime` is stamped when
/// a round starts, and that is when the others' clock for expiry starts, so a leader
/// stops leading two thirds of the duration after the *start* of its last successful
/// round — by a timer, even while a round hangs — and no standby can take over before.
pub fn spawn(client: kube::Client, cfg: LeaseConfig) -> (watch::Receiver<bool>, StandAside) {
    spawn_gated(client, cfg, None)
}

/// [`spawn`], for one shard of several when `gate` is given: the replica's load decides
/// whether this Lease is taken, kept or given up ([`super::shards::Load::decide`]).
pub(super) fn spawn_gated(client: kube::Client, cfg: LeaseConfig, gate: Option<Box<dyn Gate>>) -> (watch::Receiver<bool>, StandAside) {
    let (tx, rx) = watch::channel(false);
    let (aside_tx, aside) = watch::channel(None::<tokio::time::Instant>);
    let generation = std::sync::Arc::new(std::sync::Mutex::new(LeaseGeneration::default()));
    let handle = StandAside { aside: std::sync::Arc::new(aside_tx), generation: generation.clone(), identity: cfg.identity.clone() };
    let api: Api<DynamicObject> = Api::namespaced_with(client, &cfg.namespace, &resource());
    let election = Election {
        api,
        load_changes: gate.as_ref().map(|g| g.changes()),
        period: (cfg.duration / 3).max(Duration::from_millis(100)),
        step_down_after: cfg.duration * 2 / 3,
        cfg,
        gate,
        tx,
        aside,
        generation,
        me: handle.clone(),
        renewed_at: None,
    };
    tokio::spawn(election.run());
    (rx, handle)
}

/// One replica's election, carried from round to round.
struct Election {
    api: Api<DynamicObject>,
    cfg: LeaseConfig,
    gate: Option<Box<dyn Gate>>,
    /// The gate's [`Gate::changes`], which ends a skipped round early.
    load_changes: Option<watch::Receiver<u64>>,
    /// Whether this replica leads, for [`spawn`]'s receiver.
    tx: watch::Sender<bool>,
    /// Until when [`StandAside`] asks this replica to stand aside.
    aside: watch::Receiver<Option<tokio::time::Instant>>,
    /// The Lease's generation in the last round that held it ([`StandAside::lease_generation`]).
    generation: std::sync::Arc<std::sync::Mutex<LeaseGeneration>>,
    /// This election's own handle, to stand aside after giving a shard up.
    me: StandAside,
    /// Time between rounds: a third of the Lease's duration.
    period: Duration,
    /// How long after the start of its last successful round a leader stops leading.
    step_down_after: Duration,
    /// When the last round that renewed the lease started.
    renewed_at: Option<tokio::time::Instant>,
}

/// What the election does after a step of a round.
enum Then {
    /// Go on with this round.
    Go,
    /// Start the next round now.
    NextRound,
    /// Nobody listens any more: end.
    Stop,
}

impl Election {
    /// Runs rounds until the receiver side is dropped.
    async fn run(mut self) {
        loop {
            let started = tokio::time::Instant::now();
            let steps = match self.stand_aside(started).await {
                Then::Go => self.ask_gate().await,
                other => other,
            };
            let then = match steps {
                Then::Go => self.round(started).await,
                other => other,
            };
            if let Then::Stop = then {
                return;
            }
        }
    }

    /// Tells the gate (with shards) whether this replica holds the Lease.
    fn held(&self, holding: bool) {
        if let Some(g) = &self.gate {
            g.held(holding);
        }
    }

    /// While asked to stand aside: gives the Lease up if held, says "not leading", and
    /// waits until then or until asked again.
    async fn stand_aside(&mut self, started: tokio::time::Instant) -> Then {
        let aside_until = *self.aside.borrow_and_update();
        let Some(until) = aside_until.filter(|u| *u > started) else { return Then::Go };
        let cfg = &self.cfg;
        if *self.tx.borrow() || self.renewed_at.is_some() {
            tracing::info!(identity = %cfg.identity, lease = %cfg.name, "standing aside: giving the lease up");
            if let Err(e) = tokio::time::timeout(self.period, release(&self.api, cfg)).await.unwrap_or(Ok(())) {
                tracing::warn!(error = %e, lease = %cfg.name, "releasing the lease failed; it expires instead");
            }
        }
        self.renewed_at = None;
        self.held(false);
        if self.tx.send(false).is_err() {
            return Then::Stop;
        }
        // Until then, or until asked again.
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            _ = self.aside.changed() => {}
        }
        Then::NextRound
    }

    /// With shards: whether the replica's load lets this Lease be taken or kept.
    async fn ask_gate(&mut self) -> Then {
        let Some(g) = &self.gate else { return Then::Go };
        if let Some(rx) = self.load_changes.as_mut() {
            // What changed before this decision is in it.
            rx.borrow_and_update();
        }
        let holding = *self.tx.borrow();
        match g.decide(holding) {
            Decision::Release => {
                tracing::info!(lease = %self.cfg.name, "more shards than this replica's share: giving this one up");
                // Its workers stop on this signal and its evaluation thread
                // closes the store; only then is the Lease given up (for one
                // lease duration, so that another replica takes it), or the
                // next holder would fence writes still under way here.
                self.held(false);
                if self.tx.send(false).is_err() {
                    return Then::Stop;
                }
                tokio::time::sleep(self.period.min(self.cfg.duration / 4)).await;
                self.me.until(tokio::time::Instant::now() + self.cfg.duration);
                Then::NextRound
            }
            Decision::Skip => {
                self.renewed_at = None;
                tokio::select! {
                    _ = tokio::time::sleep(self.period) => {}
                    _ = self.aside.changed() => {}
                    _ = load_changed(&mut self.load_changes) => {}
                }
                Then::NextRound
            }
            Decision::Take | Decision::Keep => Then::Go,
        }
    }

    /// One round (begun at `started`): takes or renews the Lease, says whether this
    /// replica leads, and waits for the next round.
    async fn round(&mut self, started: tokio::time::Instant) -> Then {
        let (cfg, step_down_after) = (&self.cfg, self.step_down_after);
        // The client retries 429/503 with backoff on its own; a round that does not
        // finish within the period counts as failed.
        let round = tokio::time::timeout(self.period, try_acquire_or_renew(&self.api, cfg, Utc::now()));
        let result = until_deadline(round, self.renewed_at, step_down_after, &self.tx).await;
        let mut expires = None;
        let leading = match result.unwrap_or_else(|_| Err(kube::Error::Service("lease request timed out".into()))) {
            Ok(Acquired::Held(held)) => {
                // Published before the channel says "leading": the store opens with it.
                *self.generation.lock().unwrap_or_else(|p| p.into_inner()) = held;
                self.renewed_at = Some(started);
                started.elapsed() < step_down_after
            }
            Ok(Acquired::Elsewhere { expires: at }) => {
                expires = at;
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, lease = %cfg.name, "lease request failed");
                // Keep leading only while the lease we hold cannot have expired.
                self.renewed_at.is_some_and(|t| t.elapsed() < step_down_after) && *self.tx.borrow()
            }
        };
        if !leading {
            self.renewed_at = None;
        }
        if *self.tx.borrow() != leading {
            tracing::info!(identity = %cfg.identity, lease = %cfg.name, leading, "leadership changed");
        }
        self.held(leading);
        if self.tx.send(leading).is_err() {
            return Then::Stop;
        }
        let wait = next_round(self.period, expires, Utc::now());
        tokio::select! {
            _ = until_deadline(tokio::time::sleep(wait), self.renewed_at, step_down_after, &self.tx) => {}
            // Asked to stand aside: at once, not at the next round.
            _ = self.aside.changed() => {}
        }
        Then::NextRound
    }
}

/// Resolves when the gate's load changes; never without a gate, or once its sender is
/// gone.
async fn load_changed(rx: &mut Option<watch::Receiver<u64>>) {
    if let Some(rx) = rx
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// Awaits `fut`; if this replica leads and its last renewal (`renewed_at`) becomes
/// `after` old first, steps down at that moment and goes on waiting.
async fn until_deadline<F: std::future::Future>(
    fut: F,
    renewed_at: Option<tokio::time::Instant>,
    after: Duration,
    tx: &watch::Sender<bool>,
) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    if let Some(t) = renewed_at
        && *tx.borrow()
    {
        tokio::select! {
            out = &mut fut => return out,
            _ = tokio::time::sleep_until(t + after) => {
                tracing::warn!("the lease was not renewed within two thirds of its duration: stepping down");
                let _ = tx.send(false);
            }
        }
    }
    fut.await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_comes_just_past_another_holders_expiry_when_that_is_before_the_period() {
        let now = DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z").unwrap().with_timezone(&Utc);
        let period = Duration::from_secs(5);
        let at = |ms: i64| Some(now + chrono::TimeDelta::milliseconds(ms));
        // Held by this replica, or won by another this instant: a period.
        assert_eq!(next_round(period, None, now), period);
        // Another's Lease expiring within the period: just past its expiry.
        assert_eq!(next_round(period, at(2_000), now), Duration::from_millis(2_050));
        // Renewed, expiring after the period: a period, then look again.
        assert_eq!(next_round(period, at(14_000), now), period);
        // Already past (the holder's clock ahead of ours): soon, but not at once.
        assert_eq!(next_round(period, at(-3_000), now), PAST_EXPIRY);
        // A period shorter than the margin is kept.
        assert_eq!(next_round(Duration::from_millis(20), at(-3_000), now), Duration::from_millis(20));
    }
}
