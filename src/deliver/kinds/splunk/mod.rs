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
        match c.batch_size {
            Some(n) if !(1..=100).contains(&n) => Err(SettingsError::Rule(format!("batchSize must be from 1 to 100, not {n}"))),
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
