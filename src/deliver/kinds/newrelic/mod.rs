//! New Relic deployment markers: `POST /v2/applications/{id}/deployments.json` (the
//! recipient is the APM application id) with `X-Api-Key`, the revision (the template's
//! `newrelic.revision`, else the Application's synced revision), `changelog`,
//! `description` (else the message) and `user`.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::NewRelicClient;
pub use config::NewRelicConfig;
pub use payload::deployment;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Newrelic kind: what the registry (`deliver::kinds`) needs of it.
pub struct Newrelic;

impl Kind for Newrelic {
    const KIND: DestinationKind = DestinationKind::Newrelic;
    type Config = NewRelicConfig;
    const LIMITS: Limits = Limits { per_second: 2.0, burst: 5, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::NewRelicDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "newrelic",
        settings: &[("apiURL", "apiURL"), ("apiKey", "apiKey")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &NewRelicConfig) -> Vec<&str> {
        vec![c.api_key.as_str()]
    }

    fn client(_name: &str, c: &NewRelicConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(NewRelicClient::new(c, env)?))
    }
}
