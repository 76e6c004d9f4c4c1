//! The stages of one evaluation pass, in order: observe (what drifted, break-glass,
//! the episode), route (subscriptions and the route tree), fire (the triggers'
//! conditions, hold-downs), then per destination: a condition turned false
//! (`turned_false`: leave a group, resolve, re-arm), dedup (`repeat:` aside), mute
//! (a page a break-glass exception holds), and join a group or render. Each reads the
//! pass's [`Subject`] and, from fire on, its [`Pass`]; none does I/O: the store was
//! asked once, before the pass, for the Application's [`AppState`] (a group joined or
//! left is read from the pass's snapshot through [`GroupReads`]).

use super::{
    Action, App, AppMeta, AppState, ConditionResult, DateTime, Destination, Drift, Episode, Evaluation, Event, GroupReads, Inputs,
    Notification, Pipeline, RecordOp, RenderContext, RouteHit, RouteInput, RouteSubject, Skip, StateError, StateRecord, Target, Utc,
    dedup_key, episode, from_millis, group, new_operations, pages_held, to_millis, under_break_glass, wiring, with_now,
};
use crate::json::Pointer;

/// How soon a resolve whose firing is still in flight is looked at again.
const RESOLVE_RECHECK: chrono::Duration = chrono::Duration::seconds(2);

/// The Application a pass is about, what the store holds about it, and the pass's
/// instant: what every stage reads.
pub(super) struct Subject<'a> {
    pub(super) app: &'a App,
    /// Its state-store key.
    pub(super) key: String,
    pub(super) state: &'a AppState,
    /// The groups it may join or leave, in the same snapshot.
    pub(super) groups: &'a dyn GroupReads,
    pub(super) now: DateTime<Utc>,
}

/// A condition result of a trigger, as the destination stages see it.
pub(super) struct Fired<'a> {
    pub(super) trigger: &'a str,
    pub(super) r: &'a ConditionResult,
}

/// One destination of a fired condition: its dedup key, and whether a grouped route
/// takes it.
pub(super) struct Dest<'a> {
    pub(super) d: &'a Destination,
    pub(super) key: String,
    pub(super) grouped: bool,
}

/// What [`Pipeline::render_all`] renders: a condition's templates for a fire or a
/// resolve, with the dedup record its delivery writes.
pub(super) struct Send<'a> {
    pub(super) trigger: &'a str,
    pub(super) r: &'a ConditionResult,
    pub(super) action: Action,
    pub(super) record: StateRecord,
}

/// The destination stages' context of one pass: the subject, what the earlier stages
/// found, and the render context, built on the first notification only (most passes
/// render nothing).
pub(super) struct Pass<'a> {
    pub(super) s: &'a Subject<'a>,
    pub(super) drift: &'a Drift,
    pub(super) episode: Option<&'a Episode>,
    /// The cluster the Application's resources are in (a group's `cluster` label).
    pub(super) cluster: String,
    /// The route tree's matches (a grouped route, a break-glass route).
    pub(super) routes: &'a [RouteHit],
    /// The break-glass ticket that holds this pass's pages, if one does.
    pub(super) pages_held: Option<&'a str>,
    /// The episode as a notification carries it (when it belongs to it), made once.
    pub(super) episode_view: Option<serde_json::Value>,
    /// Whether this pass's notifications belong to the episode: it is open, or this
    /// very observation resolved it. A notification about something else long after an
    /// episode ended (an `on-deployed` next week) does not carry it, so it is neither
    /// noted in that episode's history nor sent to a SIEM as part of it.
    pub(super) belongs: bool,
    /// The record of the pass's last operation, made once, for the notifications
    /// about it (`oncePer` its id).
    pub(super) operation_view: Option<serde_json::Value>,
    pub(super) ctx: Option<RenderContext>,
}

impl Pass<'_> {
    /// The episode a notification carries (when it belongs to it), made once a pass.
    pub(super) fn episode_json(&mut self) -> Option<serde_json::Value> {
        match (self.belongs, self.episode) {
            (true, Some(e)) => Some(self.episode_view.get_or_insert_with(|| e.view(self.s.now)).clone()),
            _ => None,
        }
    }
}

