//! Pushover: `POST https://api.pushover.net/1/messages.json` with the application token,
//! the recipient as the user (or group) key, and the message; the template's
//! `pushover.title`, `.priority` (-2 to 2), `.url`, `.urlTitle`, `.sound`, `.device`.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::PushoverClient;
pub use config::PushoverConfig;
pub use payload::message;
