//! The New Relic client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::NewRelicConfig;
use super::payload::deployment;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

pub struct NewRelicClient {
    http: reqwest::Client,
    base: String,
    key: Secret,
}

impl NewRelicClient {
    pub fn new(cfg: &NewRelicConfig, env: &Env) -> Result<NewRelicClient, crate::deliver::kind::BuildError> {
        let base = cfg.api_url.clone().unwrap_or_else(|| "https://api.newrelic.com".into());
        Ok(NewRelicClient { http: env.http.clone(), base: base.trim_end_matches('/').to_string(), key: env.secret(&cfg.api_key)? })
    }
}

impl NewRelicClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let id = n.destination.recipient.trim();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Outcome::Permanent(format!("the recipient {id:?} is not a New Relic application id"));
        }
        let url = format!("{}/v2/applications/{id}/deployments.json", self.base);
        let req = self.http.post(url).header("X-Api-Key", self.key.expose()).json(&deployment(n));
        let (outcome, _) = http::send(req).await;
        outcome
    }
}

impl Deliverer for NewRelicClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
