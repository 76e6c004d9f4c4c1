//! The settings of an OTLP/HTTP logs service (`services.<name>` in driftwatch.yaml);
//! `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OtlpConfig {
    /// The collector's OTLP/HTTP endpoint (`https://otel-collector:4318`); logs go to
    /// `<url>/v1/logs` unless it already ends so. May be a `$secret`.
    pub url: String,
    /// Request headers (an `Authorization`, Grafana Cloud's or Honeycomb's key); values
    /// may reference `$secrets`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// More resource attributes (`deployment.environment.name: production`).
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
    /// The records' schema, each record a log record's body: `ecs` (default) or `ocsf`.
    #[serde(default)]
    pub format: crate::deliver::siem::Schema,
    /// `gzip` (default) or `none`.
    pub compression: Option<String>,
    /// Notifications per request (1 to 1000); 100 when absent.
    pub batch_size: Option<usize>,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
