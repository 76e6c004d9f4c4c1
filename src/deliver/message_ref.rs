//! References to sent chat messages (channel and message id per service and
//! notification), kept in the state store so that a resolve edits the original
//! message in place where the chat's API allows it (Slack, Mattermost, Telegram,
//! Webex, Rocket.Chat), even after a restart. The Slack client keeps its own keys
//! (threads) in the same table.

use std::sync::Arc;

use crate::deliver::outcome::Outcome;
use crate::model::Notification;
use crate::state::{SlackRef, StateStore};

/// The key of a notification's message: its Application and dedup key, the same for
/// the notification and its resolve.
pub fn key(n: &Notification) -> Option<String> {
    n.record.as_ref().map(|r| format!("msg\u{0}{}\u{0}{}", r.app_key, r.key))
}

/// The message a resolve should edit: `Ok(None)` when it is not a resolve or nothing
/// was kept.
pub fn for_resolve(state: &StateStore, service: &str, n: &Notification) -> Result<Option<SlackRef>, Outcome> {
    if n.action != crate::model::Action::Resolve {
        return Ok(None);
    }
    let Some(k) = key(n) else { return Ok(None) };
    state.slack_ref(service, &k).map_err(|e| Outcome::retry(format!("state store: {e}")))
}

/// Remembers a sent message; a failure only costs the edit, so it is logged.
pub fn remember(state: &Arc<StateStore>, service: &str, n: &Notification, channel: &str, id: &str) {
    let Some(k) = key(n) else { return };
    let r = SlackRef { channel: channel.to_string(), ts: id.to_string(), at_ms: crate::state::to_millis(chrono::Utc::now()) };
    if let Err(e) = state.set_slack_ref(service, &k, &r) {
        tracing::warn!(service, error = %e, "could not keep the message reference; a resolve will be a new message");
    }
}
