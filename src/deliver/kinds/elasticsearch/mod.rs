//! Elasticsearch and OpenSearch: each record a `create` action of `POST
//! <url>/<data stream>/_bulk` (NDJSON), its `_id` the record's identity, so a copy a
//! crash or a retry makes is answered `409` and is already there: exactly once into
//! the data stream. A `200` answer is read item by item; each notification of a batch
//! gets its own outcome.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::ElasticsearchClient;
pub use config::ElasticsearchConfig;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, NoSection, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Elasticsearch kind: what the registry (`deliver::kinds`) needs of it.
pub struct Elasticsearch;

impl Kind for Elasticsearch {
    const KIND: DestinationKind = DestinationKind::Elasticsearch;
    type Config = ElasticsearchConfig;
    const LIMITS: Limits = Limits { per_second: 50.0, burst: 100, concurrency: 4 };
    const ENCODE: Encoder = payload::encode;
    // A SIEM: one record per notification (and with OCSF its requests), also on
    // grouped routes.
    const SIEM: bool = true;
    type Template = NoSection;
    // Argo CD has no such service.
    const ARGO: Option<ArgoService> = None;

    fn validate(c: &ElasticsearchConfig) -> Result<(), SettingsError> {
        let rule = |m: String| Err(SettingsError::Rule(m));
        if let Some(n) = c.batch_size.filter(|n| !(1..=500).contains(n)) {
            return rule(format!("batchSize must be from 1 to 500, not {n}"));
        }
        if let Some(n) = c.max_batch_bytes.filter(|n| !(1024..=50 * 1024 * 1024).contains(n)) {
            return rule(format!("maxBatchBytes must be from 1024 to 52428800, not {n}"));
        }
        match (&c.api_key, &c.username, &c.password) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => return rule("set apiKey or username and password, not both".into()),
            (None, Some(_), None) | (None, None, Some(_)) => return rule("username and password go together".into()),
            _ => {}
        }
        match c.data_stream.as_deref().and_then(payload::bad_data_stream) {
            Some(why) => rule(why),
            None => Ok(()),
        }
    }

    fn secrets(c: &ElasticsearchConfig) -> Vec<&str> {
        [Some(&c.url), c.api_key.as_ref(), c.username.as_ref(), c.password.as_ref()].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &ElasticsearchConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(ElasticsearchClient::new(c, env)?))
    }
}
