//! Google Chat through incoming webhooks: `{text, cardsV2}` (or legacy `cards`) from the
//! template's `googlechat.*` fields, posted to the recipient's space webhook; with
//! `googlechat.threadKey` messages of one key go to one thread
//! (`messageReplyOption=REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD`). A webhook cannot edit a
//! message: a resolve is a new message, in the same thread when the key is the same.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::GoogleChatClient;
pub use config::GoogleChatConfig;
pub use payload::{message, url_with_thread};
