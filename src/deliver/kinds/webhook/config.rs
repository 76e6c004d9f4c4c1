//! The settings of a webhook service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::deliver::http::BasicAuth;

/// A generic HTTP webhook; templates add method, path, headers and body.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookConfig {
    /// Base URL; the template's `path` is appended.
    pub url: String,
    /// Headers sent with every request (values may reference `$secrets`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub basic_auth: Option<BasicAuth>,
    /// `$webhook-token`, sent as `Authorization: Bearer …`.
    pub bearer_token: Option<String>,
    /// Extra CA certificates (PEM) to trust, for a private CA.
    pub ca_file: Option<String>,
    /// TLS certificates are verified unless this is set.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
