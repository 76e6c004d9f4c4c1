//! Telegram's Bot API: `sendMessage` to a chat id (`-100…`, a number) or a channel
//! (`@name`; Argo CD's recipients name it without the `@`), with the template's
//! `telegram.parseMode` (`Markdown`, `MarkdownV2`, `HTML`). Telegram answers JSON with
//! `ok`; a 429 carries `parameters.retry_after`, honoured like `Retry-After`. The bot
//! token is part of the URL, which no error or log line ever shows.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::TelegramClient;
pub use config::TelegramConfig;
pub use payload::{chat_id, message};
