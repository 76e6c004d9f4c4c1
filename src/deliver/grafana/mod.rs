//! Grafana annotations: `POST /api/annotations` with the message as the text and the
//! recipient's tags (Argo CD's form: `tag1|tag2`) plus `argocd` and the Application,
//! so deployments and drift show on dashboards. Authenticated with a service-account
//! token (`Authorization: Bearer`).

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::GrafanaClient;
pub use config::GrafanaConfig;
pub use payload::annotation;
