//! The Teams workflow client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::TeamsWorkflowsConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::recipients::PerRecipient;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;

pub struct TeamsWorkflowsClient {
    http: reqwest::Client,
    /// Recipient -> workflow URL.
    urls: PerRecipient,
}

impl TeamsWorkflowsClient {
    pub fn new(cfg: &TeamsWorkflowsConfig, env: &Env) -> Result<TeamsWorkflowsClient, crate::deliver::kind::BuildError> {
        let urls = PerRecipient::resolve(&cfg.recipient_urls, env, "workflow URL", "recipientUrls")?;
        Ok(TeamsWorkflowsClient { http: env.http.clone(), urls })
    }
}

impl TeamsWorkflowsClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let url = match self.urls.get(n) {
            Ok(url) => url,
            Err(refused) => return refused,
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
