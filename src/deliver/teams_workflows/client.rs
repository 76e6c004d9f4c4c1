//! The Teams workflow client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::collections::BTreeMap;

use super::config::TeamsWorkflowsConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::services::Env;
use crate::deliver::worker::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

pub struct TeamsWorkflowsClient {
    http: reqwest::Client,
    urls: BTreeMap<String, Secret>,
}

impl TeamsWorkflowsClient {
    pub fn new(cfg: &TeamsWorkflowsConfig, env: &Env) -> Result<TeamsWorkflowsClient, String> {
        let mut urls = BTreeMap::new();
        for (recipient, url) in &cfg.recipient_urls {
            urls.insert(recipient.clone(), env.secrets.resolve(url).map_err(|e| e.to_string())?);
        }
        Ok(TeamsWorkflowsClient { http: env.http.clone(), urls })
    }
}

impl TeamsWorkflowsClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let Some(url) = self.urls.get(&n.destination.recipient) else {
            return Outcome::Permanent(format!(
                "no workflow URL for recipient {:?} (services.<name>.recipientUrls)",
                n.destination.recipient
            ));
        };
        let (outcome, _) = http::send(self.http.post(url.expose()).json(&message(n))).await;
        outcome
    }
}

impl Deliverer for TeamsWorkflowsClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
