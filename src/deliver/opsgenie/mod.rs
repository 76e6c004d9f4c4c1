//! Opsgenie's Alert API: an alert created with a stable `alias` (the same Application,
//! trigger and condition always give the same one, so a re-send after a crash updates
//! the same alert), and closed by that alias on resolve, as PagerDuty's `dedup_key`.
//! `POST /v2/alerts` and `POST /v2/alerts/{alias}/close?identifierType=alias`, with
//! `Authorization: GenieKey <key>`; both answer 202.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::OpsgenieClient;
pub use config::OpsgenieConfig;
pub use payload::{alias, close, create};
