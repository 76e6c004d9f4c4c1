//! The Opsgenie client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::OpsgenieConfig;
use super::payload::{close, create};
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::recipients::PerRecipient;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::{Action, Notification};

pub struct OpsgenieClient {
    http: reqwest::Client,
    base: String,
    /// Recipient -> API integration key.
    keys: PerRecipient,
    argocd_url: String,
}

impl OpsgenieClient {
    pub fn new(cfg: &OpsgenieConfig, env: &Env) -> Result<OpsgenieClient, crate::deliver::kind::BuildError> {
        let keys = PerRecipient::resolve(&cfg.api_keys, env, "API key", "apiKeys")?;
        let mut base = cfg.api_url.clone().unwrap_or_else(|| "https://api.opsgenie.com".into());
        if !base.contains("://") {
            // Argo CD's examples write the host alone (`apiUrl: api.opsgenie.com`).
            base = format!("https://{base}");
        }
        Ok(OpsgenieClient {
            http: env.http.clone(),
            base: base.trim_end_matches('/').to_string(),
            keys,
            argocd_url: env.context.get("argocdUrl").cloned().unwrap_or_default(),
        })
    }
}

impl OpsgenieClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let key = match self.keys.get(n) {
            Ok(key) => key,
            Err(refused) => return refused,
        };
        let (url, body) = match n.action {
            Action::Fire => (format!("{}/v2/alerts", self.base), create(n, &self.argocd_url)),
            Action::Resolve => {
                let (path, body) = close(n);
                (format!("{}{path}", self.base), body)
            }
        };
        let req = self.http.post(&url).header("Authorization", format!("GenieKey {}", key.expose())).json(&body);
        let (outcome, _) = http::send(req).await;
        outcome
    }
}

impl Deliverer for OpsgenieClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
