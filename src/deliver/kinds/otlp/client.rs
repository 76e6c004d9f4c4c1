//! The OTLP/HTTP logs client: a batch as one `ExportLogsServiceRequest` (protobuf,
//! gzip) to `<url>/v1/logs`.

use std::collections::BTreeMap;

use super::config::OtlpConfig;
use super::payload::{body, classify, request};
use crate::deliver::deliverer::{BoxFuture, Deliverer};
use crate::deliver::ecs::Origin;
use crate::deliver::env::Env;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::siem::Schema;
use crate::model::Notification;

pub struct OtlpClient {
    name: String,
    http: reqwest::Client,
    endpoint: String,
    headers: BTreeMap<String, String>,
    resource: BTreeMap<String, String>,
    schema: Schema,
    gzip: bool,
    batch: usize,
    origin: Origin,
}

impl OtlpClient {
    pub fn new(name: &str, cfg: &OtlpConfig, env: &Env) -> Result<OtlpClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let base = env.secret(&cfg.url)?.expose().trim_end_matches('/').to_string();
        let endpoint = if base.ends_with("/v1/logs") { base } else { format!("{base}/v1/logs") };
        Ok(OtlpClient {
            name: name.to_string(),
            http,
            endpoint,
            headers: env.secrets.resolve_map(&cfg.headers)?,
            resource: cfg.resource_attributes.clone(),
            schema: cfg.format,
            gzip: cfg.compression.as_deref() != Some("none"),
            batch: cfg.batch_size.unwrap_or(100),
            origin: env.origin(),
        })
    }
}

impl Deliverer for OtlpClient {
    fn max_batch(&self) -> usize {
        self.batch
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let records: Vec<_> = batch.iter().map(|n| (n, self.schema.records(n, &self.origin, now))).collect();
            let mut req = self
                .http
                .post(&self.endpoint)
                .header("Content-Type", "application/x-protobuf")
                .body(body(&request(&records, &self.origin, &self.resource, now), self.gzip));
            if self.gzip {
                req = req.header("Content-Encoding", "gzip");
            }
            for (k, v) in &self.headers {
                req = req.header(k, v);
            }
            match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retry_after =
                        http::retry_after(&resp);
                    // Bounded: a collector cannot make driftwatch buffer more.
                    let bytes = http::read_bytes(resp).await;
                    let (outcome, partial) = classify(status, retry_after, &bytes);
                    if let Some(note) = partial {
                        // The specification: a partial success is not retried.
                        tracing::warn!(service = %self.name, %note, "OTLP partial success; not retried");
                    }
                    outcome
                }
                Err(e) => http::transport_error(e),
            }
        })
    }
}
