//! Pushover: `POST https://api.pushover.net/1/messages.json` with the application token,
//! the recipient as the user (or group) key, and the message; the template's
//! `pushover.title`, `.priority` (-2 to 2), `.url`, `.urlTitle`, `.sound`, `.device`.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::PushoverClient;
pub use config::PushoverConfig;
pub use payload::message;

/// The Pushover kind: what the registry (`deliver::kinds`) needs of it.
pub struct Pushover;

impl crate::deliver::kind::Kind for Pushover {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Pushover;
    type Config = PushoverConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 2.0, burst: 5, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::PushoverDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("pushover.title", crate::template::FieldKind::Text), ("pushover.priority", crate::template::FieldKind::Text), ("pushover.url", crate::template::FieldKind::Text), ("pushover.urlTitle", crate::template::FieldKind::Text), ("pushover.sound", crate::template::FieldKind::Text), ("pushover.device", crate::template::FieldKind::Text)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "pushover",
        settings: &[("token", "token")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &PushoverConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(_name: &str, c: &PushoverConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(PushoverClient::new(c, env)?))
    }
}
