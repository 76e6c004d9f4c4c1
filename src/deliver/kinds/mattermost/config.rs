//! The settings of a Mattermost service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// Argo CD's settings: `apiURL` (the server), `token` (`$mattermost-token`),
/// `insecureSkipVerify`; and `caFile`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MattermostConfig {
    #[serde(rename = "apiURL")]
    pub api_url: String,
    pub token: String,
    #[serde(rename = "caFile")]
    pub ca_file: Option<String>,
    #[serde(rename = "insecureSkipVerify", default)]
    pub insecure_skip_verify: bool,
}
