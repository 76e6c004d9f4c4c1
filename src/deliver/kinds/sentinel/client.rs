//! The Sentinel client: a batch's records, each with `TimeGenerated`, posted as JSON
//! arrays of at most [`MAX_CALL_BYTES`] to the data collection rule's stream
//! (`POST {endpoint}/dataCollectionRules/{id}/streams/{stream}?api-version=2023-01-01`)
//! with an Entra ID token ([`super::token`]). `204` is delivered; `429` and `5xx` are
//! retried after `Retry-After`; a `401` drops the kept token and is retried with a new
//! one; a batch refused for good is sent again one notification at a time, so one
//! record the rule refuses never dead-letters the others ([`alone_after_refusal`]).
//! The API answers a call as a whole: there is no per-record outcome to read.

use std::ops::Range;

use serde_json::json;

use super::config::SentinelConfig;
use super::token::{Credential, Tokens};
use crate::deliver::deliverer::{Answer, BoxFuture, Deliverer, alone_after_refusal, batch_outcome};
use crate::deliver::ecs::Origin;
use crate::deliver::env::Env;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::siem::Schema;
use crate::model::Notification;

/// The Logs Ingestion API's version.
pub const API_VERSION: &str = "2023-01-01";
/// The API takes at most 1 MB a call; a call is kept under this many bytes of JSON.
pub const MAX_CALL_BYTES: usize = 1_000_000;
/// Entra ID's public authority and the Monitor ingestion scope.
const AUTHORITY: &str = "https://login.microsoftonline.com";
const SCOPE: &str = "https://monitor.azure.com//.default";

pub struct SentinelClient {
    http: reqwest::Client,
    url: String,
    tokens: Tokens,
    schema: Schema,
    batch: usize,
    origin: Origin,
}

impl SentinelClient {
    pub fn new(cfg: &SentinelConfig, env: &Env) -> Result<SentinelClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let endpoint = cfg.endpoint.trim_end_matches('/');
        let url = format!("{endpoint}/dataCollectionRules/{}/streams/{}?api-version={API_VERSION}", cfg.dcr_immutable_id, cfg.stream);
        let credential = match (&cfg.client_secret, &cfg.federated_token_file) {
            (Some(s), _) => Credential::Secret(env.secret(s)?),
            (None, Some(path)) => Credential::FederatedTokenFile(path.clone()),
            // `validate` refuses a configuration with neither.
            (None, None) => Credential::FederatedTokenFile(String::new()),
        };
        let authority = cfg.authority_host.as_deref().unwrap_or(AUTHORITY);
        // The credential goes to Entra ID over a client that always verifies its
        // certificate: `caFile` and `insecureSkipVerify` are the endpoint's.
        let tokens =
            Tokens::new(env.http.clone(), authority, &cfg.tenant_id, &cfg.client_id, cfg.scope.as_deref().unwrap_or(SCOPE), credential);
        Ok(SentinelClient { http, url, tokens, schema: cfg.format, batch: cfg.batch_size.unwrap_or(50), origin: env.origin() })
    }

    /// One call: `records` (a JSON array's items, already within [`MAX_CALL_BYTES`]).
    async fn call(&self, records: &[String]) -> Answer {
        let token = match self.tokens.token().await {
            Ok(t) => t,
            // The token's failure is the service's, not a record's: never split for it.
            Err(o) => return Answer::Final(o),
        };
        let body = format!("[{}]", records.join(","));
        // `bearer_auth` marks the header sensitive (never indexed, never printed).
        let req = self.http.post(&self.url).header(reqwest::header::CONTENT_TYPE, "application/json").bearer_auth(token.expose()).body(body);
        let (outcome, _) = http::send(req).await;
        if outcome.reason().starts_with("HTTP 401") {
            self.tokens.forget(&token).await;
        }
        Answer::of(outcome)
    }

    /// The records of the notifications `range` of `each`, in calls of at most
    /// [`MAX_CALL_BYTES`] (several only for a notification whose own records need
    /// them); the first call not delivered is the answer.
    async fn send(&self, each: &[Vec<String>], range: Range<usize>) -> Answer {
        for call in calls(each[range].iter().flatten()) {
            match self.call(&call).await {
                Answer::Final(Outcome::Delivered) => {}
                other => return other,
            }
        }
        Answer::Final(Outcome::Delivered)
    }

    /// A notification's records as the stream takes them: each with `TimeGenerated`,
    /// the time the record itself says (an episode step's when it happened), and
    /// within one call's size.
    fn records(&self, n: &Notification, now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
        self.schema
            .records(n, &self.origin, now)
            .into_iter()
            .map(|mut r| {
                let generated = time_generated(&r).unwrap_or_else(|| now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
                if let Some(m) = r.as_object_mut() {
                    m.insert("TimeGenerated".into(), json!(generated));
                }
                let text = r.to_string();
                // A record past a call's size is shrunk as a syslog datagram is
                // (evidence, then free text); what is still too large the API refuses
                // (413), for that notification alone.
                if text.len() + 2 > MAX_CALL_BYTES { self.schema.fit(r, MAX_CALL_BYTES - 2).to_string() } else { text }
            })
            .collect()
    }
}

