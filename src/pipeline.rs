//! Wires the stages for one Application snapshot: subscriptions -> triggers -> dedup
//! check -> templates, producing the notifications to deliver and the keys to re-arm.
//! Nothing here delivers or records a delivery: that is [`crate::deliver::dispatch`]'s
//! job, after which the state store learns what was sent.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::Runtime;
use crate::model::{Action, App, AppMeta, Destination, Notification, Project, RecordOp, StateRecord};
use crate::secret::Redactor;
use crate::state::{StateError, StateStore, dedup_key};
use crate::template::{RenderContext, Target};
use crate::trigger::ConditionResult;
use crate::trigger::engine::with_now;

/// Why a condition result did not become a notification (for `-v` output and tests).
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
}

/// The render context of one pass, built on the first notification only (most passes
/// render nothing), from the `drift` the pass already computed.
struct LazyRender<'a> {
    drift: &'a serde_json::Value,
    ctx: Option<RenderContext>,
}

/// The per-configuration pieces the pipeline needs, plus the projects seen so far.
pub struct Pipeline {
    pub runtime: Arc<Runtime>,
    /// AppProjects by name (from the watch cache or replay files); never fetched per
    /// evaluation.
    pub projects: BTreeMap<String, Project>,
    pub redactor: Redactor,
}

impl Pipeline {
    pub fn new(runtime: Arc<Runtime>) -> Pipeline {
        let redactor = runtime.redactor.clone();
        Pipeline { runtime, projects: BTreeMap::new(), redactor }
    }

    /// Evaluates every subscribed trigger on `app` at instant `now`.
    pub fn evaluate(&self, app: &App, state: &StateStore, now: DateTime<Utc>) -> Result<Evaluation, StateError> {
        let mut out = Evaluation::default();
        if app.sync_status_is_stale() {
            out.stale = true;
            return Ok(out);
        }
        let rt = &self.runtime;
        let (subs, annotation_errors) = rt.router.subscriptions(app, self.projects.get(&app.project));
        out.annotation_errors = annotation_errors;
        if subs.is_empty() {
            return Ok(out);
        }
        let app_key = app.state_key();
        // Converted once for all triggers and conditions of this pass.
        let drift = rt.classes.drift(&app.object);
        let mut scope = rt.engine.prepare_with(&app.object, &[("drift", &drift)]);
        let mut render_ctx = LazyRender { drift: &drift, ctx: None };
        for (trigger_name, destinations) in &subs {
            let Some(trigger) = rt.triggers.get(trigger_name) else {
                out.skipped.push(Skip::UnknownTrigger { trigger: trigger_name.clone() });
                continue;
            };
            let results = with_now(now, || rt.engine.run(trigger, &mut scope));
            for r in results {
                for d in destinations {
                    let key = dedup_key(r.once_per.as_deref(), trigger_name, &r.key, &d.service, &d.recipient);
                    if !r.result {
                        if r.resolve {
                            self.resolve(app, &app_key, trigger_name, &r, d, state, &mut render_ctx, &mut out)?;
                        } else if state.is_notified(&app_key, &key)? {
                            // Only keys without oncePer re-arm; an oncePer key is kept until
                            // its value changes (a new value is a new key). Checked with a
                            // read first: most conditions are false most of the time, and a
                            // forget is a durable write.
                            out.rearm.push(StateRecord { app_key: app_key.clone(), key, op: RecordOp::Clear });
                        }
                        continue;
                    }
                    if state.is_notified(&app_key, &key)? {
                        out.skipped.push(Skip::AlreadyNotified { trigger: trigger_name.clone(), destination: d.clone() });
                        continue;
                    }
                    let record = StateRecord { app_key: app_key.clone(), key, op: RecordOp::Set };
                    self.render_all(app, trigger_name, &r, d, Action::Fire, record, state, &mut render_ctx, &mut out)?;
                }
            }
        }
        Ok(out)
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
        state: &StateStore,
        ctx: &mut LazyRender<'_>,
        out: &mut Evaluation,
    ) -> Result<(), StateError> {
        let suffix = format!(":{trigger}:{}:{}:{}", r.key, d.service, d.recipient);
        for (key, _) in state.keys(app_key)? {
            if key.ends_with(&suffix) {
                let record = StateRecord { app_key: app_key.to_string(), key, op: RecordOp::Clear };
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
        state: &StateStore,
        ctx: &mut LazyRender<'_>,
        out: &mut Evaluation,
    ) -> Result<(), StateError> {
        let rt = &self.runtime;
        let Some(kind) = rt.service_kind(&d.service) else {
            out.skipped.push(Skip::UnknownService { service: d.service.clone() });
            return Ok(());
        };
        let target = Target { trigger, kind, service: &d.service, recipient: &d.recipient, resolved: action == Action::Resolve };
        for template in &r.send {
            if state.is_pending(&record.app_key, &record.key, template, action)? {
                out.skipped.push(Skip::InFlight { trigger: trigger.to_string(), destination: d.clone() });
                continue;
            }
            let drift = ctx.drift;
            let ctx = ctx.ctx.get_or_insert_with(|| RenderContext::new(app, &rt.context).with("drift", drift.clone()));
            match rt.templates.render(template, ctx, &target, app) {
                Ok(rendered) => {
                    let mut payload = rendered.payload;
                    self.redactor.redact_json(&mut payload);
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
                    });
                }
                Err(e) => out.skipped.push(Skip::RenderFailed {
                    trigger: trigger.to_string(),
                    destination: d.clone(),
                    error: self.redactor.redact(&e.to_string()),
                }),
            }
        }
        Ok(())
    }
}
