//! One pass for one Application, the same for the daemon and `run --replay`: evaluate,
//! then write what the pass decided (episode, hold-downs, re-arms) and its
//! notifications to the outbox in one transaction; the delivery workers deliver and
//! record. A deleted Application is retired in that transaction too: its state is
//! purged when its last outbox entry settles, not before.
//!
//! Previews (`run --replay` without `--deliver`) take the same path, with every service
//! delivered by [`Preview`], which takes everything: what was shown is what was
//! recorded, by the same settle that records a real delivery.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Evaluation, Inputs, Pipeline, pass_write};
use crate::config::Runtime;
use crate::deliver::deliverer::BoxFuture;
use crate::deliver::outcome::Outcome;
use crate::deliver::queue::{OutboxClock, SubmitReport};
use crate::deliver::{Deliverer, Delivery, ServiceRuntime};
use crate::json::Pointer;
use crate::model::{App, DestinationKind, Notification};
use crate::state::{PassStore, StateError, Store};

/// Where a pass failed: reading the store to evaluate, or writing what it decided.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("evaluation failed (state store): {0}")]
    Evaluate(StateError),
    #[error("recording the evaluation failed (state store): {0}")]
    Write(StateError),
}

/// What one pass did.
#[derive(Debug)]
pub struct Pass {
    pub eval: Evaluation,
    /// What went into the outbox (nothing for a stale snapshot, which decides nothing).
    pub submitted: SubmitReport,
    /// Whether the pass wrote anything (most write nothing: no transaction at all).
    pub wrote: bool,
}

/// Evaluates `app` at `now` and writes the pass. `deleted`: the Application is gone
/// (a watch delete, a relist without it, a replay's deleted snapshot): it is evaluated
/// as being deleted (a `deletionTimestamp` of `now` when the object has none, so
/// `on-deleted` sees it on the pass's clock) and then retired.
pub fn run(
    pipeline: &Pipeline,
    inputs: &Inputs,
    state: &PassStore,
    delivery: &Delivery,
    app: &App,
    deleted: bool,
    (now, received_ms): (DateTime<Utc>, Option<u64>),
) -> Result<Pass, PassError> {
    let stamped;
    let app = match deleted && app.object.at("/metadata/deletionTimestamp").is_none_or(Value::is_null) {
        true => {
            stamped = stamp_deleted(app, now);
            &stamped
        }
        false => app,
    };
    let eval = match pipeline.evaluate(inputs, app, state, now) {
        Err(StateError::Episode { app: key, detail }) => {
            // One unreadable episode must not stop this Application (nor, through a
            // store reopened in a loop, every other): its episode state is reset, and
            // the pass decides on a fresh one.
            tracing::error!(app = %key, error = %detail, "the stored drift episode cannot be read: its episode state is reset");
            state.reset_episode(&key).map_err(PassError::Write)?;
            pipeline.evaluate(inputs, app, state, now).map_err(PassError::Evaluate)?
        }
        r => r.map_err(PassError::Evaluate)?,
    };
    let mut eval = eval;
    // When the event behind this pass reached the daemon: the delivery's latency runs
    // from there (`driftwatch_notification_latency_seconds`).
    for n in &mut eval.notifications {
        n.received_ms = received_ms;
    }
    if deleted && !eval.stale {
        pipeline.leave_all_groups(app, state, now, &mut eval).map_err(PassError::Evaluate)?;
    }
    if let Some(r) = &eval.break_glass {
        log_break_glass(r);
    }
    // A stale snapshot decides nothing (its pass writes nothing), but a deleted
    // Application is retired all the same: nothing later would retire it.
    let key = app.state_key();
    let pass = pass_write(&eval, &key, &pipeline.runtime, deleted, now);
    let wrote = !pass.is_empty() || !eval.notifications.is_empty();
    // The pass goes to the store in one transaction with its notifications, at the
    // due times the queue gives them, and the dead letters of those for services not
    // configured; then the queue wakes its workers.
    let plan = delivery.plan(&eval.notifications);
    let enqueue = state.write_pass_due(&pass, &plan.known, plan.now_ms, Some(&plan.due), &plan.rejects()).map_err(PassError::Write)?;
    let submitted = delivery.queued(&plan, enqueue).map_err(PassError::Write)?;
    Ok(Pass { eval, submitted, wrote })
}

