//! E-mail over SMTP with lettre: plain, STARTTLS or implicit TLS, optional
//! authentication, a text part and an optional HTML part, several recipients.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::EmailClient;
pub use config::EmailConfig;
pub use payload::{message, recipients};
