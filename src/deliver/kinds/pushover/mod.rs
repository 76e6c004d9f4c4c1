//! Pushover: `POST https://api.pushover.net/1/messages.json` with the application token,
//! the recipient as the user (or group) key, and the message; the template's
//! `pushover.title`, `.priority` (-2 to 2), `.url`, `.urlTitle`, `.sound`, `.device`.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::PushoverClient;
pub use config::PushoverConfig;
pub use payload::message;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Pushover kind: what the registry (`deliver::kinds`) needs of it.
pub struct Pushover;

impl Kind for Pushover {
    const KIND: DestinationKind = DestinationKind::Pushover;
    type Config = PushoverConfig;
    const LIMITS: Limits = Limits { per_second: 2.0, burst: 5, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    // It wakes a person up: a break-glass exception holds it back.
    const PAGES: bool = true;
    type Template = template::PushoverDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "pushover",
        settings: &[("token", "token")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &PushoverConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(_name: &str, c: &PushoverConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(PushoverClient::new(c, env)?))
    }
}
