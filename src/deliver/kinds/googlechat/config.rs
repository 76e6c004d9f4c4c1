//! The settings of a Google Chat service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `webhooks`: recipient (a space name) -> webhook URL (a secret: `$chat-space-url`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GoogleChatConfig {
    pub webhooks: BTreeMap<String, String>,
}
