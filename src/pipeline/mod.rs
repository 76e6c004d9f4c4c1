//! Wires the stages for one Application snapshot: drift and episode -> subscriptions
//! and routes -> triggers -> dedup check -> templates, producing the notifications to
//! deliver and the keys to re-arm ([`Pipeline::evaluate`], which writes nothing).
//! [`pass::run`] is the one driver of a pass, for the daemon and replays alike: it
//! writes what the evaluation decided and its notifications to the outbox, whose
//! workers deliver and record.

pub mod group;
pub mod pass;
pub mod wiring;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::clock::with_now;
use crate::config::Runtime;
use crate::drift::Drift;
use crate::drift::attribution::LiveIndex;
use crate::drift::episode::{self, Episode, Event};
use crate::model::{Action, App, AppMeta, Destination, DestinationKind, Notification, Project, RecordOp, StateRecord};
use crate::route::tree::{RouteHit, RouteInput, RouteSubject};
use crate::state::{StateError, StateStore, StateView, dedup_key, from_millis, to_millis};
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
    /// Malformed subscription annotations.
    pub annotation_errors: Vec<String>,
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
/// [`StateStore::write_pass`].
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

/// The render context of one pass, built on the first notification only (most passes
/// render nothing), from the `drift` the pass already computed.
struct LazyRender<'a> {
    drift: &'a Drift,
    episode: Option<&'a Episode>,
    now: DateTime<Utc>,
    /// The episode as a notification carries it (when it belongs to it), made once.
    episode_view: Option<serde_json::Value>,
    /// Whether this pass's notifications belong to the episode: it is open, or this
    /// very observation resolved it. A notification about something else long after an
    /// episode ended (an `on-deployed` next week) does not carry it, so it is neither
    /// noted in that episode's history nor sent to a SIEM as part of it.
    belongs: bool,
    /// The record of the pass's last operation, made once, for the notifications
    /// about it (`oncePer` its id).
    operation_view: Option<serde_json::Value>,
    ctx: Option<RenderContext>,
}

impl LazyRender<'_> {
    /// The episode a notification carries (when it belongs to it), made once a pass.
    fn episode_json(&mut self) -> Option<serde_json::Value> {
        match (self.belongs, self.episode) {
            (true, Some(e)) => Some(self.episode_view.get_or_insert_with(|| e.view(self.now)).clone()),
            _ => None,
        }
    }
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

/// What an evaluation reads besides the Application and the store, kept by the driver
/// (the daemon from its watch and fetcher, a replay from its files) and lent to each
/// evaluation; the pipeline holds none of it, so a new configuration keeps it as is.
#[derive(Debug, Default)]
pub struct Inputs {
    /// AppProjects by name (from the watch cache or replay files); never fetched per
    /// evaluation.
    pub projects: BTreeMap<String, Project>,
    /// Attribution of drifted resources, read from the live objects outside the
    /// evaluation path (the daemon's fetcher, or live objects in a replay).
    pub live: LiveIndex,
    /// Changes and refused attempts from the audit input, per Application, in the
    /// window (`audit.window`).
    pub attempts: crate::drift::audit::AttemptIndex,
    /// Writes of the break-glass annotation the audit input saw, per Application.
    pub break_glass: crate::drift::break_glass::Writes,
    /// Whether the driver reads drifted resources' live objects (the daemon with
    /// attribution on): a new episode then waits for them (`drift.awaitingLive`), and
    /// what is read is bounded by each Application's AppProject ([`Inputs::scope`]).
    pub reads_live: bool,
}

impl Inputs {
    /// What `app`'s AppProject lets the driver read for it: the project's rule when
    /// live objects are read on the Application's behalf (an unseen project permits
    /// nothing); unrestricted for a replay, which reads no cluster.
    pub fn scope(&self, app: &App) -> crate::project::Scope {
        if self.reads_live {
            crate::project::Scope::of(&app.object, self.projects.get(&app.project).map(|p| &p.policy))
        } else {
            crate::project::Scope::unrestricted()
        }
    }
}

/// The per-configuration pieces the pipeline needs.
pub struct Pipeline {
    pub runtime: Arc<Runtime>,
}