/// One log line per transition of a break-glass exception (the pass writes each once):
/// a refusal is a warning with its reason, which the history keeps too.
fn log_break_glass(r: &crate::drift::break_glass::Record) {
    let b = &r.break_glass;
    let app = format!("{}/{}", r.namespace, r.name);
    let Some(last) = b.events.last() else { return };
    for t in &b.events[b.events.len().saturating_sub(b.fresh)..] {
        crate::metrics::METRICS.break_glass.inc(&t.event);
    }
    match b.state {
        crate::drift::break_glass::State::Refused => {
            tracing::warn!(app = %app, ticket = %b.ticket, reason = %b.refusal, "break-glass exception refused: it changes nothing, pages go out as usual")
        }
        _ => tracing::info!(app = %app, ticket = %b.ticket, event = %last.event, state = %b.state.as_str(), opened_by = %b.opened_by,
            approved_by = %b.approved_by, verification = %b.verification.as_str(), effective = b.effective, overdue = b.overdue,
            "break-glass exception"),
    }
}

/// A DELETED event may carry the object without a `deletionTimestamp`; it is deleted
/// all the same, and `on-deleted` must see it so.
fn stamp_deleted(app: &App, now: DateTime<Utc>) -> App {
    let mut app = app.clone();
    if let Some(meta) = app.object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("deletionTimestamp".into(), now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true).into());
    }
    app
}

/// The deliverer of previews: takes every notification. The caller shows a
/// notification as it submits it, except a group's: its members join one by one and
/// its message goes out once, when the group's wait ends, so the group messages
/// "sent" are kept here for the caller to show then ([`Preview::take_sent_groups`]).
#[derive(Default)]
pub struct Preview {
    sent_groups: std::sync::Mutex<Vec<Notification>>,
}

impl Preview {
    /// The group messages delivered since the last call, in order.
    pub fn take_sent_groups(&self) -> Vec<Notification> {
        std::mem::take(&mut *self.sent_groups.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Deliverer for Preview {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let groups = batch.iter().filter(|n| n.group.is_some()).cloned();
            self.sent_groups.lock().unwrap_or_else(|p| p.into_inner()).extend(groups);
            Outcome::Delivered
        })
    }
}

/// A worker for every service a notification of `rt` can name — each configured
/// service and each destination kind by its own name — all delivered by `deliverer`,
/// one at a time (in the order they were decided) and without a rate limit.
pub fn preview_services(rt: &Runtime, deliverer: Arc<dyn Deliverer>) -> Vec<ServiceRuntime> {
    let configured = rt.services.values().map(|s| (s.name.clone(), s.spec.config.kind()));
    let kinds = DestinationKind::ALL.iter().filter(|k| !rt.services.contains_key(k.as_str())).map(|k| (k.as_str().to_string(), *k));
    configured
        .chain(kinds)
        .map(|(name, kind)| {
            let mut settings = crate::deliver::kinds::default_settings(kind);
            settings.rate.per_second = 1_000_000.0;
            settings.rate.burst = 1_000_000;
            settings.concurrency = 1;
            ServiceRuntime { name, kind, deliverer: deliverer.clone(), settings, redactor: rt.redactor.clone() }
        })
        .collect()
}

/// Starts previews over `state` on `clock`: [`preview_services`] with `preview`.
pub fn start_preview(rt: &Runtime, state: Arc<Store>, clock: OutboxClock, preview: Arc<Preview>) -> Delivery {
    Delivery::start_with_clock(preview_services(rt, preview), state, clock)
}
