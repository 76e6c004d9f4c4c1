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

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Splunk kind: what the registry (`deliver::kinds`) needs of it.
pub struct Splunk;

impl Kind for Splunk {
    const KIND: DestinationKind = DestinationKind::Splunk;
    type Config = SplunkConfig;
    const LIMITS: Limits = Limits { per_second: 50.0, burst: 100, concurrency: 4 };
    const ENCODE: Encoder = payload::encode;
    // A SIEM: one ECS record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &SplunkConfig) -> Result<(), SettingsError> {
        if let Some(n) = c.batch_size.filter(|n| !(1..=100).contains(n)) {
            return Err(SettingsError::Rule(format!("batchSize must be from 1 to 100, not {n}")));
        }
        match c.ack_timeout.map(|d| d.0) {
            Some(d) if !(std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(600)).contains(&d) => {
                Err(SettingsError::Rule(format!("ackTimeout must be from 1s to 10m, not {d:?}")))
            }
            _ => Ok(()),
        }
    }

    fn secrets(c: &SplunkConfig) -> Vec<&str> {
        vec![c.url.as_str(), c.token.as_str()]
    }

    fn client(_name: &str, c: &SplunkConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(SplunkClient::new(c, env)?))
    }
}
