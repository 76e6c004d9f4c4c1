//! Microsoft Sentinel through Azure Monitor's Logs Ingestion API (the HTTP Data
//! Collector API it replaces reached its end of support on 2026-09-14): the records
//! (ECS or OCSF) posted to a data collection rule's stream with an Entra ID
//! client-credentials token, which the rule writes to a Log Analytics table Sentinel
//! reads. `deploy/sentinel/` has the table and rule definitions for both schemas.

mod client;
mod config;
#[cfg(test)]
mod tests;
mod token;

pub use client::{API_VERSION, MAX_CALL_BYTES, SentinelClient};
pub use config::SentinelConfig;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// This kind's encoder: the rendered message (the records are built from the
/// notification, not from a template).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}

/// The Sentinel kind: what the registry (`deliver::kinds`) needs of it.
pub struct Sentinel;

impl Kind for Sentinel {
    const KIND: DestinationKind = DestinationKind::Sentinel;
    type Config = SentinelConfig;
    const LIMITS: Limits = Limits { per_second: 20.0, burst: 50, concurrency: 2 };
    const ENCODE: Encoder = encode;
    // A SIEM: one record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &SentinelConfig) -> Result<(), SettingsError> {
        let rule = |m: String| Err(SettingsError::Rule(m));
        // A batch the rule refuses is sent again one notification at a time, four at
        // once, within the attempt's timeout: kept small enough for that.
        if let Some(n) = c.batch_size.filter(|n| !(1..=100).contains(n)) {
            return rule(format!("batchSize must be from 1 to 100, not {n}"));
        }
        // They go into the URLs' paths: nothing that would end a path segment.
        for (key, v) in [("tenantId", &c.tenant_id), ("clientId", &c.client_id), ("dcrImmutableId", &c.dcr_immutable_id), ("stream", &c.stream)] {
            if !v.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.')) {
                return rule(format!("{key} may hold only letters, digits, '-', '_' and '.'"));
            }
        }
        if !c.dcr_immutable_id.starts_with("dcr-") {
            return rule(format!("dcrImmutableId is the rule's immutable id (dcr-…), not {:?}", c.dcr_immutable_id));
        }
        if !(c.stream.starts_with("Custom-") || c.stream.starts_with("Microsoft-")) {
            return rule(format!("stream is one of the rule's input streams (Custom-…), not {:?}", c.stream));
        }
        if c.tenant_id.trim().is_empty() || c.client_id.trim().is_empty() {
            return rule("tenantId and clientId are required".into());
        }
        // A token or a federated assertion goes to both: never in clear.
        for (key, url) in [("endpoint", Some(&c.endpoint)), ("authorityHost", c.authority_host.as_ref())] {
            if let Some(why) = url.and_then(|u| crate::deliver::http::not_https(u)) {
                return rule(format!("{key} {why}"));
            }
        }
        match (&c.client_secret, &c.federated_token_file) {
            (Some(_), Some(_)) => rule("set clientSecret or federatedTokenFile, not both".into()),
            (None, None) => rule("clientSecret (a $secret) or federatedTokenFile is required".into()),
            _ => Ok(()),
        }
    }

    fn secrets(c: &SentinelConfig) -> Vec<&str> {
        c.client_secret.iter().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &SentinelConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(SentinelClient::new(c, env)?))
    }
}
