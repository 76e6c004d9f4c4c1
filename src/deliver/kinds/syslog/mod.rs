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

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Syslog kind: what the registry (`deliver::kinds`) needs of it.
pub struct Syslog;

impl Kind for Syslog {
    const KIND: DestinationKind = DestinationKind::Syslog;
    type Config = SyslogConfig;
    const LIMITS: Limits = Limits { per_second: 50.0, burst: 100, concurrency: 1 };
    const ENCODE: Encoder = payload::encode;
    // A SIEM: one ECS record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &SyslogConfig) -> Result<(), SettingsError> {
        match c.facility {
            Some(n) if !(0..=23).contains(&n) => Err(SettingsError::Rule(format!("facility must be from 0 to 23, not {n}"))),
            _ => Ok(()),
        }
    }

    fn secrets(_: &SyslogConfig) -> Vec<&str> {
        Vec::new()
    }

    fn client(_name: &str, c: &SyslogConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(SyslogClient::new(c, env)?))
    }
}
