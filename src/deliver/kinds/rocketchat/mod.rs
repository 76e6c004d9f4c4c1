//! Rocket.Chat's REST API: `POST /api/v1/chat.postMessage` to the recipient channel
//! (`#name`, or `@user`) with the message and the template's `rocketchat.attachments`,
//! `alias`, `emoji`, `avatar`; a resolve edits the original with `chat.update`.
//! Authenticated as Argo CD does, by logging in (`email`, `password`: the session is
//! cached and renewed after a 401), or with a personal access token (`userId`, `token`).

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::RocketChatClient;
pub use config::RocketChatConfig;
pub use payload::{channel, message};

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Rocketchat kind: what the registry (`deliver::kinds`) needs of it.
pub struct Rocketchat;

impl Kind for Rocketchat {
    const KIND: DestinationKind = DestinationKind::Rocketchat;
    type Config = RocketChatConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::RocketChatDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "rocketchat",
        settings: &[("serverUrl", "serverUrl"), ("email", "email"), ("password", "password")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn validate(c: &RocketChatConfig) -> Result<(), SettingsError> {
        let login = c.email.is_some() && c.password.is_some() && c.user_id.is_none() && c.token.is_none();
        let token = c.user_id.is_some() && c.token.is_some() && c.email.is_none() && c.password.is_none();
        if !login && !token {
            return Err(SettingsError::Rule("a rocketchat service needs email and password, or userId and token".into()));
        }
        Ok(())
    }

    fn secrets(c: &RocketChatConfig) -> Vec<&str> {
        [&c.email, &c.password, &c.user_id, &c.token].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(name: &str, c: &RocketChatConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(RocketChatClient::new(name, c, env)?))
    }
}
