//! Generic HTTP webhook: the template's `webhook.<service>` fields (method, path,
//! headers, body) sent to the service's URL, with basic or bearer auth.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::WebhookClient;
pub use config::{BasicAuth, WebhookConfig};
pub use payload::{HttpRequest, request};

/// The Webhook kind: what the registry (`deliver::kinds`) needs of it.
pub struct Webhook;

impl crate::deliver::kind::Kind for Webhook {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Webhook;
    type Config = WebhookConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 10.0, burst: 20, concurrency: 16 };
    const ENCODE: crate::template::Encoder = payload::encode;

    fn secrets(c: &WebhookConfig) -> Vec<&str> {
        let mut out = vec![c.url.as_str()];
        out.extend(c.headers.values().map(String::as_str));
        out.extend(c.bearer_token.as_deref());
        if let Some(b) = &c.basic_auth {
            out.push(&b.password);
        }
        out
    }

    fn client(_name: &str, c: &WebhookConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(WebhookClient::new(c, &env.secrets, &env.http)?))
    }
}
