//! The Splunk HEC client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::SplunkConfig;
use super::payload::{EnvelopeMeta, batch_body, classify, envelope};
use crate::deliver::ecs::{self, Origin};
use crate::deliver::http;
use crate::deliver::outcome::{Outcome, parse_retry_after};
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer};
use crate::model::Notification;
use crate::secret::Secret;

pub struct SplunkClient {
    http: reqwest::Client,
    endpoint: String,
    token: Secret,
    meta: EnvelopeMeta,
    batch: usize,
    origin: Origin,
}

impl SplunkClient {
    pub fn new(cfg: &SplunkConfig, env: &Env) -> Result<SplunkClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let base = env.secret(&cfg.url)?.expose().trim_end_matches('/').to_string();
        Ok(SplunkClient {
            http,
            endpoint: format!("{base}/services/collector/event"),
            token: env.secret(&cfg.token)?,
            meta: EnvelopeMeta {
                host: cfg.host.clone().unwrap_or_else(crate::deliver::hostname),
                source: cfg.source.clone().unwrap_or_else(|| "driftwatch".into()),
                sourcetype: cfg.sourcetype.clone().unwrap_or_else(|| "driftwatch:notification".into()),
                index: cfg.index.clone(),
            },
            batch: cfg.batch_size.unwrap_or(50),
            origin: env.origin(),
        })
    }
}

impl Deliverer for SplunkClient {
    fn max_batch(&self) -> usize {
        self.batch
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let envelopes: Vec<_> = batch.iter().map(|n| envelope(&self.meta, ecs::record(n, &self.origin, now), now)).collect();
            let mut req = self
                .http
                .post(&self.endpoint)
                .header("Authorization", format!("Splunk {}", self.token.expose()))
                .header("Content-Type", "application/json");
            // HEC has no idempotency of its own: each event carries its delivery's key
            // as `event.id`, and a request of one event (the batch a crash repeats is
            // not always the same) carries it as `Idempotency-Key` for a proxy that
            // honours it.
            if let [n] = batch
                && let Some(key) = &n.idempotency_key
            {
                req = req.header(crate::deliver::http::IDEMPOTENCY_KEY, key);
            }
            let req = req.body(batch_body(&envelopes));
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| parse_retry_after(v, chrono::Utc::now()));
                    let body = http::read_body(resp).await;
                    classify(status, retry_after, &body)
                }
                Err(e) => http::transport_error(e),
            }
        })
    }
}
