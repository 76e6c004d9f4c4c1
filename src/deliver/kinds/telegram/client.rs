//! The Telegram client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::time::Duration;

use serde_json::{Value, json};

use super::config::TelegramConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::message_ref;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;
use crate::state::MessageRefs;

pub struct TelegramClient {
    http: reqwest::Client,
    base: String,
    token: Secret,
    service: String,
    state: MessageRefs,
}

impl TelegramClient {
    pub fn new(service: &str, cfg: &TelegramConfig, env: &Env) -> Result<TelegramClient, crate::deliver::kind::BuildError> {
        Ok(TelegramClient {
            http: env.http.clone(),
            base: cfg.api_url.clone().unwrap_or_else(|| "https://api.telegram.org".into()).trim_end_matches('/').to_string(),
            token: env.secret(&cfg.token)?,
            service: service.to_string(),
            state: env.refs.clone(),
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
        let body = message(n);
        message_ref::post_or_edit(
            &self.state,
            &self.service,
            n,
            |r| {
                let mut edit = body.clone();
                // Telegram's message ids are numbers; this client kept it as one.
                edit["message_id"] = r.ts.parse::<i64>().map_or_else(|_| json!(r.ts), |id| json!(id));
                if let Some(m) = edit.as_object_mut() {
                    m.remove("disable_web_page_preview");
                }
                async move { self.call("editMessageText", &edit).await.0 }
            },
            || self.call("sendMessage", &body),
            |v| Some((n.destination.recipient.clone(), v.pointer("/result/message_id")?.as_i64()?.to_string())),
        )
        .await
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
