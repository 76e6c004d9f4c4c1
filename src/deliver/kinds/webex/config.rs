//! The settings of a Webex service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// Argo CD's setting `token` (`$webex-token`, a bot's); `apiUrl` defaults to
/// `https://webexapis.com`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebexConfig {
    pub token: String,
    #[serde(default)]
    pub api_url: Option<String>,
}
