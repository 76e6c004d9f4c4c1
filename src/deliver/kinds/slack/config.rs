//! The settings of a Slack service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// Slack: a bot token for the Web API, or an incoming-webhook URL.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SlackConfig {
    /// Bot token (`$slack-token`).
    pub token: Option<String>,
    /// Incoming-webhook URL (`$slack-webhook`), instead of a token. Messages cannot be
    /// updated in this mode: a resolve is a new message.
    pub webhook_url: Option<String>,
    /// Web API base URL; `https://slack.com/api` when absent.
    pub api_url: Option<String>,
    pub username: Option<String>,
    /// An emoji (`:robot_face:`) or an image URL.
    pub icon: Option<String>,
}
