//! `driftwatch break-glass open|approve|close|show NAMESPACE/APP`: an emergency manual
//! change as a documented exception, with the operator's own Kubernetes credentials.
//! Each command asks the API server who the caller is (`SelfSubjectReview`), never
//! takes a name from the command line, and writes the exception into the
//! Application's annotation with a precondition on its `resourceVersion` (two people
//! approving at once: one wins, the other is told). It names itself in its user agent,
//! so the audit log shows a write made with it from one made by hand. Exit 0: done;
//! 1: the cluster could not be reached or refused the write; 2: refused (no such
//! Application, an exception already open, the opener approving, bad input).

use std::io::Write;

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;

use crate::cluster::break_glass::{Applications, Error};
use crate::drift::break_glass::{self as bg, Exception, State};
use crate::exit::{BAD_INPUT, FAILED, OK};

/// What to do.
#[derive(Debug, Clone)]
pub enum Action {
    Open { ticket: String, reason: String, duration: chrono::Duration },
    Approve,
    Close,
    Show,
}

pub struct Options<'a> {
    pub app: &'a str,
    /// Its `config` is read for `breakGlass.maxFor` (the daemon refuses a longer exception).
    pub cluster: super::ClusterOptions<'a>,
    pub action: Action,
}

/// A refusal (exit 2) or a failure to reach or write the cluster (exit 1).
enum Failure {
    Refused(String),
    Cluster(String),
}

pub fn command(o: &Options<'_>, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    let settings = match o.cluster.config {
        Some(_) => match super::load(o.cluster.config, err)? {
            Some(rt) => rt.break_glass,
            None => return Ok(BAD_INPUT),
        },
        None => bg::Settings::default(),
    };
    let (namespace, name) = o.app.split_once('/').unwrap_or(("argocd", o.app));
    let tokio_rt = tokio::runtime::Runtime::new()?;
    let agent = format!("{}{}", bg::USER_AGENT, env!("CARGO_PKG_VERSION"));
    let result = tokio_rt.block_on(async {
        let apps = Applications::connect(o.cluster.kubeconfig, o.cluster.context, &agent, namespace).await?;
        run(&apps, namespace, name, &o.action, &settings, out).await
    });
    match result {
        Ok(()) => Ok(OK),
        Err(Failure::Refused(why)) => {
            writeln!(err, "error: {why}")?;
            Ok(BAD_INPUT)
        }
        Err(Failure::Cluster(why)) => {
            writeln!(err, "error: {why}")?;
            Ok(FAILED)
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::NoUsername => Failure::Refused(e.to_string()),
            Error::Failed(why) => Failure::Cluster(why),
        }
    }
}

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(0)
}

/// The Application a command works on, as read just now, and what its annotation holds.
struct Found<'a> {
    apps: &'a Applications,
    name: &'a str,
    /// `namespace/name`, as messages show it.
    target: String,
    app: Value,
    /// The `resourceVersion` read: the precondition of the write.
    version: String,
    /// The annotation's value, if it has one.
    current: Option<String>,
    /// The annotation as an exception, or why the daemon would refuse it.
    judged: Option<Result<Exception, bg::Malformed>>,
    settings: &'a bg::Settings,
    at: DateTime<Utc>,
}

fn io(e: std::io::Error) -> Failure {
    Failure::Cluster(e.to_string())
}

async fn run(
    apps: &Applications,
    namespace: &str,
    name: &str,
    action: &Action,
    settings: &bg::Settings,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let Some(app) = apps.get(name).await? else {
        return Err(Failure::Refused(format!("Application {namespace}/{name} does not exist")));
    };
    let version = app.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let current = app.pointer("/metadata/annotations").and_then(|a| a.get(bg::ANNOTATION)).and_then(Value::as_str).map(str::to_string);
    let at = now();
    let judged = current.as_deref().map(|v| bg::parse(v, settings, at));
    let found = Found { apps, name, target: format!("{namespace}/{name}"), app, version, current, judged, settings, at };
    match action {
        Action::Show => show(&found, out),
        Action::Open { ticket, reason, duration } => open(&found, (ticket, reason, *duration), out).await,
        Action::Approve => approve(found, out).await,
        Action::Close => close(found, out).await,
    }
}

