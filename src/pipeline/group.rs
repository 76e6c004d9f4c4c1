//! Grouped routes in a pass: which (trigger, destination) pairs a `group:` route took,
//! the group each notification joins (its `by` values), and the group's message
//! rendered as the group will be once this member joined or left. The outbox keeps
//! the group (`state::outbox::groups`); SIEM destinations are never grouped (one record per
//! Application).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{Evaluation, Pass, Pipeline, Skip, Subject};
use crate::json::Pointer;
use crate::model::{Action, App, AppMeta, Destination, GroupRef, Notification, StateRecord};
use crate::route::tree::{GroupSpec, RouteHit};
use crate::state::{Group, StateError, to_millis};
use crate::template::{RenderContext, Target};
use crate::trigger::ConditionResult;

/// The grouped route that took `trigger` for `d`, if one did (the first in tree order).
pub(super) fn grouping<'a>(routes: &'a [RouteHit], trigger: &str, d: &Destination) -> Option<(&'a str, &'a GroupSpec)> {
    routes.iter().find_map(|h| {
        let g = h.group.as_ref()?;
        (h.triggers.iter().any(|t| t == trigger) && h.recipients.contains(d)).then_some((h.path.as_str(), g))
    })
}

/// The values of a group's `by` for this Application and what drifted.
pub fn labels(
    by: &[String],
    app: &App,
    drift: &crate::drift::Drift,
    episode: Option<&crate::drift::episode::Episode>,
    cluster: &str,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for b in by {
        let value = match b.as_str() {
            "revision" => drift.revision.clone(),
            "project" => app.project.clone(),
            "class" => match episode {
                Some(e) => e.classes.iter().cloned().collect::<Vec<_>>().join(","),
                None => drift.classes.join(","),
            },
            "severity" => episode.map(|e| e.severity).or(drift.severity).map_or_else(String::new, |s| s.as_str().to_string()),
            "cluster" => cluster.to_string(),
            "namespace" => app.namespace.clone(),
            "destinationNamespace" => app.object.at("/spec/destination/namespace").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
            other => other.strip_prefix("label:").and_then(|k| app.labels.get(k)).cloned().unwrap_or_default(),
        };
        out.insert(b.clone(), value);
    }
    out
}

/// A group's key: the route, the trigger, the destination and the `by` values (32 hex
/// digits of their SHA-256).
pub fn key(route: &str, trigger: &str, d: &Destination, labels: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for part in [route, trigger, d.service.as_str(), d.recipient.as_str()] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for (k, v) in labels {
        h.update(k.as_bytes());
        h.update([1]);
        h.update(v.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// What a pass knows of one grouped (trigger, destination).
pub(super) struct Grouped<'a> {
    pub route: &'a str,
    pub spec: &'a GroupSpec,
    pub trigger: &'a str,
    pub d: &'a Destination,
}

/// The group a change is about: its key and what its message is made with.
struct GroupTarget<'a> {
    key: String,
    labels: BTreeMap<String, String>,
    template: &'a str,
    wait_ms: u64,
    interval_ms: u64,
}

/// The condition a grouped notification is about (its index and identity).
pub(super) struct Condition<'a> {
    pub index: usize,
    pub key: &'a str,
}

impl<'a> From<&'a ConditionResult> for Condition<'a> {
    fn from(r: &'a ConditionResult) -> Self {
        Condition { index: r.index, key: &r.key }
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A member joining (`record` set) or leaving a group, for one condition of one
/// trigger at one destination.
struct Change<'a> {
    trigger: &'a str,
    d: &'a Destination,
    c: &'a Condition<'a>,
    record: Option<StateRecord>,
}