impl Pipeline {
    pub fn new(runtime: Arc<Runtime>) -> Pipeline {
        Pipeline { runtime }
    }

    /// Evaluates every subscribed trigger on `app` at instant `now`, on one snapshot of
    /// the store taken now ([`Pipeline::evaluate_in`]).
    pub fn evaluate(&self, inputs: &Inputs, app: &App, state: &StateStore, now: DateTime<Utc>) -> Result<Evaluation, StateError> {
        self.evaluate_in(inputs, app, &state.view()?, now)
    }

    /// Evaluates every subscribed trigger on `app` at instant `now`, deciding from one
    /// consistent snapshot of the store: what was delivered and what is in flight are
    /// read together, so a settle committing meanwhile (its key recorded, its entry
    /// gone) cannot be seen half. Each notification carries what its key held in the
    /// snapshot (`StateRecord::seen`); the enqueue drops it if a settle changed that
    /// since.
    pub fn evaluate_in(&self, inputs: &Inputs, app: &App, state: &StateView, now: DateTime<Utc>) -> Result<Evaluation, StateError> {
        let mut out = Evaluation::default();
        if app.sync_status_is_stale() {
            out.stale = true;
            return Ok(out);
        }
        let rt = &self.runtime;
        let app_key = app.state_key();
        // What drifted and the episode come first: every Application's drift is
        // recorded, subscribed or not, and routes match on them.
        let target = rt.target(&app.object);
        let cluster = target.key();
        let (server, name) = rt.destination_of(&app.object);
        let scope = inputs.scope(app).resolved(&server, &name);
        let mut drift =
            Drift::of(&app.object, &rt.classes, &inputs.live, &cluster, &scope).with_attempts(inputs.attempts.of(&app_key), &rt.classes);
        out.break_glass = self.judge_break_glass(inputs, app, &app_key, state, &mut drift, now)?;
        if let Some(at) =
            drift.break_glass.as_ref().filter(|b| b.state == crate::drift::break_glass::State::Active).and_then(|b| b.expires_at)
        {
            out.wake(at);
        }
        let obs = episode::observe(state.latest_episode(&app_key)?, app, &drift, now);
        out.episode = obs.episode;
        out.episode_event = obs.event;
        out.operations = new_operations(app, &drift, state.latest_operation(&app_key)?);
        // A new episode's live reads (who, the diff) are waited for, briefly: every
        // condition that holds waits while `drift.awaitingLive` (below), and the pass is
        // run again when a read completes, or at the latest after `episode::OPENING`.
        if inputs.reads_live
            && !matches!(target, crate::config::clusters::Target::Elsewhere(_))
            && let Some(ep) = out.episode.as_ref().filter(|e| e.is_open())
            && let Some(until) = ep.opened_at.checked_add_signed(episode::OPENING)
            && now < until
            && drift.resources.iter().any(|r| {
                !r.version.is_empty()
                    && !r.name.is_empty()
                    && !inputs.live.contains_key(&crate::drift::attribution::live_key(&cluster, &r.group, &r.kind, &r.namespace, &r.name))
            })
        {
            drift.awaiting_live = true;
            out.wake(until);
        }
        out.target = target;
        // Held while waiting, stored so; released (and stored) once not.
        if let Some(ep) = out.episode.as_mut().filter(|e| e.held != drift.awaiting_live) {
            ep.held = drift.awaiting_live;
            out.episode_event.get_or_insert(Event::Updated);
        }
        let routed = rt.router.subscriptions(app, inputs.projects.get(&app.project));
        let mut subs = routed.subs;
        out.annotation_errors = routed.errors;
        // What the limits dropped is kept on the Application (`driftwatch state list`)
        // when it changes, not written every pass.
        if state.app_note(&app_key)? != routed.capped {
            out.note = Some(routed.capped.clone());
        }
        out.capped = routed.capped;
        if subs.is_empty() && rt.routes.is_empty() {
            out.drift = drift;
            return Ok(out);
        }
        if !rt.routes.is_empty() {
            let subject = out.episode.as_ref().map_or_else(|| RouteSubject::from(&drift), RouteSubject::from);
            let current = out.episode.as_ref().filter(|e| e.is_open() || out.episode_event == Some(Event::Resolved));
            let break_glass = under_break_glass(&drift, current).is_some();
            out.routes = rt.routes.matches(&RouteInput { labels: &app.labels, project: &app.project, subject, break_glass });
            out.routes.iter().for_each(|hit| hit.add_to(&mut subs));
        }
        if subs.is_empty() {
            out.drift = drift;
            return Ok(out);
        }
        // Converted once for all triggers and conditions of this pass.
        let episode = out.episode.take();
        let mut scope = rt.engine.prepare_pass(&app.object, &drift, episode.as_ref(), now);
        let belongs =
            episode.as_ref().is_some_and(Episode::is_open) || matches!(out.episode_event, Some(Event::Resolved | Event::Attempted));
        let pages_held = pages_held(&drift, episode.as_ref());
        let break_glass_routes: Vec<RouteHit> = out.routes.iter().filter(|h| h.break_glass).cloned().collect();
        // Taken for the loop (which writes `out`), put back after it.
        let routes = std::mem::take(&mut out.routes);
        let mut in_a_group: Option<bool> = None;
        let mut render_ctx =
            LazyRender { drift: &drift, episode: episode.as_ref(), now, episode_view: None, belongs, operation_view: None, ctx: None };
        for (trigger_name, destinations) in &subs {
            let Some(trigger) = rt.triggers.get(trigger_name) else {
                out.skipped.push(Skip::UnknownTrigger { trigger: trigger_name.clone() });
                continue;
            };
            let results = with_now(now, || rt.engine.run(trigger, &mut scope));
            for r in results {
                if !self.held_long_enough(&app_key, trigger_name, &r, state, now, &mut out)? {
                    continue;
                }
                // A condition that holds waits for the live reads of a new episode (it
                // is not false: nothing is resolved or re-armed meanwhile).
                if r.result && drift.awaiting_live {
                    if let Some(until) = out.wake_at {
                        out.skipped.push(Skip::HeldDown { trigger: trigger_name.clone(), until });
                    }
                    continue;
                }
                for d in destinations {
                    let key = dedup_key(r.once_per.as_deref(), trigger_name, &r.key, &d.service, &d.recipient);
                    // A grouped route's destination (never a SIEM's: one record per
                    // Application) gets the group's message instead.
                    let grouped = group::grouping(&routes, trigger_name, d)
                        .filter(|_| !rt.service_kind(&d.service).is_some_and(crate::deliver::kinds::is_siem))
                        .map(|(route, spec)| group::Grouped { route, spec, trigger: trigger_name, d });
                    if !r.result && grouped.is_some() {
                        // The member leaves its group (the message is updated; the last
                        // one to leave resolves it), and the key re-arms now: the leave
                        // is stored with it.
                        self.leave_group(app, trigger_name, d, &(&r).into(), state, &mut render_ctx, &mut out)?;
                        if state.is_notified(&app_key, &key)? {
                            out.rearm.push(StateRecord { app_key: app_key.clone(), key, op: RecordOp::Clear, seen: None });
                        }
                        continue;
                    }
                    if !r.result {
                        // Joined while its route was grouped (a reload took the group
                        // away): it leaves the group it joined then. One probe per pass
                        // tells whether the Application is in any group at all.
                        let grouped_before = match in_a_group {
                            Some(b) => b,
                            None => *in_a_group.insert(state.in_any_group(&app_key)?),
                        };
                        if grouped_before {
                            self.leave_group(app, trigger_name, d, &(&r).into(), state, &mut render_ctx, &mut out)?;
                        }
                        if r.resolve {
                            self.resolve(app, &app_key, trigger_name, &r, d, state, &mut render_ctx, &mut out)?;
                        } else if state.is_notified(&app_key, &key)? {
                            // Only keys without oncePer re-arm; an oncePer key is kept until
                            // its value changes (a new value is a new key). Checked with a
                            // read first: most conditions are false most of the time, and a
                            // forget is a durable write.
                            out.rearm.push(StateRecord { app_key: app_key.clone(), key, op: RecordOp::Clear, seen: None });
                        }
                        continue;
                    }
                    let seen = state.notified_at(&app_key, &key)?;
                    if let Some(at) = seen {
                        // `repeat:` notifies again once the interval since the last
                        // delivery has passed.
                        // A repeat so far off that the time is not representable never
                        // falls due (the configuration bounds it; this keeps the
                        // arithmetic total).
                        let due = r
                            .repeat
                            .and_then(|every| chrono::Duration::from_std(every).ok().and_then(|d| from_millis(at).checked_add_signed(d)));
                        match due {
                            Some(due) if due <= now => {}
                            Some(due) => {
                                out.wake(due);
                                out.skipped.push(Skip::AlreadyNotified { trigger: trigger_name.clone(), destination: d.clone() });
                                continue;
                            }
                            None => {
                                out.skipped.push(Skip::AlreadyNotified { trigger: trigger_name.clone(), destination: d.clone() });
                                continue;
                            }
                        }
                    }
                    if let Some(ticket) = pages_held.filter(|_| !trigger_name.starts_with("on-break-glass"))
                        && rt.service_kind(&d.service).is_some_and(crate::deliver::kinds::pages)
                        && !break_glass_routes.iter().any(|h| h.triggers.contains(trigger_name) && h.recipients.contains(d))
                    {
                        out.skipped.push(Skip::BreakGlass {
                            trigger: trigger_name.clone(),
                            destination: d.clone(),
                            ticket: ticket.to_string(),
                        });
                        continue;
                    }
                    let record = StateRecord { app_key: app_key.clone(), key, op: RecordOp::Set, seen };
                    match &grouped {
                        Some(g) => self.join_group(app, g, (&r).into(), record, state, &mut render_ctx, &cluster, &mut out)?,
                        None => self.render_all(app, trigger_name, &r, d, Action::Fire, record, state, &mut render_ctx, &mut out)?,
                    }
                }
            }
        }
        out.routes = routes;
        out.episode = episode;
        out.drift = drift;
        Ok(out)
    }

