//! Wires the stages for one Application snapshot: drift and episode -> subscriptions
//! and routes -> triggers -> dedup check -> templates, producing the notifications to
//! deliver and the keys to re-arm ([`Pipeline::evaluate`], which writes nothing).
//! [`pass::run`] is the one driver of a pass, for the daemon and replays alike: it
//! writes what the evaluation decided and its notifications to the outbox, whose
//! workers deliver and record.

pub mod group;
mod inputs;
pub mod pass;
mod stages;
#[cfg(test)]
mod tests;
pub mod wiring;

pub use inputs::Inputs;
use stages::{Pass, Subject};

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::clock::with_now;
use crate::config::Runtime;
use crate::drift::Drift;
use crate::drift::episode::{self, Episode, Event};
use crate::model::{Action, App, AppMeta, Destination, DestinationKind, Notification, RecordOp, StateRecord};
use crate::route::tree::{RouteHit, RouteInput, RouteSubject};
use crate::state::{AppState, GroupReads, PassStore, StateError, dedup_key, from_millis, to_millis};
use crate::template::{RenderContext, Target};
use crate::trigger::ConditionResult;

/// Why a condition result did not become a notification (shown by the replay and
/// `routes test`, as a sentence: its `Display`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The state store has this key: it was delivered before.
    AlreadyNotified { trigger: String, destination: Destination },
    /// The same notification is waiting in the outbox.
    InFlight { trigger: String, destination: Destination },
    /// The subscription names a service that is neither configured nor a kind.
    UnknownService { service: String },
    /// The subscription names a trigger that does not exist.
    UnknownTrigger { trigger: String },
    /// Rendering failed (bad JSON field, unknown template...).
    RenderFailed { trigger: String, destination: Destination, error: String },
    /// The condition holds but its `for:` hold-down has not elapsed.
    HeldDown { trigger: String, until: DateTime<Utc> },
    /// A page held by a break-glass exception: the live drift is recorded against the
    /// ticket and goes to the break-glass routes instead.
    BreakGlass { trigger: String, destination: Destination, ticket: String },
}

impl std::fmt::Display for Skip {
    /// A sentence for a person (the replay, `routes test`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::AlreadyNotified { trigger, destination } => write!(f, "{trigger} to {destination}: already sent"),
            Skip::InFlight { trigger, destination } => {
                write!(f, "{trigger} to {destination}: the same notification is already waiting in the outbox")
            }
            Skip::UnknownService { service } => {
                write!(f, "a subscription names service {service:?}, which is neither configured nor a destination kind")
            }
            Skip::UnknownTrigger { trigger } => write!(f, "a subscription names trigger {trigger:?}, which does not exist"),
            Skip::RenderFailed { trigger, destination, error } => {
                write!(f, "{trigger} to {destination}: the template did not render: {error}")
            }
            Skip::HeldDown { trigger, until } => {
                write!(f, "held down: {trigger} holds, notifies if it still does at {}", until.format("%H:%M:%S UTC"))
            }
            Skip::BreakGlass { trigger, destination, ticket } => {
                write!(f, "break-glass {ticket}: {trigger} is not paged to {destination}; the break-glass routes have it")
            }
        }
    }
}

