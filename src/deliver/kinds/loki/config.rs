//! The settings of a Grafana Loki service (`services.<name>` in driftwatch.yaml);
//! `$key` references are resolved when the client is built.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LokiConfig {
    /// Loki's base URL (`https://loki.example.com:3100`; Grafana Cloud's
    /// `https://logs-prod-…grafana.net`); may be a `$secret`.
    pub url: String,
    /// The tenant (`X-Scope-OrgID`) of a multi-tenant Loki.
    pub tenant: Option<String>,
    /// Basic authentication (Grafana Cloud: the instance id and a token), `$secret`s.
    pub username: Option<String>,
    pub password: Option<String>,
    /// A bearer token instead (`$loki-token`).
    pub bearer_token: Option<String>,
    /// The records' schema: `ecs` (default) or `ocsf`; each is one log line.
    #[serde(default)]
    pub format: crate::deliver::siem::Schema,
    /// Notifications per push (1 to 500); 100 when absent.
    pub batch_size: Option<usize>,
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