/// `show`: the exception as the daemon reads it.
fn show(f: &Found<'_>, out: &mut dyn Write) -> Result<(), Failure> {
    let target = &f.target;
    let Some(value) = &f.current else {
        writeln!(out, "{target}: no break-glass exception").map_err(io)?;
        return Ok(());
    };
    let b = bg::evaluate(&f.app, bg::Stored::default(), &[], &bg::Settings { audited: false, ..f.settings.clone() }, true, f.at)
        .unwrap_or_default();
    match b.state {
        State::Refused => writeln!(out, "{target}: refused: {}\n  annotation: {value}", b.refusal).map_err(io)?,
        state => {
            let until = b.expires_at.map(|t| t.to_rfc3339()).unwrap_or_default();
            let approved = if b.approved_by.is_empty() { "not approved yet".to_string() } else { format!("approved by {}", b.approved_by) };
            writeln!(
                out,
                "{target}: {} {} — opened by {}, {approved}; until {until}\n  reason: {}",
                b.ticket,
                state.as_str(),
                b.opened_by,
                b.reason
            )
            .map_err(io)?;
            writeln!(out, "  (the daemon checks both writes against the audit log when it has one)").map_err(io)?;
        }
    }
    Ok(())
}

/// `open`: a new exception by the caller, unless one is open.
async fn open(f: &Found<'_>, (ticket, reason, duration): (&str, &str, chrono::Duration), out: &mut dyn Write) -> Result<(), Failure> {
    let (target, at) = (&f.target, f.at);
    if let Some(Ok(e)) = &f.judged
        && e.expires_at > at
    {
        return Err(Failure::Refused(format!(
            "{target} already has break-glass {} open (by {}, until {}): close it first (driftwatch break-glass close {target})",
            e.ticket,
            e.opened_by,
            e.expires_at.to_rfc3339()
        )));
    }
    let who = f.apps.whoami().await?;
    let expires_at = at.checked_add_signed(duration).ok_or_else(|| Failure::Refused("--for is too long".into()))?;
    let e = Exception {
        ticket: ticket.trim().to_string(),
        reason: reason.trim().to_string(),
        opened_by: who,
        opened_at: at,
        expires_at,
        approved_by: String::new(),
        approved_at: None,
    };
    bg::parse(&e.to_annotation(), f.settings, at).map_err(|e| Failure::Refused(e.0))?;
    f.apps.write(f.name, &f.version, Some(e.to_annotation())).await?;
    writeln!(
        out,
        "break-glass {} opened on {target} by {} until {}.\nIt changes nothing until a second person approves it: driftwatch break-glass approve {target}",
        e.ticket,
        e.opened_by,
        e.expires_at.to_rfc3339()
    )
    .map_err(io)?;
    Ok(())
}

/// `approve`: the open exception approved by a second, different person.
async fn approve(f: Found<'_>, out: &mut dyn Write) -> Result<(), Failure> {
    let (target, at) = (&f.target, f.at);
    let mut e = match f.judged {
        None => return Err(Failure::Refused(format!("{target} has no break-glass exception to approve"))),
        Some(Err(why)) => return Err(Failure::Refused(format!("the exception on {target} is refused: {why}"))),
        Some(Ok(e)) => e,
    };
    if e.expires_at <= at {
        return Err(Failure::Refused(format!("break-glass {} on {target} expired at {}", e.ticket, e.expires_at.to_rfc3339())));
    }
    if !e.approved_by.is_empty() {
        return Err(Failure::Refused(format!("break-glass {} on {target} is already approved by {}", e.ticket, e.approved_by)));
    }
    let who = f.apps.whoami().await?;
    if who == e.opened_by {
        return Err(Failure::Refused(format!("you ({who}) opened break-glass {}: a second, different person must approve it", e.ticket)));
    }
    e.approved_by = who;
    e.approved_at = Some(at);
    // What the daemon refuses from the names alone (the opener's other account, a
    // ServiceAccount or system identity) is refused here before it is written.
    bg::parse(&e.to_annotation(), f.settings, at)
        .map_err(|why| Failure::Refused(format!("break-glass {} on {target}: {why}", e.ticket)))?;
    f.apps.write(f.name, &f.version, Some(e.to_annotation())).await?;
    writeln!(
        out,
        "break-glass {} on {target} approved by {}: in force until {}.\nLive drift on it goes to the break-glass routes instead of paging; when it expires with {target} still off Git, on-break-glass-overdue pages.",
        e.ticket,
        e.approved_by,
        e.expires_at.to_rfc3339()
    )
    .map_err(io)?;
    Ok(())
}

/// `close`: the annotation removed, whatever it holds.
async fn close(f: Found<'_>, out: &mut dyn Write) -> Result<(), Failure> {
    let target = &f.target;
    if f.current.is_none() {
        return Err(Failure::Refused(format!("{target} has no break-glass exception to close")));
    }
    let who = f.apps.whoami().await?;
    f.apps.write(f.name, &f.version, None).await?;
    let ticket = f.judged.and_then(Result::ok).map(|e| e.ticket).unwrap_or_else(|| "exception".into());
    writeln!(out, "break-glass {ticket} on {target} closed by {who}.").map_err(io)?;
    Ok(())
}
