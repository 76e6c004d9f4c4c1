//! PagerDuty Events API v2: `POST <api>/v2/enqueue` with `trigger` events carrying a
//! stable `dedup_key` (Application UID, trigger, condition — never random), and
//! `resolve` with the same key when a `resolve: true` condition clears.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::PagerDutyClient;
pub use config::PagerDutyConfig;
pub use payload::{MAX_BODY_BYTES, dedup_key, event};
