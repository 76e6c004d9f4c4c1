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

/// The Application a pass is about, the store's snapshot it decides from, and its
/// instant: what every stage reads.
struct Subject<'a> {
    app: &'a App,
    /// Its state-store key.
    key: String,
    state: &'a StateView,
    now: DateTime<Utc>,
}

/// A condition result of a trigger, as the destination stages see it.
struct Fired<'a> {
    trigger: &'a str,
    r: &'a ConditionResult,
}

/// One destination of a fired condition: its dedup key, and whether a grouped route
/// takes it.
struct Dest<'a> {
    d: &'a Destination,
    key: String,
    grouped: bool,
}

/// What [`Pipeline::render_all`] renders: a condition's templates for a fire or a
/// resolve, with the dedup record its delivery writes.
struct Send<'a> {
    trigger: &'a str,
    r: &'a ConditionResult,
    action: Action,
    record: StateRecord,
}

/// The destination stages' context of one pass: the subject, what the earlier stages
/// found, and the render context, built on the first notification only (most passes
/// render nothing).
struct Pass<'a> {
    s: &'a Subject<'a>,
    drift: &'a Drift,
    episode: Option<&'a Episode>,
    /// The cluster the Application's resources are in (a group's `cluster` label).
    cluster: String,
    /// The route tree's matches (a grouped route, a break-glass route).
    routes: &'a [RouteHit],
    /// The break-glass ticket that holds this pass's pages, if one does.
    pages_held: Option<&'a str>,
    /// Whether the Application is in any group, once asked (one probe per pass).
    in_a_group: Option<bool>,
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

