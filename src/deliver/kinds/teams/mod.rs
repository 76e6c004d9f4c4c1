//! Microsoft Teams through incoming webhooks: a MessageCard built from the template's
//! `teams.*` fields (Argo CD's names: `title`, `summary`, `text`, `themeColor`,
//! `facts`, `sections`, `potentialAction`, or a whole card in `template`), posted to
//! the recipient's webhook URL. A webhook cannot edit a message: a resolve is a new
//! card rendered with `resolved` true.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::TeamsClient;
pub use config::TeamsConfig;
pub use payload::card;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Teams kind: what the registry (`deliver::kinds`) needs of it.
pub struct Teams;

impl Kind for Teams {
    const KIND: DestinationKind = DestinationKind::Teams;
    type Config = TeamsConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::TeamsDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "teams",
        settings: &[("recipientUrls", "recipientUrls")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &TeamsConfig) -> Vec<&str> {
        c.recipient_urls.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &TeamsConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(TeamsClient::new(c, env)?))
    }
}
