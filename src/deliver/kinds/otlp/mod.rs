//! OpenTelemetry logs over OTLP/HTTP: `POST <url>/v1/logs`, an
//! `ExportLogsServiceRequest` in protobuf, gzip-compressed, to any Collector or OTLP
//! endpoint (Loki's `/otlp`, Grafana Cloud, Datadog, Honeycomb). Each SIEM record is
//! one log record, its body the ECS or OCSF document; its resource the Kubernetes
//! semantic conventions' (`k8s.cluster.name`, `k8s.namespace.name`,
//! `k8s.deployment.name`, …).

mod client;
mod config;
pub(crate) mod payload;
pub(crate) mod proto;
#[cfg(test)]
mod tests;

pub use client::OtlpClient;
pub use config::OtlpConfig;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The OTLP kind: what the registry (`deliver::kinds`) needs of it.
pub struct Otlp;

impl Kind for Otlp {
    const KIND: DestinationKind = DestinationKind::Otlp;
    type Config = OtlpConfig;
    const LIMITS: Limits = Limits { per_second: 50.0, burst: 100, concurrency: 4 };
    const ENCODE: Encoder = payload::encode;
    // A SIEM: one record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &OtlpConfig) -> Result<(), SettingsError> {
        let rule = |m: String| Err(SettingsError::Rule(m));
        if let Some(n) = c.batch_size.filter(|n| !(1..=1000).contains(n)) {
            return rule(format!("batchSize must be from 1 to 1000, not {n}"));
        }
        match c.compression.as_deref() {
            None | Some("gzip" | "none") => Ok(()),
            Some(other) => rule(format!("compression must be gzip or none, not {other:?}")),
        }
    }

    fn secrets(c: &OtlpConfig) -> Vec<&str> {
        std::iter::once(c.url.as_str()).chain(c.headers.values().map(String::as_str)).collect()
    }

    fn client(name: &str, c: &OtlpConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(OtlpClient::new(name, c, env)?))
    }
}
