//! Syslog (RFC 5424) over UDP, TCP with octet counting (RFC 6587) or TLS (RFC 5425);
//! the message is the notification's ECS record as JSON, or CEF.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::SyslogClient;
pub use config::{Format, Protocol, SyslogConfig};
pub use payload::{Header, cef, frame, rfc5424};

/// The Syslog kind: what the registry (`deliver::kinds`) needs of it.
pub struct Syslog;

impl crate::deliver::kind::Kind for Syslog {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Syslog;
    type Config = SyslogConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 50.0, burst: 100, concurrency: 1 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = crate::deliver::kind::NoSection;
    // Argo CD has no such service.
    const ARGO: Option<crate::deliver::kind::ArgoService> = None;

    fn secrets(_: &SyslogConfig) -> Vec<&str> {
        Vec::new()
    }

    fn client(_name: &str, c: &SyslogConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(SyslogClient::new(c, env)?))
    }
}
