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

/// The Email kind: what the registry (`deliver::kinds`) needs of it.
pub struct Email;

impl crate::deliver::kind::Kind for Email {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Email;
    type Config = EmailConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 5.0, burst: 10, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::EmailDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("email.subject", crate::template::FieldKind::Text), ("email.body", crate::template::FieldKind::Text), ("email.html", crate::template::FieldKind::Text)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "email",
        settings: &[("host", "host"), ("port", "port"), ("from", "from"), ("username", "username"), ("password", "password")],
        not_needed: &[("html", "driftwatch sends an HTML part when the template has `email.html`")],
        typed: true,
        written_order: false,
    });

    /// Argo CD's mailer (gomail) uses implicit TLS on port 465 and STARTTLS elsewhere.
    fn import(service: &crate::deliver::kind::ArgoService, argo: &serde_json::Map<String, serde_json::Value>) -> crate::deliver::kind::Imported {
        let mut out = service.convert(argo);
        let port = argo.get("port").and_then(|p| p.as_u64().or_else(|| p.as_str().and_then(|s| s.parse().ok())));
        out.settings.insert("tls".into(), serde_json::json!(if port == Some(465) { "implicit" } else { "starttls" }));
        out
    }

    fn secrets(c: &EmailConfig) -> Vec<&str> {
        [&c.username, &c.password].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &EmailConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(EmailClient::new(c, &env.secrets)?))
    }
}
