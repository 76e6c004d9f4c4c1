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

/// The Grafana kind: what the registry (`deliver::kinds`) needs of it.
pub struct Grafana;

impl crate::deliver::kind::Kind for Grafana {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Grafana;
    type Config = GrafanaConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 10.0, burst: 20, concurrency: 4 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = crate::deliver::kind::NoSection;
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "grafana",
        settings: &[("apiUrl", "apiUrl"), ("apiKey", "apiKey"), ("insecureSkipVerify", "insecureSkipVerify")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &GrafanaConfig) -> Vec<&str> {
        vec![c.api_key.as_str()]
    }

    fn client(_name: &str, c: &GrafanaConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(GrafanaClient::new(c, env)?))
    }
}
