//! The Elasticsearch / OpenSearch client: each batch's records as `create` actions of
//! `_bulk` requests into the data stream, and each notification's outcome from its
//! documents' answers.

use super::config::{DEFAULT_BATCH, DEFAULT_DATA_STREAM, DEFAULT_MAX_BYTES, ElasticsearchConfig};
use super::payload::{bodies, classify, docs, per_notification};
use crate::deliver::deliverer::{BoxFuture, Deliverer};
use crate::deliver::ecs::Origin;
use crate::deliver::env::Env;
use crate::deliver::http::{self, Auth};
use crate::deliver::outcome::Outcome;
use crate::deliver::siem::Schema;
use crate::model::Notification;

pub struct ElasticsearchClient {
    http: reqwest::Client,
    /// `<url>/<data stream>/_bulk`, answering only what is read of it.
    endpoint: String,
    auth: Auth,
    schema: Schema,
    batch: usize,
    max_bytes: usize,
    origin: Origin,
}

/// Only what the outcome is read from: the error flag and each item's status, type
/// and reason (a large batch's answer stays small).
const FILTER: &str = "filter_path=errors,items.*.status,items.*.error.type,items.*.error.reason";

impl ElasticsearchClient {
    pub fn new(cfg: &ElasticsearchConfig, env: &Env) -> Result<ElasticsearchClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let base = env.secret(&cfg.url)?.expose().trim_end_matches('/').to_string();
        let stream = cfg.data_stream.as_deref().unwrap_or(DEFAULT_DATA_STREAM);
        let auth = match (&cfg.api_key, &cfg.username, &cfg.password) {
            (Some(key), _, _) => Auth::Scheme("ApiKey", env.secret(key)?),
            (None, Some(u), Some(p)) => Auth::Basic(env.secret(u)?, env.secret(p)?),
            _ => Auth::None,
        };
        Ok(ElasticsearchClient {
            http,
            endpoint: format!("{base}/{stream}/_bulk?{FILTER}"),
            auth,
            schema: cfg.format,
            batch: cfg.batch_size.unwrap_or(DEFAULT_BATCH),
            max_bytes: cfg.max_batch_bytes.unwrap_or(DEFAULT_MAX_BYTES),
            origin: env.origin(),
        })
    }

    /// One `_bulk` request: an outcome per document it holds.
    async fn bulk(&self, body: String, count: usize) -> Vec<Outcome> {
        let req = self.http.post(&self.endpoint).header("Content-Type", "application/x-ndjson").body(body);
        let req = self.auth.apply(req);
        match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after =
                    http::retry_after(&resp);
                let body = http::read_body(resp).await;
                classify(status, retry_after, &body, count)
            }
            Err(e) => vec![http::transport_error(e); count],
        }
    }
}

impl Deliverer for ElasticsearchClient {
    fn max_batch(&self) -> usize {
        self.batch
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            crate::deliver::deliverer::batch_outcome(&self.deliver_each(batch).await)
        })
    }

    fn deliver_each<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let all: Vec<_> = batch.iter().enumerate().flat_map(|(i, n)| docs(i, self.schema.records(n, &self.origin, now))).collect();
            let mut outcomes = vec![Outcome::retry("not sent"); all.len()];
            for (body, held) in bodies(&all, self.max_bytes) {
                let answers = self.bulk(body, held.len()).await;
                for (i, o) in held.into_iter().zip(answers) {
                    outcomes[i] = o;
                }
            }
            per_notification(&all, &outcomes, batch.len())
        })
    }
}