/// The outcome of evaluating one Application.
#[derive(Debug, Default)]
pub struct Evaluation {
    /// `true` when Argo CD's sync status was stale and nothing was evaluated.
    pub stale: bool,
    pub notifications: Vec<Notification>,
    /// Keys of plain triggers whose condition is false now (op `Clear`): forget them so
    /// the trigger fires again next time it holds.
    pub rearm: Vec<StateRecord>,
    pub skipped: Vec<Skip>,
    /// Refused subscription annotations (malformed, or past the bounds).
    pub annotation_errors: Vec<crate::route::AnnotationError>,
    /// What the subscription limits dropped (`route::Limits`).
    pub capped: Option<String>,
    /// The Application's stored note changes to this (`None` inside: cleared).
    pub note: Option<Option<String>>,
    /// What drifted.
    pub drift: Drift,
    /// The cluster the Application's resources are in (where they are read).
    pub target: crate::config::clusters::Target,
    /// The Application's episode after this observation (open or last resolved).
    pub episode: Option<Episode>,
    /// What this observation did to the episode; `Some` means store it.
    pub episode_event: Option<Event>,
    /// Sync operations seen ended for the first time (the last one, after any
    /// deployment of `status.history` not recorded yet), oldest first: stored.
    pub operations: Vec<crate::drift::operation::OperationRecord>,
    /// The Application's break-glass exception changed: the record to store.
    pub break_glass: Option<crate::drift::break_glass::Record>,
    /// Routes of the route tree that took this drift.
    pub routes: Vec<RouteHit>,
    /// Hold-downs to start (`Some(since ms)`) or end (`None`), by hold key.
    pub holds: Vec<(String, Option<u64>)>,
    /// When this Application must be evaluated again even if nothing changes (a
    /// hold-down elapsing, a `repeat:` falling due).
    pub wake_at: Option<DateTime<Utc>>,
}

impl Evaluation {
    fn wake(&mut self, at: DateTime<Utc>) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }
}

/// What an evaluation decided about state other than deliveries — the episode (when it
/// changed), hold-downs, re-armed keys, the retirement of a deleted Application — for
/// [`PassStore::write_pass`].
pub fn pass_write<'a>(
    eval: &'a Evaluation,
    app_key: &'a str,
    rt: &Runtime,
    deleted: bool,
    now: DateTime<Utc>,
) -> crate::state::PassWrite<'a> {
    crate::state::PassWrite {
        app_key,
        at_ms: crate::state::to_millis(now),
        episode: match (&eval.episode, eval.episode_event) {
            (Some(ep), Some(_)) => Some((ep, rt.retention)),
            _ => None,
        },
        operations: &eval.operations,
        break_glass: eval.break_glass.as_ref(),
        retention: rt.retention,
        holds: &eval.holds,
        forgets: eval.rearm.iter().map(|r| r.key.as_str()).collect(),
        note: eval.note.as_ref().map(Option::as_deref),
        deleted,
    }
}

/// The operations to record: the last one once it ended and is not recorded yet (a
/// retry that ended otherwise is recorded again), after the deployments of
/// `status.history` since the newest recorded (all of them the first time).
fn new_operations(app: &App, drift: &Drift, recorded: Option<(u64, String)>) -> Vec<crate::drift::operation::OperationRecord> {
    use crate::drift::operation::OperationRecord;
    let Some(op) = drift.operation.as_ref().filter(|op| op.is_done()) else { return Vec::new() };
    let ms = op.started_ms();
    if recorded.as_ref().is_some_and(|(at, id)| ms < *at || (ms == *at && *id == op.id)) {
        return Vec::new();
    }
    let (after, recorded_id) = recorded.as_ref().map_or((0, None), |(at, id)| (*at, Some(id.as_str())));
    let mut ops = OperationRecord::from_history(app, after, recorded_id, Some(op));
    ops.retain(|r| r.operation.started_ms() < ms);
    ops.push(OperationRecord::of(app, op));
    ops
}

/// The break-glass exception the Application is under: one in force, or the one its
/// open episode was recorded against until that exception is closed or refused (an episode that
/// started under it stays on the break-glass routes, and its pages stay held while the
/// exception is overdue: `on-break-glass-overdue` pages instead).
/// `episode` is the pass's episode when it is open or this pass resolved it (its
/// resolve goes where its notifications went).
fn under_break_glass<'a>(drift: &'a Drift, episode: Option<&Episode>) -> Option<&'a crate::drift::break_glass::BreakGlass> {
    let b = drift.break_glass.as_ref()?;
    let recorded = episode.and_then(|e| e.break_glass.as_ref()).is_some_and(|r| r.id == b.id);
    // A refused exception (an edit by hand after the approval) holds nothing: what it
    // held pages now.
    use crate::drift::break_glass::State;
    (b.effective || (recorded && !matches!(b.state, State::Closed | State::Refused))).then_some(b)
}

