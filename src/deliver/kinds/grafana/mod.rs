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

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Grafana kind: what the registry (`deliver::kinds`) needs of it.
pub struct Grafana;

impl Kind for Grafana {
    const KIND: DestinationKind = DestinationKind::Grafana;
    type Config = GrafanaConfig;
    const LIMITS: Limits = Limits { per_second: 10.0, burst: 20, concurrency: 4 };
    const ENCODE: Encoder = payload::encode;
    type Template = NoSection;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "grafana",
        settings: &[("apiUrl", "apiUrl"), ("apiKey", "apiKey"), ("insecureSkipVerify", "insecureSkipVerify")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &GrafanaConfig) -> Vec<&str> {
        vec![c.api_key.as_str()]
    }

    fn client(_name: &str, c: &GrafanaConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(GrafanaClient::new(c, env)?))
    }
}
