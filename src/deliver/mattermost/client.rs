use super::config::MattermostConfig;
use super::payload::post;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::services::Env;
use crate::deliver::worker::{BoxFuture, Deliverer};
use crate::model::Notification;
use crate::secret::Secret;

pub struct MattermostClient {
    http: reqwest::Client,
    url: String,
    token: Secret,
}

impl MattermostClient {
    pub fn new(cfg: &MattermostConfig, env: &Env) -> Result<MattermostClient, String> {
        Ok(MattermostClient {
            http: http::client_for(&env.http, cfg.ca_file.as_deref(), cfg.insecure_skip_verify)?,
            url: format!("{}/api/v4/posts", cfg.api_url.trim_end_matches('/')),
            token: env.secrets.resolve(&cfg.token).map_err(|e| e.to_string())?,
        })
    }
}

impl Deliverer for MattermostClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            for n in batch {
                let req = self.http.post(&self.url).bearer_auth(self.token.expose()).json(&post(n));
                let (outcome, _) = http::send(req).await;
                if outcome != Outcome::Delivered {
                    return outcome;
                }
            }
            Outcome::Delivered
        })
    }
}
