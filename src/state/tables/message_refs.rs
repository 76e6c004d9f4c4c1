//! References to sent chat messages (Slack, Mattermost, Rocket.Chat, Google Chat,
//! Webex), by service and reference key. Bounded; the oldest goes first, found by an
//! age index. (The tables keep their first names, `slack_messages*`, so existing state
//! files read as they are.)

use serde::{Deserialize, Serialize};

use super::{from_json, index_once, to_json};
use crate::state::kv::{ReadTransaction, TableDefinition, WriteTransaction};
use crate::state::{StateError, storage};

/// `"<service>\u{0}<reference key>"` -> JSON [`MessageRef`].
const REFS: TableDefinition<&str, &str> = TableDefinition::new("slack_messages");
/// `"<at_ms, 20 digits>\u{0}<service>\u{0}<reference key>"` -> nothing: the message
/// references by age, so the oldest is dropped without a scan.
const BY_AGE: TableDefinition<&str, ()> = TableDefinition::new("slack_messages_by_age");

/// Most message references kept (oldest dropped).
pub const MAX_MESSAGE_REFS: usize = 50_000;

/// Where a sent chat message is (its channel and Slack-style `ts`, or the chat's own
/// message id in `ts`), to update it or reply in its thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRef {
    pub channel: String,
    pub ts: String,
    pub at_ms: u64,
}

pub(in crate::state) fn create_tables(tx: &WriteTransaction) -> Result<(), StateError> {
    tx.open_table(REFS).map_err(storage)?;
    index_once(tx, "slack_messages_by_age", REFS, BY_AGE, |k, v| Ok(Some(age_key(from_json::<MessageRef>(v)?.at_ms, k))))?;
    Ok(())
}

fn age_key(at_ms: u64, full_key: &str) -> String {
    format!("{at_ms:020}\u{0}{full_key}")
}

/// The reference kept for `key` of `service`, if any.
pub(in crate::state) fn get(tx: &ReadTransaction, service: &str, key: &str) -> Result<Option<MessageRef>, StateError> {
    let t = tx.open_table(REFS).map_err(storage)?;
    match t.get(format!("{service}\u{0}{key}").as_str()).map_err(storage)? {
        Some(v) => Ok(Some(from_json(v.value())?)),
        None => Ok(None),
    }
}

/// Keeps a message reference; past [`MAX_MESSAGE_REFS`] the oldest goes, found through
/// the age index (no scan).
pub(in crate::state) fn set(tx: &WriteTransaction, service: &str, key: &str, r: &MessageRef) -> Result<(), StateError> {
    let full = format!("{service}\u{0}{key}");
    let mut t = tx.open_table(REFS).map_err(storage)?;
    let mut by_age = tx.open_table(BY_AGE).map_err(storage)?;
    if let Some(old) = t.insert(full.as_str(), to_json(r)?.as_str()).map_err(storage)? {
        let at = from_json::<MessageRef>(old.value())?.at_ms;
        by_age.remove(age_key(at, &full).as_str()).map_err(storage)?;
    }
    by_age.insert(age_key(r.at_ms, &full).as_str(), ()).map_err(storage)?;
    while t.len().map_err(storage)? > MAX_MESSAGE_REFS as u64 {
        let Some(oldest) = by_age.pop_first().map_err(storage)? else { break };
        let oldest = oldest.0.value().to_string();
        let Some((_, full_key)) = oldest.split_once('\u{0}') else { continue };
        t.remove(full_key).map_err(storage)?;
    }
    Ok(())
}
