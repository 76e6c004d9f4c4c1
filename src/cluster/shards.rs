//! Shards held through Leases, with a bounded load. Each shard has its own Lease
//! (`<name>-shard-<i>`, the election of [`super::lease`]); each replica also renews a
//! member Lease (`<name>-member-<identity>`, labelled with the election's name) so that
//! every replica knows how many replicas are alive. A replica holds at most
//! `ceil(shards / replicas)` shards: one under that bound takes a free or expired shard,
//! one over it (a replica joined) gives its highest shards up, and a dead replica's
//! shards are taken by the others once its Leases expire — and its member Lease with
//! them, which raises the bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::lease::{self, Decision, Gate, LeaseConfig, StandAside};

/// The label every member Lease carries, with the election's name as value.
const MEMBER_LABEL: &str = "driftwatch.io/members-of";

/// Member Leases expired this many lease durations are deleted by whichever replica
/// sees them (a replica killed leaves its own behind).
const MEMBER_GC_DURATIONS: u32 = 10;

/// What the shard elections of one replica share: which shards it holds, and how many
/// replicas are alive (0 until the first member round answered).
pub struct Load {
    holding: Vec<AtomicBool>,
    members: AtomicU32,
    /// When this replica first knew the members, and how long after that it takes
    /// nothing ([`Load::decide`]).
    joined: std::sync::OnceLock<std::time::Instant>,
    settle: Duration,
    /// One decision at a time: a `Take` claims its shard before the round that
    /// acquires it, so the replica's elections, deciding together, never take more
    /// than the bound between them (each saw the same count under it, and one replica
    /// took three of four shards, only to give two back).
    deciding: std::sync::Mutex<()>,
    /// Bumped when the members counted change or a shard (or a claim) is no longer
    /// held: the elections that skipped decide again at once ([`Gate::changes`]).
    changes: watch::Sender<u64>,
}

impl Load {
    /// `settle`: how long a replica that just joined waits before it takes a shard, so
    /// that replicas started together (a rollout, a scale-up) all count each other
    /// first; without it the first to count itself alone took every shard, listed and
    /// kept every Application, and gave most of them up a moment later, each shard
    /// given up a store handed over and each taken a list more (BENCHMARKS.md, "Shards").
    pub fn new(shards: u32, settle: Duration) -> Load {
        Load {
            holding: (0..shards).map(|_| AtomicBool::new(false)).collect(),
            members: AtomicU32::new(0),
            joined: std::sync::OnceLock::new(),
            settle,
            deciding: std::sync::Mutex::new(()),
            changes: watch::channel(0).0,
        }
    }

    /// The members alive, as the last member round counted them.
    fn set_members(&self, alive: u32) -> u32 {
        self.joined.get_or_init(std::time::Instant::now);
        let before = self.members.swap(alive, Ordering::Relaxed);
        if before != alive {
            self.changed();
        }
        before
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// How many shards this replica holds.
    pub fn held(&self) -> usize {
        self.holding.iter().filter(|h| h.load(Ordering::Relaxed)).count()
    }

    /// The most shards one replica holds: `ceil(shards / replicas alive)`.
    pub fn bound(&self) -> usize {
        let members = self.members.load(Ordering::Relaxed).max(1) as usize;
        self.holding.len().div_ceil(members)
    }

    pub(super) fn set(&self, shard: usize, holding: bool) {
        if let Some(h) = self.holding.get(shard)
            && h.swap(holding, Ordering::Relaxed)
            && !holding
        {
            self.changed();
        }
    }

    /// What shard `shard`'s election does next, given whether it holds the shard. A
    /// `Take` counts the shard as held until its round says otherwise ([`Load::set`]).
    pub fn decide(&self, shard: usize, holding: bool) -> Decision {
        let _one_at_a_time = self.deciding.lock().unwrap_or_else(|p| p.into_inner());
        let settling = self.joined.get().is_none_or(|t| t.elapsed() < self.settle);
        if self.members.load(Ordering::Relaxed) == 0 || (settling && !holding) {
            return if holding { Decision::Keep } else { Decision::Skip };
        }
        let (held, bound) = (self.held(), self.bound());
        if holding {
            let over = held.saturating_sub(bound);
            let highest: Vec<usize> =
                (0..self.holding.len()).rev().filter(|i| self.holding[*i].load(Ordering::Relaxed)).take(over).collect();
            if highest.contains(&shard) { Decision::Release } else { Decision::Keep }
        } else if held < bound {
            self.set(shard, true);
            Decision::Take
        } else {
            Decision::Skip
        }
    }
}

/// One shard's election as [`lease::spawn_gated`] runs it: its index and the
/// replica's load.
struct ShardGate {
    shard: usize,
    load: Arc<Load>,
}

impl Gate for ShardGate {
    fn decide(&self, holding: bool) -> Decision {
        let d = self.load.decide(self.shard, holding);
        if d == Decision::Release {
            tracing::info!(shard = self.shard, held = self.load.held(), bound = self.load.bound(), "giving a shard up to another replica");
        }
        d
    }

