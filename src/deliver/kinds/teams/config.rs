//! The settings of a Microsoft Teams service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `recipientUrls`: recipient name -> incoming-webhook URL (a secret: `$teams-ops-url`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TeamsConfig {
    pub recipient_urls: BTreeMap<String, String>,
}
