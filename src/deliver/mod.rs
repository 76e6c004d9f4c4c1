//! Delivers rendered notifications and, only after a delivery succeeded, records them
//! in the state store.
//!
//! One path: [`worker::Delivery`] writes notifications to the durable outbox and runs
//! one worker per service (rate limit, per-attempt timeout, retries with jittered
//! backoff honouring `Retry-After`, dead letters), whose settle records what was
//! delivered. Each destination kind is a folder of `kinds/` with the same files:
//! `config.rs`, `payload.rs` (pure, tested without a network), `client.rs`, `tests.rs`
//! (the shared compliance harness against a real listener), and in `mod.rs` its
//! [`kind::Kind`]; `kinds/mod.rs` registers each in one line. The rest is machinery
//! that names no kind: the worker, outcomes, HTTP, the client environment ([`env`]). Replays show what they submit with
//! [`ConsoleWriter`] and [`JsonLinesWriter`]; their previews are delivered by a
//! deliverer that takes everything (`pipeline::pass::Preview`).

pub mod ecs;
pub mod encode;
pub mod env;
pub mod http;
pub mod kind;
pub mod kinds;
pub mod message_ref;
pub mod outcome;
pub mod recipients;
pub mod services;
#[cfg(test)]
pub(crate) mod testkit;
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

use std::io::Write;

use crate::model::Notification;

/// Shows notifications for a person to read, as a replay submits them.
pub struct ConsoleWriter<W: Write> {
    out: W,
}

impl<W: Write> ConsoleWriter<W> {
    pub fn new(out: W) -> Self {
        ConsoleWriter { out }
    }

    pub fn show(&mut self, n: &Notification) -> std::io::Result<()> {
        // Plain data with string keys: serializing cannot fail.
        let payload = serde_json::to_string_pretty(&n.payload).unwrap_or_default();
        let action = if n.action == crate::model::Action::Resolve { " [resolve]" } else { "" };
        writeln!(self.out, "  -> {} ({}) {}: {}[{}] -> {}{action}", n.destination, n.kind, n.app, n.trigger, n.condition, n.template)?;
        for line in payload.lines() {
            writeln!(self.out, "     {line}")?;
        }
        Ok(())
    }
}

/// Appends one JSON object per notification, as a replay submits them.
pub struct JsonLinesWriter<W: Write> {
    out: W,
    /// Added to every record as `step` (the replay file), when set.
    pub step: String,
}

impl<W: Write> JsonLinesWriter<W> {
    pub fn new(out: W) -> Self {
        JsonLinesWriter { out, step: String::new() }
    }

    pub fn show(&mut self, n: &Notification) -> std::io::Result<()> {
        let mut v = serde_json::to_value(n).unwrap_or_default();
        if let (Some(map), false) = (v.as_object_mut(), self.step.is_empty()) {
            map.insert("step".into(), self.step.clone().into());
        }
        writeln!(self.out, "{v}")?;
        self.out.flush()
    }
}
