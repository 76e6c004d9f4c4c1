//! Google Chat through incoming webhooks: `{text, cardsV2}` (or legacy `cards`) from the
//! template's `googlechat.*` fields, posted to the recipient's space webhook; with
//! `googlechat.threadKey` messages of one key go to one thread
//! (`messageReplyOption=REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD`). A webhook cannot edit a
//! message: a resolve is a new message, in the same thread when the key is the same.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::GoogleChatClient;
pub use config::GoogleChatConfig;
pub use payload::{message, url_with_thread};

/// The Googlechat kind: what the registry (`deliver::kinds`) needs of it.
pub struct Googlechat;

impl crate::deliver::kind::Kind for Googlechat {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Googlechat;
    type Config = GoogleChatConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::GoogleChatDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("googlechat.cards", crate::template::FieldKind::Json), ("googlechat.cardsV2", crate::template::FieldKind::Json), ("googlechat.threadKey", crate::template::FieldKind::Text)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "googlechat",
        settings: &[("webhooks", "webhooks")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &GoogleChatConfig) -> Vec<&str> {
        c.webhooks.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &GoogleChatConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(GoogleChatClient::new(c, env)?))
    }
}
