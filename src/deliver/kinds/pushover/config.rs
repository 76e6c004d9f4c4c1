//! The settings of a Pushover service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// `token`: the application's API token (`$pushover-token`); `apiUrl` defaults to
/// `https://api.pushover.net`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PushoverConfig {
    pub token: String,
    #[serde(default)]
    pub api_url: Option<String>,
}
