//! PagerDuty Events API v2: `POST <api>/v2/enqueue` with `trigger` events carrying a
//! stable `dedup_key` (Application UID, trigger, condition — never random), and
//! `resolve` with the same key when a `resolve: true` condition clears.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::PagerDutyClient;
pub use config::PagerDutyConfig;
pub use payload::{MAX_BODY_BYTES, dedup_key, event};

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Pagerduty kind: what the registry (`deliver::kinds`) needs of it.
pub struct Pagerduty;

impl Kind for Pagerduty {
    const KIND: DestinationKind = DestinationKind::Pagerduty;
    type Config = PagerDutyConfig;
    const LIMITS: Limits = Limits { per_second: 1.5, burst: 10, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    // It wakes a person up: a break-glass exception holds it back.
    const PAGES: bool = true;
    type Template = template::PagerDutyDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "pagerdutyv2",
        settings: &[("serviceKeys", "routingKeys")],
        not_needed: &[],
        typed: true,
        written_order: false,
    });

    fn secrets(c: &PagerDutyConfig) -> Vec<&str> {
        c.routing_keys.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &PagerDutyConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(PagerDutyClient::new(c, env)?))
    }
}
