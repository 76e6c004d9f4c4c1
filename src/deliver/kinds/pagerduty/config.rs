//! The settings of a PagerDuty service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PagerDutyConfig {
    /// Recipient name (as written in subscriptions) -> integration routing key
    /// (`$pagerduty-platform-key`).
    #[serde(default)]
    pub routing_keys: BTreeMap<String, String>,
    /// Events API base URL; `https://events.pagerduty.com` when absent.
    pub api_url: Option<String>,
}
