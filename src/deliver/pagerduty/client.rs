//! The PagerDuty client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::collections::BTreeMap;

use super::config::PagerDutyConfig;
use super::payload::event;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::services::Env;
use crate::deliver::worker::{BoxFuture, Deliverer};
use crate::model::Notification;
use crate::secret::Secret;

pub struct PagerDutyClient {
    http: reqwest::Client,
    endpoint: String,
    /// Recipient -> routing key.
    routing_keys: BTreeMap<String, Secret>,
    argocd_url: String,
}

impl PagerDutyClient {
    pub fn new(cfg: &PagerDutyConfig, env: &Env) -> Result<PagerDutyClient, String> {
        let mut routing_keys = BTreeMap::new();
        for (recipient, key) in &cfg.routing_keys {
            routing_keys.insert(recipient.clone(), env.secrets.resolve(key).map_err(|e| e.to_string())?);
        }
        let base = cfg.api_url.clone().unwrap_or_else(|| "https://events.pagerduty.com".into());
        Ok(PagerDutyClient {
            http: env.http.clone(),
            endpoint: format!("{}/v2/enqueue", base.trim_end_matches('/')),
            routing_keys,
            argocd_url: env.context.get("argocdUrl").cloned().unwrap_or_default(),
        })
    }
}

impl Deliverer for PagerDutyClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            for n in batch {
                let Some(key) = self.routing_keys.get(&n.destination.recipient) else {
                    return Outcome::Permanent(format!(
                        "no routing key for recipient {:?} (services.<name>.routingKeys)",
                        n.destination.recipient
                    ));
                };
                let body = event(n, key.expose(), &self.argocd_url, chrono::Utc::now());
                let (outcome, _) = http::send(self.http.post(&self.endpoint).json(&body)).await;
                if outcome != Outcome::Delivered {
                    return outcome;
                }
            }
            Outcome::Delivered
        })
    }
}
