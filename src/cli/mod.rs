//! The commands behind the `driftwatch` binary. Each writes to the given output and
//! returns the process exit code, so tests call them directly.

pub mod break_glass;
pub mod diff;
pub mod drift;
mod show;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use chrono::Utc;
use serde_json::{Value, json};

use crate::config::{self, Runtime};
use crate::drift::Drift;
use crate::drift::episode::Episode;
use crate::model::{Action, App, AppMeta, Destination, DestinationKind, Notification};
use crate::pipeline::{Pipeline, Skip};
use crate::replay::{self, Snapshot};
use crate::source::ConfigError;
use crate::state::StateStore;
use crate::template::{RenderContext, Target};
use show::{ConsoleWriter, JsonLinesWriter};

pub use crate::exit::{BAD_INPUT, FAILED, NEEDS_HAND, OK};

/// Output format of `trigger run` and `template notify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

fn print_errors(err: &mut dyn Write, errors: &[ConfigError]) -> std::io::Result<()> {
    for e in errors {
        writeln!(err, "error: {e}")?;
    }
    Ok(())
}

/// Loads the configuration or prints every error.
fn load(config: Option<&Path>, err: &mut dyn Write) -> anyhow::Result<Option<Runtime>> {
    match config::load(config) {
        Ok(rt) => Ok(Some(rt)),
        Err(errors) => {
            print_errors(err, &errors)?;
            writeln!(err, "{} configuration error(s)", errors.len())?;
            Ok(None)
        }
    }
}

/// Rich Applications every template is rendered against by `check`, so a JSON field
/// that cannot render to JSON is found before a real notification needs it.
const CHECK_SAMPLES: &[&str] = &[include_str!("check_sample_single_source.json"), include_str!("check_sample_multi_source.json")];

/// A group of three Applications (one resolved, or all when `resolved`) for `check`.
fn check_group_sample(app: &App, resolved: bool) -> serde_json::Value {
    let mut g = None;
    let names = [app.qualified_name(), format!("{}/sample-b", app.namespace), format!("{}/sample-c", app.namespace)];
    for name in &names {
        g = crate::state::Group::after(g.as_ref(), None, "check", name, true, "check.0", 0).map(|(g, _)| g).or(g);
    }
    let leaving = if resolved { &names[..] } else { &names[..1] };
    for name in leaving {
        let member = crate::state::Member { instance: "check.0".into(), firing: true };
        g = crate::state::Group::after(g.as_ref(), Some(&member), "check", name, false, "check.0", 0).map(|(g, _)| g).or(g);
    }
    let labels = std::collections::BTreeMap::from([("revision".to_string(), "0123456789abcdef0123456789abcdef01234567".to_string())]);
    g.map_or(serde_json::Value::Null, |g| g.view(&labels))
}

