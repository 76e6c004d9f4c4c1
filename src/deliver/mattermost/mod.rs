//! Mattermost's REST API: `POST /api/v4/posts` to the recipient channel (its id) with
//! the message and the template's `mattermost.attachments` (Slack-style attachments)
//! as `props.attachments`, authenticated with a bot or personal access token.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::MattermostClient;
pub use config::MattermostConfig;
pub use payload::post;
