//! Prometheus Alertmanager's v2 API: drift routed into an existing Alertmanager. An
//! alert is `POST /api/v2/alerts` with labels (the template's `alertmanager.labels`, by
//! default `alertname` = the trigger plus the Application's name, namespace and
//! project), annotations and a `generatorURL`; a resolve posts the same labels with
//! `endsAt` now, which resolves it. The same labels always identify the same alert.
//! Every target gets the alert; one that accepts is enough.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::AlertmanagerClient;
pub use config::AlertmanagerConfig;
pub use payload::alerts;
