//! SIEM webhook: the notification's Elastic Common Schema record as JSON, signed with
//! HMAC-SHA256 over the body (`X-Signature: sha256=<hex>`). The body's `@timestamp` is
//! signed with it and repeated in `X-Signature-Timestamp`, so a receiver can reject
//! replays (an old timestamp) and tampering (a bad signature).

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::SignedWebhookClient;
pub use config::SignedWebhookConfig;
pub use payload::{signature, signed_request, verify};
