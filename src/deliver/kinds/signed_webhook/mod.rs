//! SIEM webhook: the notification's Elastic Common Schema record as JSON, signed with
//! HMAC-SHA256 over the body (`X-Signature: sha256=<hex>`). The body's `@timestamp` is
//! signed with it and repeated in `X-Signature-Timestamp`, so a receiver can reject
//! replays (an old timestamp) and tampering (a bad signature).

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::SignedWebhookClient;
pub use config::SignedWebhookConfig;
pub use payload::{signature, signed_request, verify};

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The SignedWebhook kind: what the registry (`deliver::kinds`) needs of it.
pub struct SignedWebhook;

impl Kind for SignedWebhook {
    const KIND: DestinationKind = DestinationKind::SignedWebhook;
    type Config = SignedWebhookConfig;
    const LIMITS: Limits = Limits { per_second: 10.0, burst: 20, concurrency: 16 };
    const ENCODE: Encoder = payload::encode;
    // A SIEM: one ECS record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn secrets(c: &SignedWebhookConfig) -> Vec<&str> {
        [c.url.as_str(), c.secret.as_str()].into_iter().chain(c.headers.values().map(String::as_str)).collect()
    }

    fn client(_name: &str, c: &SignedWebhookConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(SignedWebhookClient::new(c, env)?))
    }
}
