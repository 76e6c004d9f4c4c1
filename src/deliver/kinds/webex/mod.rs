//! Webex messages: `POST https://webexapis.com/v1/messages` with the message as
//! markdown, to a person (`toPersonEmail`, when the recipient is an address) or a room
//! (`roomId`), with a bot token.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::WebexClient;
pub use config::WebexConfig;
pub use payload::message;

/// The Webex kind: what the registry (`deliver::kinds`) needs of it.
pub struct Webex;

impl crate::deliver::kind::Kind for Webex {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Webex;
    type Config = WebexConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = crate::deliver::kind::NoSection;
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "webex",
        settings: &[("token", "token")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &WebexConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(name: &str, c: &WebexConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(WebexClient::new(name, c, env)?))
    }
}
