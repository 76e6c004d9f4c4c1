//! Mattermost's REST API: `POST /api/v4/posts` to the recipient channel (its id) with
//! the message and the template's `mattermost.attachments` (Slack-style attachments)
//! as `props.attachments`, authenticated with a bot or personal access token.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::MattermostClient;
pub use config::MattermostConfig;
pub use payload::post;

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Mattermost kind: what the registry (`deliver::kinds`) needs of it.
pub struct Mattermost;

impl Kind for Mattermost {
    const KIND: DestinationKind = DestinationKind::Mattermost;
    type Config = MattermostConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::MattermostDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "mattermost",
        settings: &[("apiURL", "apiURL"), ("token", "token"), ("insecureSkipVerify", "insecureSkipVerify")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &MattermostConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(name: &str, c: &MattermostConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(MattermostClient::new(name, c, env)?))
    }
}
