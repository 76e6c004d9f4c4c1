//! The settings of a e-mail (SMTP) service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    None,
    #[default]
    Starttls,
    Implicit,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EmailConfig {
    pub host: String,
    /// 587 for STARTTLS, 465 for implicit TLS, 25 otherwise, when absent.
    pub port: Option<u16>,
    pub from: String,
    pub username: Option<String>,
    /// `$smtp-password`.
    pub password: Option<String>,
    #[serde(default)]
    pub tls: TlsMode,
    /// Extra CA certificates (PEM) to trust, for a private CA.
    pub ca_file: Option<String>,
}
