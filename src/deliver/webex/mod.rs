//! Webex messages: `POST https://webexapis.com/v1/messages` with the message as
//! markdown, to a person (`toPersonEmail`, when the recipient is an address) or a room
//! (`roomId`), with a bot token.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::WebexClient;
pub use config::WebexConfig;
pub use payload::message;
