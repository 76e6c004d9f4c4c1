//! The settings of a syslog service (`services.<name>` in driftwatch.yaml); `$key` references are resolved when the client is built.

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Udp,
    #[default]
    Tcp,
    Tls,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// The ECS record as JSON.
    #[default]
    #[serde(alias = "ecs")]
    Json,
    Cef,
    /// OCSF 1.8.0 records as JSON, one message each.
    Ocsf,
    /// The same in OCSF 1.7.0.
    #[serde(rename = "ocsf-1.7.0")]
    Ocsf1_7,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SyslogConfig {
    /// `host:port` of the receiver.
    pub address: String,
    #[serde(default)]
    pub protocol: Protocol,
    #[serde(default)]
    pub format: Format,
    /// Syslog facility number (0-23); 16 (local0) when absent.
    pub facility: Option<u8>,
    /// APP-NAME; `driftwatch` when absent.
    pub app_name: Option<String>,
    /// HOSTNAME; this machine's when absent.
    pub hostname: Option<String>,
    /// TLS server name to verify; the address's host when absent.
    pub server_name: Option<String>,
    /// Extra CA certificates (PEM) to trust for TLS.
    pub ca_file: Option<String>,
}
