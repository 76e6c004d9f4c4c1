//! Slack: the Web API with a bot token (`chat.postMessage`, and `chat.update` of the
//! original message when a `resolve: true` condition clears; replies threaded under the
//! first message of a `groupingKey`), or an incoming webhook. Message and thread
//! timestamps are kept in the state store, so they survive restarts. About one message
//! per second per channel.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::SlackClient;
pub use config::SlackConfig;
pub use payload::{api_result, message};
