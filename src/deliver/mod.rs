//! Delivers rendered notifications and, only after a delivery succeeded, records them
//! in the state store.
//!
//! One path: [`queue::Delivery`] writes notifications to the durable outbox and runs
//! one worker per service (rate limit, per-attempt timeout, retries with jittered
//! backoff honouring `Retry-After`, dead letters), whose settle records what was
//! delivered. Each destination kind is a folder of `kinds/` with the same files:
//! `config.rs`, `payload.rs` (pure, tested without a network), `client.rs`, `tests.rs`
//! (the shared compliance harness against a real listener), and in `mod.rs` its
//! [`kind::Kind`]; `kinds/mod.rs` registers each in one line. The rest is machinery
//! that names no kind: the queue ([`queue`]), the contract a kind implements ([`deliverer`]), outcomes,
//! HTTP, the client environment ([`env`]), records in calls of bounded size ([`calls`]),
//! OAuth tokens kept and refreshed ([`oauth`]) and RS256 JWTs ([`jwt`]). A replay's previews are delivered by a
//! deliverer that takes everything (`pipeline::pass::Preview`).

pub mod calls;
pub mod deliverer;
pub mod ecs;
pub mod encode;
pub mod env;
pub mod http;
pub mod jwt;
pub mod kind;
pub mod kinds;
pub mod message_ref;
pub mod oauth;
pub mod ocsf;
pub mod outcome;
pub mod queue;
pub mod recipients;
pub mod services;
pub mod siem;
#[cfg(test)]
pub(crate) mod testkit;

pub use deliverer::{Deliverer, ServiceRuntime};
pub use queue::Delivery;

/// This machine's host name (syslog HOSTNAME, Splunk `host`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "driftwatch".into())
}
