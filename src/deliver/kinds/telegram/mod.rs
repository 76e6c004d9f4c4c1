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

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Telegram kind: what the registry (`deliver::kinds`) needs of it.
pub struct Telegram;

impl Kind for Telegram {
    const KIND: DestinationKind = DestinationKind::Telegram;
    type Config = TelegramConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::TelegramDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "telegram",
        settings: &[("token", "token")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &TelegramConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(name: &str, c: &TelegramConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(TelegramClient::new(name, c, env)?))
    }
}