    fn held(&self, holding: bool) {
        self.load.set(self.shard, holding);
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.load.changes.subscribe()
    }
}

/// The Lease of shard `i` of the election `cfg`.
pub fn shard_lease(cfg: &LeaseConfig, i: u32) -> LeaseConfig {
    LeaseConfig { name: format!("{}-shard-{i}", cfg.name), ..cfg.clone() }
}

/// This replica's member Lease: [`Membership::leave`] deletes it when the replica
/// stops, so the others' bound rises at once rather than when it expires.
pub struct Membership {
    api: Api<DynamicObject>,
    name: String,
    task: tokio::task::JoinHandle<()>,
}

impl Membership {
    /// Stops renewing the member Lease and deletes it (within `within`; it expires
    /// otherwise).
    pub async fn leave(self, within: Duration) {
        self.task.abort();
        match tokio::time::timeout(within, self.api.delete(&self.name, &DeleteParams::default())).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.name, "left the shard members"),
            Ok(Err(e)) => tracing::warn!(error = %e, lease = %self.name, "deleting the member lease failed; it expires instead"),
            Err(_) => tracing::warn!(lease = %self.name, "deleting the member lease timed out; it expires instead"),
        }
    }
}

/// Starts the member Lease and one election per shard. Per shard: whether this replica
/// holds it, and its [`StandAside`].
pub fn spawn(client: kube::Client, cfg: LeaseConfig, shards: u32) -> (Membership, Vec<(watch::Receiver<bool>, StandAside)>) {
    let period = (cfg.duration / 3).max(Duration::from_millis(100));
    let load = Arc::new(Load::new(shards, period));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &cfg.namespace, &lease::resource());
    let name = member_name(&cfg);
    let task = tokio::spawn(members(api.clone(), cfg.clone(), name.clone(), load.clone()));
    let elections = (0..shards)
        .map(|i| {
            let gate = Box::new(ShardGate { shard: i as usize, load: load.clone() }) as Box<dyn Gate>;
            lease::spawn_gated(client.clone(), shard_lease(&cfg, i), Some(gate))
        })
        .collect();
    (Membership { api, name, task }, elections)
}

/// A Lease name from an identity: lower case letters, digits, `-` and `.`.
fn member_name(cfg: &LeaseConfig) -> String {
    let id: String = cfg
        .identity
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '-' })
        .collect();
    let name = format!("{}-member-{}", cfg.name, id.trim_matches(|c: char| c == '-' || c == '.'));
    name.chars().take(253).collect()
}

/// When a Lease's holder last renewed it, and for how long that holds.
fn renewed(lease: &DynamicObject) -> Option<(DateTime<Utc>, i64)> {
    let spec = lease.data.get("spec")?;
    let at = spec.get("renewTime").and_then(Value::as_str).and_then(|s| DateTime::parse_from_rfc3339(s).ok())?.with_timezone(&Utc);
    Some((at, spec.get("leaseDurationSeconds").and_then(Value::as_i64).unwrap_or(1)))
}

/// Renews this replica's member Lease and counts the members alive, every third of the
/// lease duration, until the process ends.
/// A round comes early, just past another member's expiry, when that comes first:
/// a replica killed is counted out as its member Lease expires, not up to a period
/// later, and the bound rises with it ([`lease::next_round`]).
async fn members(api: Api<DynamicObject>, cfg: LeaseConfig, name: String, load: Arc<Load>) {
    let period = (cfg.duration / 3).max(Duration::from_millis(100));
    let mut early = false;
    loop {
        let mut next_expiry = None;
        match tokio::time::timeout(period, member_round(&api, &cfg, &name, Utc::now())).await {
            Ok(Ok(Members { alive, next_expiry: expiry })) => {
                next_expiry = expiry;
                let before = load.set_members(alive);
                if before != alive {
                    tracing::info!(replicas = alive, bound = load.bound(), held = load.held(), "shard members changed");
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, lease = %name, "member lease round failed (needs get, list, create, update, delete on leases)")
            }
            Err(_) => tracing::warn!(lease = %name, "member lease round timed out"),
        }
        let wait;
        (wait, early) = member_wait(period, next_expiry, Utc::now(), early);
        tokio::time::sleep(wait).await;
    }
}

/// How long the member loop waits before its next round, and whether that round comes
/// early: just past another member's expiry ([`lease::next_round`]), but never two
/// early rounds in a row. Member Leases are anyone's to write who may write Leases in
/// the namespace: staggered expiries would otherwise bring a round (an update and a
/// list of them all) every 50 ms; this way at most two rounds come per period.
fn member_wait(period: Duration, next_expiry: Option<DateTime<Utc>>, now: DateTime<Utc>, last_early: bool) -> (Duration, bool) {
    if last_early {
        return (period, false);
    }
    let wait = lease::next_round(period, next_expiry, now);
    (wait, wait < period)
}

