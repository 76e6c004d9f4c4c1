//! The settings of a Telegram service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// `token` (`$telegram-token`, from @BotFather); `apiUrl` for a local Bot API server.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TelegramConfig {
    pub token: String,
    #[serde(default)]
    pub api_url: Option<String>,
}