impl Pass<'_> {
    /// The episode a notification carries (when it belongs to it), made once a pass.
    fn episode_json(&mut self) -> Option<serde_json::Value> {
        match (self.belongs, self.episode) {
            (true, Some(e)) => Some(self.episode_view.get_or_insert_with(|| e.view(self.s.now)).clone()),
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
        let s = Subject { app, key: app.state_key(), state, now };
        // What drifted and the episode come first: every Application's drift is
        // recorded, subscribed or not, and routes match on them.
        let drift = self.observe(inputs, &s, &mut out)?;
        if let Some(subs) = self.route(inputs, &s, &drift, &mut out)? {
            self.fire(&s, &drift, &subs, &mut out)?;
        }
        out.drift = drift;
        Ok(out)
    }

    /// Stage 1, observe: what drifted (with the audit input's attempts), the
    /// break-glass verdict, the episode, sync operations seen ended, and whether a new
    /// episode's live reads are still awaited.
    fn observe(&self, inputs: &Inputs, s: &Subject<'_>, out: &mut Evaluation) -> Result<Drift, StateError> {
        let rt = &self.runtime;
        let (app, app_key, now) = (s.app, &s.key, s.now);
        let target = rt.target(&app.object);
        let cluster = target.key();
        let (server, name) = rt.destination_of(&app.object);
        let scope = inputs.scope(app).resolved(&server, &name);
        let mut drift =
            Drift::of(&app.object, &rt.classes, &inputs.live, &cluster, &scope).with_attempts(inputs.attempts.of(app_key), &rt.classes);
        out.break_glass = self.judge_break_glass(inputs, s, &mut drift)?;
        if let Some(at) =
            drift.break_glass.as_ref().filter(|b| b.state == crate::drift::break_glass::State::Active).and_then(|b| b.expires_at)
        {
            out.wake(at);
        }
        let obs = episode::observe(s.state.latest_episode(app_key)?, app, &drift, now);
        out.episode = obs.episode;
        out.episode_event = obs.event;
        out.operations = new_operations(app, &drift, s.state.latest_operation(app_key)?);
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
        Ok(drift)
    }

    /// Stage 2, route: the subscriptions (annotations, the AppProject's, configured
    /// ones) and the route tree's matches on the episode; `None` when nothing is
    /// subscribed.
    fn route(
        &self,
        inputs: &Inputs,
        s: &Subject<'_>,
        drift: &Drift,
        out: &mut Evaluation,
    ) -> Result<Option<crate::route::Subscriptions>, StateError> {
        let rt = &self.runtime;
        let app = s.app;
        let routed = rt.router.subscriptions(app, inputs.projects.get(&app.project));
        let mut subs = routed.subs;
        out.annotation_errors = routed.errors;
        // What the limits dropped is kept on the Application (`driftwatch state list`)
        // when it changes, not written every pass.
        if s.state.app_note(&s.key)? != routed.capped {
            out.note = Some(routed.capped.clone());
        }
        out.capped = routed.capped;
        if !rt.routes.is_empty() {
            let subject = out.episode.as_ref().map_or_else(|| RouteSubject::from(drift), RouteSubject::from);
            let current = out.episode.as_ref().filter(|e| e.is_open() || out.episode_event == Some(Event::Resolved));
            let break_glass = under_break_glass(drift, current).is_some();
            out.routes = rt.routes.matches(&RouteInput { labels: &app.labels, project: &app.project, subject, break_glass });
            out.routes.iter().for_each(|hit| hit.add_to(&mut subs));
        }
        Ok((!subs.is_empty()).then_some(subs))
    }

    /// Stage 3, fire: each subscribed trigger's conditions, on the pass's values
    /// converted once; a condition with `for:` goes on once its hold-down elapsed, one
    /// that holds waits for a new episode's live reads; then each destination.
    fn fire(&self, s: &Subject<'_>, drift: &Drift, subs: &crate::route::Subscriptions, out: &mut Evaluation) -> Result<(), StateError> {
        let rt = &self.runtime;
        // Taken for the loop (which writes `out`), put back after it.
        let episode = out.episode.take();
        let routes = std::mem::take(&mut out.routes);
        let mut scope = rt.engine.prepare_pass(&s.app.object, drift, episode.as_ref(), s.now);
        let belongs =
            episode.as_ref().is_some_and(Episode::is_open) || matches!(out.episode_event, Some(Event::Resolved | Event::Attempted));
        let mut p = Pass {
            s,
            drift,
            episode: episode.as_ref(),
            cluster: out.target.key(),
            routes: &routes,
            pages_held: pages_held(drift, episode.as_ref()),
            in_a_group: None,
            episode_view: None,
            belongs,
            operation_view: None,
            ctx: None,
        };
        for (trigger_name, destinations) in subs {
            let Some(trigger) = rt.triggers.get(trigger_name) else {
                out.skipped.push(Skip::UnknownTrigger { trigger: trigger_name.clone() });
                continue;
            };
            for r in with_now(s.now, || rt.engine.run(trigger, &mut scope)) {
                if !self.held_long_enough(s, trigger_name, &r, out)? {
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
                let f = Fired { trigger: trigger_name, r: &r };
                for d in destinations {
                    self.to_destination(&mut p, &f, d, out)?;
                }
            }
        }
        drop(p);
        out.routes = routes;
        out.episode = episode;
        Ok(())
    }

    /// Stage 4, per destination of a condition: a condition turned false leaves its
    /// group, resolves or re-arms; one that holds is deduplicated (`repeat:` aside),
    /// muted when a break-glass exception holds its page, then joins its group or is
    /// rendered.
    fn to_destination(&self, p: &mut Pass<'_>, f: &Fired<'_>, d: &Destination, out: &mut Evaluation) -> Result<(), StateError> {
        let s = p.s;
        let key = dedup_key(f.r.once_per.as_deref(), f.trigger, &f.r.key, &d.service, &d.recipient);
        // A grouped route's destination (never a SIEM's: one record per Application)
        // gets the group's message instead.
        let grouped = group::grouping(p.routes, f.trigger, d)
            .filter(|_| !self.runtime.service_kind(&d.service).is_some_and(crate::deliver::kinds::is_siem))
            .map(|(route, spec)| group::Grouped { route, spec, trigger: f.trigger, d });
        if !f.r.result {
            return self.turned_false(p, f, &Dest { d, key, grouped: grouped.is_some() }, out);
        }
        let dest = Dest { d, key, grouped: grouped.is_some() };
        let Some(seen) = self.dedup(p, f, &dest, out)? else { return Ok(()) };
        if self.muted(p, f, d, out) {
            return Ok(());
        }
        let record = StateRecord { app_key: s.key.clone(), key: dest.key, op: RecordOp::Set, seen };
        match &grouped {
            Some(g) => self.join_group(p, g, ((f.r).into(), record), out),
            None => self.render_all(p, Send { trigger: f.trigger, r: f.r, action: Action::Fire, record }, d, out),
        }
    }

    /// A condition that is false: the member leaves its group (the message is updated;
    /// the last to leave resolves it); a `resolve: true` condition resolves every key
    /// recorded for it; any other re-arms (its key is forgotten).
    fn turned_false(&self, p: &mut Pass<'_>, f: &Fired<'_>, dest: &Dest<'_>, out: &mut Evaluation) -> Result<(), StateError> {
        let s = p.s;
        let cond = group::Condition::from(f.r);
        if dest.grouped {
            self.leave_group(p, (f.trigger, dest.d), &cond, out)?;
        } else {
            // Joined while its route was grouped (a reload took the group away): it
            // leaves the group it joined then. One probe per pass tells whether the
            // Application is in any group at all.
            let grouped_before = match p.in_a_group {
                Some(b) => b,
                None => *p.in_a_group.insert(s.state.in_any_group(&s.key)?),
            };
            if grouped_before {
                self.leave_group(p, (f.trigger, dest.d), &cond, out)?;
            }
            if f.r.resolve {
                return self.resolve(p, f, dest.d, out);
            }
        }
        // Only keys without oncePer re-arm; an oncePer key is kept until its value
        // changes (a new value is a new key). Checked with a read first: most
        // conditions are false most of the time, and a forget is a durable write.
        if s.state.is_notified(&s.key, &dest.key)? {
            out.rearm.push(StateRecord { app_key: s.key.clone(), key: dest.key.clone(), op: RecordOp::Clear, seen: None });
        }
        Ok(())
    }

    /// Whether the notification was delivered before: `Some(when)` (or `Some(None)`,
    /// never) when it goes on — a `repeat:` falls due after its interval — else `None`
    /// (skipped, and woken when the repeat falls due).
    fn dedup(&self, p: &Pass<'_>, f: &Fired<'_>, dest: &Dest<'_>, out: &mut Evaluation) -> Result<Option<Option<u64>>, StateError> {
        let s = p.s;
        let Some(at) = s.state.notified_at(&s.key, &dest.key)? else { return Ok(Some(None)) };
        // A repeat so far off that the time is not representable never falls due (the
        // configuration bounds it; this keeps the arithmetic total).
        let due = f.r.repeat.and_then(|every| chrono::Duration::from_std(every).ok().and_then(|d| from_millis(at).checked_add_signed(d)));
        match due {
            Some(due) if due <= s.now => Ok(Some(Some(at))),
            other => {
                if let Some(due) = other {
                    out.wake(due);
                }
                out.skipped.push(Skip::AlreadyNotified { trigger: f.trigger.to_string(), destination: dest.d.clone() });
                Ok(None)
            }
        }
    }

    /// Stage 5, mute: a page a break-glass exception holds (the live drift goes to the
    /// break-glass routes instead), as Alertmanager's inhibition does.
    fn muted(&self, p: &Pass<'_>, f: &Fired<'_>, d: &Destination, out: &mut Evaluation) -> bool {
        let Some(ticket) = p.pages_held.filter(|_| !f.trigger.starts_with("on-break-glass")) else { return false };
        let pages = self.runtime.service_kind(&d.service).is_some_and(crate::deliver::kinds::pages);
        let on_break_glass_route =
            p.routes.iter().any(|h| h.break_glass && h.triggers.iter().any(|t| t.as_str() == f.trigger) && h.recipients.contains(d));
        if !pages || on_break_glass_route {
            return false;
        }
        out.skipped.push(Skip::BreakGlass { trigger: f.trigger.to_string(), destination: d.clone(), ticket: ticket.to_string() });
        true
    }

    /// The Application's break-glass exception, judged from its annotation, the stored
    /// copy and the audit input's writes, into `drift.breakGlass`; returns the record
    /// to store when it changed. An Application that never had one reads one value.
    fn judge_break_glass(
        &self,
        inputs: &Inputs,
        s: &Subject<'_>,
        drift: &mut Drift,
    ) -> Result<Option<crate::drift::break_glass::Record>, StateError> {
        use crate::drift::break_glass::{self as bg, Record};
        let (app, app_key, state, now) = (s.app, s.key.as_str(), s.state, s.now);
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
    fn held_long_enough(&self, s: &Subject<'_>, trigger: &str, r: &ConditionResult, out: &mut Evaluation) -> Result<bool, StateError> {
        let (app_key, state, now) = (s.key.as_str(), s.state, s.now);
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
    fn resolve(&self, p: &mut Pass<'_>, f: &Fired<'_>, d: &Destination, out: &mut Evaluation) -> Result<(), StateError> {
        let s = p.s;
        let suffix = format!(":{}:{}:{}:{}", f.trigger, f.r.key, d.service, d.recipient);
        for (key, at) in s.state.keys(&s.key)? {
            if key.ends_with(&suffix) {
                let record = StateRecord { app_key: s.key.clone(), key, op: RecordOp::Clear, seen: Some(at) };
                self.render_all(p, Send { trigger: f.trigger, r: f.r, action: Action::Resolve, record }, d, out)?;
            }
        }
        Ok(())
    }

    /// Renders every template of a condition for one destination, skipping those
    /// already in flight.
    fn render_all(&self, ctx: &mut Pass<'_>, send: Send<'_>, d: &Destination, out: &mut Evaluation) -> Result<(), StateError> {
        let rt = &self.runtime;
        let Send { trigger, r, action, record } = send;
        let (app, state) = (ctx.s.app, ctx.s.state);
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
            let (drift, episode, now) = (ctx.drift, ctx.episode, ctx.s.now);
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
