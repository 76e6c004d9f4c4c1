//! The Grafana client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::GrafanaConfig;
use super::payload::annotation;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

pub struct GrafanaClient {
    http: reqwest::Client,
    url: String,
    key: Secret,
}

impl GrafanaClient {
    pub fn new(cfg: &GrafanaConfig, env: &Env) -> Result<GrafanaClient, crate::deliver::kind::BuildError> {
        Ok(GrafanaClient {
            http: http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?,
            url: format!("{}/annotations", cfg.api_url.trim_end_matches('/')),
            key: env.secret(&cfg.api_key)?,
        })
    }
}

impl GrafanaClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let req = self.http.post(&self.url).bearer_auth(self.key.expose()).json(&annotation(n, chrono::Utc::now()));
        let (outcome, _) = http::send(req).await;
        outcome
    }
}

impl Deliverer for GrafanaClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
