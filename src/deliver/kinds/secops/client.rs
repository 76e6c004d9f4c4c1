//! The Google Security Operations client: a batch's records as log entries
//! ([`super::payload`]) imported into the instance's log type with the Chronicle API's
//! `logs.import` (`POST {endpoint}/v1alpha/projects/{project}/locations/{location}/`
//! `instances/{instance}/logTypes/{logType}/logs:import`), with a Google access token
//! ([`super::token`]), in calls of at most 1 MB cut between notifications
//! ([`crate::deliver::calls`]).
//!
//! A `2xx` (an empty body, the reference says) is delivered; `429` and `5xx` are
//! retried after `Retry-After`, the calls after it waiting with it; a `401` drops the
//! kept token and is retried with a new one; `403` and `404` (a role not yet granted,
//! a resource not yet there) are retried as for every kind; any other refusal (a
//! `400`: an entry the API does not take) is permanent, with Google's message, and a
//! call refused for good is sent again one notification at a time, so that only the
//! one refused is dead-lettered. The API answers a call as a whole.

use serde_json::Value;

use super::config::SecopsConfig;
use super::payload;
use super::token::{Credential, METADATA_URL, ServiceAccount, Tokens};
use crate::deliver::calls::{self, CallSize};
use crate::deliver::deliverer::{Answer, BoxFuture};
use crate::deliver::ecs::Origin;
use crate::deliver::env::Env;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::siem::Schema;
use crate::model::Notification;

/// The Chronicle API's version `logs.import` is in.
pub const API_VERSION: &str = "v1alpha";
/// The log type when `logType` is absent: a custom one, created in SecOps.
pub const LOG_TYPE: &str = "DRIFTWATCH_OCSF";
/// Notifications per batch when `batchSize` is absent.
const BATCH: usize = 100;

pub struct SecopsClient {
    /// The endpoint's client (its own when `caFile` or `insecureSkipVerify` is set).
    http: reqwest::Client,
    /// The log type's `logs:import` URL.
    url: String,
    /// Where the access tokens come from, and the one kept.
    tokens: Tokens,
    /// The records' schema and what they say they came from.
    schema: Schema,
    origin: Origin,
    /// Notifications per batch.
    batch: usize,
    /// The forwarder's resource name, when `forwarder` names one.
    forwarder: Option<String>,
    /// How large a call may be, with this forwarder in each.
    size: CallSize,
}

impl SecopsClient {
    pub fn new(cfg: &SecopsConfig, env: &Env) -> Result<SecopsClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let base = match (&cfg.endpoint, &cfg.region) {
            (Some(endpoint), _) => endpoint.trim_end_matches('/').to_string(),
            (None, region) => format!("https://{}-chronicle.googleapis.com", region.as_deref().unwrap_or_default()),
        };
        let instance = format!("projects/{}/locations/{}/instances/{}", cfg.project, cfg.location, cfg.instance);
        let log_type = cfg.log_type.as_deref().unwrap_or(LOG_TYPE);
        let url = format!("{base}/{API_VERSION}/{instance}/logTypes/{log_type}/logs:import");
        let credential = match &cfg.credentials {
            Some(key) => Credential::Key(Box::new(ServiceAccount::parse(&env.secret(key)?)?)),
            // `validate` refuses a configuration with neither.
            None => Credential::metadata_server(cfg.metadata_url.as_deref().unwrap_or(METADATA_URL)),
        };
        let forwarder = cfg.forwarder.as_ref().map(|f| format!("{instance}/forwarders/{f}"));
        // The key's assertion goes to Google over a client that always verifies its
        // certificate: `caFile` and `insecureSkipVerify` are the endpoint's.
        let tokens = Tokens::new(env.http.clone(), credential);
        Ok(SecopsClient {
            http,
            url,
            tokens,
            schema: cfg.format,
            batch: cfg.batch_size.unwrap_or(BATCH),
            origin: env.origin(),
            size: payload::call_size(forwarder.as_deref()),
            forwarder,
        })
    }

    /// The kept token as it would be `by` later.
    #[cfg(test)]
    pub(super) async fn age_token(&self, by: std::time::Duration) {
        self.tokens.age(by).await
    }

    /// Where the calls go.
    #[cfg(test)]
    pub(super) fn url(&self) -> &str {
        &self.url
    }
}

/// A refusal's reason with Google's own error (`{"error": {"code", "message",
/// "status"}}`, the shape of every Google API's errors): its status and whole
/// message, where the body's first characters might cut it.
fn with_google_message(o: Outcome, body: Option<&str>) -> Outcome {
    let Some(error) = body.and_then(|b| serde_json::from_str::<Value>(b).ok()).map(|mut v| v["error"].take()) else { return o };
    let (Some(code), Some(message)) = (error["code"].as_u64(), error["message"].as_str()) else { return o };
    let status = error["status"].as_str().unwrap_or_default();
    let reason = format!("HTTP {code} {status}: {}", crate::text::clip(message, 1000));
    match o {
        Outcome::Permanent(_) => Outcome::Permanent(reason),
        Outcome::Retry { after, .. } => Outcome::Retry { reason, after },
        Outcome::Delivered => Outcome::Delivered,
    }
}

impl calls::Api for SecopsClient {
    fn batch_size(&self) -> usize {
        self.batch
    }

    fn size(&self) -> CallSize {
        self.size
    }

    /// A notification's records as log entries, each within a call alone.
    fn records(&self, n: &Notification, now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
        payload::entries(self.schema, n, &self.origin, now, self.size.room())
    }

    /// One call: `entries`, already within the call's size.
    fn call(&self, entries: Vec<String>) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let body = payload::body(&entries, self.forwarder.as_deref());
            let req = self.http.post(&self.url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
            let answer = self.tokens.send(req).await;
            answer.map_or_else(Answer::Final, |(outcome, body)| Answer::of(with_google_message(outcome, body.as_deref())))
        })
    }
}