    /// The Application's break-glass exception, judged from its annotation, the stored
    /// copy and the audit input's writes, into `drift.breakGlass`; returns the record
    /// to store when it changed. An Application that never had one reads one value.
    fn judge_break_glass(
        &self,
        inputs: &Inputs,
        app: &App,
        app_key: &str,
        state: &StateView,
        drift: &mut Drift,
        now: DateTime<Utc>,
    ) -> Result<Option<crate::drift::break_glass::Record>, StateError> {
        use crate::drift::break_glass::{self as bg, Record};
        let annotated = app.object.pointer("/metadata/annotations").and_then(|a| a.get(bg::ANNOTATION)).is_some();
        let latest = state.latest_break_glass(app_key)?;
        if !annotated && latest.as_ref().is_none_or(|l| l.closed) {
            return Ok(None);
        }
        let stored = match &latest {
            Some(l) => state.break_glass(app_key, l.opened_ms)?,
            None => None,
        };
        let off_git = app.object.pointer("/status/sync/status").and_then(serde_json::Value::as_str) != Some("Synced");
        let before = stored.as_ref().map(|r| &r.break_glass);
        let Some(judged) = bg::evaluate(&app.object, before, inputs.break_glass.of(app_key), &self.runtime.break_glass, off_git, now)
        else {
            return Ok(None);
        };
        let changed = before.is_none_or(|b| b.fingerprint() != judged.fingerprint());
        let record = changed.then(|| Record {
            app_key: app_key.to_string(),
            namespace: app.namespace.clone(),
            name: app.name.clone(),
            break_glass: bg::with_transitions(judged.clone(), before, now),
        });
        drift.break_glass = Some(judged);
        Ok(record)
    }

