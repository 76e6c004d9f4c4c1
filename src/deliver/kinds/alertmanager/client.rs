//! The Alertmanager client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use super::config::AlertmanagerConfig;
use super::payload::alerts;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

pub struct AlertmanagerClient {
    http: reqwest::Client,
    urls: Vec<String>,
    basic: Option<(String, Secret)>,
    bearer: Option<Secret>,
    argocd_url: String,
}

impl AlertmanagerClient {
    pub fn new(cfg: &AlertmanagerConfig, env: &Env) -> Result<AlertmanagerClient, crate::deliver::kind::BuildError> {
        let scheme = cfg.scheme.as_deref().unwrap_or("http");
        let path = cfg.api_path.as_deref().unwrap_or("/api/v2/alerts");
        let urls = cfg
            .targets
            .iter()
            .map(|t| {
                let t = t.trim_end_matches('/');
                let base = if t.contains("://") { t.to_string() } else { format!("{scheme}://{t}") };
                format!("{base}/{}", path.trim_start_matches('/'))
            })
            .collect();
        Ok(AlertmanagerClient {
            http: http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?,
            urls,
            basic: match &cfg.basic_auth {
                Some(b) => Some((b.username.clone(), env.secret(&b.password)?)),
                None => None,
            },
            bearer: cfg.bearer_token.as_deref().map(|s| env.secret(s)).transpose()?,
            argocd_url: env.context.get("argocdUrl").cloned().unwrap_or_default(),
        })
    }
}

impl AlertmanagerClient {
    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let body = alerts(n, &self.argocd_url, chrono::Utc::now());
        // Alertmanagers of one cluster gossip: one that accepts is enough. The
        // worst answer is kept when none does.
        let mut worst: Option<Outcome> = None;
        let mut delivered = false;
        for url in &self.urls {
            let mut req = self.http.post(url).json(&body);
            if let Some((user, pass)) = &self.basic {
                req = req.basic_auth(user, Some(pass.expose()));
            }
            if let Some(t) = &self.bearer {
                req = req.bearer_auth(t.expose());
            }
            match http::send(req).await.0 {
                Outcome::Delivered => {
                    delivered = true;
                    break;
                }
                o @ Outcome::Permanent(_) => worst = Some(o),
                o => {
                    if !matches!(worst, Some(Outcome::Permanent(_))) {
                        worst = Some(o);
                    }
                }
            }
        }
        if !delivered {
            return worst.unwrap_or_else(|| Outcome::Permanent("no alertmanager targets".into()));
        }
        Outcome::Delivered
    }
}

impl Deliverer for AlertmanagerClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
