//! Delivers rendered notifications and, only after a delivery succeeded, records them
//! in the state store.
//!
//! Two paths share the pipeline's output:
//! - the network path: [`worker::Delivery`] writes notifications to the durable outbox
//!   and runs one worker per configured service (rate limit, per-attempt timeout,
//!   retries with jittered backoff honouring `Retry-After`, dead letters). Each
//!   destination kind is a folder with the same files: `config.rs`, `payload.rs` (pure,
//!   tested without a network), `client.rs`, `tests.rs` (the shared compliance harness
//!   against a real listener);
//! - the preview path: [`dispatch`] hands notifications to local [`Sink`]s (console,
//!   JSON lines), as `run --replay` does.

pub mod alertmanager;
pub mod ecs;
pub mod email;
pub mod github;
pub mod googlechat;
pub mod grafana;
pub mod http;
pub mod mattermost;
pub mod message_ref;
pub mod newrelic;
pub mod opsgenie;
pub mod outcome;
pub mod pagerduty;
pub mod pushover;
pub mod recipients;
pub mod rocketchat;
pub mod services;
pub mod signed_webhook;
pub mod slack;
pub mod splunk;
pub mod syslog;
pub mod teams;
pub mod teams_workflows;
pub mod telegram;
#[cfg(test)]
pub(crate) mod testkit;
pub mod webex;
pub mod webhook;
pub mod worker;

pub use worker::{Deliverer, Delivery, ServiceRuntime};

/// This machine's host name (syslog HOSTNAME, Splunk `host`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "driftwatch".into())
}

/// The `console` service: prints each notification as one JSON line on stdout.
pub struct ConsoleDeliverer;

impl Deliverer for ConsoleDeliverer {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> worker::BoxFuture<'a, outcome::Outcome> {
        Box::pin(async move {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            for n in batch {
                let line = serde_json::json!({"app": n.app, "trigger": n.trigger, "destination": n.destination, "action": n.action, "payload": n.payload});
                if let Err(e) = writeln!(out, "{line}") {
                    return outcome::Outcome::retry(format!("stdout: {e}"));
                }
            }
            outcome::Outcome::Delivered
        })
    }
}

use std::collections::BTreeSet;
use std::io::Write;

use crate::model::{Notification, RecordOp};
use crate::state::{StateError, StateStore};

#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("write failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Failed(String),
}

/// A destination that takes rendered notifications.
pub trait Sink {
    fn deliver(&mut self, n: &Notification) -> Result<(), DeliveryError>;
}

/// Prints notifications for a person to read.
pub struct ConsoleSink<W: Write> {
    out: W,
    /// Printed before each notification (the replay step), when set.
    pub label: String,
}

impl<W: Write> ConsoleSink<W> {
    pub fn new(out: W) -> Self {
        ConsoleSink { out, label: String::new() }
    }
}

impl<W: Write> Sink for ConsoleSink<W> {
    fn deliver(&mut self, n: &Notification) -> Result<(), DeliveryError> {
        let payload = serde_json::to_string_pretty(&n.payload).map_err(|e| DeliveryError::Failed(e.to_string()))?;
        let action = if n.action == crate::model::Action::Resolve { " [resolve]" } else { "" };
        writeln!(self.out, "  -> {} ({}) {}: {}[{}] -> {}{action}", n.destination, n.kind, n.app, n.trigger, n.condition, n.template)?;
        for line in payload.lines() {
            writeln!(self.out, "     {line}")?;
        }
        Ok(())
    }
}

/// Appends one JSON object per notification.
pub struct JsonLinesSink<W: Write> {
    out: W,
    /// Added to every record as `step` (the replay file), when set.
    pub step: String,
}

impl<W: Write> JsonLinesSink<W> {
    pub fn new(out: W) -> Self {
        JsonLinesSink { out, step: String::new() }
    }
}

impl<W: Write> Sink for JsonLinesSink<W> {
    fn deliver(&mut self, n: &Notification) -> Result<(), DeliveryError> {
        let mut v = serde_json::to_value(n).map_err(|e| DeliveryError::Failed(e.to_string()))?;
        if let (Some(map), false) = (v.as_object_mut(), self.step.is_empty()) {
            map.insert("step".into(), self.step.clone().into());
        }
        writeln!(self.out, "{v}")?;
        self.out.flush()?;
        Ok(())
    }
}

/// What [`dispatch`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DispatchReport {
    pub delivered: usize,
    pub failed: usize,
    pub recorded: usize,
}

/// Sends every notification to every sink, then records each dedup key whose
/// notifications all succeeded (a condition may send several templates under one key).
/// A key with any failure is not recorded, so the next evaluation tries again.
pub fn dispatch(
    notifications: &[Notification],
    sinks: &mut [&mut dyn Sink],
    state: &StateStore,
    now_millis: u64,
) -> Result<DispatchReport, StateError> {
    let mut report = DispatchReport::default();
    let mut failed_keys = BTreeSet::new();
    for n in notifications {
        let mut ok = true;
        for sink in sinks.iter_mut() {
            if let Err(e) = sink.deliver(n) {
                tracing::warn!(app = %n.app, trigger = %n.trigger, destination = %n.destination, error = %e, "delivery failed; will retry on the next evaluation");
                ok = false;
            }
        }
        if ok {
            report.delivered += 1;
            state.note_sent(n, now_millis)?;
        } else {
            report.failed += 1;
            if let Some(r) = &n.record {
                failed_keys.insert((r.app_key.clone(), r.key.clone()));
            }
        }
    }
    let mut recorded = BTreeSet::new();
    for r in notifications.iter().filter_map(|n| n.record.as_ref()) {
        let id = (r.app_key.clone(), r.key.clone());
        if failed_keys.contains(&id) || !recorded.insert(id) {
            continue;
        }
        match r.op {
            RecordOp::Set => state.record(&r.app_key, &r.key, now_millis)?,
            RecordOp::Clear => {
                state.forget(&r.app_key, &r.key)?;
            }
        }
        report.recorded += 1;
    }
    Ok(report)
}
