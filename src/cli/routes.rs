//! `driftwatch routes test`: which destinations an Application's drift would reach,
//! through which route or subscription, and what would be sent now.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};

use super::{BAD_INPUT, Format, Named, OK, Tool, ToolArgs};
use crate::duration::human_duration;
use crate::model::Severity;
use crate::pipeline::Pipeline;
use crate::replay::read_documents;
use crate::state::Store;

/// `driftwatch routes test --app FILE [--live FILE ...]`: which destinations this
/// Application's drift would reach, through which route or subscription, and what
/// would be sent now — as if driftwatch met the Application for the first time.
pub fn explain_routes(
    args: &ToolArgs<'_>,
    files: (&[PathBuf], &[PathBuf]),
    project_file: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let (rt, app) = match Tool::load(args, Named::Nothing, err)? {
        Ok(Tool { rt, app }) => (rt, app),
        Err(code) => return Ok(code),
    };
    let pipeline = Pipeline::new(Arc::new(rt));
    let inputs = match given_inputs(&pipeline, &app, files, project_file) {
        Ok(i) => i,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            return Ok(BAD_INPUT);
        }
    };
    let subs = pipeline.runtime.router.subscriptions(&app, inputs.project(&app.project));
    let state = Store::in_memory()?;
    let now = Utc::now();
    let eval = pipeline.evaluate(&inputs, &app, &state.pass(), now)?;
    let found = Found { app: &app, eval: &eval, subs: &subs, now };
    match args.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&found.json())?)?,
        Format::Text => found.text(out)?,
    }
    Ok(OK)
}

/// What the command was given besides the Application: live objects, an AppProject
/// and audit events (an EventList, as the webhook posts it, or JSON lines, as the log
/// file holds them), as the daemon's inputs. `Err` names the file and what is wrong.
fn given_inputs(
    pipeline: &Pipeline,
    app: &crate::model::App,
    (live_files, audit_files): (&[PathBuf], &[PathBuf]),
    project_file: Option<&Path>,
) -> Result<crate::pipeline::Inputs, String> {
    let mut inputs = crate::pipeline::Inputs::default();
    for f in live_files {
        for d in read_documents(f).map_err(|e| e.to_string())? {
            let (key, a) = crate::cluster::live::offline_attribution(&pipeline.runtime, &d, [&app.object]);
            inputs.live_read(key, Some(a), false);
        }
    }
    if let Some(f) = project_file {
        inputs.project_seen(crate::replay::read_project(f).map_err(|e| e.to_string())?);
    }
    if audit_files.is_empty() {
        return Ok(inputs);
    }
    let mut index = crate::audit::ManagedIndex::default();
    index.update(app, &crate::project::Scope::unrestricted());
    let rt = &pipeline.runtime;
    for f in audit_files {
        let body = std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let filter = crate::audit::event::Filter {
            argocd_identities: &rt.audit.argocd_identities,
            index: &index,
            now: Utc::now(),
            mask: &rt.diff.mask,
            times: None,
            cluster: "",
        };
        let batch = match crate::audit::event::parse_list(&body, &filter) {
            Ok(b) => b,
            Err(list_error) => {
                let mut b = crate::audit::event::Batch::default();
                for (n, line) in body.split(|c| *c == b'\n').enumerate().filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace)) {
                    crate::audit::event::parse_line(line, &filter, &mut b)
                        .map_err(|e| format!("{}: neither an EventList ({list_error}) nor JSON lines: line {}: {e}", f.display(), n + 1))?;
                }
                b
            }
        };
        for a in batch.attempts {
            inputs.attempt_audited(a, &rt.classes, rt.audit.window, Utc::now());
        }
    }
    Ok(inputs)
}

/// What one evaluation found, to show.
struct Found<'a> {
    app: &'a crate::model::App,
    eval: &'a crate::pipeline::Evaluation,
    subs: &'a crate::route::AppSubscriptions,
    now: chrono::DateTime<Utc>,
}

