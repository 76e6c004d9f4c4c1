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

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Webex kind: what the registry (`deliver::kinds`) needs of it.
pub struct Webex;

impl Kind for Webex {
    const KIND: DestinationKind = DestinationKind::Webex;
    type Config = WebexConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = NoSection;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "webex",
        settings: &[("token", "token")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &WebexConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(name: &str, c: &WebexConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(WebexClient::new(name, c, env)?))
    }
}
