//! E-mail over SMTP with lettre: plain, STARTTLS or implicit TLS, optional
//! authentication, a text part and an optional HTML part, several recipients.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::EmailClient;
pub use config::EmailConfig;
pub use payload::{message, recipients};

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Imported, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Email kind: what the registry (`deliver::kinds`) needs of it.
pub struct Email;

impl Kind for Email {
    const KIND: DestinationKind = DestinationKind::Email;
    type Config = EmailConfig;
    const LIMITS: Limits = Limits { per_second: 5.0, burst: 10, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::EmailDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "email",
        settings: &[("host", "host"), ("port", "port"), ("from", "from"), ("username", "username"), ("password", "password")],
        not_needed: &[("html", "driftwatch sends an HTML part when the template has `email.html`")],
        typed: true,
        written_order: false,
    });

    /// Argo CD's mailer (gomail) uses implicit TLS on port 465 and STARTTLS elsewhere.
    fn import(service: &ArgoService, argo: &Map<String, Value>) -> Imported {
        let mut out = service.convert(argo);
        let port = argo.get("port").and_then(|p| p.as_u64().or_else(|| p.as_str().and_then(|s| s.parse().ok())));
        out.settings.insert("tls".into(), serde_json::json!(if port == Some(465) { "implicit" } else { "starttls" }));
        out
    }

    fn secrets(c: &EmailConfig) -> Vec<&str> {
        [&c.username, &c.password].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &EmailConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(EmailClient::new(c, &env.secrets)?))
    }
}
