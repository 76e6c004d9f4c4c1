//! The evaluation threads ("units") and their [`Supervisor`]: one unit for the whole
//! daemon without sharding, one per shard with `sharding.shards`. Each unit is an
//! [`EvalThread`] on a thread of its own, with its store (a shard's PostgreSQL schema),
//! its election, its live reads and its input queue; the supervisor hands each unit
//! only the Applications of its shard while this replica holds it, and gives the
//! Leases up when the daemon stops.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::eval_thread::{self, EvalThread, Input, LeadError};
use super::{DaemonOptions, INPUT_QUEUE, SharedState};
use crate::cluster::lease::StandAside;
use crate::cluster::live::LiveFetcher;
use crate::cluster::watch::{Change, Kind};
use crate::config::Runtime;
use crate::trigger::TriggerEngine;

/// A unit's election: whether it leads, and how to make it stand aside.
pub(super) type Election = (tokio::sync::watch::Receiver<bool>, StandAside);

/// What every unit is built from.
pub(super) struct Common<'a> {
    pub rt: &'a Arc<Runtime>,
    pub client: &'a crate::cluster::client::ApiClient,
    pub engine: &'a Arc<TriggerEngine>,
    pub opts: &'a DaemonOptions,
    pub store_at: &'a eval_thread::StoreAt,
    pub shared: &'a SharedState,
    /// The audit input's index: unit 0's (the listener's and the file follower's);
    /// with the audit inbox every other unit has one of its own.
    pub audit: &'a Option<Arc<crate::audit::Shared>>,
    /// The audit inbox, which every unit reads while it leads (the state in PostgreSQL).
    pub inbox: &'a Option<crate::state::AuditInbox>,
    pub step_down_grace: Duration,
    pub sharded: bool,
    /// Where a unit's election says whether it leads, as `(unit, leading)`; `None` when
    /// the election stopped.
    pub leading_tx: &'a tokio::sync::mpsc::Sender<(usize, Option<bool>)>,
}

/// Starts unit `i` (shard `i` with sharding): its live reads, the forwarding of its
/// election to the supervisor, and its evaluation thread.
pub(super) async fn spawn(c: &Common<'_>, i: usize, election: Option<Election>) -> anyhow::Result<Unit> {
    let shard = u32::try_from(i).unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<Input>(INPUT_QUEUE);
    // Live reads, each unit its own (their results go to the unit that asked).
    let live = match c.rt.attribution.enabled {
        true => {
            let (f, mut live_rx) = LiveFetcher::for_runtime(c.rt, c.client.clone()).await;
            let to = tx.clone();
            tokio::spawn(async move {
                while let Some(fetched) = live_rx.recv().await {
                    if to.send(Input::Fetched(Box::new(fetched))).await.is_err() {
                        break;
                    }
                }
            });
            Some(f)
        }
        false => None,
    };
    let kept = election.clone();
    let (halt, stand_aside) = match election {
        Some((mut rx, aside)) => {
            let halt = crate::deliver::queue::Halt { leading: rx.clone(), grace: c.step_down_grace };
            let to = c.leading_tx.clone();
            tokio::spawn(async move {
                loop {
                    let now = match rx.changed().await {
                        Ok(()) => Some(*rx.borrow_and_update()),
                        Err(_) => None,
                    };
                    if to.send((i, now)).await.is_err() || now.is_none() {
                        break;
                    }
                }
            });
            let duration = c.opts.lease.as_ref().map_or(Duration::ZERO, |l| l.duration);
            (Some(halt), Some((aside, duration)))
        }
        None => (None, None),
    };
    let thread = EvalThread::new(eval_thread::EvalThreadOptions {
        runtime: c.rt.clone(),
        engine: c.engine.clone(),
        config: c.opts.config.clone(),
        shared: c.shared.clone(),
        live,
        audit: match (i, c.inbox) {
            (0, _) => c.audit.clone(),
            (_, Some(_)) => c.audit.as_ref().map(|_| crate::audit::Shared::new(&c.rt.audit)),
            (_, None) => None,
        },
        inbox: c.inbox.clone().map(eval_thread::InboxReader::new),
        streams: c.opts.watch.streams().into_iter().collect(),
        shard,
        sharded: c.sharded,
        lead: eval_thread::LeadOptions {
            store_at: match (c.store_at, c.sharded) {
                (eval_thread::StoreAt::Postgres(pg), true) => eval_thread::StoreAt::Postgres(pg.for_shard(shard)),
                (at, _) => at.clone(),
            },
            // Without leader election this process always sends.
            leading: c.opts.lease.is_none(),
            step_down_grace: c.step_down_grace,
            shutdown_grace: c.opts.shutdown_grace,
            halt,
            stand_aside,
        },
        handle: tokio::runtime::Handle::current(),
    });
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Result<(), LeadError>>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<bool>();
    let name = if c.sharded { format!("driftwatch-eval-{i}") } else { "driftwatch-eval".into() };
    std::thread::Builder::new().name(name).spawn(move || {
        let fenced = thread.run(rx, started_tx);
        let _ = done_tx.send(fenced);
    })?;
    Ok(Unit { tx, started: Some(started_rx), done: done_rx, election: kept })
}

/// How long a stopping replica waits for its Leases to be given up.
pub(super) const RELEASE_WITHIN: Duration = Duration::from_secs(2);

/// How long after a shard is taken over the watch lists again (shards taken together,
/// as at start-up, share one list).
pub(super) const RELIST_AFTER: Duration = Duration::from_millis(250);

