//! The Mattermost client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).


use serde_json::json;

use super::config::MattermostConfig;
use super::payload::post;
use crate::deliver::http;
use crate::deliver::message_ref;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;
use crate::state::MessageRefs;

pub struct MattermostClient {
    http: reqwest::Client,
    base: String,
    token: Secret,
    service: String,
    state: MessageRefs,
}

impl MattermostClient {
    pub fn new(service: &str, cfg: &MattermostConfig, env: &Env) -> Result<MattermostClient, crate::deliver::kind::BuildError> {
        Ok(MattermostClient {
            http: http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?,
            base: format!("{}/api/v4/posts", cfg.api_url.trim_end_matches('/')),
            token: env.secret(&cfg.token)?,
            service: service.to_string(),
            state: env.refs.clone(),
        })
    }

    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let body = post(n);
        message_ref::post_or_edit(
            &self.state,
            &self.service,
            n,
            |r| {
                let mut patch = body.clone();
                patch["id"] = json!(r.ts);
                let req = self.http.put(format!("{}/{}", self.base, r.ts)).bearer_auth(self.token.expose()).json(&patch);
                async move { http::send(req).await.0 }
            },
            || http::send(self.http.post(&self.base).bearer_auth(self.token.expose()).json(&body)),
            |v| Some((n.destination.recipient.clone(), v["id"].as_str()?.to_string())),
        )
        .await
    }
}

impl Deliverer for MattermostClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
