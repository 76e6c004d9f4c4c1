//! The settings of a GitHub service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// Argo CD's settings (`appID`, `installationID`, `privateKey`, `enterpriseBaseURL`),
/// or `token` (a personal access or fine-grained token) instead of the App.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GitHubConfig {
    #[serde(rename = "appID", default, deserialize_with = "string_or_number")]
    pub app_id: Option<String>,
    #[serde(rename = "installationID", default, deserialize_with = "string_or_number")]
    pub installation_id: Option<String>,
    /// PEM (`$github-private-key`).
    #[serde(rename = "privateKey")]
    pub private_key: Option<String>,
    /// `$github-token`, instead of the App.
    pub token: Option<String>,
    /// `https://github.example.com/api/v3` for GitHub Enterprise Server.
    #[serde(rename = "enterpriseBaseURL")]
    pub enterprise_base_url: Option<String>,
    /// The repositories statuses, deployments and comments may be written to
    /// (`owner/name` or `owner/*`): the repository comes from the Application's
    /// `spec.source.repoURL`, which whoever may patch the Application writes. All the
    /// App's (or token's) repositories when absent.
    pub repositories: Option<Vec<String>>,
}

/// Argo CD's examples write the ids as numbers (`appID: 12345`).
fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(match v {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        Some(other) => return Err(serde::de::Error::custom(format!("expected an id, found {other}"))),
    })
}
