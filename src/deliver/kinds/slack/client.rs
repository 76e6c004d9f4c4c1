//! The Slack client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::config::SlackConfig;
use super::payload::{api_result, message};
use crate::deliver::outcome::{Outcome, classify_status};
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::deliver::{http, message_ref};
use crate::model::Notification;
use crate::secret::Secret;
use crate::state::{MessageRef, MessageRefs};

enum Mode {
    Api { base: String, token: Secret },
    Webhook { url: Secret },
}

pub struct SlackClient {
    service: String,
    http: reqwest::Client,
    mode: Mode,
    username: Option<String>,
    icon: Option<String>,
    state: MessageRefs,
    /// About one message per second per channel, as Slack asks.
    per_channel: DefaultKeyedRateLimiter<String>,
}

fn group_key(channel: &str, group: &str) -> String {
    format!("group\u{0}{channel}\u{0}{group}")
}

impl SlackClient {
    pub fn new(service: &str, cfg: &SlackConfig, env: &Env) -> Result<SlackClient, crate::deliver::kind::BuildError> {
        let mode = match (&cfg.token, &cfg.webhook_url) {
            (Some(t), _) => Mode::Api {
                base: cfg.api_url.clone().unwrap_or_else(|| "https://slack.com/api".into()).trim_end_matches('/').to_string(),
                token: env.secret(t)?,
            },
            (None, Some(u)) => Mode::Webhook { url: env.secret(u)? },
            (None, None) => return Err(crate::deliver::kind::BuildError::Setting("a slack service needs a token or a webhookUrl".into())),
        };
        Ok(SlackClient {
            service: service.to_string(),
            http: env.http.clone(),
            mode,
            username: cfg.username.clone(),
            icon: cfg.icon.clone(),
            state: env.refs.clone(),
            per_channel: RateLimiter::keyed(Quota::per_second(NonZeroU32::MIN)),
        })
    }

    async fn call(&self, base: &str, token: &Secret, method: &str, body: &serde_json::Value) -> Result<(String, String), Outcome> {
        let req = self.http.post(format!("{base}/{method}")).bearer_auth(token.expose()).json(body);
        match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after =
                    http::retry_after(&resp);
                let text = http::read_body(resp).await;
                match classify_status(status, retry_after, &text) {
                    Outcome::Delivered => api_result(&text),
                    other => Err(other),
                }
            }
            Err(e) => Err(http::transport_error(e)),
        }
    }

    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let channel = n.destination.recipient.clone();
        self.per_channel.until_key_ready(&channel).await;
        match &self.mode {
            Mode::Webhook { url } => {
                let body = message(&n.payload, None, None, None, self.username.as_deref(), self.icon.as_deref());
                http::send(self.http.post(url.expose()).json(&body)).await.0
            }
            Mode::Api { base, token } => {
                let now = crate::state::to_millis(chrono::Utc::now());
                let store_err = |e: crate::state::StateError| Outcome::retry(format!("state store: {e}"));
                let existing = match message_ref::key(n) {
                    Some(k) => match message_ref::get(&self.state, &self.service, &k).await {
                        Ok(r) => r,
                        Err(e) => return store_err(e),
                    },
                    None => None,
                };
                if message_ref::edits(n)
                    && let Some(r) = existing
                {
                    let body = message(&n.payload, Some(&r.channel), None, Some(&r.ts), None, None);
                    return match self.call(base, token, "chat.update", &body).await {
                        Ok(_) => Outcome::Delivered,
                        Err(o) => o,
                    };
                }
                let group = n.payload.get("groupingKey").and_then(|v| v.as_str()).filter(|g| !g.is_empty());
                let thread = match group {
                    Some(g) => match message_ref::get(&self.state, &self.service, &group_key(&channel, g)).await {
                        Ok(r) => r.map(|r| r.ts),
                        Err(e) => return store_err(e),
                    },
                    None => None,
                };
                let body = message(&n.payload, Some(&channel), thread.as_deref(), None, self.username.as_deref(), self.icon.as_deref());
                match self.call(base, token, "chat.postMessage", &body).await {
                    Ok((posted_channel, ts)) => {
                        let r = MessageRef { channel: posted_channel, ts, at_ms: now };
                        if let Some(k) = message_ref::key(n)
                            && let Err(e) = message_ref::set(&self.state, &self.service, &k, r.clone()).await
                        {
                            tracing::warn!(service = %self.service, error = %e, "could not keep the Slack message reference");
                        }
                        if let (Some(g), None) = (group, thread)
                            && let Err(e) = message_ref::set(&self.state, &self.service, &group_key(&channel, g), r.clone()).await
                        {
                            tracing::warn!(service = %self.service, error = %e, "could not keep the Slack thread reference");
                        }
                        Outcome::Delivered
                    }
                    Err(o) => o,
                }
            }
        }
    }
}

impl Deliverer for SlackClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
