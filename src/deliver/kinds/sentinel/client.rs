//! The Sentinel client: a batch's records, each with `TimeGenerated`, posted as JSON
//! arrays of at most [`MAX_CALL_BYTES`] to the data collection rule's stream
//! (`POST {endpoint}/dataCollectionRules/{id}/streams/{stream}?api-version=2023-01-01`)
//! with an Entra ID token ([`super::token`]). `204` is delivered; `429` and `5xx` are
//! retried after `Retry-After`; a `401` drops the kept token and is retried with a new
//! one. The API answers a call as a whole: there is no per-record outcome to read, so
//! the batch goes in calls cut between notifications, a call refused for good sent
//! again one notification at a time ([`crate::deliver::calls`]).

use serde_json::json;

use super::config::SentinelConfig;
use super::token::{Credential, Tokens};
use crate::deliver::calls::{self, CallSize};
use crate::deliver::deliverer::{Answer, BoxFuture};
use crate::deliver::ecs::Origin;
use crate::deliver::env::Env;
use crate::deliver::http;
use crate::deliver::siem::Schema;
use crate::model::Notification;

/// The Logs Ingestion API's version.
pub const API_VERSION: &str = "2023-01-01";
/// The API takes at most 1 MB a call; a call is kept under this many bytes of JSON.
pub const MAX_CALL_BYTES: usize = 1_000_000;
/// A call's body: a JSON array of records.
const CALL: CallSize = CallSize { max: MAX_CALL_BYTES, envelope: 2 };
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
}

impl calls::Api for SentinelClient {
    fn batch_size(&self) -> usize {
        self.batch
    }

    fn size(&self) -> CallSize {
        CALL
    }

    /// A notification's records as the stream takes them: each with `TimeGenerated`,
    /// the time the record itself says (an episode step's when it happened), and
    /// within one call's size.
    fn records(&self, n: &Notification, now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
        self.schema
            .records(n, &self.origin, now)
            .into_iter()
            .map(|mut r| {
                let generated = crate::deliver::siem::record_time(&r).unwrap_or(now).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                if let Some(m) = r.as_object_mut() {
                    m.insert("TimeGenerated".into(), json!(generated));
                }
                let text = r.to_string();
                // A record past a call's size is shrunk as a syslog datagram is
                // (evidence, then free text); what is still too large the API refuses
                // (413), for that notification alone.
                if text.len() > CALL.room() { self.schema.fit(r, CALL.room()).to_string() } else { text }
            })
            .collect()
    }

    /// One call: `records` (a JSON array's items, already within [`MAX_CALL_BYTES`]).
    fn call(&self, records: Vec<String>) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let body = format!("[{}]", records.join(","));
            let req = self.http.post(&self.url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
            self.tokens.send(req).await.map_or_else(Answer::Final, |(outcome, _)| Answer::of(outcome))
        })
    }
}