impl Pipeline {
    /// `app` joins the group its `by` values name (`record`: its dedup record, written
    /// when the message that shows it is delivered); if it is in another group of the
    /// same (trigger, destination) — a new revision — it leaves that one first.
    pub(super) fn join_group(
        &self,
        ctx: &mut Pass<'_>,
        g: &Grouped<'_>,
        (c, record): (Condition<'_>, StateRecord),
        out: &mut Evaluation,
    ) -> Result<(), StateError> {
        let (app, state) = (ctx.s.app, ctx.s.state);
        let template = g.spec.template.as_str();
        if state.is_pending(&record.key, template, Action::Fire) {
            out.skipped.push(Skip::InFlight { trigger: g.trigger.to_string(), destination: g.d.clone() });
            return Ok(());
        }
        let labels = labels(&g.spec.by, app, ctx.drift, ctx.episode, &ctx.cluster);
        let key = key(g.route, g.trigger, g.d, &labels);
        if state.membership(g.trigger, g.d).is_some_and(|old| old != key) {
            self.leave_group(ctx, (g.trigger, g.d), &c, out)?;
        }
        let target = GroupTarget { key, labels, template, wait_ms: millis(g.spec.wait), interval_ms: millis(g.spec.interval) };
        self.change_group(ctx, &target, Change { trigger: g.trigger, d: g.d, c: &c, record: Some(record) }, out)
    }

    /// `app` leaves the group it is in for (trigger, destination), if any: the group's
    /// message is updated (the last member to leave resolves it), rendered as the group
    /// was made (its template, `by` values and timing), whatever the routes say now.
    pub(super) fn leave_group(
        &self,
        ctx: &mut Pass<'_>,
        (trigger, d): (&str, &Destination),
        c: &Condition<'_>,
        out: &mut Evaluation,
    ) -> Result<(), StateError> {
        let Some(key) = ctx.s.state.membership(trigger, d).map(str::to_string) else { return Ok(()) };
        let Some(made) = ctx.s.groups.group(&key)?.and_then(|g| g.notification) else { return Ok(()) };
        let Some(r) = made.group else { return Ok(()) };
        let target = GroupTarget { key, labels: r.labels, template: &made.template, wait_ms: r.wait_ms, interval_ms: r.interval_ms };
        self.change_group(ctx, &target, Change { trigger, d, c, record: None }, out)
    }

    /// A deleted Application leaves every group it is in (its pass's notifications get
    /// the leaves): its trigger conditions may never turn false again.
    pub(super) fn leave_all_groups(
        &self,
        app: &App,
        state: &crate::state::PassStore,
        now: chrono::DateTime<chrono::Utc>,
        eval: &mut Evaluation,
    ) -> Result<(), StateError> {
        let view = state.view()?;
        let app_state = view.app_state(&app.state_key())?;
        if !app_state.in_any_group() {
            return Ok(());
        }
        let (drift, episode) = (eval.drift.clone(), eval.episode.clone());
        let s = Subject { app, key: app.state_key(), state: &app_state, groups: &view, now };
        let mut ctx = Pass {
            s: &s,
            drift: &drift,
            episode: episode.as_ref(),
            cluster: eval.target.key(),
            routes: &[],
            pages_held: None,
            episode_view: None,
            belongs: false,
            operation_view: None,
            ctx: None,
        };
        for (trigger, d) in app_state.memberships.keys() {
            self.leave_group(&mut ctx, (trigger, d), &Condition { index: 0, key: "" }, eval)?;
        }
        Ok(())
    }

    /// The group's message after `app` joins (`record` set) or leaves it: nothing when
    /// that changes nothing (leaving a group it is not firing in).
    fn change_group(&self, ctx: &mut Pass<'_>, t: &GroupTarget<'_>, change: Change<'_>, out: &mut Evaluation) -> Result<(), StateError> {
        let rt = &self.runtime;
        let Change { trigger, d, c, record } = change;
        let (app, groups) = (ctx.s.app, ctx.s.groups);
        let Some(kind) = self.kind_or_skip(d, out) else { return Ok(()) };
        let app_key = ctx.s.key.clone();
        let joins = record.is_some();
        let now_ms = to_millis(ctx.s.now);
        let prev = groups.group(&t.key)?;
        let member = groups.group_member(&t.key, &app_key)?;
        let name = app.qualified_name();
        let fresh = format!("{}.{now_ms}", t.key);
        let Some((group, _)) = Group::after(prev.as_ref(), member.as_ref(), &t.key, &name, joins, &fresh, now_ms) else {
            return Ok(());
        };
        let resolved = group.firing == 0;
        let target = Target { trigger, kind, service: &d.service, recipient: &d.recipient, resolved };
        let episode = ctx.episode_json();
        let (drift, ep, now) = (ctx.drift, ctx.episode, ctx.s.now);
        let render_ctx = ctx.ctx.get_or_insert_with(|| RenderContext::new(app, &rt.context).with_pass(drift, ep, now));
        render_ctx.set("group", group.view(&t.labels));
        let rendered = super::wiring::render(rt, t.template, render_ctx, &target, app);
        render_ctx.set("group", serde_json::Value::Null);
        match rendered {
            Ok(rendered) => {
                let mut payload = rendered.payload;
                rt.redactor.redact_json(&mut payload);
                out.notifications.push(Notification {
                    received_ms: None,
                    app: name.clone(),
                    meta: AppMeta::of(app),
                    trigger: trigger.to_string(),
                    condition: c.index,
                    condition_key: c.key.to_string(),
                    template: t.template.to_string(),
                    destination: d.clone(),
                    kind,
                    action: if resolved { Action::Resolve } else { Action::Fire },
                    severity: rendered.severity,
                    payload,
                    record,
                    episode,
                    operation: None,
                    idempotency_key: None,
                    group: Some(GroupRef {
                        key: t.key.clone(),
                        instance: group.instance,
                        labels: t.labels.clone(),
                        wait_ms: t.wait_ms,
                        interval_ms: t.interval_ms,
                        member: name,
                        member_key: app_key,
                        joins,
                        revision: group.revision,
                    }),
                });
            }
            Err(e) => out.skipped.push(Skip::RenderFailed {
                trigger: trigger.to_string(),
                destination: d.clone(),
                error: rt.redactor.redact(&e.to_string()),
            }),
        }
        Ok(())
    }
}
