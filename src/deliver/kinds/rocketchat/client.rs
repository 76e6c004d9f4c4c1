//! The Rocket.Chat client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::sync::Mutex;

use serde_json::{Value, json};

use super::config::RocketChatConfig;
use super::payload::message;
use crate::deliver::http;
use crate::deliver::message_ref;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;
use crate::state::MessageRefs;

enum Auth {
    Login { email: String, password: Secret },
    Token { user_id: String, token: Secret },
}

pub struct RocketChatClient {
    http: reqwest::Client,
    base: String,
    auth: Auth,
    /// (user id, auth token) of the logged-in session.
    session: Mutex<Option<(String, Secret)>>,
    service: String,
    state: MessageRefs,
}

impl RocketChatClient {
    pub fn new(service: &str, cfg: &RocketChatConfig, env: &Env) -> Result<RocketChatClient, crate::deliver::kind::BuildError> {
        let auth = match (&cfg.email, &cfg.password, &cfg.user_id, &cfg.token) {
            (Some(e), Some(p), None, None) => Auth::Login { email: env.secret(e)?.expose().to_string(), password: env.secret(p)? },
            (None, None, Some(u), Some(t)) => Auth::Token { user_id: env.secret(u)?.expose().to_string(), token: env.secret(t)? },
            _ => return Err(crate::deliver::kind::BuildError::Setting("a rocketchat service needs email and password, or userId and token".into())),
        };
        Ok(RocketChatClient {
            http: env.http.clone(),
            base: format!("{}/api/v1", cfg.server_url.trim_end_matches('/')),
            auth,
            session: Mutex::new(None),
            service: service.to_string(),
            state: env.refs.clone(),
        })
    }

    async fn credentials(&self) -> Result<(String, Secret), Outcome> {
        let (email, password) = match &self.auth {
            Auth::Token { user_id, token } => return Ok((user_id.clone(), token.clone())),
            Auth::Login { email, password } => (email, password),
        };
        if let Ok(s) = self.session.lock()
            && let Some(s) = s.as_ref()
        {
            return Ok(s.clone());
        }
        let req = self.http.post(format!("{}/login", self.base)).json(&json!({"user": email, "password": password.expose()}));
        let (outcome, body) = http::send(req).await;
        if outcome != Outcome::Delivered {
            return Err(match outcome {
                Outcome::Permanent(m) => Outcome::Permanent(format!("logging in: {m}")),
                o => o,
            });
        }
        let v: Value = serde_json::from_str(body.as_deref().unwrap_or_default())
            .map_err(|_| Outcome::retry("Rocket.Chat's login answer is not JSON"))?;
        let (Some(user), Some(token)) =
            (v.pointer("/data/userId").and_then(Value::as_str), v.pointer("/data/authToken").and_then(Value::as_str))
        else {
            return Err(Outcome::Permanent("Rocket.Chat's login answer has no session".into()));
        };
        let session = (user.to_string(), Secret::new(token.to_string()));
        if let Ok(mut s) = self.session.lock() {
            *s = Some(session.clone());
        }
        Ok(session)
    }

    /// One API call with the session's credentials; a 401 to a logged-in session drops
    /// it, to log in again on the next attempt.
    async fn call(&self, method: &str, body: &Value, user: &str, token: &Secret) -> (Outcome, Option<String>) {
        let req =
            self.http.post(format!("{}/{method}", self.base)).header("X-User-Id", user).header("X-Auth-Token", token.expose()).json(body);
        let (outcome, answer) = http::send(req).await;
        if matches!(&outcome, Outcome::Retry { reason, .. } if reason.starts_with("HTTP 401")) && matches!(self.auth, Auth::Login { .. }) {
            if let Ok(mut s) = self.session.lock() {
                *s = None;
            }
            return (Outcome::retry("Rocket.Chat session expired"), None);
        }
        (outcome, answer)
    }

    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let (user, token) = match self.credentials().await {
            Ok(c) => c,
            Err(o) => return o,
        };
        let body = message(n);
        message_ref::post_or_edit(
            &self.state,
            &self.service,
            n,
            |r| {
                let edit = json!({"roomId": r.channel, "msgId": r.ts, "text": body["text"]});
                let (user, token) = (&user, &token);
                async move { self.call("chat.update", &edit, user, token).await.0 }
            },
            || self.call("chat.postMessage", &body, &user, &token),
            |v| Some((v.pointer("/message/rid")?.as_str()?.to_string(), v.pointer("/message/_id")?.as_str()?.to_string())),
        )
        .await
    }
}

impl Deliverer for RocketChatClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
