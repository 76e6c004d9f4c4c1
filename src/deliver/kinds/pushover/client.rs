//! The Pushover client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::PushoverConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

pub struct PushoverClient {
    http: reqwest::Client,
    url: String,
    token: Secret,
}

impl PushoverClient {
    pub fn new(cfg: &PushoverConfig, env: &Env) -> Result<PushoverClient, crate::deliver::kind::BuildError> {
        let base = cfg.api_url.clone().unwrap_or_else(|| "https://api.pushover.net".into());
        Ok(PushoverClient {
            http: env.http.clone(),
            url: format!("{}/1/messages.json", base.trim_end_matches('/')),
            token: env.secret(&cfg.token)?,
        })
    }
}

impl PushoverClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let mut body = message(n);
        body["token"] = serde_json::json!(self.token.expose());
        let (outcome, _) = http::send(self.http.post(&self.url).json(&body)).await;
        outcome
    }
}

impl Deliverer for PushoverClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
