//! The Telegram client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::config::TelegramConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::message_ref;
use crate::deliver::outcome::Outcome;
use crate::deliver::services::Env;
use crate::deliver::worker::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;
use crate::state::StateStore;

pub struct TelegramClient {
    http: reqwest::Client,
    base: String,
    token: Secret,
    service: String,
    state: Arc<StateStore>,
}

impl TelegramClient {
    pub fn new(service: &str, cfg: &TelegramConfig, env: &Env) -> Result<TelegramClient, String> {
        Ok(TelegramClient {
            http: env.http.clone(),
            base: cfg.api_url.clone().unwrap_or_else(|| "https://api.telegram.org".into()).trim_end_matches('/').to_string(),
            token: env.secret(&cfg.token)?,
            service: service.to_string(),
            state: env.state.clone(),
        })
    }

    async fn call(&self, method: &str, body: &Value) -> (Outcome, Option<String>) {
        let url = format!("{}/bot{}/{method}", self.base, self.token.expose());
        let (outcome, answer) = http::send(self.http.post(url).json(body)).await;
        let outcome = match outcome {
            Outcome::Retry { reason, after: None } => Outcome::Retry { after: answer.as_deref().and_then(retry_after), reason },
            o => o,
        };
        (outcome, answer)
    }

    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let mut body = message(n);
        let existing = match message_ref::for_resolve(&self.state, &self.service, n).await {
            Ok(r) => r,
            Err(o) => return o,
        };
        if let Some(r) = existing
            && let Ok(id) = r.ts.parse::<i64>()
        {
            // A resolve edits the original message.
            body["message_id"] = json!(id);
            if let Some(m) = body.as_object_mut() {
                m.remove("disable_web_page_preview");
            }
            return self.call("editMessageText", &body).await.0;
        }
        let (outcome, answer) = self.call("sendMessage", &body).await;
        if outcome == Outcome::Delivered
            && let Some(id) = answer
                .and_then(|a| serde_json::from_str::<Value>(&a).ok())
                .and_then(|v| v.pointer("/result/message_id").and_then(Value::as_i64))
        {
            message_ref::remember(&self.state, &self.service, n, &n.destination.recipient, &id.to_string()).await;
        }
        outcome
    }
}

/// A 429's `parameters.retry_after` (seconds), capped at an hour.
fn retry_after(body: &str) -> Option<Duration> {
    let v: Value = serde_json::from_str(body).ok()?;
    v.pointer("/parameters/retry_after").and_then(Value::as_u64).map(|s| Duration::from_secs(s.min(3600)))
}

impl Deliverer for TelegramClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
