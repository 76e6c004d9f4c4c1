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