impl Pipeline {
    /// Stage 1, observe: what drifted (with the audit input's attempts), the
    /// break-glass verdict, the episode, sync operations seen ended, and whether a new
    /// episode's live reads are still awaited.
    pub(super) fn observe(&self, inputs: &Inputs, s: &Subject<'_>, out: &mut Evaluation) -> Drift {
        let rt = &self.runtime;
        let (app, app_key, now) = (s.app, &s.key, s.now);
        let target = rt.target_of(app);
        let cluster = target.key();
        let scope = inputs.scope(app, rt);
        let mut drift = Drift::of_app(app, &rt.classes, &inputs.live, &cluster, &scope, &rt.diff.mask)
            .with_attempts(inputs.attempts.of(app_key), &rt.classes);
        out.break_glass = self.judge_break_glass(inputs, s, &mut drift);
        if let Some(at) =
            drift.break_glass.as_ref().filter(|b| b.state == crate::drift::break_glass::State::Active).and_then(|b| b.expires_at)
        {
            out.wake(at);
        }
        let obs = episode::observe(s.state.episode.clone(), app, &drift, now);
        out.episode = obs.episode;
        out.episode_event = obs.event;
        out.operations = new_operations(app, &drift, s.state.operation.clone());
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
                    && !r.object.name.is_empty()
                    && !inputs.live.contains_key(&crate::drift::attribution::live_key(&cluster, &r.object))
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
        drift
    }

    /// Stage 2, route: the subscriptions (annotations, the AppProject's, configured
    /// ones) and the route tree's matches on the episode; `None` when nothing is
    /// subscribed.
    pub(super) fn route(
        &self,
        inputs: &Inputs,
        s: &Subject<'_>,
        drift: &Drift,
        out: &mut Evaluation,
    ) -> Option<crate::route::Subscriptions> {
        let rt = &self.runtime;
        let app = s.app;
        let routed = rt.router.subscriptions(app, inputs.projects.get(&app.project));
        let mut subs = routed.subs;
        // What the bounds refused and what the limits dropped is kept on the
        // Application (`driftwatch state list`) when it changes, not written every pass.
        let note = crate::route::note(&routed.errors, routed.capped.as_deref());
        if s.state.note != note {
            out.note = Some(note);
        }
        out.annotation_errors = routed.errors;
        out.capped = routed.capped;
        if !rt.routes.is_empty() {
            let subject = out.episode.as_ref().map_or_else(|| RouteSubject::from(drift), RouteSubject::from);
            let current = out.episode.as_ref().filter(|e| e.is_open() || out.episode_event == Some(Event::Resolved));
            let break_glass = under_break_glass(drift, current).is_some();
            out.routes = rt.routes.matches(&RouteInput {
                labels: &app.labels,
                project: &app.project,
                engine: app.engine().as_str(),
                subject,
                break_glass,
            });
            out.routes.iter().for_each(|hit| hit.add_to(&mut subs));
        }
        (!subs.is_empty()).then_some(subs)
    }

