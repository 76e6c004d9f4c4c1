//! The Splunk HEC client: sends a batch's events in one request and turns the answer
//! into an `Outcome` (delivered, retry, permanent). A request of several
//! notifications that HEC refuses for good is sent again one notification a request,
//! so each gets its own outcome ([`alone_after_refusal`]).

use super::config::SplunkConfig;
use super::payload::{EnvelopeMeta, batch_body, classify, envelope};
use crate::deliver::ecs::Origin;
use crate::deliver::siem::Schema;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{Answer, BoxFuture, Deliverer, alone_after_refusal, batch_outcome};
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
                    Schema::Ocsf | Schema::Ocsf1_7 => "driftwatch:ocsf".into(),
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
        Box::pin(async move { batch_outcome(&self.deliver_each(batch).await) })
    }

    /// The batch as one request; refused for good (a `400` invalid data format, a
    /// `413` content too large), each notification's events again as a request of
    /// their own. The envelopes are made once, at one `now`: a re-send carries the
    /// same events with the same `event.id`s. HEC may have indexed the events before
    /// the one it refused; sent again, they are there twice under one `event.id`.
    fn deliver_each<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let each: Vec<Vec<serde_json::Value>> = batch
                .iter()
                .map(|n| self.schema.records(n, &self.origin, now).into_iter().map(|record| envelope(&self.meta, record, now)).collect())
                .collect();
            alone_after_refusal(batch.len(), |r| self.post(&batch[r.clone()], batch_body(&each[r].concat()))).await
        })
    }
}

impl SplunkClient {
    /// One request of `notifications`' events (`body`), and HEC's answer; with
    /// `useAck`, delivered once HEC acknowledges it.
    async fn post(&self, notifications: &[Notification], body: String) -> Answer {
        let mut req = self
            .http
            .post(&self.endpoint)
            .header("Authorization", format!("Splunk {}", self.token.expose()))
            .header("Content-Type", "application/json");
        // HEC has no idempotency of its own: each event carries its delivery's key
        // as `event.id`, and a request of one event (the batch a crash repeats is
        // not always the same) carries it as `Idempotency-Key` for a proxy that
        // honours it.
        if let [n] = notifications
            && let Some(key) = &n.idempotency_key
        {
            req = req.header(crate::deliver::http::IDEMPOTENCY_KEY, key);
        }
        if let Some(ack) = &self.ack {
            req = req.header("X-Splunk-Request-Channel", &ack.channel);
        }
        let (outcome, body) = match req.body(body).send().await {
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
                // HEC answered before indexing: the delivery counts once it acks. A
                // token without acknowledgement is the service's problem, not the
                // events': the batch's outcome, never re-sent alone.
                Answer::Final(
                    match serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v.get("ackId").and_then(serde_json::Value::as_u64)) {
                        Some(id) => self.acknowledged(ack, id).await,
                        None => Outcome::Permanent(
                            "HEC answered without an ackId: indexer acknowledgement is off for this token (turn it on, or set useAck: false)".into(),
                        ),
                    },
                )
            }
            (_, outcome) => Answer::of(outcome),
        }
    }
}