impl Found<'_> {
    /// The templates `trigger` sends to `dest` now.
    fn fires(&self, trigger: &str, dest: &str) -> Vec<&str> {
        self.eval
            .notifications
            .iter()
            .filter(|n| n.trigger == trigger && n.destination.to_string() == dest)
            .map(|n| n.template.as_str())
            .collect()
    }

    /// The group a grouped route's notification joins: its `by` values and key.
    fn group_of(&self, trigger: &str, dest: &str) -> Option<&crate::model::GroupRef> {
        self.eval.notifications.iter().find(|n| n.trigger == trigger && n.destination.to_string() == dest).and_then(|n| n.group.as_ref())
    }

    fn json(&self) -> Value {
        let eval = self.eval;
        let routes: Vec<Value> = eval
            .routes
            .iter()
            .map(|h| {
                json!({"path": h.path, "name": h.name, "reasons": h.reasons, "triggers": h.triggers,
                       "recipients": h.recipients.iter().map(ToString::to_string).collect::<Vec<_>>()})
            })
            .collect();
        let subscriptions: serde_json::Map<String, Value> =
            self.subs.subs.iter().map(|(t, ds)| (t.clone(), json!(ds.iter().map(ToString::to_string).collect::<Vec<_>>()))).collect();
        let notifications: Vec<Value> = eval
            .notifications
            .iter()
            .map(|n| {
                let (t, d) = (n.trigger.as_str(), n.destination.to_string());
                let group = self
                    .group_of(t, &d)
                    .map(|g| json!({"key": g.key, "labels": g.labels, "waitMs": g.wait_ms, "intervalMs": g.interval_ms}));
                json!({"trigger": t, "destination": d, "template": n.template, "group": group})
            })
            .collect();
        json!({"app": self.app.qualified_name(), "drift": eval.drift,
            "episode": eval.episode.as_ref().map(|e| e.view(self.now)), "routes": routes, "subscriptions": subscriptions,
            "notifications": notifications, "annotationErrors": self.subs.errors, "capped": self.subs.capped})
    }

    fn text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        self.drift_text(out)?;
        writeln!(out, "\nroutes:")?;
        if self.eval.routes.is_empty() {
            writeln!(out, "  (none matched)")?;
        }
        for h in &self.eval.routes {
            let name = h.name.as_deref().map(|n| format!(" {n:?}")).unwrap_or_default();
            let why = if h.reasons.is_empty() { "catch-all".to_string() } else { h.reasons.join(", ") };
            writeln!(out, "  {}{name} matched: {why}", h.path)?;
            for t in &h.triggers {
                for r in &h.recipients {
                    self.sends(out, t, &r.to_string())?;
                    if let Some(g) = self.group_of(t, &r.to_string()) {
                        writeln!(out, "      {}", group_line(g))?;
                    }
                }
            }
        }
        writeln!(out, "\nsubscriptions (annotations, AppProject, config):")?;
        if self.subs.subs.is_empty() {
            writeln!(out, "  (none)")?;
        }
        for (t, ds) in &self.subs.subs {
            for r in ds {
                self.sends(out, t, &r.to_string())?;
            }
        }
        for e in self.subs.errors.iter().map(ToString::to_string).chain(self.subs.capped.iter().cloned()) {
            writeln!(out, "  ! {e}")?;
        }
        Ok(())
    }

    /// One trigger and destination, and what it sends now.
    fn sends(&self, out: &mut dyn Write, trigger: &str, dest: &str) -> std::io::Result<()> {
        let now = self.fires(trigger, dest);
        let when = if now.is_empty() { "not now".to_string() } else { format!("sends now: {}", now.join(", ")) };
        writeln!(out, "    {trigger} -> {dest}  ({when})")
    }

    /// The drift: its resources, the audit input's attempts, the attribution.
    fn drift_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let d = &self.eval.drift;
        let severity = d.severity.map_or("none", Severity::as_str);
        writeln!(out, "{}  drift: {} resource(s), direction={}, severity={severity}", self.app.qualified_name(), d.count, d.direction)?;
        for r in &d.resources {
            let refined = if r.class == r.kind_class { String::new() } else { format!(" (by kind: {})", r.kind_class) };
            writeln!(out, "  {} {}/{}  class={}{refined}", r.object.kind, r.object.namespace, r.object.name, r.class)?;
        }
        for a in &d.attempts {
            let security = if a.security { "  [security]" } else { "" };
            let reason = if a.reason.is_empty() { String::new() } else { format!(": {}", a.reason) };
            let at = a.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            writeln!(
                out,
                "  audit: {} {} {} {} ({}) at {at}{reason}{security}",
                a.actor.display(),
                a.decision.as_str(),
                a.verb,
                a.resource,
                a.class
            )?;
        }
        for a in &d.attribution {
            let security = if a.security_fields.is_empty() { "" } else { "  [security]" };
            let who = a.actor.as_ref().map(|w| format!("{} via ", w.display())).unwrap_or_default();
            writeln!(
                out,
                "  {who}{} ({}) changed {} on {} at {}{security}",
                a.manager,
                a.operation,
                a.fields.join(", "),
                a.resource,
                a.time
            )?;
        }
        Ok(())
    }
}

/// The group line of a grouped route's notification.
fn group_line(g: &crate::model::GroupRef) -> String {
    let labels: Vec<String> = g.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let by = if labels.is_empty() { "everything the route takes".to_string() } else { labels.join(", ") };
    let wait = human_duration(i64::try_from(g.wait_ms / 1000).unwrap_or(i64::MAX));
    let every = human_duration(i64::try_from(g.interval_ms / 1000).unwrap_or(i64::MAX));
    format!("joins group {} ({by}): sent {wait} after the group opens, then updated at most every {every}", g.key)
}
