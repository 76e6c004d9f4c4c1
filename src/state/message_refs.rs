//! The one face of the store a chat kind gets (through `deliver::env::Env::refs`):
//! references to the messages it sent (Slack, Mattermost, Rocket.Chat, Google Chat,
//! Webex), by service and reference key, so a resolve edits the message and a
//! follow-up replies in its thread.

use std::sync::Arc;

use super::StateError;
use super::store::Shared;
use super::tables::message_refs;

pub use message_refs::{MAX_MESSAGE_REFS, MessageRef};

/// The one face of the store a chat kind gets: the references of the messages it sent,
/// to edit them or reply in their thread. Nothing else of the store is reachable
/// through it.
#[derive(Clone)]
pub struct MessageRefs(Arc<Shared>);

impl MessageRefs {
    pub(super) fn new(shared: Arc<Shared>) -> MessageRefs {
        MessageRefs(shared)
    }

    /// The reference kept for `key` of `service`, if any.
    pub fn get(&self, service: &str, key: &str) -> Result<Option<MessageRef>, StateError> {
        self.0.read_with(|tx| message_refs::get(tx, service, key))
    }

    /// Keeps a message reference; past [`MAX_MESSAGE_REFS`] the oldest goes, found
    /// through the age index (no scan).
    pub fn set(&self, service: &str, key: &str, r: &MessageRef) -> Result<(), StateError> {
        self.0.write_with(|tx| message_refs::set(tx, service, key, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_references_past_the_bound_drop_the_oldest() {
        let s = crate::state::Store::in_memory().unwrap().message_refs();
        let r = |at: u64| MessageRef { channel: "C1".into(), ts: format!("{at}"), at_ms: at };
        // Inserted newest-first, so insertion order is not what decides.
        for i in (0..MAX_MESSAGE_REFS as u64 + 3).rev() {
            s.set("slack", &format!("k{i}"), &r(i + 10)).unwrap();
        }
        // k0..k2 were the oldest; refreshing k3 moves it to the newest.
        for i in 0..3 {
            assert_eq!(s.get("slack", &format!("k{i}")).unwrap(), None, "k{i}");
        }
        s.set("slack", "k3", &r(1_000_000)).unwrap();
        s.set("slack", "new", &r(1_000_001)).unwrap();
        assert!(s.get("slack", "k3").unwrap().is_some(), "refreshed, so not the oldest");
        assert_eq!(s.get("slack", "k4").unwrap(), None, "the oldest after k3 moved");
        assert!(s.get("slack", "new").unwrap().is_some());
    }

    #[test]
    fn message_refs_round_trip() {
        let s = crate::state::Store::in_memory().unwrap().message_refs();
        let r = MessageRef { channel: "C1".into(), ts: "1.2".into(), at_ms: 1 };
        s.set("slack", "k", &r).unwrap();
        assert_eq!(s.get("slack", "k").unwrap(), Some(r));
        assert_eq!(s.get("slack", "other").unwrap(), None);
    }
}
