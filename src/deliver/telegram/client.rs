use std::time::Duration;

use serde_json::Value;

use super::config::TelegramConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::services::Env;
use crate::deliver::worker::{BoxFuture, Deliverer};
use crate::model::Notification;
use crate::secret::Secret;

pub struct TelegramClient {
    http: reqwest::Client,
    base: String,
    token: Secret,
}

impl TelegramClient {
    pub fn new(cfg: &TelegramConfig, env: &Env) -> Result<TelegramClient, String> {
        Ok(TelegramClient {
            http: env.http.clone(),
            base: cfg.api_url.clone().unwrap_or_else(|| "https://api.telegram.org".into()).trim_end_matches('/').to_string(),
            token: env.secrets.resolve(&cfg.token).map_err(|e| e.to_string())?,
        })
    }
}

/// A 429's `parameters.retry_after` (seconds), capped at an hour.
fn retry_after(body: &str) -> Option<Duration> {
    let v: Value = serde_json::from_str(body).ok()?;
    v.pointer("/parameters/retry_after").and_then(Value::as_u64).map(|s| Duration::from_secs(s.min(3600)))
}

impl Deliverer for TelegramClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            for n in batch {
                let url = format!("{}/bot{}/sendMessage", self.base, self.token.expose());
                let (outcome, body) = http::send(self.http.post(url).json(&message(n))).await;
                let outcome = match outcome {
                    Outcome::Retry { reason, after: None } => Outcome::Retry { after: body.as_deref().and_then(retry_after), reason },
                    o => o,
                };
                if outcome != Outcome::Delivered {
                    return outcome;
                }
            }
            Outcome::Delivered
        })
    }
}
