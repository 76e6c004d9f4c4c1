//! Trying a configuration out on one Application file: `driftwatch trigger run` (which
//! conditions hold) and `driftwatch template notify` (what would be sent, and `--send`
//! to send it).

use super::Named;
use super::{
    Action, App, AppMeta, Arc, BAD_INPUT, Destination, Drift, Episode, FAILED, Format, Notification, OK, RenderContext, Runtime, Store,
    Target, Tool, ToolArgs, Utc, Value, Write, json,
};

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
pub fn trigger_run(name: &str, args: &ToolArgs<'_>, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let (rt, app) = match Tool::load(args, Named::Trigger(name), err)? {
        Ok(Tool { rt, app }) => (rt, app),
        Err(code) => return Ok(code),
    };
    // Tool::load checked that the trigger exists.
    let Some(trigger) = rt.triggers.get(name) else { return Ok(BAD_INPUT) };
    let now = Utc::now();
    let (drift, episode) = first_sight(&rt, &app, now);
    let mut scope = rt.engine.prepare_pass(&app.object, &app.unit, &drift, episode.as_ref(), now, &trigger.reads());
    let results = crate::clock::with_now(now, || rt.engine.run(trigger, &mut scope));
    match args.format {
        Format::Json => {
            let v = json!({"trigger": name, "conditions": results});
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Format::Text => {
            if app.sync_status_is_stale(now) {
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
pub fn template_notify(
    name: &str,
    args: &ToolArgs<'_>,
    (recipients, send): (&[String], bool),
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<i32> {
    let (rt, app) = match Tool::load(args, Named::Template(name), err)? {
        Ok(Tool { rt, app }) => (rt, app),
        Err(code) => return Ok(code),
    };
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
                    received_ms: None,
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
    match args.format {
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
    let state = Arc::new(Store::in_memory()?);
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
    let dead = state.outbox().dead_letters()?;
    let pending = state.outbox().entries(None)?;
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
