//! Generic HTTP webhook: the template's `webhook.<service>` fields (method, path,
//! headers, body) sent to the service's URL, with basic or bearer auth.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::WebhookClient;
pub use config::WebhookConfig;
pub use payload::request;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Imported, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Webhook kind: what the registry (`deliver::kinds`) needs of it.
pub struct Webhook;

impl Kind for Webhook {
    const KIND: DestinationKind = DestinationKind::Webhook;
    type Config = WebhookConfig;
    const LIMITS: Limits = Limits { per_second: 10.0, burst: 20, concurrency: 16 };
    const ENCODE: Encoder = payload::encode;
    type Template = std::collections::BTreeMap<String, template::WebhookDef>;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "webhook",
        settings: &[("url", "url"), ("basicAuth", "basicAuth"), ("insecureSkipVerify", "insecureSkipVerify"), ("headers", "headers")],
        not_needed: &[
            ("retryWaitMin", "driftwatch retries with its own backoff (see `retry:` in destinations.md)"),
            ("retryWaitMax", "driftwatch retries with its own backoff (see `retry:` in destinations.md)"),
            ("retryMax", "driftwatch retries with its own backoff (see `retry:` in destinations.md)"),
        ],
        typed: true,
        written_order: false,
    });

    /// Argo CD's headers are a list of `{name, value}`; driftwatch's a map.
    fn import(service: &ArgoService, argo: &Map<String, Value>) -> Imported {
        let mut out = service.convert(argo);
        if let Some(list) = argo.get("headers").and_then(serde_json::Value::as_array) {
            let mut headers = serde_json::Map::new();
            for h in list {
                if let (Some(n), Some(v)) = (h.get("name").and_then(serde_json::Value::as_str), h.get("value")) {
                    let v = v.as_str().map_or_else(|| serde_json::to_string_pretty(v).unwrap_or_default(), str::to_string);
                    headers.insert(n.into(), serde_json::json!(v));
                }
            }
            out.settings.insert("headers".into(), serde_json::Value::Object(headers));
        }
        out
    }

    fn secrets(c: &WebhookConfig) -> Vec<&str> {
        let mut out = vec![c.url.as_str()];
        out.extend(c.headers.values().map(String::as_str));
        out.extend(c.bearer_token.as_deref());
        if let Some(b) = &c.basic_auth {
            out.push(&b.password);
        }
        out
    }

    fn client(_name: &str, c: &WebhookConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(WebhookClient::new(c, &env.secrets, &env.http)?))
    }
}
