//! Service configuration as written under `services:` in `driftwatch.yaml`, and the
//! step that turns a validated configuration into running delivery clients. What each
//! kind reads and builds is the kind's own (`deliver::kinds`); secret values are `$key`
//! references, resolved only when a client is built.

use serde_json::Value;

use super::deliverer::ServiceRuntime;
use super::env::Env;
use super::kind::{self, BuildError, SettingsError};
pub use super::kinds::ServiceConfig;
use super::outcome::DeliverySettings;
use crate::model::DestinationKind;

/// A service's configuration: its kind's settings and the common ones.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSpec {
    pub config: ServiceConfig,
    pub settings: DeliverySettings,
}

impl ServiceSpec {
    /// Builds the typed configuration of `kind` from the YAML mapping (without `type`).
    pub fn from_value(kind: DestinationKind, v: Value) -> Result<ServiceSpec, SettingsError> {
        let (rest, settings) = kind::split_common(v, super::kinds::limits(kind))?;
        let plain = plain_http_url(&rest, 0);
        let config = ServiceConfig::parse(kind, rest)?;
        // A secret sent over plain HTTP crosses the network in clear (review L-e).
        if let Some(url) = plain
            && config.strings().iter().any(|s| s.contains('$'))
        {
            return Err(SettingsError::Rule(format!(
                "{url:?} is http:// to a host that is not loopback, and this service sends a secret: use https://"
            )));
        }
        Ok(ServiceSpec { config, settings })
    }
}

/// The first `http://` URL to a host other than loopback among a service's settings
/// (any key, any depth: `url`, `apiUrl`, `webhookUrl`, a header's value).
fn plain_http_url(v: &Value, depth: usize) -> Option<String> {
    match v {
        // As the URL parser reads it (`http:host/x` and a tab inside the scheme are
        // `http://` too), not by its text.
        Value::String(s) => {
            let url = s.trim().parse::<reqwest::Url>().ok().filter(|u| u.scheme() == "http")?;
            let loopback = url.host_str().is_some_and(|h| {
                h == "localhost" || h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
            });
            (!loopback).then(|| crate::text::clip(s, 200))
        }
        Value::Object(m) if depth < 8 => m.values().find_map(|x| plain_http_url(x, depth + 1)),
        Value::Array(a) if depth < 8 => a.iter().find_map(|x| plain_http_url(x, depth + 1)),
        _ => None,
    }
}

/// Builds the client of one service; errors name what is missing (an unset secret, an
/// unreadable CA file), never a secret value.
pub fn build(name: &str, spec: &ServiceSpec, env: &Env) -> Result<ServiceRuntime, BuildError> {
    let deliverer = spec.config.client(name, env)?;
    Ok(kind::assemble(name, spec.config.kind(), deliverer, spec.settings, &spec.config.strings(), env))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Review L-e: a service that sends a secret to a plain `http://` URL off loopback is
    /// refused at load time; without a secret, or on loopback, or over https it loads.
    /// (Before: every one loaded.)
    #[test]
    fn a_secret_over_plain_http_is_refused_at_load() {
        let webhook = |url: &str, token: Option<&str>| {
            let mut v = json!({"url": url});
            if let Some(t) = token {
                v["bearerToken"] = json!(t);
            }
            ServiceSpec::from_value(DestinationKind::Webhook, v)
        };
        let refused = webhook("http://siem.example.com/ingest", Some("$siem-token")).unwrap_err();
        assert!(refused.to_string().contains("use https://"), "{refused}");
        assert!(webhook("http://siem.example.com/ingest", None).is_ok());
        assert!(webhook("http://127.0.0.1:8080/ingest", Some("$siem-token")).is_ok());
        assert!(webhook("https://siem.example.com/ingest", Some("$siem-token")).is_ok());
        // Spelled so that only the parser sees `http://` (a second review).
        assert!(webhook("http:siem.example.com/ingest", Some("$siem-token")).is_err());
        assert!(webhook("ht\ttp://siem.example.com/ingest", Some("$siem-token")).is_err());
    }
}
