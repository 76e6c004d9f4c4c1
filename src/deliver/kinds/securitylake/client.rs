//! The Security Lake client: a file of notifications (the queue cuts it, see
//! `deliver::queue::files`) made into OCSF records, the records into Parquet objects
//! ([`super::payload`]), each object written with a SigV4-signed S3 `PutObject`.
//! The file's outcome is the first object's that was not written: a file written in
//! part is written again whole, and as each object's key depends only on its records,
//! writing it again replaces it (S3 keeps the last `PUT` of a key).

use std::sync::Arc;

use super::config::SecurityLakeConfig;
use super::credentials::Credentials;
use super::payload::{self, Layout, Object};
use super::sigv4::{self, Scope};
use crate::deliver::deliverer::{BoxFuture, Deliverer, FileCut};
use crate::deliver::ecs::Origin;
use crate::deliver::http;
use crate::deliver::outcome::{Outcome, classify_status};
use crate::deliver::siem::Schema;
use crate::model::Notification;

/// S3 errors that are the credentials' state, not the object's: retried, with new
/// keys for an assumed role.
const CREDENTIAL_ERRORS: [&str; 4] = ["ExpiredToken", "TokenRefreshRequired", "RequestExpired", "RequestTimeTooSkewed"];

pub struct LakeClient {
    http: reqwest::Client,
    /// `<scheme>://<host>[:port]` and the path before the key (`/<bucket>` with
    /// path-style addressing, empty otherwise).
    base: String,
    prefix: String,
    region: String,
    layout: Layout,
    credentials: Arc<Credentials>,
    schema: Schema,
    origin: Origin,
    cut: FileCut,
}

impl LakeClient {
    pub fn new(c: &SecurityLakeConfig, env: &crate::deliver::env::Env, cut: FileCut) -> Result<LakeClient, crate::deliver::kind::BuildError> {
        use crate::deliver::kind::BuildError;
        let http = http::client_for(&env.http, c.ca_file.as_deref(), c.insecure_skip_verify)?;
        let endpoint = c.endpoint.clone().unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", c.region));
        let url = reqwest::Url::parse(&endpoint).map_err(|e| BuildError::Setting(format!("endpoint: {e}")))?;
        let scheme = url.scheme();
        let host = host_of(&url);
        let (base, prefix) = match c.path_style {
            true => (format!("{scheme}://{host}"), format!("/{}", c.bucket)),
            false => (format!("{scheme}://{}.{host}", c.bucket), String::new()),
        };
        let keys = sigv4::Keys {
            access_key_id: env.secret(&c.access_key_id)?,
            secret_access_key: env.secret(&c.secret_access_key)?,
            session_token: c.session_token.as_deref().map(|t| env.secret(t)).transpose()?,
        };
        let role = c.role_arn.as_ref().map(|arn| super::credentials::Role {
            arn: arn.clone(),
            external_id: c.external_id.clone(),
            url: c.sts_endpoint.clone().unwrap_or_else(|| format!("https://sts.{}.amazonaws.com/", c.region)),
            region: c.region.clone(),
        });
        let class_sources = c.class_sources.iter().filter_map(|(k, v)| Some((k.parse().ok()?, v.clone()))).collect();
        let layout = Layout {
            region: c.region.clone(),
            account_id: c.account_id.clone(),
            source_name: c.source_name.clone(),
            source_version: c.source_version.clone().unwrap_or_else(|| "1.0".into()),
            class_sources,
        };
        Ok(LakeClient {
            // STS gets the keys over a client that always verifies its certificate.
            credentials: Arc::new(Credentials::new(keys, role, env.http.clone())),
            http,
            base,
            prefix,
            region: c.region.clone(),
            layout,
            schema: c.format,
            origin: env.origin(),
            cut,
        })
    }

    /// A notification's records, stamped with its own time (`received_ms`, which the
    /// file's queue sets), so they are the same at every attempt.
    fn records(&self, n: &Notification) -> Vec<serde_json::Value> {
        let at = n.received_ms.and_then(|ms| chrono::DateTime::from_timestamp_millis(ms as i64)).unwrap_or_else(chrono::Utc::now);
        self.schema.records(n, &self.origin, at)
    }

    /// Writes one object: `PUT` its key, signed. A credential error forgets an assumed
    /// role's keys and is retried.
    async fn put(&self, o: &Object) -> Outcome {
        let keys = match self.credentials.keys().await {
            Ok(k) => k,
            Err(o) => return o,
        };
        let path = format!("{}/{}", self.prefix, sigv4::uri_encode(&o.key, false));
        let url = format!("{}{path}", self.base);
        let Ok(parsed) = reqwest::Url::parse(&url) else { return Outcome::Permanent(format!("not a URL: {url}")) };
        let hash = sigv4::hex_sha256(&o.body);
        let req = sigv4::Request {
            method: "PUT",
            path: &path,
            query: &[],
            headers: vec![("host".into(), host_of(&parsed)), ("x-amz-content-sha256".into(), hash.clone())],
            payload_hash: &hash,
        };
        let signed = sigv4::sign(req, &keys, &Scope { region: &self.region, service: "s3" }, chrono::Utc::now());
        let mut builder = self
            .http
            .put(parsed)
            .header("x-amz-content-sha256", hash.as_str())
            .header(reqwest::header::CONTENT_TYPE, "application/vnd.apache.parquet")
            .body(o.body.clone());
        for (k, v) in signed {
            builder = builder.header(k, v);
        }
        let resp = match builder.send().await {
            Ok(r) => r,
            Err(e) => return http::transport_error(e),
        };
        let status = resp.status().as_u16();
        let after = http::retry_after(&resp);
        let body = http::read_body(resp).await;
        if !(200..300).contains(&status) && CREDENTIAL_ERRORS.iter().any(|c| body.contains(&format!("<Code>{c}</Code>"))) {
            self.credentials.forget(&keys).await;
            return Outcome::retry(format!("HTTP {status}: {}", body.chars().take(300).collect::<String>()));
        }
        classify_status(status, after, &body)
    }
}

/// `host[:port]` of a URL, as the `Host` header carries it (the port only when it is
/// not the scheme's default).
pub fn host_of(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => String::new(),
    }
}

impl Deliverer for LakeClient {
    fn files(&self) -> Option<FileCut> {
        Some(self.cut)
    }

    /// The bytes of a notification's records as JSON: a file's records stay within
    /// `maxFileBytes` of JSON, and its Parquet objects smaller.
    fn weight(&self, n: &Notification) -> u64 {
        self.records(n).iter().map(|r| r.to_string().len() as u64).sum()
    }

    /// A whole file (the queue's): its objects written one after the other, stopping
    /// at the first not written, whose outcome is the file's.
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let records: Vec<serde_json::Value> = batch.iter().flat_map(|n| self.records(n)).collect();
            if records.is_empty() {
                return Outcome::Delivered;
            }
            let layout = self.layout.clone();
            // Parquet encoding is CPU work on up to `maxFileBytes` of records: on the
            // blocking pool, not on a runtime worker.
            let objects = match tokio::task::spawn_blocking(move || payload::objects(&layout, records)).await {
                Ok(Ok(objects)) => objects,
                Ok(Err(e)) => return Outcome::Permanent(e),
                Err(e) => return Outcome::retry(format!("encoding the file: {e}")),
            };
            for o in &objects {
                let outcome = self.put(o).await;
                if outcome != Outcome::Delivered {
                    return outcome;
                }
                tracing::debug!(key = %o.key, records = o.records, class_uid = o.class_uid, "object written");
            }
            Outcome::Delivered
        })
    }
}
