//! The settings of an Elasticsearch or OpenSearch service (`services.<name>` in
//! driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ElasticsearchConfig {
    /// The cluster's base URL (`https://es.example.com:9200`); may be a `$secret`.
    pub url: String,
    /// An API key (`$es-api-key`: the base64 `id:api_key` Elasticsearch returns as
    /// `encoded`), sent as `Authorization: ApiKey <key>`.
    pub api_key: Option<String>,
    /// Basic authentication (both `$secret` references), instead of an API key.
    pub username: Option<String>,
    pub password: Option<String>,
    /// The data stream written to; `logs-driftwatch-default` when absent.
    pub data_stream: Option<String>,
    /// The records' schema: `ecs` (default) or `ocsf`.
    #[serde(default)]
    pub format: crate::deliver::siem::Schema,
    /// Notifications per `_bulk` request (1 to 500); 100 when absent.
    pub batch_size: Option<usize>,
    /// Bytes per `_bulk` request (1 KiB to 50 MiB); 5 MiB when absent. A batch over it
    /// goes as several requests.
    pub max_batch_bytes: Option<usize>,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// `logs-driftwatch-default`: the `logs` type, so Elasticsearch's built-in `logs-*-*`
/// index template and lifecycle apply unless `deploy/elasticsearch/` is installed.
pub const DEFAULT_DATA_STREAM: &str = "logs-driftwatch-default";
pub const DEFAULT_BATCH: usize = 100;
pub const DEFAULT_MAX_BYTES: usize = 5 * 1024 * 1024;