/// The time a record says it is about: OCSF's `time` (epoch milliseconds), ECS's
/// `@timestamp`.
fn time_generated(r: &serde_json::Value) -> Option<String> {
    if let Some(ms) = r.get("time").and_then(serde_json::Value::as_i64) {
        let t = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)?;
        return Some(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
    r.get("@timestamp").and_then(serde_json::Value::as_str).map(str::to_string)
}

/// Records grouped into calls of at most [`MAX_CALL_BYTES`] as a JSON array, in order.
fn calls<'a>(records: impl Iterator<Item = &'a String>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut size = 2;
    for r in records {
        let room = !out.is_empty() && size + 1 + r.len() <= MAX_CALL_BYTES;
        if !room {
            out.push(Vec::new());
            size = 2;
        }
        size += r.len() + 1;
        if let Some(c) = out.last_mut() {
            c.push(r.clone());
        }
    }
    out
}

/// Notifications grouped, in order, so that each group's records fit one call; a
/// notification whose records alone do not is a group of its own.
fn groups(each: &[Vec<String>]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut size = 2;
    for (i, records) in each.iter().enumerate() {
        let own: usize = records.iter().map(|r| r.len() + 1).sum();
        match out.last_mut() {
            Some(g) if size + own <= MAX_CALL_BYTES => {
                g.end = i + 1;
                size += own;
            }
            _ => {
                out.push(i..i + 1);
                size = 2 + own;
            }
        }
    }
    out
}

impl Deliverer for SentinelClient {
    fn max_batch(&self) -> usize {
        self.batch
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { batch_outcome(&self.deliver_each(batch).await) })
    }

    /// The batch in calls cut between notifications, each within the API's size; a
    /// call refused for good is sent again one notification at a time, so only the
    /// one the rule refuses is dead-lettered; once a call is to be retried (`429`,
    /// `5xx`, a token), the calls after it are not made and their notifications wait
    /// with it. Each notification's outcome is its own: what was delivered is not sent
    /// again.
    fn deliver_each<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let each: Vec<Vec<String>> = batch.iter().map(|n| self.records(n, now)).collect();
            let mut out = vec![Outcome::Delivered; batch.len()];
            let mut waiting: Option<Outcome> = None;
            for g in groups(&each) {
                if let Some(o) = &waiting {
                    out[g].fill(o.clone());
                    continue;
                }
                let mine = &each[g.clone()];
                let outcomes = alone_after_refusal(mine.len(), |r| self.send(mine, r)).await;
                for (slot, o) in out[g].iter_mut().zip(outcomes) {
                    if waiting.is_none() && matches!(o, Outcome::Retry { .. }) {
                        waiting = Some(o.clone());
                    }
                    *slot = o;
                }
            }
            out
        })
    }
}

#[cfg(test)]
pub(super) fn calls_of(records: &[String]) -> Vec<Vec<String>> {
    calls(records.iter())
}

#[cfg(test)]
pub(super) fn groups_of(each: &[Vec<String>]) -> Vec<Range<usize>> {
    groups(each)
}

#[cfg(test)]
pub(super) fn as_value(call: &[String]) -> serde_json::Value {
    serde_json::from_str(&format!("[{}]", call.join(","))).unwrap_or(serde_json::Value::Null)
}
