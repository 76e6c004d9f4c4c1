//! The settings of a Rocket.Chat service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// Argo CD's settings (`serverUrl`, `email`, `password`), or a personal access token
/// (`userId`, `token`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RocketChatConfig {
    pub server_url: String,
    pub email: Option<String>,
    pub password: Option<String>,
    pub user_id: Option<String>,
    pub token: Option<String>,
}
