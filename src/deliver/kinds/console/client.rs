//! The console's client: each notification as one JSON line on stdout.

use crate::deliver::deliverer::{BoxFuture, Deliverer};
use crate::deliver::outcome::Outcome;
use crate::model::Notification;

/// The `console` service: prints each notification as one JSON line on stdout.
pub struct ConsoleDeliverer;

impl Deliverer for ConsoleDeliverer {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            for n in batch {
                let line = serde_json::json!({"app": n.app, "trigger": n.trigger, "destination": n.destination, "action": n.action, "payload": n.payload});
                if let Err(e) = writeln!(out, "{line}") {
                    return Outcome::retry(format!("stdout: {e}"));
                }
            }
            Outcome::Delivered
        })
    }
}
