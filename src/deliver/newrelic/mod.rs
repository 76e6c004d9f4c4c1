//! New Relic deployment markers: `POST /v2/applications/{id}/deployments.json` (the
//! recipient is the APM application id) with `X-Api-Key`, the revision (the template's
//! `newrelic.revision`, else the Application's synced revision), `changelog`,
//! `description` (else the message) and `user`.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::NewRelicClient;
pub use config::NewRelicConfig;
pub use payload::deployment;
