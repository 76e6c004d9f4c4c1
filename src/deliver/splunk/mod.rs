//! Splunk HTTP Event Collector: `POST <url>/services/collector/event` with
//! `Authorization: Splunk <token>`, several `{time, host, source, sourcetype, index,
//! event}` envelopes per request, the event being the notification's ECS record.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::SplunkClient;
pub use config::SplunkConfig;
pub use payload::{batch_body, classify, envelope};
