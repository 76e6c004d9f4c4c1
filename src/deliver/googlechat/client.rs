//! The Google Chat client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::collections::BTreeMap;

use super::config::GoogleChatConfig;
use super::payload::{message, url_with_thread};
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::services::Env;
use crate::deliver::worker::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

pub struct GoogleChatClient {
    http: reqwest::Client,
    /// Recipient -> webhook URL.
    webhooks: BTreeMap<String, Secret>,
}

impl GoogleChatClient {
    pub fn new(cfg: &GoogleChatConfig, env: &Env) -> Result<GoogleChatClient, String> {
        let mut webhooks = BTreeMap::new();
        for (recipient, url) in &cfg.webhooks {
            webhooks.insert(recipient.clone(), env.secrets.resolve(url).map_err(|e| e.to_string())?);
        }
        Ok(GoogleChatClient { http: env.http.clone(), webhooks })
    }
}

impl GoogleChatClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let Some(url) = self.webhooks.get(&n.destination.recipient) else {
            return Outcome::Permanent(format!("no webhook for recipient {:?} (services.<name>.webhooks)", n.destination.recipient));
        };
        let req = self.http.post(url_with_thread(url.expose(), n)).json(&message(n));
        let (outcome, _) = http::send(req).await;
        outcome
    }
}

impl Deliverer for GoogleChatClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
