//! The Loki client: a batch's records as one push (`POST /loki/api/v1/push`, JSON),
//! answered as any HTTP request is (`204`; `429` and `5xx` retried; an entry Loki
//! refuses for good, permanent with its reason).

use super::config::LokiConfig;
use super::payload::{entries, push_body};
use crate::deliver::deliverer::{BoxFuture, Deliverer};
use crate::deliver::ecs::Origin;
use crate::deliver::env::Env;
use crate::deliver::http::{self, Auth};
use crate::deliver::outcome::Outcome;
use crate::deliver::siem::Schema;
use crate::model::Notification;

pub struct LokiClient {
    http: reqwest::Client,
    endpoint: String,
    tenant: Option<String>,
    auth: Auth,
    schema: Schema,
    batch: usize,
    origin: Origin,
}

impl LokiClient {
    pub fn new(cfg: &LokiConfig, env: &Env) -> Result<LokiClient, crate::deliver::kind::BuildError> {
        let http = http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let base = env.secret(&cfg.url)?.expose().trim_end_matches('/').to_string();
        let auth = match (&cfg.username, &cfg.password, &cfg.bearer_token) {
            (Some(u), Some(p), _) => Auth::Basic(env.secret(u)?, env.secret(p)?),
            (_, _, Some(t)) => Auth::Scheme("Bearer", env.secret(t)?),
            _ => Auth::None,
        };
        Ok(LokiClient {
            http,
            endpoint: format!("{base}/loki/api/v1/push"),
            tenant: cfg.tenant.clone(),
            auth,
            schema: cfg.format,
            batch: cfg.batch_size.unwrap_or(100),
            origin: env.origin(),
        })
    }
}

impl Deliverer for LokiClient {
    fn max_batch(&self) -> usize {
        self.batch
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let entries = batch
                .iter()
                .flat_map(|n| entries(n, self.schema.records(n, &self.origin, now), now))
                .collect();
            let mut req = self.http.post(&self.endpoint).json(&push_body(entries));
            if let Some(t) = &self.tenant {
                req = req.header("X-Scope-OrgID", t);
            }
            req = self.auth.apply(req);
            http::send(req).await.0
        })
    }
}
