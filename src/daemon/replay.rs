//! `driftwatch run --replay`'s driver, beside the daemon's: snapshot files fed through
//! the same pass driver (`pipeline::pass::run`) on the snapshots' clock, into the
//! outbox, whose workers deliver through previews (everything is taken and recorded)
//! or, with `--deliver`, through the configured services. It prints nothing: each
//! step's [`Stepped`] says what happened, and the command shows it.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::config::Runtime;
use crate::deliver::Delivery;
use crate::deliver::queue::OutboxClock;
use crate::drift::attribution::Attribution;
use crate::json::Pointer;
use crate::model::{App, Notification};
use crate::pipeline::pass::{self, Pass, Preview};
use crate::pipeline::{Inputs, Pipeline};
use crate::replay::{Snapshot, Step};
use crate::state::Store;

/// What one step of a replay did.
pub enum Stepped {
    /// An AppProject, kept for the Applications after it.
    Project(String),
    /// A live object, attributed (and diffed against the newest snapshot of the
    /// Application that manages it) for the passes after it.
    Live(Attribution),
    /// A file that is not an Application, AppProject or live object: skipped.
    Malformed(String),
    /// The step's Application snapshot (or its deletion) went through a pass at `now`.
    Pass {
        now: DateTime<Utc>,
        pass: Box<Pass>,
        /// Group messages the previews sent after this pass (their wait ended on the
        /// snapshot's clock).
        groups_sent: Vec<Notification>,
    },
}

/// A replay in progress: the pipeline, its inputs, the store and the outbox's workers
/// on the snapshots' clock.
pub struct Replay {
    pipeline: Pipeline,
    inputs: Inputs,
    state: Arc<Store>,
    delivery: Delivery,
    clock: OutboxClock,
    preview: Arc<Preview>,
    /// Whether the configured services deliver (`--deliver`), not previews.
    delivers: bool,
    now: DateTime<Utc>,
    /// The newest snapshot of each Application: whose `ignoreDifferences` a live
    /// object's diff honours.
    seen: std::collections::HashMap<String, Value>,
    /// Notifications naming a service that is not configured.
    pub unconfigured: usize,
}

impl Replay {
    /// Starts the outbox's workers over `state` (inside a tokio runtime): the
    /// configured services when `delivers`, else previews. A service that cannot be
    /// built is an error for each.
    pub fn start(rt: Runtime, state: Arc<Store>, delivers: bool) -> Result<Replay, Vec<String>> {
        let clock = OutboxClock::manual(0);
        let preview = Arc::new(Preview::default());
        let delivery = match delivers {
            true => Delivery::start(crate::pipeline::wiring::service_clients(&rt, &state)?, state.clone()),
            false => pass::start_preview(&rt, state.clone(), clock.clone(), preview.clone()),
        };
        Ok(Replay {
            pipeline: Pipeline::new(Arc::new(rt)),
            inputs: Inputs::default(),
            state,
            delivery,
            clock,
            preview,
            delivers,
            now: DateTime::<Utc>::MIN_UTC,
            seen: std::collections::HashMap::new(),
            unconfigured: 0,
        })
    }

    /// Feeds one step. An Application's pass runs on the clock of its snapshot (when
    /// Argo CD reconciled it, never going backwards); without `--deliver` what is due
    /// then is delivered before the next step, which is evaluated on what it recorded.
    pub async fn step(&mut self, step: &Step) -> Result<Stepped, pass::PassError> {
        let (app, deleted) = match &step.snapshot {
            Snapshot::Project(p) => {
                self.inputs.project_seen((**p).clone());
                return Ok(Stepped::Project(p.name.clone()));
            }
            Snapshot::Live(object) => {
                let (key, a) = crate::cluster::live::offline_attribution(&self.pipeline.runtime, object, self.seen.values());
                self.inputs.live_read(key, Some(a.clone()), false);
                return Ok(Stepped::Live(a));
            }
            Snapshot::Malformed(reason) => {
                tracing::warn!(step = %step.label, %reason, "malformed object skipped");
                return Ok(Stepped::Malformed(reason.clone()));
            }
            Snapshot::App(app) => (app.as_ref(), false),
            Snapshot::Deleted(app) => (app.as_ref(), true),
        };
        if !deleted {
            self.seen.insert(app.qualified_name(), app.object.clone());
        }
        self.now = observed_at(app).unwrap_or_else(Utc::now).max(self.now);
        self.clock.set(crate::state::to_millis(self.now));
        let pass = pass::run(&self.pipeline, &self.inputs, &self.state.pass(), &self.delivery, app, deleted, (self.now, None))?;
        self.unconfigured += pass.submitted.unconfigured;
        let mut groups_sent = Vec::new();
        if !self.delivers {
            // Only what is due on the snapshot's clock: a group's message waiting for
            // its `wait` is due at a later snapshot (the clock stands still meanwhile).
            self.delivery.settle(std::time::Duration::ZERO, std::time::Duration::from_secs(60)).await;
            groups_sent = self.preview.take_sent_groups();
        }
        Ok(Stepped::Pass { now: self.now, pass: Box::new(pass), groups_sent })
    }

    /// The group messages still waiting for their `wait` after the last snapshot, sent
    /// as they would be once it ended (the clock moved a day on): for a replay without
    /// a state file, where nothing later would send them.
    pub async fn end_groups(&mut self) -> Vec<Notification> {
        self.clock.set(crate::state::to_millis(self.now.checked_add_signed(chrono::Duration::days(1)).unwrap_or(self.now)));
        self.delivery.settle(std::time::Duration::ZERO, std::time::Duration::from_secs(60)).await;
        self.preview.take_sent_groups()
    }

    /// Waits at most `wait` for the outbox to drain (`--deliver`).
    pub async fn drain(&self, wait: std::time::Duration) {
        // Files are closed now, not after their age: nothing more is coming.
        self.delivery.close_files();
        self.delivery.settle(std::time::Duration::from_secs(3600), wait).await;
    }

    /// Stops the workers; returns (sent, dead-lettered).
    pub async fn shutdown(self) -> (u64, u64) {
        let totals = self.delivery.totals();
        self.delivery.shutdown(std::time::Duration::from_secs(5)).await;
        totals
    }
}

/// When Argo CD produced this snapshot: `status.reconciledAt`, else `observedAt`.
fn observed_at(app: &App) -> Option<DateTime<Utc>> {
    ["/status/reconciledAt", "/status/observedAt"]
        .iter()
        .filter_map(|p| app.object.at(p).and_then(Value::as_str))
        .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .max()
}
