//! The settings of a signed webhook service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignedWebhookConfig {
    pub url: String,
    /// The HMAC key (`$siem-hmac-key`).
    pub secret: String,
    /// Extra headers (values may reference `$secrets`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The records' schema: `ecs` (default, one record per request) or `ocsf` (a
    /// JSON array of the notification's records per request).
    #[serde(default)]
    pub format: crate::deliver::siem::Schema,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
