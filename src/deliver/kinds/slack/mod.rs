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

/// The Slack kind: what the registry (`deliver::kinds`) needs of it.
pub struct Slack;

impl crate::deliver::kind::Kind for Slack {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Slack;
    type Config = SlackConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::SlackDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("slack.text", crate::template::FieldKind::Text), ("slack.attachments", crate::template::FieldKind::Json), ("slack.blocks", crate::template::FieldKind::Json), ("slack.groupingKey", crate::template::FieldKind::Text)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "slack",
        settings: &[("token", "token"), ("username", "username"), ("icon", "icon"), ("apiURL", "apiUrl")],
        not_needed: &[("signingSecret", "used by Argo CD for incoming Slack requests only; not needed")],
        typed: false,
        written_order: false,
    });

    fn validate(c: &SlackConfig) -> Result<(), crate::deliver::kind::SettingsError> {
        if c.token.is_none() == c.webhook_url.is_none() {
            return Err(crate::deliver::kind::SettingsError::Rule("a slack service needs exactly one of token and webhookUrl".into()));
        }
        Ok(())
    }

    fn secrets(c: &SlackConfig) -> Vec<&str> {
        [&c.token, &c.webhook_url, &c.api_url].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(name: &str, c: &SlackConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(SlackClient::new(name, c, env)?))
    }
}
