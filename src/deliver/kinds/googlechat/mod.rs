//! Google Chat through incoming webhooks: `{text, cardsV2}` (or legacy `cards`) from the
//! template's `googlechat.*` fields, posted to the recipient's space webhook; with
//! `googlechat.threadKey` messages of one key go to one thread
//! (`messageReplyOption=REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD`). A webhook cannot edit a
//! message: a resolve is a new message, in the same thread when the key is the same.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::GoogleChatClient;
pub use config::GoogleChatConfig;
pub use payload::{message, url_with_thread};

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Googlechat kind: what the registry (`deliver::kinds`) needs of it.
pub struct Googlechat;

impl Kind for Googlechat {
    const KIND: DestinationKind = DestinationKind::Googlechat;
    type Config = GoogleChatConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::GoogleChatDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "googlechat",
        settings: &[("webhooks", "webhooks")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &GoogleChatConfig) -> Vec<&str> {
        c.webhooks.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &GoogleChatConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(GoogleChatClient::new(c, env)?))
    }
}
