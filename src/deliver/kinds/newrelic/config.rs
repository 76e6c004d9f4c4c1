//! The settings of a New Relic service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// Argo CD's settings: `apiURL` (`https://api.newrelic.com`, or the EU one) and
/// `apiKey` (`$newrelic-apiKey`, a user key).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NewRelicConfig {
    #[serde(rename = "apiURL", default)]
    pub api_url: Option<String>,
    #[serde(rename = "apiKey")]
    pub api_key: String,
}
