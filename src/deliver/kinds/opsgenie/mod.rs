//! Opsgenie's Alert API: an alert created with a stable `alias` (the same Application,
//! trigger and condition always give the same one, so a re-send after a crash updates
//! the same alert), and closed by that alias on resolve, as PagerDuty's `dedup_key`.
//! `POST /v2/alerts` and `POST /v2/alerts/{alias}/close?identifierType=alias`, with
//! `Authorization: GenieKey <key>`; both answer 202.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::OpsgenieClient;
pub use config::OpsgenieConfig;
pub use payload::{alias, close, create};

/// The Opsgenie kind: what the registry (`deliver::kinds`) needs of it.
pub struct Opsgenie;

impl crate::deliver::kind::Kind for Opsgenie {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Opsgenie;
    type Config = OpsgenieConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 5.0, burst: 10, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "opsgenie",
        settings: &[("apiUrl", "apiUrl"), ("apiKeys", "apiKeys")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &OpsgenieConfig) -> Vec<&str> {
        c.api_keys.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &OpsgenieConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(OpsgenieClient::new(c, env)?))
    }
}