/// `driftwatch check`: compiles everything, renders every template for every kind
/// against sample Applications, prints every error and warning.
pub fn check(config: Option<&Path>, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let Some(rt) = load(config, err)? else { return Ok(FAILED) };
    let mut errors = 0;
    for w in &rt.warnings {
        match &w.pos {
            Some(p) => writeln!(err, "warning: {p}: {}", w.message)?,
            None => writeln!(err, "warning: {}", w.message)?,
        }
    }
    let kinds: Vec<(DestinationKind, String)> = DestinationKind::ALL
        .iter()
        .filter(|k| **k != DestinationKind::Webhook)
        .map(|k| (*k, k.as_str().to_string()))
        .chain(
            rt.services
                .values()
                .filter(|s| s.spec.config.kind() == DestinationKind::Webhook)
                .map(|s| (DestinationKind::Webhook, s.name.clone())),
        )
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for sample in CHECK_SAMPLES {
        let app = App::from_value(serde_json::from_str(sample).context("built-in check sample")?).context("built-in check sample")?;
        for (drift, episode, at, resolved) in check_drift_samples(&rt, &app) {
            let mut ctx = RenderContext::new(&app, &rt.context).with_pass(&drift, episode.as_ref(), at);
            // What a grouped route's message sees (other templates ignore it).
            ctx.set("group", check_group_sample(&app, resolved));
            for name in rt.templates.names() {
                for (kind, service) in &kinds {
                    let target = Target { trigger: "check", kind: *kind, service, recipient: "check", resolved };
                    match crate::pipeline::wiring::render(&rt, name, &mut ctx, &target, &app) {
                        Ok(_)
                        | Err(crate::template::RenderError::NoWebhookField { .. } | crate::template::RenderError::NoKindFields { .. }) => {}
                        Err(e) => {
                            if seen.insert(e.to_string()) {
                                writeln!(err, "error: {e} (rendering a sample Application for {kind})")?;
                                errors += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    if errors > 0 {
        writeln!(err, "{errors} configuration error(s)")?;
        return Ok(FAILED);
    }
    writeln!(
        out,
        "ok: {} triggers, {} templates, {} services, {} warning(s)",
        rt.triggers.len(),
        rt.templates.names().count(),
        rt.services.len(),
        rt.warnings.len()
    )?;
    Ok(OK)
}

/// `drift` and `episode` values `check` renders every template with: none (a synced
/// Application), an open security episode with attribution, and its resolution.
fn check_drift_samples(rt: &Runtime, app: &App) -> Vec<(Drift, Option<Episode>, chrono::DateTime<Utc>, bool)> {
    let t0 = chrono::DateTime::<Utc>::from_timestamp(1_772_420_000, 0).unwrap_or_default();
    let none =
        Drift::of(&app.object, &rt.classes, &crate::drift::attribution::LiveIndex::new(), "", &crate::project::Scope::unrestricted());
    let mut drifted = app.clone();
    // The samples are being deleted (for on-deleted); a drifting one is not.
    if let Some(meta) = drifted.object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("deletionTimestamp");
    }
    drifted.object["status"]["sync"]["status"] = json!("OutOfSync");
    drifted.object["status"]["resources"] = json!([
        {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "ns", "name": "web", "status": "OutOfSync"},
        {"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "Role", "namespace": "ns", "name": "reader", "status": "OutOfSync"}
    ]);
    let live_object = json!({"metadata": {"managedFields": [{"manager": "kubectl-edit", "operation": "Update", "time": "2026-03-02T03:12:00Z",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:securityContext": {"f:privileged": {}}}}}}}}}]}});
    let mut live = crate::drift::attribution::LiveIndex::new();
    let mut attribution = crate::drift::attribution::attribute(&live_object, "workload", &[]);
    let change = |path: &str, desired: &str, live: &str, security: bool| crate::drift::diff::FieldChange {
        path: path.into(),
        desired: desired.into(),
        live: live.into(),
        manager: "kubectl-edit".into(),
        user: "alice@example.com".into(),
        time: "2026-03-02T03:12:00Z".into(),
        security,
    };
    attribution.diff = Some(crate::drift::diff::ResourceDiff {
        source: crate::drift::diff::DesiredSource::LastApplied,
        changes: vec![
            change("spec.template.spec.containers[web].securityContext.privileged", crate::drift::diff::NOT_SET, "true", true),
            change("spec.replicas", "2", "5", false),
        ],
        more: 3,
        ..Default::default()
    });
    live.insert(crate::drift::attribution::resource_key("apps", "Deployment", "ns", "web"), attribution);
    let drift = Drift::of(&drifted.object, &rt.classes, &live, "", &crate::project::Scope::unrestricted());
    let open = crate::drift::episode::observe(None, &drifted, &drift, t0).episode;
    debug_assert!(open.is_some(), "the drifted sample opens an episode");
    let resolved = crate::drift::episode::observe(open.clone(), app, &none, t0 + chrono::Duration::minutes(14)).episode;
    vec![(none.clone(), None, t0, false), (drift, open, t0, false), (none, resolved, t0 + chrono::Duration::minutes(14), true)]
}

/// Reports a trigger or template name that does not exist, with the known ones.
fn unknown<'a>(err: &mut dyn Write, what: &str, name: &str, known: impl Iterator<Item = &'a str>) -> anyhow::Result<i32> {
    writeln!(err, "error: {what} {name:?} does not exist (known: {})", known.collect::<Vec<_>>().join(", "))?;
    Ok(BAD_INPUT)
}

/// Reads the one Application a command works on, or reports why it cannot.
fn read_app(path: &Path, err: &mut dyn Write) -> anyhow::Result<Option<App>> {
    match replay::read_app(path) {
        Ok(a) => Ok(Some(a)),
        Err(e) => {
            writeln!(err, "error: {e}")?;
            Ok(None)
        }
    }
}

/// `drift` and `episode` for a single Application file, as the daemon would see them
/// the first time it met the Application in this state (an episode opens now if it
/// is OutOfSync or Degraded).
fn first_sight(rt: &Runtime, app: &App, now: chrono::DateTime<Utc>) -> (Drift, Option<Episode>) {
    let drift =
        Drift::of(&app.object, &rt.classes, &crate::drift::attribution::LiveIndex::new(), "", &crate::project::Scope::unrestricted());
    let episode = crate::drift::episode::observe(None, app, &drift, now).episode;
    (drift, episode)
}

/// `driftwatch trigger run NAME APP_FILE`.
pub fn trigger_run(
    name: &str,
    app_file: &Path,
    config: Option<&Path>,
    format: Format,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let Some(rt) = load(config, err)? else { return Ok(FAILED) };
    let Some(trigger) = rt.triggers.get(name) else {
        return unknown(err, "trigger", name, rt.triggers.keys().map(String::as_str));
    };
    let Some(app) = read_app(app_file, err)? else {
        return Ok(BAD_INPUT);
    };
    let now = Utc::now();
    let (drift, episode) = first_sight(&rt, &app, now);
    let mut scope = rt.engine.prepare_pass(&app.object, &drift, episode.as_ref(), now);
    let results = crate::clock::with_now(now, || rt.engine.run(trigger, &mut scope));
    match format {
        Format::Json => {
            let v = json!({"trigger": name, "conditions": results});
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => {
            if app.sync_status_is_stale() {
                writeln!(
                    out,
                    "note: the sync status is stale (operation finished after the last reconcile); the daemon would skip this Application until Argo CD re-reconciles"
                )?;
            }
            writeln!(out, "{:<3} {:<6} {:<20} {:<24} WHEN", "#", "RESULT", "ONCEPER", "SEND")?;
            for r in &results {
                let when: String = r.when.split_whitespace().collect::<Vec<_>>().join(" ");
                writeln!(
                    out,
                    "{:<3} {:<6} {:<20} {:<24} {}",
                    r.index,
                    r.result,
                    r.once_per.as_deref().unwrap_or("-"),
                    r.send.join(","),
                    when
                )?;
                if let Some(e) = &r.error {
                    writeln!(out, "    error: {e}")?;
                }
            }
        }
    }
    Ok(OK)
}

/// `driftwatch template notify NAME APP_FILE [--recipient SERVICE:RECIPIENT ...] [--send]`:
/// renders the template for each recipient; with `send`, delivers it for real through
/// the configured services (to try a configuration by hand).
#[allow(clippy::too_many_arguments)]
pub fn template_notify(
    name: &str,
    app_file: &Path,
    recipients: &[String],
    config: Option<&Path>,
    format: Format,
    send: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let Some(rt) = load(config, err)? else { return Ok(FAILED) };
    if !rt.templates.contains(name) {
        return unknown(err, "template", name, rt.templates.names());
    }
    let Some(app) = read_app(app_file, err)? else { return Ok(BAD_INPUT) };
    let destinations: Vec<Destination> = if recipients.is_empty() {
        vec![Destination::new("console", "")]
    } else {
        recipients.iter().map(|r| Destination::parse(r)).collect()
    };
    let redactor = &rt.redactor;
    let now = Utc::now();
    let (drift, episode) = first_sight(&rt, &app, now);
    let mut ctx = RenderContext::new(&app, &rt.context).with_pass(&drift, episode.as_ref(), now);
    let mut notifications = Vec::new();
    for d in &destinations {
        let Some(kind) = rt.service_kind(&d.service) else {
            writeln!(err, "error: service {:?} is not configured and is not a destination kind", d.service)?;
            return Ok(BAD_INPUT);
        };
        let target = Target { trigger: "", kind, service: &d.service, recipient: &d.recipient, resolved: false };
        match crate::pipeline::wiring::render(&rt, name, &mut ctx, &target, &app) {
            Ok(rendered) => {
                let mut payload = rendered.payload;
                redactor.redact_json(&mut payload);
                notifications.push(Notification {
                    app: app.qualified_name(),
                    meta: AppMeta::of(&app),
                    trigger: "manual".into(),
                    condition: 0,
                    condition_key: "manual".into(),
                    template: name.to_string(),
                    destination: d.clone(),
                    kind,
                    action: Action::Fire,
                    severity: rendered.severity,
                    payload,
                    record: None,
                    episode: None,
                    operation: None,
                    idempotency_key: None,
                    group: None,
                });
            }
            Err(e) => {
                writeln!(err, "error: {}", redactor.redact(&e.to_string()))?;
                return Ok(FAILED);
            }
        }
    }
    match format {
        Format::Json => {
            let list: Vec<Value> = notifications
                .iter()
                .map(|n| json!({"destination": n.kind, "service": n.destination.service, "recipient": n.destination.recipient, "payload": n.payload}))
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&json!({"template": name, "notifications": list}))?)?;
        }
        Format::Text => {
            for n in &notifications {
                writeln!(out, "--- {} {}", n.kind, n.destination)?;
                match &n.payload {
                    Value::Object(m) if m.len() == 1 && m.contains_key("message") => {
                        writeln!(out, "{}", m["message"].as_str().unwrap_or_default())?
                    }
                    p => writeln!(out, "{}", serde_json::to_string_pretty(p)?)?,
                }
            }
        }
    }
    if !send {
        return Ok(OK);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(send_now(&rt, &notifications, err))
}

/// Delivers notifications once through the configured services (in-memory state: a
/// manual send is not recorded) and reports what each destination did.
async fn send_now(rt: &Runtime, notifications: &[Notification], err: &mut dyn Write) -> anyhow::Result<i32> {
    let state = Arc::new(StateStore::in_memory()?);
    let env = crate::pipeline::wiring::delivery_env(rt, &state).map_err(anyhow::Error::msg)?;
    let mut services = Vec::new();
    for n in notifications {
        let Some(s) = rt.services.get(&n.destination.service) else {
            writeln!(err, "error: service {:?} is not configured (services: in the config); nothing sent to it", n.destination.service)?;
            return Ok(FAILED);
        };
        if services.iter().any(|r: &crate::deliver::ServiceRuntime| r.name == s.name) {
            continue;
        }
        match crate::deliver::services::build(&s.name, &s.spec, &env) {
            Ok(mut r) => {
                // A manual try should answer quickly: a few attempts within a minute.
                r.settings.retry.max_attempts = r.settings.retry.max_attempts.min(3);
                services.push(r);
            }
            Err(e) => {
                writeln!(err, "error: service {}: {e}", s.name)?;
                return Ok(FAILED);
            }
        }
    }
    let delivery = crate::deliver::Delivery::start(services, state.clone());
    delivery.submit(notifications)?;
    delivery.settle(std::time::Duration::from_secs(60), std::time::Duration::from_secs(90)).await;
    delivery.shutdown(std::time::Duration::from_secs(5)).await;
    let dead = state.dead_letters()?;
    let pending = state.outbox(None)?;
    for d in &dead {
        writeln!(err, "failed: {} {}: {}", d.notification.kind, d.notification.destination, d.error)?;
    }
    for p in &pending {
        writeln!(
            err,
            "not delivered yet: {} {}: {}",
            p.notification.kind,
            p.notification.destination,
            p.last_error.as_deref().unwrap_or("-")
        )?;
    }
    let sent = notifications.len() - dead.len() - pending.len();
    writeln!(err, "sent {sent} of {} notification(s)", notifications.len())?;
    Ok(if dead.is_empty() && pending.is_empty() { OK } else { FAILED })
}

/// `driftwatch state list --state FILE [--app PREFIX]`: what the store says was
/// delivered, per Application.
pub fn state_list(path: &Path, app_prefix: Option<&str>, format: Format, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    if !path.exists() {
        writeln!(err, "error: {}: no such state file", path.display())?;
        return Ok(BAD_INPUT);
    }
    let state = StateStore::open(path)?;
    let mut rows = Vec::new();
    for app in state.apps()? {
        if app_prefix.is_some_and(|p| !app.starts_with(p)) {
            continue;
        }
        for (key, at) in state.keys(&app)? {
            let when = crate::state::from_millis(at).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            rows.push((app.clone(), key, when));
        }
    }
    let notes: Vec<(String, String)> = state.notes()?.into_iter().filter(|(a, _)| app_prefix.is_none_or(|p| a.starts_with(p))).collect();
    match format {
        Format::Json => {
            // Notes are rows of their own: `{app, note}` instead of `{app, key, deliveredAt}`.
            let v: Vec<Value> = rows
                .iter()
                .map(|(a, k, w)| json!({"app": a, "key": k, "deliveredAt": w}))
                .chain(notes.iter().map(|(a, n)| json!({"app": a, "note": n})))
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => {
            writeln!(out, "{:<40} {:<22} KEY", "APP", "DELIVERED")?;
            for (a, k, w) in &rows {
                writeln!(out, "{a:<40} {w:<22} {k}")?;
            }
            if !notes.is_empty() {
                writeln!(out, "\nNOTES")?;
                for (a, n) in &notes {
                    writeln!(out, "{a:<40} {n}")?;
                }
            }
        }
    }
    Ok(OK)
}

/// `driftwatch import FILE... --out DIR`: converts an Argo CD notifications
/// configuration and prints the report.
pub fn import(files: &[PathBuf], dir: &Path, force: bool, format: Format, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let report = match crate::import::import(files, dir, force) {
        Ok(r) => r,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            return Ok(BAD_INPUT);
        }
    };
    match format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        Format::Text => write!(out, "{}", crate::import::render_report(&report))?,
    }
    Ok(if report.complete() { OK } else { NEEDS_HAND })
}

/// `driftwatch deliveries retry --state FILE (ID... | --all)`: dead letters back into
/// the outbox. Exit 2 when an id names no dead letter, 1 when a service's outbox is full.
pub fn retry_dead_letters(path: &Path, ids: Option<&[u64]>, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    if !path.exists() {
        writeln!(err, "error: {}: no such state file", path.display())?;
        return Ok(BAD_INPUT);
    }
    let state = StateStore::open(path)?;
    let r = state.requeue_dead(ids, crate::state::to_millis(chrono::Utc::now()))?;
    for (id, service) in &r.queued {
        writeln!(out, "#{id}: queued again for {service}")?;
    }
    for id in &r.in_flight {
        writeln!(out, "#{id}: already in flight again (decided anew); dead letter removed")?;
    }
    for id in &r.full {
        writeln!(err, "error: #{id}: its service's outbox is full; left in the dead letters")?;
    }
    for id in &r.missing {
        writeln!(err, "error: #{id}: no such dead letter")?;
    }
    writeln!(out, "{} queued again; the next start of driftwatch on this state file delivers them", r.queued.len())?;
    Ok(if !r.missing.is_empty() {
        BAD_INPUT
    } else if !r.full.is_empty() {
        FAILED
    } else {
        OK
    })
}

/// `driftwatch deliveries --state FILE [--failed]`: undelivered notifications (the
/// outbox), dead letters and quarantined entries.
pub fn deliveries(path: Option<&Path>, failed_only: bool, format: Format, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let Some(path) = path else {
        writeln!(err, "error: deliveries needs --state FILE")?;
        return Ok(BAD_INPUT);
    };
    if !path.exists() {
        writeln!(err, "error: {}: no such state file", path.display())?;
        return Ok(BAD_INPUT);
    }
    let state = StateStore::open(path)?;
    let dead = state.dead_letters()?;
    let quarantined = state.quarantined()?;
    let pending = if failed_only { Vec::new() } else { state.outbox(None)? };
    let groups = if failed_only { Vec::new() } else { state.groups()? };
    let time = |ms: u64| crate::state::from_millis(ms).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    // A group's entry is about the group, not the member whose pass queued it.
    let about = |n: &crate::model::Notification| match &n.group {
        Some(g) => format!("group {}", g.key),
        None => n.app.clone(),
    };
    let labels =
        |g: &crate::state::Group| g.notification.as_ref().and_then(|n| n.group.as_ref()).map(|r| r.labels.clone()).unwrap_or_default();
    match format {
        Format::Json => {
            let v = json!({
                "failed": dead.iter().map(|d| json!({"id": d.id, "failedAt": time(d.failed_ms), "attempts": d.attempts, "permanent": d.permanent,
                    "error": d.error, "app": d.notification.app, "trigger": d.notification.trigger, "destination": d.notification.destination,
                    "kind": d.notification.kind, "action": d.notification.action})).collect::<Vec<_>>(),
                "quarantined": quarantined.iter().map(|q| json!({"id": q.id, "at": time(q.at_ms), "service": q.service, "error": q.error,
                    "raw": q.raw})).collect::<Vec<_>>(),
                "pending": pending.iter().map(|p| json!({"id": p.id, "enqueuedAt": time(p.enqueued_ms), "nextAttemptAt": time(p.next_attempt_ms),
                    "attempts": p.attempts, "lastError": p.last_error, "app": p.notification.app, "trigger": p.notification.trigger,
                    "destination": p.notification.destination, "kind": p.notification.kind,
                    "group": p.notification.group.as_ref().map(|g| &g.key)})).collect::<Vec<_>>(),
                "groups": groups.iter().map(|g| json!({"key": g.key, "labels": labels(g), "openedAt": time(g.opened_ms),
                    "firing": g.firing, "resolved": g.resolved, "lastSentAt": g.last_sent_ms.map(time), "entry": g.entry,
                    "trigger": g.notification.as_ref().map(|n| &n.trigger),
                    "destination": g.notification.as_ref().map(|n| &n.destination)})).collect::<Vec<_>>(),
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => {
            writeln!(out, "FAILED ({})", dead.len())?;
            for d in &dead {
                let kind = if d.permanent { "permanent" } else { "gave up" };
                writeln!(
                    out,
                    "  #{} {} {} {} -> {} after {} attempt(s), {kind}: {}",
                    d.id,
                    time(d.failed_ms),
                    d.notification.app,
                    d.notification.trigger,
                    d.notification.destination,
                    d.attempts,
                    d.error
                )?;
            }
            if !quarantined.is_empty() {
                writeln!(out, "QUARANTINED ({}): outbox entries that could not be read", quarantined.len())?;
                for q in &quarantined {
                    writeln!(out, "  #{} {} {}: {}", q.id, time(q.at_ms), q.service, q.error)?;
                }
            }
            if !failed_only {
                writeln!(out, "PENDING ({})", pending.len())?;
                for p in &pending {
                    writeln!(
                        out,
                        "  #{} {} {} -> {} attempts {} next {}{}",
                        p.id,
                        about(&p.notification),
                        p.notification.trigger,
                        p.notification.destination,
                        p.attempts,
                        time(p.next_attempt_ms),
                        p.last_error.as_deref().map(|e| format!(" last error: {e}")).unwrap_or_default()
                    )?;
                }
                if !groups.is_empty() {
                    writeln!(out, "GROUPS ({})", groups.len())?;
                }
                for g in &groups {
                    let by: Vec<String> = labels(g).iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let (trigger, destination) =
                        g.notification.as_ref().map(|n| (n.trigger.clone(), n.destination.to_string())).unwrap_or_default();
                    let sent = g.last_sent_ms.map_or("not sent yet".to_string(), |at| format!("last sent {}", time(at)));
                    writeln!(
                        out,
                        "  {} {trigger} -> {destination} ({}): {} of {} firing, opened {}, {sent}{}",
                        g.key,
                        by.join(", "),
                        g.firing,
                        g.firing + g.resolved,
                        time(g.opened_ms),
                        g.entry.map(|id| format!(", message #{id} pending")).unwrap_or_default()
                    )?;
                }
            }
        }
    }
    Ok(OK)
}

/// Where a command that reads the cluster connects, with the operator's credentials:
/// `--kubeconfig`, `--context`, and the configuration it reads (`--config`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterOptions<'a> {
    pub kubeconfig: Option<&'a Path>,
    pub context: Option<&'a str>,
    pub config: Option<&'a Path>,
}

/// Options of `driftwatch run --replay`.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    pub path: PathBuf,
    pub config: Option<PathBuf>,
    /// Persist notification state here (default: in memory, so every replay starts
    /// from nothing).
    pub state: Option<PathBuf>,
    /// Also append every notification as a JSON line here.
    pub jsonl: Option<PathBuf>,
    /// Deliver through the configured services for real, waiting at most this long at
    /// the end for the outbox to drain (what is left is delivered by the next run with
    /// the same `--state`).
    pub deliver: Option<std::time::Duration>,
}

fn summarize_app(app: &App) -> String {
    let s = |p: &str| app.object.pointer(p).and_then(Value::as_str).unwrap_or("-").to_string();
    let rev = s("/status/sync/revision");
    let rev = if rev.len() > 7 { rev[..7].to_string() } else { rev };
    format!(
        "{}  sync={} health={} operation={} revision={}",
        app.qualified_name(),
        s("/status/sync/status"),
        s("/status/health/status"),
        s("/status/operationState/phase"),
        rev
    )
}

/// When Argo CD produced this snapshot: `status.reconciledAt`, else `observedAt`.
fn observed_at(app: &App) -> Option<chrono::DateTime<Utc>> {
    ["/status/reconciledAt", "/status/observedAt"]
        .iter()
        .filter_map(|p| app.object.pointer(p).and_then(Value::as_str))
        .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .max()
}

/// The attribution and diff of a live object (a replay's stand-in for the cluster),
/// under the key the pipeline looks it up by; the `ignoreDifferences` of the
/// Application among `apps` that lists it as a resource apply.
pub(crate) fn live_attribution<'a>(
    rt: &Runtime,
    object: &Value,
    apps: impl IntoIterator<Item = &'a Value>,
) -> (String, crate::drift::attribution::Attribution) {
    let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (group, version) = s("/apiVersion").rsplit_once('/').unwrap_or(("", s("/apiVersion")));
    let (kind, namespace, name) = (s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
    let class = rt.classes.class_of(group, kind);
    let lists = |app: &Value| {
        app.pointer("/status/resources").and_then(Value::as_array).is_some_and(|rs| {
            rs.iter().any(|r| {
                let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
                (f("group"), f("kind"), f("namespace"), f("name")) == (group, kind, namespace, name)
            })
        })
    };
    let app = apps.into_iter().find(|a| lists(a));
    // Under the cluster of the Application that lists it, where the pipeline looks.
    let cluster = app.map(|a| rt.target(a).key()).unwrap_or_default();
    let key = crate::drift::attribution::live_key(&cluster, group, kind, namespace, name);
    let rules = app.map(crate::drift::ignore::IgnoreRules::of).unwrap_or_default();
    let meta = |k: &str| app.and_then(|a| a.pointer(&format!("/metadata/{k}"))).and_then(Value::as_str).unwrap_or_default().to_string();
    let wanted = crate::cluster::live::Wanted {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        class: class.into(),
        cluster: String::new(),
        app_namespace: meta("namespace"),
        app_name: meta("name"),
        ignore: rules.for_resource(group, kind, namespace, name),
        notes: rules.notes.clone(),
    };
    let settings = crate::cluster::live::ReadSettings {
        read_secrets: true,
        ignore_managers: rt.attribution.ignore_managers.clone(),
        diff: rt.diff.clone(),
        argocd: None,
    };
    (key, crate::cluster::live::analyse(object, &settings, &wanted, None))
}

/// One line about an episode for replay and `routes test` output.
fn episode_line(ep: &crate::drift::episode::Episode, now: chrono::DateTime<Utc>) -> String {
    let classes: Vec<&str> = ep.classes.iter().map(String::as_str).collect();
    let after = match ep.resolved_at {
        Some(_) => format!(" after {}", crate::drift::episode::human_duration(ep.duration_secs(now))),
        None => String::new(),
    };
    format!("{} severity={} direction={} classes=[{}]{after}", ep.id, ep.severity.as_str(), ep.direction, classes.join(","))
}

/// `driftwatch run --replay PATH`: feeds snapshots through the real pipeline and prints
/// every notification it would send.
pub fn run_replay(opts: &ReplayOptions, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let Some(rt) = load(opts.config.as_deref(), err)? else {
        return Ok(FAILED);
    };
    let max_keys = rt.state.max_keys_per_app;
    let state = match &opts.state {
        Some(p) => StateStore::open(p)?,
        None => StateStore::in_memory()?,
    };
    let state = Arc::new(match max_keys {
        Some(n) => state.with_max_keys_per_app(n),
        None => state,
    });
    let steps = match replay::read_replay(&opts.path) {
        Ok(s) => s,
        Err(e) => {
            writeln!(err, "error: {e}")?;
            return Ok(BAD_INPUT);
        }
    };
    // Every notification goes through the outbox, whose workers deliver and record:
    // through the configured services with `--deliver` (starting on whatever a
    // previous run left), else through previews that take everything, on the
    // snapshots' clock. Either way what is shown is shown as it is submitted.
    let tokio_rt = tokio::runtime::Runtime::new()?;
    let _entered = tokio_rt.enter();
    let clock = crate::deliver::queue::OutboxClock::manual(0);
    let preview = Arc::new(crate::pipeline::pass::Preview::default());
    let delivery = match opts.deliver {
        Some(_) => match crate::pipeline::wiring::service_clients(&rt, &state) {
            Ok(services) => crate::deliver::Delivery::start(services, state.clone()),
            Err(errors) => {
                for e in errors {
                    writeln!(err, "error: {e}")?;
                }
                return Ok(FAILED);
            }
        },
        None => crate::pipeline::pass::start_preview(&rt, state.clone(), clock.clone(), preview.clone()),
    };
    let pipeline = Pipeline::new(Arc::new(rt));
    let mut inputs = crate::pipeline::Inputs::default();
    let mut jsonl = match &opts.jsonl {
        Some(p) => Some(JsonLinesWriter::new(std::io::BufWriter::new(
            std::fs::OpenOptions::new().create(true).append(true).open(p).with_context(|| format!("opening {}", p.display()))?,
        ))),
        None => None,
    };
    let (mut unconfigured, mut malformed, mut apps) = (0, 0, 0);
    // The latest snapshot of each Application: whose ignoreDifferences a live object's diff honors.
    let mut seen: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    let mut now = chrono::DateTime::<Utc>::MIN_UTC;
    for step in &steps {
        let (app, deleted) = match &step.snapshot {
            Snapshot::Project(p) => {
                writeln!(out, "== {}  AppProject {}", step.label, p.name)?;
                inputs.projects.insert(p.name.clone(), p.clone());
                continue;
            }
            Snapshot::Live(object) => {
                let (key, a) = live_attribution(&pipeline.runtime, object, seen.values());
                let who: Vec<String> = a
                    .managers
                    .iter()
                    .map(|m| format!("{}{}", m.manager, if m.security_fields.is_empty() { "" } else { " (security fields)" }))
                    .collect();
                let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default();
                let what = format!("{} {}/{}", s("/kind"), s("/metadata/namespace"), s("/metadata/name"));
                let who = if who.is_empty() { "only Argo CD".to_string() } else { format!("changed by {}", who.join(", ")) };
                writeln!(out, "== {}  live object {what}: {who}", step.label)?;
                if let Some(d) = &a.diff {
                    for c in &d.changes {
                        let by = if c.manager.is_empty() { String::new() } else { format!(" ({})", c.manager) };
                        writeln!(out, "     {}: {} -> {}{by}", c.path, c.desired, c.live)?;
                    }
                    if d.more > 0 {
                        writeln!(out, "     and {} more", d.more)?;
                    }
                }
                inputs.live.insert(key, a);
                continue;
            }
            Snapshot::Malformed(reason) => {
                malformed += 1;
                writeln!(out, "== {}  skipped: {reason}", step.label)?;
                tracing::warn!(step = %step.label, %reason, "malformed object skipped");
                continue;
            }
            Snapshot::App(app) => (app.as_ref(), false),
            Snapshot::Deleted(app) => (app.as_ref(), true),
        };
        apps += 1;
        if !deleted {
            seen.insert(app.qualified_name(), app.object.clone());
        }
        writeln!(out, "== {}  {}{}", step.label, summarize_app(app), if deleted { " (deleted)" } else { "" })?;
        // A snapshot is what Argo CD reported when it last reconciled: replays run on
        // that clock (hold-downs and episode durations), never going backwards.
        now = observed_at(app).unwrap_or_else(Utc::now).max(now);
        clock.set(crate::state::to_millis(now));
        let pass = crate::pipeline::pass::run(&pipeline, &inputs, &state, &delivery, app, deleted, now)?;
        let eval = &pass.eval;
        for e in &eval.annotation_errors {
            writeln!(out, "  ! {e}")?;
        }
        if eval.stale {
            writeln!(out, "  (sync status is stale: skipped until Argo CD re-reconciles)")?;
            continue;
        }
        if let (Some(ep), Some(event)) = (&eval.episode, eval.episode_event) {
            writeln!(out, "  episode {}: {}", event.as_str(), episode_line(ep, now))?;
        }
        if let Some(b) = eval.break_glass.as_ref().map(|r| &r.break_glass) {
            match b.state {
                crate::drift::break_glass::State::Refused => writeln!(out, "  break-glass {}: refused: {}", b.ticket, b.refusal)?,
                state => {
                    let force = if b.effective {
                        ", in force"
                    } else if b.overdue {
                        ", overdue"
                    } else {
                        ""
                    };
                    writeln!(out, "  break-glass {}: {} ({}{force})", b.ticket, state.as_str(), b.verification.as_str())?
                }
            }
        }
        for s in &eval.skipped {
            match s {
                Skip::AlreadyNotified { .. } => {}
                Skip::HeldDown { .. } | Skip::BreakGlass { .. } => writeln!(out, "  ({s})")?,
                other => writeln!(out, "  ! {other}")?,
            }
        }
        if eval.notifications.is_empty() {
            writeln!(out, "  (no new notifications)")?;
        }
        let mut console = ConsoleWriter::new(&mut *out);
        for n in &eval.notifications {
            // A group member's notification is a join (or a leave); the group's message
            // is shown once, when it goes out (below).
            match &n.group {
                Some(g) => console.show_member(n, g)?,
                None => console.show(n)?,
            }
            if let Some(j) = jsonl.as_mut() {
                j.step = step.label.clone();
                j.show(n)?;
            }
        }
        unconfigured += pass.submitted.unconfigured;
        if opts.deliver.is_none() {
            // The next snapshot is evaluated on what this one's previews recorded. Only
            // what is due on the snapshot's clock can be: a group's message waiting for
            // its `wait` is due at a later snapshot (the clock stands still meanwhile).
            tokio_rt.block_on(delivery.settle(std::time::Duration::ZERO, std::time::Duration::from_secs(60)));
            for n in preview.take_sent_groups() {
                ConsoleWriter::new(&mut *out).show(&n)?;
            }
        }
    }
    if let Some(wait) = opts.deliver {
        writeln!(out, "\nreplayed {} step(s) ({apps} Application snapshot(s)); delivering (waiting at most {wait:?})", steps.len())?;
        out.flush()?;
        tokio_rt.block_on(delivery.settle(std::time::Duration::from_secs(3600), wait));
        tokio_rt.block_on(delivery.shutdown(std::time::Duration::from_secs(5)));
        let dead = state.dead_letters()?.len();
        let pending = state.outbox(None)?.len();
        writeln!(out, "deliveries: {pending} still pending, {dead} dead letter(s) in the store; see `driftwatch deliveries --state …`")?;
        return Ok(if dead > 0 || pending > 0 { FAILED } else { OK });
    }
    // Group messages still waiting for their wait after the last snapshot go out now, as
    // they would once it ended (the snapshots' clock moved past the longest wait).
    clock.set(crate::state::to_millis(now.checked_add_signed(chrono::Duration::days(1)).unwrap_or(now)));
    tokio_rt.block_on(delivery.settle(std::time::Duration::ZERO, std::time::Duration::from_secs(60)));
    let mut console = ConsoleWriter::new(&mut *out);
    for n in preview.take_sent_groups() {
        console.show(&n)?;
    }
    let (sent, dead) = delivery.totals();
    tokio_rt.block_on(delivery.shutdown(std::time::Duration::from_secs(5)));
    let failed = dead + unconfigured as u64;
    writeln!(
        out,
        "\nreplayed {} step(s) ({apps} Application snapshot(s)): {sent} notification(s) sent, {failed} failed, {malformed} malformed object(s) skipped",
        steps.len()
    )?;
    Ok(if failed > 0 { FAILED } else { OK })
}
