//! The settings of a Grafana service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// Argo CD's settings: `apiUrl` (`https://grafana.example.com/api`), `apiKey`
/// (`$grafana-token`), `insecureSkipVerify`; and `caFile`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrafanaConfig {
    pub api_url: String,
    pub api_key: String,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
