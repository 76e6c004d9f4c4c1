//! The settings of a Microsoft Sentinel service (`services.<name>` in driftwatch.yaml):
//! Azure Monitor's Logs Ingestion API through a data collection rule; `$key`
//! references are resolved when the client is built.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SentinelConfig {
    /// The logs ingestion endpoint: a data collection endpoint's
    /// (`https://<name>.<region>-1.ingest.monitor.azure.com`) or the rule's own.
    pub endpoint: String,
    /// The data collection rule's immutable id (`dcr-…`).
    pub dcr_immutable_id: String,
    /// The rule's input stream (`Custom-DriftwatchOcsf`; `deploy/sentinel/`).
    pub stream: String,
    /// The Entra ID tenant and the application (client) id that may send to the rule.
    pub tenant_id: String,
    pub client_id: String,
    /// The application's client secret, a `$secret`; or `federatedTokenFile`.
    pub client_secret: Option<String>,
    /// Workload identity federation: a file holding a token Entra ID trusts for the
    /// application (AKS workload identity projects one and names it in
    /// `AZURE_FEDERATED_TOKEN_FILE`), read at each token request.
    pub federated_token_file: Option<String>,
    /// Entra ID's authority; `https://login.microsoftonline.com` when absent (a
    /// sovereign cloud's otherwise).
    pub authority_host: Option<String>,
    /// The token's scope; `https://monitor.azure.com//.default` when absent (a
    /// sovereign cloud's: `https://monitor.azure.us//.default`,
    /// `https://monitor.azure.cn//.default`).
    pub scope: Option<String>,
    /// The records' schema: `ecs` (default), `ocsf` (1.8.0) or `ocsf-1.7.0`.
    #[serde(default)]
    pub format: crate::deliver::siem::Schema,
    /// Notifications per batch (1 to 100); 50 when absent. A batch goes in as many
    /// calls of at most 1 MB as it needs, cut between notifications.
    pub batch_size: Option<usize>,
    /// The endpoint's CA file and certificate check (Entra ID's is always checked).
    pub ca_file: Option<String>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
