//! The settings of a Alertmanager service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

use crate::deliver::http::BasicAuth;

/// Argo CD's settings: `targets` (`host:port`), `scheme` (`http`), `apiPath`
/// (`/api/v2/alerts`), `basicAuth`, `bearerToken`, `insecureSkipVerify`; and `caFile`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AlertmanagerConfig {
    pub targets: Vec<String>,
    #[serde(default)]
    pub scheme: Option<String>,
    #[serde(default)]
    pub api_path: Option<String>,
    pub basic_auth: Option<BasicAuth>,
    pub bearer_token: Option<String>,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
