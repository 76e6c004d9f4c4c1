//! The settings of a Opsgenie service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Argo CD's settings: `apiUrl` (`https://api.opsgenie.com`, or `api.eu.opsgenie.com`)
/// and `apiKeys`: recipient (a team) -> API integration key (`$opsgenie-key`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpsgenieConfig {
    #[serde(default)]
    pub api_url: Option<String>,
    pub api_keys: BTreeMap<String, String>,
}
