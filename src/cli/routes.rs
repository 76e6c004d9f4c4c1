//! `driftwatch routes test`: which destinations an Application's drift would reach,
//! through which route or subscription, and what would be sent now.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};

use super::{BAD_INPUT, FAILED, Format, OK, load, read_app};
use crate::duration::human_duration;
use crate::model::Severity;
use crate::pipeline::Pipeline;
use crate::replay::read_documents;
use crate::state::StateStore;

/// `driftwatch routes test --app FILE [--live FILE ...]`: which destinations this
/// Application's drift would reach, through which route or subscription, and what
/// would be sent now — as if driftwatch met the Application for the first time.
#[allow(clippy::too_many_arguments)]
pub fn explain_routes(
    app_file: &Path,
    (live_files, audit_files): (&[PathBuf], &[PathBuf]),
    project_file: Option<&Path>,
    config: Option<&Path>,
    format: Format,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let Some(rt) = load(config, err)? else { return Ok(FAILED) };
    let Some(app) = read_app(app_file, err)? else { return Ok(BAD_INPUT) };
    let pipeline = Pipeline::new(Arc::new(rt));
    let mut inputs = crate::pipeline::Inputs::default();
    for f in live_files {
        let docs = match read_documents(f) {
            Ok(d) => d,
            Err(e) => {
                writeln!(err, "error: {e}")?;
                return Ok(BAD_INPUT);
            }
        };
        for d in docs {
            let (key, a) = crate::cluster::live::offline_attribution(&pipeline.runtime, &d, [&app.object]);
            inputs.live_read(key, Some(a), false);
        }
    }
    if let Some(f) = project_file {
        match crate::replay::read_project(f) {
            Ok(p) => {
                inputs.project_seen(p);
            }
            Err(e) => {
                writeln!(err, "error: {e}")?;
                return Ok(BAD_INPUT);
            }
        }
    }
    if !audit_files.is_empty() {
        let mut index = crate::audit::ManagedIndex::default();
        index.update(&app, &crate::project::Scope::unrestricted());
        let rt = &pipeline.runtime;
        for f in audit_files {
            let body = match std::fs::read(f) {
                Ok(b) => b,
                Err(e) => {
                    writeln!(err, "error: {}: {e}", f.display())?;
                    return Ok(BAD_INPUT);
                }
            };
            let filter = crate::audit::event::Filter {
                argocd_identities: &rt.audit.argocd_identities,
                index: &index,
                now: Utc::now(),
                mask: &rt.diff.mask,
                times: None,
            };
            // An EventList (what the webhook posts), else JSON lines (the log file).
            let batch = match crate::audit::event::parse_list(&body, &filter) {
                Ok(b) => b,
                Err(list_error) => {
                    let mut b = crate::audit::event::Batch::default();
                    for (n, line) in body.split(|c| *c == b'\n').enumerate().filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace)) {
                        if let Err(e) = crate::audit::event::parse_line(line, &filter, &mut b) {
                            writeln!(
                                err,
                                "error: {}: neither an EventList ({list_error}) nor JSON lines: line {}: {e}",
                                f.display(),
                                n + 1
                            )?;
                            return Ok(BAD_INPUT);
                        }
                    }
                    b
                }
            };
            for a in batch.attempts {
                inputs.attempt_audited(a, &rt.classes, rt.audit.window, Utc::now());
            }
        }
    }
    let crate::route::AppSubscriptions { subs, errors: annotation_errors, capped } =
        pipeline.runtime.router.subscriptions(&app, inputs.project(&app.project));
    let state = StateStore::in_memory()?;
    let now = Utc::now();
    let eval = pipeline.evaluate(&inputs, &app, &state, now)?;
    let fired: Vec<(String, String, String)> =
        eval.notifications.iter().map(|n| (n.trigger.clone(), n.destination.to_string(), n.template.clone())).collect();
    let fires = |trigger: &str, dest: &str| -> Vec<&str> {
        fired.iter().filter(|(t, d, _)| t == trigger && d == dest).map(|(_, _, tpl)| tpl.as_str()).collect()
    };
    // The group a grouped route's notification joins: its `by` values and key.
    let group_of = |trigger: &str, dest: &str| {
        eval.notifications.iter().find(|n| n.trigger == trigger && n.destination.to_string() == dest).and_then(|n| n.group.as_ref())
    };
    let group_line = |g: &crate::model::GroupRef| {
        let labels: Vec<String> = g.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let by = if labels.is_empty() { "everything the route takes".to_string() } else { labels.join(", ") };
        let wait = human_duration(i64::try_from(g.wait_ms / 1000).unwrap_or(i64::MAX));
        let every = human_duration(i64::try_from(g.interval_ms / 1000).unwrap_or(i64::MAX));
        format!("joins group {} ({by}): sent {wait} after the group opens, then updated at most every {every}", g.key)
    };
    match format {
        Format::Json => {
            let routes: Vec<Value> = eval
                .routes
                .iter()
                .map(|h| {
                    json!({"path": h.path, "name": h.name, "reasons": h.reasons, "triggers": h.triggers,
                           "recipients": h.recipients.iter().map(ToString::to_string).collect::<Vec<_>>()})
                })
                .collect();
            let subscriptions: serde_json::Map<String, Value> =
                subs.iter().map(|(t, ds)| (t.clone(), json!(ds.iter().map(ToString::to_string).collect::<Vec<_>>()))).collect();
            let notifications: Vec<Value> = fired
                .iter()
                .map(|(t, d, tpl)| {
                    let group =
                        group_of(t, d).map(|g| json!({"key": g.key, "labels": g.labels, "waitMs": g.wait_ms, "intervalMs": g.interval_ms}));
                    json!({"trigger": t, "destination": d, "template": tpl, "group": group})
                })
                .collect();
            let v = json!({"app": app.qualified_name(), "drift": eval.drift,
                "episode": eval.episode.as_ref().map(|e| e.view(now)), "routes": routes, "subscriptions": subscriptions,
                "notifications": notifications, "annotationErrors": annotation_errors, "capped": capped});
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => {
            let d = &eval.drift;
            writeln!(
                out,
                "{}  drift: {} resource(s), direction={}, severity={}",
                app.qualified_name(),
                d.count,
                d.direction,
                d.severity.map_or("none", Severity::as_str)
            )?;
            for r in &d.resources {
                let refined = if r.class == r.kind_class { String::new() } else { format!(" (by kind: {})", r.kind_class) };
                writeln!(out, "  {} {}/{}  class={}{refined}", r.kind, r.namespace, r.name, r.class)?;
            }
            for a in &d.attempts {
                let security = if a.security { "  [security]" } else { "" };
                let reason = if a.reason.is_empty() { String::new() } else { format!(": {}", a.reason) };
                writeln!(
                    out,
                    "  audit: {} {} {} {} ({}) at {}{reason}{security}",
                    a.actor.display(),
                    a.decision.as_str(),
                    a.verb,
                    a.resource,
                    a.class,
                    a.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
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
            writeln!(out, "\nroutes:")?;
            if eval.routes.is_empty() {
                writeln!(out, "  (none matched)")?;
            }
            for h in &eval.routes {
                let name = h.name.as_deref().map(|n| format!(" {n:?}")).unwrap_or_default();
                let why = if h.reasons.is_empty() { "catch-all".to_string() } else { h.reasons.join(", ") };
                writeln!(out, "  {}{name} matched: {why}", h.path)?;
                for t in &h.triggers {
                    for r in &h.recipients {
                        let now = fires(t, &r.to_string());
                        let when = if now.is_empty() { "not now".to_string() } else { format!("sends now: {}", now.join(", ")) };
                        writeln!(out, "    {t} -> {r}  ({when})")?;
                        if let Some(g) = group_of(t, &r.to_string()) {
                            writeln!(out, "      {}", group_line(g))?;
                        }
                    }
                }
            }
            writeln!(out, "\nsubscriptions (annotations, AppProject, config):")?;
            if subs.is_empty() {
                writeln!(out, "  (none)")?;
            }
            for (t, ds) in &subs {
                for r in ds {
                    let now = fires(t, &r.to_string());
                    let when = if now.is_empty() { "not now".to_string() } else { format!("sends now: {}", now.join(", ")) };
                    writeln!(out, "    {t} -> {r}  ({when})")?;
                }
            }
            for e in annotation_errors.iter().map(ToString::to_string).chain(capped.iter().cloned()) {
                writeln!(out, "  ! {e}")?;
            }
        }
    }
    Ok(OK)
}