    /// The `for:` hold-down of a condition: true when the result may go on (no
    /// hold-down, the condition is false, or it has held long enough). Starts and ends
    /// hold-downs in `out` and schedules the re-evaluation when one will elapse.
    fn held_long_enough(
        &self,
        app_key: &str,
        trigger: &str,
        r: &ConditionResult,
        state: &StateView,
        now: DateTime<Utc>,
        out: &mut Evaluation,
    ) -> Result<bool, StateError> {
        let Some(hold) = r.hold else { return Ok(true) };
        let hold_key = format!("{trigger}:{}", r.key);
        let since = state.hold_since(app_key, &hold_key)?;
        if !r.result {
            if since.is_some() {
                out.holds.push((hold_key, None));
            }
            return Ok(true);
        }
        let since = match since {
            Some(ms) => from_millis(ms),
            None => {
                out.holds.push((hold_key, Some(to_millis(now))));
                now
            }
        };
        // An unrepresentable end (the configuration bounds `for:`) never elapses.
        let Some(until) = chrono::Duration::from_std(hold).ok().and_then(|d| since.checked_add_signed(d)) else {
            out.skipped.push(Skip::HeldDown { trigger: trigger.to_string(), until: DateTime::<Utc>::MAX_UTC });
            return Ok(false);
        };
        if until <= now {
            return Ok(true);
        }
        out.wake(until);
        out.skipped.push(Skip::HeldDown { trigger: trigger.to_string(), until });
        Ok(false)
    }

