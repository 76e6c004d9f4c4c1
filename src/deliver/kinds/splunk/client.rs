//! The Splunk HEC client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::SplunkConfig;
use super::payload::{EnvelopeMeta, batch_body, classify, envelope};
use crate::deliver::ecs::Origin;
use crate::deliver::siem::Schema;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
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
    schema: Schema,
    /// With indexer acknowledgement: the ack endpoint, this client's channel (a GUID,
    /// the same for every request) and how long an attempt waits.
    ack: Option<Ack>,
}

struct Ack {
    endpoint: String,
    channel: String,
    timeout: std::time::Duration,
}

/// A random GUID (version 4) for `X-Splunk-Request-Channel`.
fn channel_guid() -> String {
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let variant = ['8', '9', 'a', 'b'][usize::from(b[8] >> 6)];
    format!("{}-{}-4{}-{variant}{}-{}", &hex[..8], &hex[8..12], &hex[13..16], &hex[17..20], &hex[20..32])
}

impl SplunkClient {
    pub fn new(cfg: &SplunkConfig, env: &Env) -> Result<SplunkClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let base = env.secret(&cfg.url)?.expose().trim_end_matches('/').to_string();
        let ack = cfg.use_ack.then(|| Ack {
            endpoint: format!("{base}/services/collector/ack"),
            channel: channel_guid(),
            timeout: cfg.ack_timeout.map_or(std::time::Duration::from_secs(8), |d| d.0),
        });
        Ok(SplunkClient {
            http,
            endpoint: format!("{base}/services/collector/event"),
            token: env.secret(&cfg.token)?,
            meta: EnvelopeMeta {
                host: cfg.host.clone().unwrap_or_else(crate::deliver::hostname),
                source: cfg.source.clone().unwrap_or_else(|| "driftwatch".into()),
                sourcetype: cfg.sourcetype.clone().unwrap_or_else(|| match cfg.format {
                    Schema::Ecs => "driftwatch:notification".into(),
                    Schema::Ocsf => "driftwatch:ocsf".into(),
                }),
                index: cfg.index.clone(),
            },
            batch: cfg.batch_size.unwrap_or(50),
            origin: env.origin(),
            schema: cfg.format,
            ack,
        })
    }

    /// Waits for HEC to acknowledge `ack_id` on the channel: delivered once it says
    /// the events are indexed; retried (with the same event ids) when it has not
    /// within the timeout or the ack endpoint fails.
    async fn acknowledged(&self, ack: &Ack, ack_id: u64) -> Outcome {
        let deadline = tokio::time::Instant::now() + ack.timeout;
        let mut wait = std::time::Duration::from_millis(200);
        loop {
            let req = self
                .http
                .post(format!("{}?channel={}", ack.endpoint, ack.channel))
                .header("Authorization", format!("Splunk {}", self.token.expose()))
                .header("X-Splunk-Request-Channel", &ack.channel)
                .json(&serde_json::json!({"acks": [ack_id]}));
            match req.send().await {
                Ok(resp) if resp.status().is_success() => {
                    let body = http::read_body(resp).await;
                    let acked = serde_json::from_str::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v.pointer(&format!("/acks/{ack_id}")).and_then(serde_json::Value::as_bool));
                    if acked == Some(true) {
                        return Outcome::Delivered;
                    }
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let body = http::read_body(resp).await;
                    return Outcome::retry(format!("HEC ack {status}: {}", body.chars().take(200).collect::<String>()));
                }
                Err(e) => return http::transport_error(e),
            }
            if tokio::time::Instant::now() + wait > deadline {
                return Outcome::retry(format!("HEC did not acknowledge ackId {ack_id} within {:?}", ack.timeout));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(std::time::Duration::from_secs(2));
        }
    }
}

impl Deliverer for SplunkClient {
    fn max_batch(&self) -> usize {
        self.batch
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let envelopes: Vec<_> = batch
                .iter()
                .flat_map(|n| self.schema.records(n, &self.origin, now))
                .map(|record| envelope(&self.meta, record, now))
                .collect();
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
            if let Some(ack) = &self.ack {
                req = req.header("X-Splunk-Request-Channel", &ack.channel);
            }
            let req = req.body(batch_body(&envelopes));
            let (outcome, body) = match req.send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = http::retry_after(&resp);
                    let body = http::read_body(resp).await;
                    (classify(status, retry_after, &body), body)
                }
                Err(e) => (http::transport_error(e), String::new()),
            };
            match (&self.ack, outcome) {
                (Some(ack), Outcome::Delivered) => {
                    // HEC answered before indexing: the delivery counts once it acks.
                    match serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v.get("ackId").and_then(serde_json::Value::as_u64)) {
                        Some(id) => self.acknowledged(ack, id).await,
                        None => Outcome::Permanent(
                            "HEC answered without an ackId: indexer acknowledgement is off for this token (turn it on, or set useAck: false)".into(),
                        ),
                    }
                }
                (_, outcome) => outcome,
            }
        })
    }
}
