//! Google Security Operations (Chronicle) through the Chronicle API's `logs.import`:
//! the records (OCSF by default, or ECS) imported as log entries of one log type of
//! one instance, with a Google access token from a service account key or the
//! metadata server (GKE Workload Identity). The log type is a custom one created in
//! SecOps (`DRIFTWATCH_OCSF` by default), whose parser maps the records to UDM
//! (docs/destinations.md).

mod client;
mod config;
mod payload;
#[cfg(test)]
mod tests;
mod token;

pub use client::{API_VERSION, LOG_TYPE, SecopsClient};
pub use config::SecopsConfig;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::http::not_https;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// Why `v`, which goes into the API's URL (a host name's first label for `region`, a
/// path segment for the others), may not: empty, too long, not starting with a letter
/// or digit (`..` would climb the path), or a character other than ASCII letters,
/// digits and `extra`.
fn not_a_name(key: &str, v: &str, extra: &[char]) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || extra.contains(&c);
    let fits = v.len() <= 128 && v.starts_with(|c: char| c.is_ascii_alphanumeric()) && v.chars().all(allowed);
    let listed: String = extra.iter().map(|c| format!(", '{c}'")).collect();
    (!fits).then(|| format!("{key} must be 1 to 128 letters, digits{listed} (a letter or digit first), not {v:?}"))
}

/// The Google Security Operations kind: what the registry (`deliver::kinds`) needs of it.
pub struct Secops;

impl Kind for Secops {
    const KIND: DestinationKind = DestinationKind::Secops;
    type Config = SecopsConfig;
    const LIMITS: Limits = Limits { per_second: 20.0, burst: 50, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    // A SIEM: one record per notification, also on grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &SecopsConfig) -> Result<(), SettingsError> {
        let rule = |m: String| Err(SettingsError::Rule(m));
        // Nothing that would end a host label or a path segment, or add a query.
        let names = [
            ("region", c.region.as_deref(), &['-'][..]),
            ("project", Some(c.project.as_str()), &['-', '.', ':'][..]),
            ("location", Some(c.location.as_str()), &['-'][..]),
            ("instance", Some(c.instance.as_str()), &['-'][..]),
            ("logType", c.log_type.as_deref(), &['_'][..]),
            ("forwarder", c.forwarder.as_deref(), &['-'][..]),
        ];
        if let Some(why) = names.iter().find_map(|(key, v, extra)| v.and_then(|v| not_a_name(key, v, extra))) {
            return rule(why);
        }
        match (&c.region, &c.endpoint) {
            (Some(_), Some(_)) => return rule("set region or endpoint, not both".into()),
            (None, None) => return rule("region (the Chronicle API endpoint's: us, europe, …) or endpoint is required".into()),
            (None, Some(endpoint)) => {
                // It carries the token: never in clear.
                if let Some(why) = not_https(endpoint) {
                    return rule(format!("endpoint {why}"));
                }
            }
            (Some(_), None) => {}
        }
        // A batch the API refuses is sent again one notification at a time, four at
        // once: a large batch makes that slow, a batch past a thousand too slow.
        if let Some(n) = c.batch_size.filter(|n| !(1..=1000).contains(n)) {
            return rule(format!("batchSize must be from 1 to 1000, not {n}"));
        }
        if let Some(url) = &c.metadata_url {
            if !c.workload_identity {
                return rule("metadataUrl goes with workloadIdentity: true".into());
            }
            if !reqwest::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
                return rule(format!("metadataUrl must be an http:// or https:// URL, not {url:?}"));
            }
        }
        match (&c.credentials, c.workload_identity) {
            (Some(_), true) => rule("set credentials or workloadIdentity, not both".into()),
            (None, false) => rule("credentials (a service account key, as a $secret) or workloadIdentity: true is required".into()),
            // A key file written into driftwatch.yaml would be logged and stored as
            // configuration: it must come from the secrets.
            (Some(key), false) if !key.starts_with('$') => rule("credentials must be a $secret reference to the key file".into()),
            _ => Ok(()),
        }
    }

    fn secrets(c: &SecopsConfig) -> Vec<&str> {
        c.credentials.iter().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &SecopsConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(SecopsClient::new(c, env)?))
    }
}
