use super::config::WebexConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::services::Env;
use crate::deliver::worker::{BoxFuture, Deliverer};
use crate::model::Notification;
use crate::secret::Secret;

pub struct WebexClient {
    http: reqwest::Client,
    url: String,
    token: Secret,
}

impl WebexClient {
    pub fn new(cfg: &WebexConfig, env: &Env) -> Result<WebexClient, String> {
        let base = cfg.api_url.clone().unwrap_or_else(|| "https://webexapis.com".into());
        Ok(WebexClient {
            http: env.http.clone(),
            url: format!("{}/v1/messages", base.trim_end_matches('/')),
            token: env.secrets.resolve(&cfg.token).map_err(|e| e.to_string())?,
        })
    }
}

impl Deliverer for WebexClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            for n in batch {
                let req = self.http.post(&self.url).bearer_auth(self.token.expose()).json(&message(n));
                let (outcome, _) = http::send(req).await;
                if outcome != Outcome::Delivered {
                    return outcome;
                }
            }
            Outcome::Delivered
        })
    }
}
