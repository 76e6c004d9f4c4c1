//! Slack: the Web API with a bot token (`chat.postMessage`, and `chat.update` of the
//! original message when a `resolve: true` condition clears; replies threaded under the
//! first message of a `groupingKey`), or an incoming webhook. Message and thread
//! timestamps are kept in the state store, so they survive restarts. About one message
//! per second per channel.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::SlackClient;
pub use config::SlackConfig;
pub use payload::{api_result, message};

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Slack kind: what the registry (`deliver::kinds`) needs of it.
pub struct Slack;

impl Kind for Slack {
    const KIND: DestinationKind = DestinationKind::Slack;
    type Config = SlackConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::SlackDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "slack",
        settings: &[("token", "token"), ("username", "username"), ("icon", "icon"), ("apiURL", "apiUrl")],
        not_needed: &[("signingSecret", "used by Argo CD for incoming Slack requests only; not needed")],
        typed: false,
        written_order: false,
    });

    fn validate(c: &SlackConfig) -> Result<(), SettingsError> {
        if c.token.is_none() == c.webhook_url.is_none() {
            return Err(SettingsError::Rule("a slack service needs exactly one of token and webhookUrl".into()));
        }
        Ok(())
    }

    fn secrets(c: &SlackConfig) -> Vec<&str> {
        [&c.token, &c.webhook_url, &c.api_url].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(name: &str, c: &SlackConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(SlackClient::new(name, c, env)?))
    }
}
