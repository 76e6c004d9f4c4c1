//! Generic HTTP webhook: the template's `webhook.<service>` fields (method, path,
//! headers, body) sent to the service's URL, with basic or bearer auth.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::WebhookClient;
pub use config::{BasicAuth, WebhookConfig};
pub use payload::{HttpRequest, request};
