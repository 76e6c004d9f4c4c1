//! The settings of a Teams workflow service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `recipientUrls`: recipient name -> workflow URL (a secret: it carries a signature).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TeamsWorkflowsConfig {
    pub recipient_urls: BTreeMap<String, String>,
}
