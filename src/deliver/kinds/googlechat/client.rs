//! The Google Chat client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::GoogleChatConfig;
use super::payload::{message, url_with_thread};
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::recipients::PerRecipient;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;

pub struct GoogleChatClient {
    http: reqwest::Client,
    /// Recipient -> webhook URL.
    webhooks: PerRecipient,
}

impl GoogleChatClient {
    pub fn new(cfg: &GoogleChatConfig, env: &Env) -> Result<GoogleChatClient, crate::deliver::kind::BuildError> {
        let webhooks = PerRecipient::resolve(&cfg.webhooks, env, "webhook", "webhooks")?;
        Ok(GoogleChatClient { http: env.http.clone(), webhooks })
    }
}

impl GoogleChatClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let url = match self.webhooks.get(n) {
            Ok(url) => url,
            Err(refused) => return refused,
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