    /// The condition (marked `resolve: true`) is false: every key still recorded for it
    /// and this destination (any `oncePer` value) gets a resolve, which clears the key
    /// once delivered.
    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &self,
        app: &App,
        app_key: &str,
        trigger: &str,
        r: &ConditionResult,
        d: &Destination,
        state: &StateView,
        ctx: &mut LazyRender<'_>,
        out: &mut Evaluation,
    ) -> Result<(), StateError> {
        let suffix = format!(":{trigger}:{}:{}:{}", r.key, d.service, d.recipient);
        for (key, at) in state.keys(app_key)? {
            if key.ends_with(&suffix) {
                let record = StateRecord { app_key: app_key.to_string(), key, op: RecordOp::Clear, seen: Some(at) };
                self.render_all(app, trigger, r, d, Action::Resolve, record, state, ctx, out)?;
            }
        }
        Ok(())
    }

    /// Renders every template of a condition for one destination, skipping those
    /// already in flight.
    #[allow(clippy::too_many_arguments)]
    fn render_all(
        &self,
        app: &App,
        trigger: &str,
        r: &ConditionResult,
        d: &Destination,
        action: Action,
        record: StateRecord,
        state: &StateView,
        ctx: &mut LazyRender<'_>,
        out: &mut Evaluation,
    ) -> Result<(), StateError> {
        let rt = &self.runtime;
        let Some(kind) = self.kind_or_skip(d, out) else { return Ok(()) };
        let target = Target { trigger, kind, service: &d.service, recipient: &d.recipient, resolved: action == Action::Resolve };
        let ctx_episode = ctx.episode_json();
        let ctx_operation = match (&ctx.drift.operation, r.once_per.as_deref()) {
            (Some(op), Some(v)) if v == op.id => Some(
                ctx.operation_view
                    .get_or_insert_with(|| {
                        serde_json::to_value(crate::drift::operation::OperationRecord::of(app, op)).unwrap_or(serde_json::Value::Null)
                    })
                    .clone(),
            ),
            _ => None,
        };
        for template in &r.send {
            if state.is_pending(&record.app_key, &record.key, template, action)? {
                out.skipped.push(Skip::InFlight { trigger: trigger.to_string(), destination: d.clone() });
                continue;
            }
            let (drift, episode, now) = (ctx.drift, ctx.episode, ctx.now);
            let ctx = ctx.ctx.get_or_insert_with(|| RenderContext::new(app, &rt.context).with_pass(drift, episode, now));
            match wiring::render(rt, template, ctx, &target, app) {
                Ok(rendered) => {
                    let mut payload = rendered.payload;
                    self.runtime.redactor.redact_json(&mut payload);
                    out.notifications.push(Notification {
                        app: app.qualified_name(),
                        meta: AppMeta::of(app),
                        trigger: trigger.to_string(),
                        condition: r.index,
                        condition_key: r.key.clone(),
                        template: template.clone(),
                        destination: d.clone(),
                        kind,
                        action,
                        severity: rendered.severity,
                        payload,
                        record: Some(record.clone()),
                        episode: ctx_episode.clone(),
                        operation: ctx_operation.clone(),
                        idempotency_key: None,
                        group: None,
                    });
                }
                Err(e) => out.skipped.push(Skip::RenderFailed {
                    trigger: trigger.to_string(),
                    destination: d.clone(),
                    error: self.runtime.redactor.redact(&e.to_string()),
                }),
            }
        }
        Ok(())
    }
}
