//! The settings of a Google Security Operations service (`services.<name>` in
//! driftwatch.yaml): the Chronicle API's `logs:import` into one instance and log type;
//! `$key` references are resolved when the client is built.

use serde::Deserialize;

use crate::deliver::siem::Schema;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecopsConfig {
    /// The region of the instance's Chronicle API endpoint (`us`, `europe`,
    /// `europe-west2`…): the API is at `https://<region>-chronicle.googleapis.com`.
    /// Or `endpoint`.
    pub region: Option<String>,
    /// The Chronicle API's base URL, instead of `region`'s (a regional endpoint
    /// `https://chronicle.<location>.rep.googleapis.com`, a private one).
    pub endpoint: Option<String>,
    /// The Google Cloud project the instance is bound to (its id or number).
    pub project: String,
    /// The instance's location (`us`, `eu`, `europe-west2`…), as its resource name
    /// `projects/<project>/locations/<location>/instances/<instance>` says.
    pub location: String,
    /// The instance's id (the SecOps customer id).
    pub instance: String,
    /// The log type the records are imported as; `DRIFTWATCH_OCSF` when absent (a
    /// custom log type created in SecOps; docs/destinations.md).
    pub log_type: Option<String>,
    /// A forwarder's id: the imported logs name it
    /// (`projects/…/instances/…/forwarders/<forwarder>`); none when absent.
    pub forwarder: Option<String>,
    /// A service account key (the JSON key file Google hands out), as a `$secret`; or
    /// `workloadIdentity`.
    pub credentials: Option<String>,
    /// The token of the workload's own service account, from the metadata server
    /// (GKE Workload Identity, a Compute Engine VM's attached account).
    #[serde(default)]
    pub workload_identity: bool,
    /// The metadata server, with `workloadIdentity`; `http://metadata.google.internal`
    /// when absent.
    pub metadata_url: Option<String>,
    /// The records' schema: `ocsf` (1.8.0, the default), `ocsf-1.7.0` or `ecs`.
    #[serde(default = "ocsf")]
    pub format: Schema,
    /// Notifications per batch (1 to 1000); 100 when absent. A batch goes in as many
    /// calls of at most 1 MB as it needs, cut between notifications.
    pub batch_size: Option<usize>,
    /// The endpoint's CA file and certificate check (the token endpoint's is always
    /// checked).
    pub ca_file: Option<String>,
    /// Not checking the endpoint's certificate (a test set-up); `false` when absent.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// OCSF (1.8.0) unless `format` says otherwise: the custom log type's parser is
/// written for one schema, and OCSF's records say their class (a finding, an API
/// activity) for it to map.
fn ocsf() -> Schema {
    Schema::Ocsf
}