/// One evaluation thread: the whole daemon without sharding, one shard with.
pub(super) struct Unit {
    pub tx: tokio::sync::mpsc::Sender<Input>,
    pub started: Option<tokio::sync::oneshot::Receiver<Result<(), LeadError>>>,
    done: tokio::sync::oneshot::Receiver<bool>,
    /// Its election (none without leader election), given up when the daemon stops.
    election: Option<Election>,
}

/// The evaluation threads and which shards this replica holds.
pub(super) struct Supervisor {
    units: Vec<Unit>,
    /// Per shard, whether this replica holds it (all, without sharding).
    owned: Vec<bool>,
    sharded: bool,
    shards: u32,
    /// With sharding, the shard of each Application of a held shard, by state key: an
    /// Application whose destination moves it to another shard is retired in its old one.
    placed: HashMap<String, usize>,
}

impl Supervisor {
    /// Supervises `units` (started); with sharding, no shard is held until its election
    /// says so.
    pub fn new(units: Vec<Unit>, sharded: bool, shards: u32) -> Supervisor {
        Supervisor { units, owned: vec![!sharded; usize::try_from(shards).unwrap_or(1)], sharded, shards, placed: HashMap::new() }
    }

    /// Sends `input` to unit `i`; false if its thread stopped.
    pub async fn send(&self, i: usize, input: Input) -> bool {
        match self.units.get(i) {
            Some(u) => u.tx.send(input).await.is_ok(),
            None => true,
        }
    }

    pub async fn broadcast(&self, input: impl Fn() -> Input) -> bool {
        for u in &self.units {
            if u.tx.send(input()).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Unit `i`'s election changed: its shard is owned before the unit leads and no
    /// longer before it stands down (the supervisor forwards a shard's Applications only
    /// while its unit holds it). Returns whether a shard not held before was taken:
    /// its Applications must be listed again.
    pub fn took_over(&mut self, i: usize, leading: bool) -> bool {
        let taken = self.sharded && leading && !self.owned.get(i).copied().unwrap_or(true);
        if let Some(o) = self.owned.get_mut(i) {
            *o = leading || !self.sharded;
        }
        if !leading {
            self.placed.retain(|_, s| *s != i);
        }
        taken
    }

    pub fn held(&self) -> Vec<usize> {
        self.owned.iter().enumerate().filter(|(_, o)| **o).map(|(i, _)| i).collect()
    }

    /// A watch change to the unit it concerns: an Application to its shard's, if this
    /// replica holds the shard (dropped otherwise: another replica has it); an
    /// AppProject and a list's start and end to all; what is only counted to the first.
    pub async fn change(&mut self, c: Change) -> bool {
        let at = crate::clock::wall_ms();
        match &c {
            Change::App(app) | Change::AppDeleted(app) => {
                if !self.sharded {
                    return self.send(0, Input::Change(c, at)).await;
                }
                let shard = app.shard(self.shards) as usize;
                let key = app.state_key();
                let deleted = matches!(c, Change::AppDeleted(_));
                let owned = self.owned.get(shard).copied().unwrap_or(false);
                let before = match owned && !deleted {
                    true => self.placed.insert(key.clone(), shard),
                    false => self.placed.remove(&key),
                };
                if let Some(old) = before.filter(|old| *old != shard)
                    && !self.send(old, Input::Moved(key)).await
                {
                    return false;
                }
                match owned {
                    true => self.send(shard, Input::Change(c, at)).await,
                    false => true,
                }
            }
            Change::ListDone(stream) => {
                let sent = self.broadcast(|| Input::Change(c.clone(), at)).await;
                if stream.kind == Kind::Application {
                    // This thread decoded the list: freed pages go back at once from
                    // now on, and what its pages took goes back now (the evaluation
                    // threads hand back theirs once they are through). Not after the
                    // AppProjects' list, which ends first and is small. (With
                    // several namespaces, at the end of the first one's.)
                    crate::memory::ready();
                }
                sent
            }
            Change::Project(_) | Change::ProjectDeleted { .. } | Change::ListStarted(_) => {
                self.broadcast(|| Input::Change(c.clone(), at)).await
            }
            Change::Malformed { .. } | Change::Error { .. } => self.send(0, Input::Change(c, at)).await,
        }
    }

    /// Stops every unit, all at once (each finishes what has arrived, its deliveries
    /// within the grace: a replica holding several shards stops within one grace, not
    /// one per shard), then gives the Leases up — nothing is sent any more — and leaves the
    /// shard members, so that another replica takes over at its next round rather than
    /// when they expire: a rolling update costs a renewal period, not a lease. Returns
    /// whether a unit ended fenced (another daemon took its store over).
    pub async fn stop(self, membership: Option<crate::cluster::shards::Membership>) -> bool {
        for unit in &self.units {
            let _ = unit.tx.send(Input::Stop).await;
        }
        let mut elections = Vec::new();
        let mut done = Vec::new();
        for unit in self.units {
            elections.extend(unit.election);
            done.push(unit.done);
        }
        let fenced = futures::future::join_all(done).await.into_iter().any(|f| f.unwrap_or(false));
        futures::future::join_all(elections.into_iter().map(|(mut rx, aside)| async move {
            aside.until(tokio::time::Instant::now() + RELEASE_WITHIN * 10);
            let _ = tokio::time::timeout(RELEASE_WITHIN, rx.wait_for(|leading| !*leading)).await;
        }))
        .await;
        if let Some(m) = membership {
            m.leave(RELEASE_WITHIN).await;
        }
        fenced
    }
}
