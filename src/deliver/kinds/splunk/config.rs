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
    /// The records' schema: `ecs` (default) or `ocsf`.
    #[serde(default)]
    pub format: crate::deliver::siem::Schema,
    /// Events per request (1 to 100); 50 when absent.
    pub batch_size: Option<usize>,
    /// Indexer acknowledgement: a delivery counts only once HEC's ack endpoint says the
    /// events are indexed (the token must have it turned on).
    #[serde(default)]
    pub use_ack: bool,
    /// How long an attempt waits for the acknowledgement (1s to 10m); 8s when absent.
    /// An attempt that gets none is retried with the same event ids; keep the
    /// service's `timeout` above it.
    pub ack_timeout: Option<crate::source::ConfigDuration>,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