    /// Stage 3, fire: each subscribed trigger's conditions, on the pass's values
    /// converted once; a condition with `for:` goes on once its hold-down elapsed, one
    /// that holds waits for a new episode's live reads; then each destination.
    pub(super) fn fire(
        &self,
        s: &Subject<'_>,
        drift: &Drift,
        subs: &crate::route::Subscriptions,
        out: &mut Evaluation,
    ) -> Result<(), StateError> {
        let rt = &self.runtime;
        // Taken for the loop (which writes `out`), put back after it.
        let episode = out.episode.take();
        let routes = std::mem::take(&mut out.routes);
        let mut scope = rt.engine.prepare_pass(&s.app.object, &s.app.unit, drift, episode.as_ref(), s.now, &rt.reads);
        let belongs =
            episode.as_ref().is_some_and(Episode::is_open) || matches!(out.episode_event, Some(Event::Resolved | Event::Attempted));
        let mut p = Pass {
            s,
            drift,
            episode: episode.as_ref(),
            cluster: out.target.key(),
            routes: &routes,
            pages_held: pages_held(drift, episode.as_ref()),
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
                if !self.held_long_enough(s, trigger_name, &r, out) {
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
    pub(super) fn to_destination(&self, p: &mut Pass<'_>, f: &Fired<'_>, d: &Destination, out: &mut Evaluation) -> Result<(), StateError> {
        let s = p.s;
        let key = dedup_key(f.r.once_per.as_deref(), f.trigger, &f.r.key, &d.service, &d.recipient);
        // A grouped route's destination (never a SIEM's: one record per Application)
        // gets the group's message instead.
        let grouped = group::grouping(p.routes, f.trigger, d)
            .filter(|_| !self.runtime.service_kind(&d.service).is_some_and(crate::deliver::kinds::is_siem))
            .map(|(route, spec)| group::Grouped { route, spec, trigger: f.trigger, d });
        let dest = Dest { d, key, grouped: grouped.is_some() };
        if !f.r.result {
            return self.turned_false(p, f, &dest, out);
        }
        let Some(seen) = self.dedup(p, f, &dest, out) else { return Ok(()) };
        if self.muted(p, f, d, out) {
            return Ok(());
        }
        let record = StateRecord { app_key: s.key.clone(), key: dest.key, op: RecordOp::Set, seen };
        match &grouped {
            Some(g) => self.join_group(p, g, ((f.r).into(), record), out),
            None => {
                self.render_all(p, Send { trigger: f.trigger, r: f.r, action: Action::Fire, record }, d, out);
                Ok(())
            }
        }
    }

    /// A condition that is false: the member leaves its group (the message is updated;
    /// the last to leave resolves it); a `resolve: true` condition resolves every key
    /// recorded for it; any other re-arms (its key is forgotten).
    pub(super) fn turned_false(&self, p: &mut Pass<'_>, f: &Fired<'_>, dest: &Dest<'_>, out: &mut Evaluation) -> Result<(), StateError> {
        let s = p.s;
        let cond = group::Condition::from(f.r);
        if dest.grouped {
            self.leave_group(p, (f.trigger, dest.d), &cond, out)?;
        } else {
            // Joined while its route was grouped (a reload took the group away): it
            // leaves the group it joined then.
            if s.state.in_any_group() {
                self.leave_group(p, (f.trigger, dest.d), &cond, out)?;
            }
            if f.r.resolve {
                self.resolve(p, f, dest.d, out);
                return Ok(());
            }
        }
        // Only keys without oncePer re-arm; an oncePer key is kept until its value
        // changes (a new value is a new key). Checked with a read first: most
        // conditions are false most of the time, and a forget is a durable write.
        if s.state.notified_at(&dest.key).is_some() {
            out.rearm.push(StateRecord { app_key: s.key.clone(), key: dest.key.clone(), op: RecordOp::Clear, seen: None });
        }
        Ok(())
    }

    /// Whether the notification was delivered before: `Some(when)` (or `Some(None)`,
    /// never) when it goes on — a `repeat:` falls due after its interval — else `None`
    /// (skipped, and woken when the repeat falls due).
    pub(super) fn dedup(&self, p: &Pass<'_>, f: &Fired<'_>, dest: &Dest<'_>, out: &mut Evaluation) -> Option<Option<u64>> {
        let s = p.s;
        let Some(at) = s.state.notified_at(&dest.key) else { return Some(None) };
        // A repeat so far off that the time is not representable never falls due (the
        // configuration bounds it; this keeps the arithmetic total).
        let due = f.r.repeat.and_then(|every| chrono::Duration::from_std(every).ok().and_then(|d| from_millis(at).checked_add_signed(d)));
        match due {
            Some(due) if due <= s.now => Some(Some(at)),
            other => {
                if let Some(due) = other {
                    out.wake(due);
                }
                out.skipped.push(Skip::AlreadyNotified { trigger: f.trigger.to_string(), destination: dest.d.clone() });
                None
            }
        }
    }

    /// Stage 5, mute: a page a break-glass exception holds (the live drift goes to the
    /// break-glass routes instead), as Alertmanager's inhibition does.
    pub(super) fn muted(&self, p: &Pass<'_>, f: &Fired<'_>, d: &Destination, out: &mut Evaluation) -> bool {
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
    pub(super) fn judge_break_glass(
        &self,
        inputs: &Inputs,
        s: &Subject<'_>,
        drift: &mut Drift,
    ) -> Option<crate::drift::break_glass::Record> {
        use crate::drift::break_glass::{self as bg, Record};
        let (app, app_key, now) = (s.app, s.key.as_str(), s.now);
        let annotated = app.object.at("/metadata/annotations").and_then(|a| a.get(bg::ANNOTATION)).is_some();
        let latest = s.state.break_glass.as_ref();
        if !annotated && latest.is_none_or(|l| l.closed) {
            return None;
        }
        let off_git = app.sync_status() != "Synced";
        let before = latest.and_then(|l| l.record.as_ref()).map(|r| &r.break_glass);
        let stored = bg::Stored {
            latest: before,
            newest_record: latest.and_then(|l| l.newest_record.as_ref()).map(|r| &r.break_glass),
            newest: latest.and_then(|l| l.newest.as_ref()),
        };
        let judged = bg::evaluate(&app.object, stored, inputs.break_glass.of(app_key), &self.runtime.break_glass, off_git, now)?;
        // The newest exception moves or ends with what the annotation holds now; the
        // store keeps it even when the judgement itself did not change.
        let newest = bg::Newest::after(stored.newest.cloned().or_else(|| before.and_then(bg::Newest::of)).as_ref(), &judged, now);
        let changed = before.is_none_or(|b| b.fingerprint() != judged.fingerprint()) || newest.as_ref() != stored.newest;
        // The exception's own stored history continues (by id), whatever was judged in
        // between.
        let prior = stored.by_id(&judged.id).or(before);
        let record = changed.then(|| Record {
            app_key: app_key.to_string(),
            namespace: app.namespace.clone(),
            name: app.name.clone(),
            break_glass: bg::with_transitions(judged.clone(), prior, now),
            newest,
        });
        drift.break_glass = Some(judged);
        record
    }

    /// The `for:` hold-down of a condition: true when the result may go on (no
    /// hold-down, the condition is false, or it has held long enough). Starts and ends
    /// hold-downs in `out` and schedules the re-evaluation when one will elapse.
    pub(super) fn held_long_enough(&self, s: &Subject<'_>, trigger: &str, r: &ConditionResult, out: &mut Evaluation) -> bool {
        let now = s.now;
        let Some(hold) = r.hold else { return true };
        let hold_key = format!("{trigger}:{}", r.key);
        let since = s.state.hold_since(&hold_key);
        if !r.result {
            if since.is_some() {
                out.holds.push((hold_key, None));
            }
            return true;
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
            return false;
        };
        if until <= now {
            return true;
        }
        out.wake(until);
        out.skipped.push(Skip::HeldDown { trigger: trigger.to_string(), until });
        false
    }

    /// The condition (marked `resolve: true`) is false: every key still recorded for it
    /// and this destination (any `oncePer` value) gets a resolve, which clears the key
    /// once delivered.
    pub(super) fn resolve(&self, p: &mut Pass<'_>, f: &Fired<'_>, d: &Destination, out: &mut Evaluation) {
        let s = p.s;
        let suffix = format!(":{}:{}:{}:{}", f.trigger, f.r.key, d.service, d.recipient);
        for (key, at) in s.state.notified.iter().filter(|(key, _)| key.ends_with(&suffix)) {
            let record = StateRecord { app_key: s.key.clone(), key: key.clone(), op: RecordOp::Clear, seen: Some(*at) };
            self.render_all(p, Send { trigger: f.trigger, r: f.r, action: Action::Resolve, record }, d, out);
        }
        // A firing still in flight (queued or being sent, its key not recorded yet) has
        // nothing to resolve now, and nothing would look at the Application again once
        // its settle records the key: the unit would stay failed at the receiver. It is
        // looked at again shortly, until the firing settles and its resolve is sent.
        if s.state.pending.iter().any(|(key, _, action)| *action == Action::Fire && key.ends_with(&suffix)) {
            out.wake(s.now + RESOLVE_RECHECK);
        }
    }

    /// Renders every template of a condition for one destination, skipping those
    /// already in flight.
    pub(super) fn render_all(&self, ctx: &mut Pass<'_>, send: Send<'_>, d: &Destination, out: &mut Evaluation) {
        let rt = &self.runtime;
        let Send { trigger, r, action, record } = send;
        let (app, state) = (ctx.s.app, ctx.s.state);
        let Some(kind) = self.kind_or_skip(d, out) else { return };
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
            if state.is_pending(&record.key, template, action) {
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
                        received_ms: None,
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
    }
}
