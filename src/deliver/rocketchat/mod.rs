//! Rocket.Chat's REST API: `POST /api/v1/chat.postMessage` to the recipient channel
//! (`#name`, or `@user`) with the message and the template's `rocketchat.attachments`,
//! `alias`, `emoji`, `avatar`; a resolve edits the original with `chat.update`.
//! Authenticated as Argo CD does, by logging in (`email`, `password`: the session is
//! cached and renewed after a 401), or with a personal access token (`userId`, `token`).

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::RocketChatClient;
pub use config::RocketChatConfig;
pub use payload::{channel, message};
