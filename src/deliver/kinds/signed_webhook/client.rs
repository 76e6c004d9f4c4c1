//! The signed webhook client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::collections::BTreeMap;

use super::config::SignedWebhookConfig;
use super::payload::signed_request;
use crate::deliver::ecs::Origin;
use crate::deliver::siem::Schema;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

pub struct SignedWebhookClient {
    http: reqwest::Client,
    url: String,
    key: Secret,
    headers: BTreeMap<String, String>,
    origin: Origin,
    schema: Schema,
}

impl SignedWebhookClient {
    pub fn new(cfg: &SignedWebhookConfig, env: &Env) -> Result<SignedWebhookClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let headers = env.secrets.resolve_map(&cfg.headers)?;
        Ok(SignedWebhookClient {
            http,
            url: env.secret(&cfg.url)?.expose().to_string(),
            key: env.secret(&cfg.secret)?,
            headers,
            origin: env.origin(),
            schema: cfg.format,
        })
    }
}

impl SignedWebhookClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let now = chrono::Utc::now();
        let mut records = self.schema.records(n, &self.origin, now);
        // ECS: the record; OCSF: the notification's records as one array, signed whole.
        let record = match self.schema {
            Schema::Ecs if records.len() == 1 => records.remove(0),
            _ => serde_json::Value::Array(records),
        };
        let r = signed_request(&self.url, self.key.expose().as_bytes(), &record, now.timestamp());
        let mut headers = self.headers.clone();
        headers.extend(r.headers);
        crate::deliver::http::add_idempotency_key(&mut headers, n);
        let mut req = self.http.post(&r.url).body(r.body);
        for (k, v) in &headers {
            req = req.header(k, v);
        }
        http::send(req).await.0
    }
}

impl Deliverer for SignedWebhookClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
