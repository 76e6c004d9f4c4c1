//! Prometheus Alertmanager's v2 API: drift routed into an existing Alertmanager. An
//! alert is `POST /api/v2/alerts` with labels (the template's `alertmanager.labels`, by
//! default `alertname` = the trigger plus the Application's name, namespace and
//! project), annotations and a `generatorURL`; a resolve posts the same labels with
//! `endsAt` now, which resolves it. The same labels always identify the same alert.
//! Every target gets the alert; one that accepts is enough.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::AlertmanagerClient;
pub use config::AlertmanagerConfig;
pub use payload::alerts;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Alertmanager kind: what the registry (`deliver::kinds`) needs of it.
pub struct Alertmanager;

impl Kind for Alertmanager {
    const KIND: DestinationKind = DestinationKind::Alertmanager;
    type Config = AlertmanagerConfig;
    const LIMITS: Limits = Limits { per_second: 20.0, burst: 40, concurrency: 4 };
    const ENCODE: Encoder = payload::encode;
    // It wakes a person up: a break-glass exception holds it back.
    const PAGES: bool = true;
    type Template = template::AlertmanagerDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "alertmanager",
        settings: &[
            ("targets", "targets"),
            ("scheme", "scheme"),
            ("apiPath", "apiPath"),
            ("basicAuth", "basicAuth"),
            ("bearerToken", "bearerToken"),
            ("insecureSkipVerify", "insecureSkipVerify"),
        ],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn validate(c: &AlertmanagerConfig) -> Result<(), SettingsError> {
        if c.targets.is_empty() {
            return Err(SettingsError::Rule("an alertmanager service needs at least one of targets".into()));
        }
        Ok(())
    }

    fn secrets(c: &AlertmanagerConfig) -> Vec<&str> {
        let mut out: Vec<&str> = c.bearer_token.as_deref().into_iter().collect();
        if let Some(b) = &c.basic_auth {
            out.push(&b.password);
        }
        out
    }

    fn client(_name: &str, c: &AlertmanagerConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(AlertmanagerClient::new(c, env)?))
    }
}