/// What a member round counted.
struct Members {
    /// The members alive, this one included.
    alive: u32,
    /// The first expiry of another member alive (if it does not renew).
    next_expiry: Option<DateTime<Utc>>,
}

/// One member round: create or renew this replica's member Lease, then list the
/// election's members and count those alive.
async fn member_round(api: &Api<DynamicObject>, cfg: &LeaseConfig, name: &str, now: DateTime<Utc>) -> Result<Members, kube::Error> {
    let secs = cfg.duration.as_secs().max(1);
    let spec = json!({"holderIdentity": cfg.identity, "leaseDurationSeconds": secs,
                      "renewTime": now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)});
    match api.get_opt(name).await? {
        Some(mut mine) => {
            mine.data["spec"] = spec;
            api.replace(name, &PostParams::default(), &mine).await?;
        }
        None => {
            let mut obj = DynamicObject::new(name, &lease::resource()).within(&cfg.namespace);
            obj.metadata.labels = Some([(MEMBER_LABEL.to_string(), cfg.name.clone())].into());
            obj.data = json!({"spec": spec});
            api.create(&PostParams::default(), &obj).await?;
        }
    }
    let listed = api.list(&ListParams::default().labels(&format!("{MEMBER_LABEL}={}", cfg.name))).await?;
    let (members, long_gone) = count_members(&listed.items, name, now);
    for n in long_gone {
        // Another replica may delete it first: either way it is gone.
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
    Ok(members)
}

