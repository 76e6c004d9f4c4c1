//! Telegram's Bot API: `sendMessage` to a chat id (`-100…`, a number) or a channel
//! (`@name`; Argo CD's recipients name it without the `@`), with the template's
//! `telegram.parseMode` (`Markdown`, `MarkdownV2`, `HTML`). Telegram answers JSON with
//! `ok`; a 429 carries `parameters.retry_after`, honoured like `Retry-After`. The bot
//! token is part of the URL, which no error or log line ever shows.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::TelegramClient;
pub use config::TelegramConfig;
pub use payload::{chat_id, message};

/// The Telegram kind: what the registry (`deliver::kinds`) needs of it.
pub struct Telegram;

impl crate::deliver::kind::Kind for Telegram {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Telegram;
    type Config = TelegramConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::TelegramDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("telegram.parseMode", crate::template::FieldKind::Text)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "telegram",
        settings: &[("token", "token")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &TelegramConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(name: &str, c: &TelegramConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(TelegramClient::new(name, c, env)?))
    }
}
