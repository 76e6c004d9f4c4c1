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

/// The Email kind: what the registry (`deliver::kinds`) needs of it.
pub struct Email;

impl crate::deliver::kind::Kind for Email {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Email;
    type Config = EmailConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 5.0, burst: 10, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;

    fn secrets(c: &EmailConfig) -> Vec<&str> {
        [&c.username, &c.password].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &EmailConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(EmailClient::new(c, &env.secrets)?))
    }
}