/// Of the member Leases listed at `now`: the members alive (this one, `name`, always
/// among them), the first expiry of another alive, and the names of those expired
/// [`MEMBER_GC_DURATIONS`] lease durations (to delete).
fn count_members<'a>(items: &'a [DynamicObject], name: &str, now: DateTime<Utc>) -> (Members, Vec<&'a str>) {
    let mut alive = 0u32;
    let mut next_expiry: Option<DateTime<Utc>> = None;
    let mut long_gone = Vec::new();
    for lease in items {
        let Some((at, secs)) = renewed(lease) else { continue };
        let expiry = chrono::TimeDelta::try_seconds(secs).and_then(|d| at.checked_add_signed(d));
        let mine = lease.metadata.name.as_deref() == Some(name);
        if let Some(e) = expiry.filter(|e| *e >= now && !mine) {
            next_expiry = Some(next_expiry.map_or(e, |n| n.min(e)));
        }
        if expiry.is_some_and(|e| e >= now) || mine {
            alive = alive.saturating_add(1);
            continue;
        }
        let gone = chrono::TimeDelta::try_seconds(secs.saturating_mul(i64::from(MEMBER_GC_DURATIONS)))
            .and_then(|d| at.checked_add_signed(d))
            .is_none_or(|e| e < now);
        if gone && let Some(n) = lease.metadata.name.as_deref() {
            long_gone.push(n);
        }
    }
    (Members { alive: alive.max(1), next_expiry }, long_gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(shards: u32, members: u32, held: &[usize]) -> Load {
        let l = Load::new(shards, Duration::ZERO);
        if members > 0 {
            l.set_members(members);
        }
        for &i in held {
            l.set(i, true);
        }
        l
    }

    #[test]
    fn a_replica_takes_up_to_its_bound_and_gives_its_highest_shards_up_past_it() {
        // Alone: every shard.
        let l = load(4, 1, &[0, 1, 2]);
        assert_eq!(l.decide(3, false), Decision::Take);
        // Deciding together, the elections take no more than the bound between them.
        let l = load(4, 2, &[]);
        let d: Vec<Decision> = (0..4).map(|i| l.decide(i, false)).collect();
        assert_eq!(d, [Decision::Take, Decision::Take, Decision::Skip, Decision::Skip]);
        l.set(0, false); // its round did not get it
        assert_eq!(l.decide(3, false), Decision::Take);
        // A second replica joined: the bound is 2, the two highest go.
        let l = load(4, 2, &[0, 1, 2, 3]);
        let d: Vec<Decision> = (0..4).map(|i| l.decide(i, true)).collect();
        assert_eq!(d, [Decision::Keep, Decision::Keep, Decision::Release, Decision::Release]);
        // At the bound: keeps what it has, takes nothing more.
        let l = load(4, 3, &[1, 3]);
        assert_eq!((l.bound(), l.decide(1, true), l.decide(0, false)), (2, Decision::Keep, Decision::Skip));
        // A replica died: the bound rises and its shards are taken.
        let l = load(4, 2, &[1]);
        assert_eq!(l.decide(0, false), Decision::Take);
        // Until the members are known, nothing is taken and nothing held is given up.
        let l = load(4, 0, &[2]);
        assert_eq!((l.decide(0, false), l.decide(2, true)), (Decision::Skip, Decision::Keep));
        // Just joined: nothing taken until the others started with it are counted.
        let l = Load::new(4, Duration::from_secs(60));
        l.set_members(1);
        assert_eq!(l.decide(0, false), Decision::Skip);
    }

    /// The elections that skipped are woken when a decision could come out otherwise:
    /// the members counted anew, a claim that failed, a shard given up; not by a count
    /// that stayed the same or a shard taken.
    #[test]
    fn the_load_tells_the_elections_when_a_decision_could_change() {
        let l = load(8, 3, &[0, 1]);
        let gate = ShardGate { shard: 5, load: Arc::new(l) };
        let mut rx = gate.changes();
        let mut changed = || {
            let c = rx.has_changed().unwrap();
            rx.borrow_and_update();
            c
        };
        gate.load.set_members(3);
        assert!(!changed(), "the same count");
        gate.load.set_members(2);
        assert!(changed(), "a replica gone: the bound rises");
        assert_eq!(gate.decide(false), Decision::Take);
        assert!(!changed(), "a claim");
        gate.held(false);
        assert!(changed(), "the claim failed: another shard may be taken");
        gate.held(true);
        assert!(!changed(), "a shard taken");
        gate.held(false);
        assert!(changed(), "a shard given up or lost");
        gate.held(false);
        assert!(!changed(), "not held before either");
    }

    /// A member round counts the others alive until their expiry, and says when the
    /// first of them expires (its next round comes just past it); not this replica's
    /// own, nor one already expired (no round comes early for it).
    #[test]
    fn a_member_round_counts_the_others_alive_and_their_first_expiry() {
        let now = DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z").unwrap().with_timezone(&Utc);
        let member = |name: &str, renewed_ago_s: i64, secs: i64| {
            let mut l = DynamicObject::new(name, &lease::resource());
            let at = now - chrono::TimeDelta::seconds(renewed_ago_s);
            l.data = json!({"spec": {"renewTime": at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true), "leaseDurationSeconds": secs}});
            l
        };
        let at = |s: i64| now + chrono::TimeDelta::seconds(s);
        let items = [
            member("me", 40, 15), // this replica's own: counted, its expiry not asked for
            member("b", 5, 15),   // alive until +10 s
            member("c", 12, 15),  // alive until +3 s: the first
            member("d", 20, 15),  // expired 5 s ago: not counted, kept a while
            member("e", 200, 15), // expired past ten durations: deleted
        ];
        let (m, gone) = count_members(&items, "me", now);
        assert_eq!((m.alive, m.next_expiry, gone), (3, Some(at(3)), vec!["e"]));
        // Alone: one member, no other expiry to wait for.
        let (m, gone) = count_members(&items[..1], "me", now);
        assert_eq!((m.alive, m.next_expiry, gone.len()), (1, None, 0));
        // Not listed yet (a create the list does not show): still one.
        let (m, _) = count_members(&items[3..4], "me", now);
        assert_eq!((m.alive, m.next_expiry), (1, None));
    }

    /// Staggered expiries of member Leases written by anyone: one early round, then a
    /// whole period, whatever they say.
    #[test]
    fn staggered_member_expiries_bring_at_most_one_early_round_a_period() {
        let period = Duration::from_secs(5);
        let mut now = DateTime::parse_from_rfc3339("2026-12-08T03:00:00Z").unwrap().with_timezone(&Utc);
        let (mut early, mut rounds, mut elapsed) = (false, 0, Duration::ZERO);
        while elapsed < period * 10 {
            // A forged member Lease always expiring 60 ms from now.
            let wait;
            (wait, early) = member_wait(period, Some(now + chrono::TimeDelta::milliseconds(60)), now, early);
            elapsed += wait;
            now += chrono::TimeDelta::from_std(wait).unwrap();
            rounds += 1;
        }
        assert!(rounds <= 20, "{rounds} rounds in 10 periods");
        // A real member's expiry within the period is still met early once.
        let (wait, was_early) = member_wait(period, Some(now + chrono::TimeDelta::seconds(2)), now, false);
        assert_eq!((wait, was_early), (Duration::from_millis(2_050), true));
    }

    #[test]
    fn member_lease_names_are_valid_names() {
        let cfg = LeaseConfig {
            name: "driftwatch".into(),
            namespace: "argocd".into(),
            identity: "Pod_A/17".into(),
            duration: Duration::from_secs(3),
        };
        assert_eq!(member_name(&cfg), "driftwatch-member-pod-a-17");
        assert_eq!(shard_lease(&cfg, 3).name, "driftwatch-shard-3");
    }
}
