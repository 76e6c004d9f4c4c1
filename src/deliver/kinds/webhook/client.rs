//! The webhook client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::collections::BTreeMap;

use super::config::WebhookConfig;
use super::payload::request;
use crate::deliver::http::HttpRequest;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::{Secret, Secrets};

/// Sends webhook requests.
pub struct WebhookClient {
    http: reqwest::Client,
    url: String,
    headers: BTreeMap<String, String>,
    basic: Option<(String, Secret)>,
    bearer: Option<Secret>,
}

impl WebhookClient {
    pub fn new(cfg: &WebhookConfig, secrets: &Secrets, shared: &reqwest::Client) -> Result<WebhookClient, crate::deliver::kind::BuildError> {
        let resolve = |s: &str| secrets.resolve(s);
        let http = http::client_for(shared, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?;
        let headers = secrets.resolve_map(&cfg.headers)?;
        Ok(WebhookClient {
            http,
            url: resolve(&cfg.url)?.expose().to_string(),
            headers,
            basic: match &cfg.basic_auth {
                Some(b) => Some((b.username.clone(), resolve(&b.password)?)),
                None => None,
            },
            bearer: cfg.bearer_token.as_deref().map(resolve).transpose()?,
        })
    }

    /// Sends one prepared request with this service's authentication.
    async fn send_one(&self, n: &Notification) -> Outcome {
        self.send(&request(&self.url, &self.headers, n)).await
    }

    pub async fn send(&self, r: &HttpRequest) -> Outcome {
        let method = match reqwest::Method::from_bytes(r.method.as_bytes()) {
            Ok(m) => m,
            Err(_) => return Outcome::Permanent(format!("invalid HTTP method {:?}", r.method)),
        };
        let mut req = self.http.request(method, &r.url).body(r.body.clone());
        for (k, v) in &r.headers {
            req = req.header(k, v);
        }
        if let Some((user, pass)) = &self.basic {
            req = req.basic_auth(user, Some(pass.expose()));
        }
        if let Some(t) = &self.bearer {
            req = req.bearer_auth(t.expose());
        }
        http::send(req).await.0
    }
}

impl Deliverer for WebhookClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.send_one(n)))
    }
}
