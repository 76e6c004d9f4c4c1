//! Microsoft Teams through incoming webhooks: a MessageCard built from the template's
//! `teams.*` fields (Argo CD's names: `title`, `summary`, `text`, `themeColor`,
//! `facts`, `sections`, `potentialAction`, or a whole card in `template`), posted to
//! the recipient's webhook URL. A webhook cannot edit a message: a resolve is a new
//! card rendered with `resolved` true.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::TeamsClient;
pub use config::TeamsConfig;
pub use payload::card;
