//! What building a delivery client needs besides the service's own configuration: the
//! one HTTP client, the chat message references, the secrets, the config's `context:`.

use std::collections::BTreeMap;

use super::ecs::Origin;
use crate::secret::{Secret, SecretError, Secrets};
use crate::state::MessageRefs;

/// The shared inputs of every client a configuration builds.
pub struct Env {
    /// The one shared HTTP client.
    pub http: reqwest::Client,
    /// The only part of the store a client may use: where its chat messages are.
    pub refs: MessageRefs,
    pub secrets: Secrets,
    /// The config's `context:` (`argocdUrl`, `clusterName`).
    pub context: BTreeMap<String, String>,
}

impl Env {
    /// A `$key` reference (or a literal value) as a secret; the error names the key,
    /// never a value.
    pub fn secret(&self, reference: &str) -> Result<Secret, SecretError> {
        self.secrets.resolve(reference)
    }

    pub fn origin(&self) -> Origin {
        Origin {
            cluster: self.context.get("clusterName").cloned().unwrap_or_default(),
            argocd_url: self.context.get("argocdUrl").cloned().unwrap_or_default(),
        }
    }
}