/// The ticket of the break-glass exception that holds this pass's pages, if one does:
/// the Application is under it and its open episode is live (or unknown) drift. A
/// Degraded without live drift still pages.
fn pages_held<'a>(drift: &'a Drift, episode: Option<&Episode>) -> Option<&'a str> {
    let episode = episode.filter(|e| e.is_open());
    let b = under_break_glass(drift, episode)?;
    episode.filter(|e| matches!(e.direction, crate::drift::Direction::Live | crate::drift::Direction::Unknown))?;
    Some(b.ticket.as_str())
}

impl Pipeline {
    /// The kind of a destination's service; an unknown service is a skip.
    fn kind_or_skip(&self, d: &Destination, out: &mut Evaluation) -> Option<DestinationKind> {
        let kind = self.runtime.service_kind(&d.service);
        if kind.is_none() {
            out.skipped.push(Skip::UnknownService { service: d.service.clone() });
        }
        kind
    }
}

/// Whether `app` is skipped while its sync status is stale, as Argo CD does
/// ([`App::sync_status_is_stale`]) — never while the audit input has writes of the
/// window on it: the status is writable by whoever may patch the Application, and a
/// forged stale status must not hold back the page for a person's write.
fn skipped_as_stale(inputs: &Inputs, app: &App, now: DateTime<Utc>) -> bool {
    app.sync_status_is_stale(now) && inputs.attempts.of(&app.state_key()).is_empty()
}

/// The per-configuration pieces the pipeline needs.
pub struct Pipeline {
    pub runtime: Arc<Runtime>,
}

impl Pipeline {
    pub fn new(runtime: Arc<Runtime>) -> Pipeline {
        Pipeline { runtime }
    }

    /// Evaluates every subscribed trigger on `app` at instant `now`, deciding from one
    /// consistent snapshot of the store taken now: the store is asked once for what
    /// it holds about the Application ([`crate::state::StateView::app_state`]), so what
    /// was delivered and what is in flight are read together and a settle committing
    /// meanwhile (its key recorded, its entry gone) cannot be seen half. Each
    /// notification carries what its key held in the snapshot (`StateRecord::seen`);
    /// the enqueue drops it if a settle changed that since.
    pub fn evaluate(&self, inputs: &Inputs, app: &App, state: &PassStore, now: DateTime<Utc>) -> Result<Evaluation, StateError> {
        if skipped_as_stale(inputs, app, now) {
            return Ok(Evaluation { stale: true, ..Evaluation::default() });
        }
        let view = state.view()?;
        self.evaluate_in(inputs, app, &view.app_state(&app.state_key())?, &view, now)
    }

    /// Evaluates every subscribed trigger on `app` at instant `now`, deciding from
    /// `state`, what the store holds about it, and `groups` (the groups a grouped
    /// route joins or leaves), both read from one snapshot. Writes nothing.
    pub fn evaluate_in(
        &self,
        inputs: &Inputs,
        app: &App,
        state: &AppState,
        groups: &dyn GroupReads,
        now: DateTime<Utc>,
    ) -> Result<Evaluation, StateError> {
        let mut out = Evaluation::default();
        if skipped_as_stale(inputs, app, now) {
            out.stale = true;
            return Ok(out);
        }
        let s = Subject { app, key: app.state_key(), state, groups, now };
        // What drifted and the episode come first: every Application's drift is
        // recorded, subscribed or not, and routes match on them.
        let drift = self.observe(inputs, &s, &mut out);
        if let Some(subs) = self.route(inputs, &s, &drift, &mut out) {
            self.fire(&s, &drift, &subs, &mut out)?;
        }
        out.drift = drift;
        Ok(out)
    }
}
