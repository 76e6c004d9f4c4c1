//! The settings of a Splunk HEC service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SplunkConfig {
    /// The HEC base URL (`https://splunk.example.com:8088`).
    pub url: String,
    /// The HEC token (`$splunk-hec-token`).
    pub token: String,
    pub index: Option<String>,
    /// `driftwatch` when absent.
    pub source: Option<String>,
    /// `driftwatch:notification` when absent.
    pub sourcetype: Option<String>,
    /// This machine's host name when absent.
    pub host: Option<String>,
    /// Events per request (1 to 100); 50 when absent.
    pub batch_size: Option<usize>,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
