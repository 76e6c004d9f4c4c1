//! Microsoft Teams through a Power Automate workflow (Microsoft's replacement for
//! incoming webhooks): an Adaptive Card, wrapped in a `message` with one attachment of
//! type `application/vnd.microsoft.card.adaptive`, posted to the recipient's workflow
//! URL. The card is built from the template's `teams.*` fields (title, text, facts,
//! potentialAction links), or `teams.template` is sent as the whole card.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::TeamsWorkflowsClient;
pub use config::TeamsWorkflowsConfig;
pub use payload::message;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The TeamsWorkflows kind: what the registry (`deliver::kinds`) needs of it.
pub struct TeamsWorkflows;

impl Kind for TeamsWorkflows {
    const KIND: DestinationKind = DestinationKind::TeamsWorkflows;
    type Config = TeamsWorkflowsConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = NoSection;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "teams-workflows",
        settings: &[("recipientUrls", "recipientUrls")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &TeamsWorkflowsConfig) -> Vec<&str> {
        c.recipient_urls.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &TeamsWorkflowsConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(TeamsWorkflowsClient::new(c, env)?))
    }
}
