//! The Microsoft Teams client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::TeamsConfig;
use super::payload::card;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::recipients::PerRecipient;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;

pub struct TeamsClient {
    http: reqwest::Client,
    /// Recipient -> webhook URL.
    urls: PerRecipient,
}

impl TeamsClient {
    pub fn new(cfg: &TeamsConfig, env: &Env) -> Result<TeamsClient, crate::deliver::kind::BuildError> {
        let urls = PerRecipient::resolve(&cfg.recipient_urls, env, "webhook URL", "recipientUrls")?;
        Ok(TeamsClient { http: env.http.clone(), urls })
    }
}

impl TeamsClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let url = match self.urls.get(n) {
            Ok(url) => url,
            Err(refused) => return refused,
        };
        let (outcome, body) = http::send(self.http.post(url.expose()).json(&card(n))).await;
        // A retired or misconfigured connector answers 200 with the error as text.
        if outcome == Outcome::Delivered
            && let Some(b) = body.filter(|b| b.contains("delivery failed"))
        {
            return Outcome::Permanent(format!("Teams refused the card: {}", b.chars().take(300).collect::<String>()));
        }
        outcome
    }
}

impl Deliverer for TeamsClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
