//! The PagerDuty client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::PagerDutyConfig;
use super::payload::event;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::recipients::PerRecipient;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;

pub struct PagerDutyClient {
    http: reqwest::Client,
    endpoint: String,
    /// Recipient -> routing key.
    routing_keys: PerRecipient,
    argocd_url: String,
}

impl PagerDutyClient {
    pub fn new(cfg: &PagerDutyConfig, env: &Env) -> Result<PagerDutyClient, crate::deliver::kind::BuildError> {
        let routing_keys = PerRecipient::resolve(&cfg.routing_keys, env, "routing key", "routingKeys")?;
        let base = cfg.api_url.clone().unwrap_or_else(|| "https://events.pagerduty.com".into());
        Ok(PagerDutyClient {
            http: env.http.clone(),
            endpoint: format!("{}/v2/enqueue", base.trim_end_matches('/')),
            routing_keys,
            argocd_url: env.context.get("argocdUrl").cloned().unwrap_or_default(),
        })
    }
}

impl PagerDutyClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let key = match self.routing_keys.get(n) {
            Ok(key) => key,
            Err(refused) => return refused,
        };
        let body = event(n, key.expose(), &self.argocd_url, chrono::Utc::now());
        let (outcome, _) = http::send(self.http.post(&self.endpoint).json(&body)).await;
        outcome
    }
}

impl Deliverer for PagerDutyClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
