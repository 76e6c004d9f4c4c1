//! An Application's story, for a post-mortem (`driftwatch history --timeline`, the web
//! view's timeline): its sync operations, drift episodes and break-glass exceptions as
//! one sequence of steps, oldest first. Pure.

use chrono::{DateTime, Utc};

use super::break_glass::Record;
use super::episode::Episode;
use super::operation::OpRef;
use super::operation::OperationRecord;
use crate::duration::human_duration;

/// One step of an Application's story, for `history --timeline`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub time: DateTime<Utc>,
    pub app: String,
    /// `deployed`, `opened`, `escalated`, `resolved`, `rollback`, `git`, `self-heal`,
    /// `manual-sync`.
    pub event: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub revision: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub by: String,
    pub episode: String,
    pub detail: String,
}

/// The story of an Application, oldest first: every sync operation the history kept
/// (deployments, rollbacks, failed syncs, who started each), the drift episodes and
/// degradations with their escalations, and how each ended — the operation that ended
/// it (its fix: a rollback, a Git revision, self-heal, a manual sync) named so, else how
/// it resolved. Episodes also carry the operation that deployed what was running when
/// they opened (their cause) and their fix, which stand in for operations the history
/// no longer has.
pub fn timeline(episodes: &[Episode], ops: &[OperationRecord], exceptions: &[Record]) -> Vec<Step> {
    let mut steps = Vec::new();
    exception_steps(exceptions, &mut steps);
    let mut by_op = operation_steps(ops, &mut steps);
    let mut oldest_first: Vec<&Episode> = episodes.iter().collect();
    oldest_first.sort_by_key(|e| e.opened_at);
    for e in oldest_first {
        episode_steps(e, &mut steps, &mut by_op);
    }
    steps.sort_by_key(|s| s.time);
    steps
}

/// Where each operation's step is, by (revision, finished at).
type ByOp = std::collections::HashMap<(String, DateTime<Utc>), usize>;

/// Break-glass exceptions: each transition (opened, approved, active, refused,
/// expired, overdue, closed) with who and the ticket.
fn exception_steps(exceptions: &[Record], steps: &mut Vec<Step>) {
    for r in exceptions {
        let b = &r.break_glass;
        for t in &b.events {
            let detail = if t.detail.is_empty() { b.ticket.clone() } else { format!("{}: {}", b.ticket, t.detail) };
            steps.push(Step {
                time: t.at,
                app: format!("{}/{}", r.namespace, r.name),
                event: format!("break-glass-{}", t.event),
                revision: String::new(),
                by: t.by.clone(),
                episode: String::new(),
                detail,
            });
        }
    }
}

/// Each operation the history kept, as a step; returns where each is, by (revision,
/// finished at): an episode's cause and fix name them so.
fn operation_steps(ops: &[OperationRecord], steps: &mut Vec<Step>) -> ByOp {
    let mut by_op = ByOp::new();
    for o in ops {
        let op = &o.operation;
        let event = match (op.rollback, op.phase.as_str()) {
            (true, _) => "rollback",
            (false, "Succeeded") => "deployed",
            _ => "sync-failed",
        };
        let mut detail = if op.rollback { format!("from {}", short(&op.from)) } else { String::new() };
        if op.phase != "Succeeded" {
            detail = format!("{} {}", op.phase, op.message).trim().to_string();
        }
        if !o.resources.is_empty() {
            let n = o.resources.len() + o.resources_more;
            detail = format!("{detail}{}{n} resource(s)", if detail.is_empty() { "" } else { ", " });
        }
        let Some(at) = op.finished_at.or(op.started_at) else { continue };
        if let Some(done) = op.finished_at {
            by_op.insert((op.revision.clone(), done), steps.len());
        }
        steps.push(Step {
            time: at,
            app: format!("{}/{}", o.namespace, o.name),
            event: event.into(),
            revision: op.revision.clone(),
            by: op.by().to_string(),
            episode: String::new(),
            detail,
        });
    }
    by_op
}

/// An episode's steps: its cause (when the history no longer has that operation),
/// its opening and escalation, and how it ended (the operation that fixed it named so).
fn episode_steps(e: &Episode, steps: &mut Vec<Step>, by_op: &mut ByOp) {
    let app = format!("{}/{}", e.namespace, e.name);
    let step = |time: DateTime<Utc>, event: &str, op: Option<&OpRef>, detail: String| Step {
        time,
        app: app.clone(),
        event: event.to_string(),
        revision: op.map(|o| o.revision.clone()).unwrap_or_default(),
        by: op.map(|o| o.by.clone()).unwrap_or_default(),
        episode: e.id.clone(),
        detail,
    };
    if let Some(c) = &e.cause
        && let Some(at) = c.at
    {
        match by_op.get(&(c.revision.clone(), at)) {
            Some(&i) => {
                if steps[i].episode.is_empty() {
                    steps[i].episode = e.id.clone();
                }
            }
            None => {
                by_op.insert((c.revision.clone(), at), steps.len());
                steps.push(step(
                    at,
                    if c.rollback { "rollback" } else { "deployed" },
                    Some(c),
                    "the revision running when the episode opened".into(),
                ));
            }
        }
    }
    let what = if e.degraded && !e.out_of_sync { "Degraded".to_string() } else { format!("{} drift", e.direction) };
    let classes = e.classes.iter().cloned().collect::<Vec<_>>().join(", ");
    let classes = if classes.is_empty() { String::new() } else { format!(" [{classes}]") };
    steps.push(step(e.opened_at, "opened", None, format!("{what} ({}){classes}", e.severity.as_str())));
    if let Some(at) = e.escalated_at {
        steps.push(step(at, "escalated", None, format!("to {}", e.severity.as_str())));
    }
    if let Some(at) = e.resolved_at {
        let how = e.resolution.map_or("resolved", |r| r.as_str());
        let ended = format!("ended the episode after {}", human_duration(e.duration_secs(at)));
        let known = e.fix.as_ref().and_then(|f| f.at.and_then(|t| by_op.get(&(f.revision.clone(), t)))).copied();
        match (&e.fix, known) {
            (Some(_), Some(i)) => {
                let s = &mut steps[i];
                s.event = how.to_string();
                s.episode = e.id.clone();
                s.detail = if s.detail.is_empty() { ended } else { format!("{}; {ended}", s.detail) };
            }
            (Some(f), None) => {
                if let Some(t) = f.at {
                    by_op.insert((f.revision.clone(), t), steps.len());
                }
                steps.push(step(f.at.unwrap_or(at), how, Some(f), ended));
            }
            _ => steps.push(step(at, "resolved", None, format!("{how} after {}", human_duration(e.duration_secs(at))))),
        }
    }
}

fn short(rev: &str) -> String {
    rev.chars().take(7).collect()
}
