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

/// The Splunk kind: what the registry (`deliver::kinds`) needs of it.
pub struct Splunk;

impl crate::deliver::kind::Kind for Splunk {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Splunk;
    type Config = SplunkConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 50.0, burst: 100, concurrency: 4 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = crate::deliver::kind::NoSection;
    // Argo CD has no such service.
    const ARGO: Option<crate::deliver::kind::ArgoService> = None;

    fn secrets(c: &SplunkConfig) -> Vec<&str> {
        vec![c.url.as_str(), c.token.as_str()]
    }

    fn client(_name: &str, c: &SplunkConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(SplunkClient::new(c, env)?))
    }
}
