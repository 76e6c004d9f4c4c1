//! References to sent chat messages (channel and message id per service and
//! notification), kept in the state store so that a resolve edits the original
//! message in place where the chat's API allows it (Slack, Mattermost, Telegram,
//! Webex, Rocket.Chat), even after a restart. Slack also keeps its thread keys here.
//! Every store call runs on the blocking pool, never on a tokio worker.

use crate::deliver::outcome::Outcome;
use crate::model::Notification;
use crate::state::{MessageRef, MessageRefs, StateError};

/// The key of a notification's message: its Application and dedup key, the same for
/// the notification and its resolve; for a group's message, the group's run.
pub fn key(n: &Notification) -> Option<String> {
    if let Some(g) = &n.group {
        return Some(format!("msg\u{0}group\u{0}{}", g.instance));
    }
    n.record.as_ref().map(|r| format!("msg\u{0}{}\u{0}{}", r.app_key, r.key))
}

/// Whether `n` edits the message it has sent before, when one is known: a resolve, and
/// every update of a group's message (members joined or resolved).
pub fn edits(n: &Notification) -> bool {
    n.action == crate::model::Action::Resolve || n.group.is_some()
}

/// A kept reference, read on the blocking pool (a redb read must not hold a tokio
/// worker).
pub async fn get(refs: &MessageRefs, service: &str, key: &str) -> Result<Option<MessageRef>, StateError> {
    let (refs, service, key) = (refs.clone(), service.to_string(), key.to_string());
    tokio::task::spawn_blocking(move || refs.get(&service, &key))
        .await
        .unwrap_or_else(|e| Err(StateError::Storage(format!("reading a message reference: {e}"))))
}

/// Keeps a reference, on the blocking pool (a durable redb commit).
pub async fn set(refs: &MessageRefs, service: &str, key: &str, r: MessageRef) -> Result<(), StateError> {
    let (refs, service, key) = (refs.clone(), service.to_string(), key.to_string());
    tokio::task::spawn_blocking(move || refs.set(&service, &key, &r))
        .await
        .unwrap_or_else(|e| Err(StateError::Storage(format!("keeping a message reference: {e}"))))
}

/// The message a resolve or a group's update should edit: `Ok(None)` when it edits
/// nothing ([`edits`]) or nothing was kept.
pub async fn to_edit(state: &MessageRefs, service: &str, n: &Notification) -> Result<Option<MessageRef>, Outcome> {
    if !edits(n) {
        return Ok(None);
    }
    let Some(k) = key(n) else { return Ok(None) };
    get(state, service, &k).await.map_err(|e| Outcome::retry(format!("state store: {e}")))
}

/// Sends `n` to a chat that can edit its messages: a resolve whose original message is
/// known edits it (`edit`); anything else is posted (`post`, which answers the
/// outcome and the response body), and a posted message's channel and id, which
/// `sent` reads from the answer's JSON, are kept for its resolve.
pub async fn post_or_edit<E, P>(
    state: &MessageRefs,
    service: &str,
    n: &Notification,
    edit: impl FnOnce(MessageRef) -> E,
    post: impl FnOnce() -> P,
    sent: impl FnOnce(&serde_json::Value) -> Option<(String, String)>,
) -> Outcome
where
    E: std::future::Future<Output = Outcome>,
    P: std::future::Future<Output = (Outcome, Option<String>)>,
{
    match to_edit(state, service, n).await {
        Err(o) => return o,
        Ok(Some(r)) => return edit(r).await,
        Ok(None) => {}
    }
    let (outcome, answer) = post().await;
    if outcome == Outcome::Delivered
        && let Some((channel, id)) = answer.and_then(|a| serde_json::from_str(&a).ok()).as_ref().and_then(sent)
    {
        remember(state, service, n, &channel, &id).await;
    }
    outcome
}

/// Remembers a sent message; a failure only costs the edit, so it is logged.
pub async fn remember(state: &MessageRefs, service: &str, n: &Notification, channel: &str, id: &str) {
    let Some(k) = key(n) else { return };
    let r = MessageRef { channel: channel.to_string(), ts: id.to_string(), at_ms: crate::state::to_millis(chrono::Utc::now()) };
    if let Err(e) = set(state, service, &k, r).await {
        tracing::warn!(service, error = %e, "could not keep the message reference; a resolve will be a new message");
    }
}
