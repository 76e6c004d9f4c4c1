//! Opsgenie's Alert API: an alert created with a stable `alias` (the same Application,
//! trigger and condition always give the same one, so a re-send after a crash updates
//! the same alert), and closed by that alias on resolve, as PagerDuty's `dedup_key`.
//! `POST /v2/alerts` and `POST /v2/alerts/{alias}/close?identifierType=alias`, with
//! `Authorization: GenieKey <key>`; both answer 202.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::OpsgenieClient;
pub use config::OpsgenieConfig;
pub use payload::{alias, close, create};

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Opsgenie kind: what the registry (`deliver::kinds`) needs of it.
pub struct Opsgenie;

impl Kind for Opsgenie {
    const KIND: DestinationKind = DestinationKind::Opsgenie;
    type Config = OpsgenieConfig;
    const LIMITS: Limits = Limits { per_second: 5.0, burst: 10, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    // It wakes a person up: a break-glass exception holds it back.
    const PAGES: bool = true;
    type Template = template::OpsgenieDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "opsgenie",
        settings: &[("apiUrl", "apiUrl"), ("apiKeys", "apiKeys")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &OpsgenieConfig) -> Vec<&str> {
        c.api_keys.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &OpsgenieConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(OpsgenieClient::new(c, env)?))
    }
}
