//! The Loki client: a batch's records as one push (`POST /loki/api/v1/push`, JSON),
//! answered as any HTTP request is (`204`; `429` and `5xx` retried; an entry Loki
//! refuses for good, permanent with its reason). A push of several notifications
//! that Loki refuses for good is sent again one notification a push, so each gets
//! its own outcome ([`alone_after_refusal`]).

use super::config::LokiConfig;
use super::payload::{Entry, entries, push_body};
use crate::deliver::deliverer::{Answer, BoxFuture, Deliverer, alone_after_refusal, batch_outcome};
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

impl LokiClient {
    /// One push of `entries`, and Loki's answer.
    async fn push(&self, entries: Vec<Entry>) -> Answer {
        let mut req = self.http.post(&self.endpoint).json(&push_body(entries));
        if let Some(t) = &self.tenant {
            req = req.header("X-Scope-OrgID", t);
        }
        req = self.auth.apply(req);
        Answer::of(http::send(req).await.0)
    }
}

impl Deliverer for LokiClient {
    fn max_batch(&self) -> usize {
        self.batch
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { batch_outcome(&self.deliver_each(batch).await) })
    }

    /// The batch as one push; refused for good (a `400`: a line too long, an entry
    /// too old), each notification's entries again as a push of their own. Each
    /// notification's entries are made once, at one `now`: a re-send is the same
    /// lines at the same timestamps, which Loki keeps once if the refused push had
    /// taken some of them.
    fn deliver_each<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let each: Vec<Vec<Entry>> =
                batch.iter().map(|n| entries(n, self.schema.records(n, &self.origin, now), now).collect()).collect();
            alone_after_refusal(batch.len(), |r| self.push(each[r].iter().flatten().cloned().collect())).await
        })
    }
}
