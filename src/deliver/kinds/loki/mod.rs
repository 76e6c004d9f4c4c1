//! Grafana Loki's push API: `POST <url>/loki/api/v1/push` with the records as log
//! lines (ECS or OCSF JSON), under a fixed, small set of stream labels (namespace,
//! project, class, severity) so the streams stay few, and everything that identifies
//! an entry (Application, trigger, record id, episode) as structured metadata.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::LokiClient;
pub use config::LokiConfig;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Loki kind: what the registry (`deliver::kinds`) needs of it.
pub struct Loki;

impl Kind for Loki {
    const KIND: DestinationKind = DestinationKind::Loki;
    type Config = LokiConfig;
    const LIMITS: Limits = Limits { per_second: 20.0, burst: 50, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    // A SIEM: one record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &LokiConfig) -> Result<(), SettingsError> {
        let rule = |m: String| Err(SettingsError::Rule(m));
        if let Some(n) = c.batch_size.filter(|n| !(1..=500).contains(n)) {
            return rule(format!("batchSize must be from 1 to 500, not {n}"));
        }
        match (&c.username, &c.password, &c.bearer_token) {
            (Some(_), None, _) | (None, Some(_), _) => rule("username and password go together".into()),
            (Some(_), Some(_), Some(_)) => rule("set username and password or bearerToken, not both".into()),
            _ => Ok(()),
        }
    }

    fn secrets(c: &LokiConfig) -> Vec<&str> {
        [Some(&c.url), c.username.as_ref(), c.password.as_ref(), c.bearer_token.as_ref()].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &LokiConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(LokiClient::new(c, env)?))
    }
}
