//! The Webex client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).


use serde_json::json;

use super::config::WebexConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::message_ref;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;
use crate::state::MessageRefs;

pub struct WebexClient {
    http: reqwest::Client,
    url: String,
    token: Secret,
    service: String,
    state: MessageRefs,
}

impl WebexClient {
    pub fn new(service: &str, cfg: &WebexConfig, env: &Env) -> Result<WebexClient, crate::deliver::kind::BuildError> {
        let base = cfg.api_url.clone().unwrap_or_else(|| "https://webexapis.com".into());
        Ok(WebexClient {
            http: env.http.clone(),
            url: format!("{}/v1/messages", base.trim_end_matches('/')),
            token: env.secret(&cfg.token)?,
            service: service.to_string(),
            state: env.refs.clone(),
        })
    }

    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let body = message(n);
        message_ref::post_or_edit(
            &self.state,
            &self.service,
            n,
            |r| {
                // Webex edits a message in its room.
                let edit = json!({"roomId": r.channel, "markdown": body["markdown"]});
                let req = self.http.put(format!("{}/{}", self.url, r.ts)).bearer_auth(self.token.expose()).json(&edit);
                async move { http::send(req).await.0 }
            },
            || http::send(self.http.post(&self.url).bearer_auth(self.token.expose()).json(&body)),
            |v| Some((v["roomId"].as_str()?.to_string(), v["id"].as_str()?.to_string())),
        )
        .await
    }
}

impl Deliverer for WebexClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
