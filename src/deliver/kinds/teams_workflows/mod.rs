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

/// The TeamsWorkflows kind: what the registry (`deliver::kinds`) needs of it.
pub struct TeamsWorkflows;

impl crate::deliver::kind::Kind for TeamsWorkflows {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::TeamsWorkflows;
    type Config = TeamsWorkflowsConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = crate::deliver::kind::NoSection;
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "teams-workflows",
        settings: &[("recipientUrls", "recipientUrls")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &TeamsWorkflowsConfig) -> Vec<&str> {
        c.recipient_urls.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &TeamsWorkflowsConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(TeamsWorkflowsClient::new(c, env)?))
    }
}
