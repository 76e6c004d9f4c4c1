//! GitHub: commit statuses, deployments (with a deployment status) and pull-request
//! comments for the Application's repository and revision, as Argo CD's `github`
//! service does (its template fields: `github.status`, `github.deployment`,
//! `github.pullRequestComment`, `repoURLPath`, `revisionPath`). Authenticates as a
//! GitHub App (app id, installation id, private key: an RS256 JWT exchanged for an
//! installation token, cached until it expires) or with a token; GitHub Enterprise
//! through `enterpriseBaseURL`.

mod auth;
mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use auth::{app_jwt, load_private_key};
pub use client::GitHubClient;
pub use config::GitHubConfig;
pub use payload::{Repo, repo_of};

use std::sync::Arc;

use crate::deliver::Deliverer;
use crate::deliver::env::Env;
use crate::deliver::kind::{ArgoService, BuildError, Kind, Limits, SettingsError};
use crate::model::DestinationKind;
use crate::template::Encoder;

/// The Github kind: what the registry (`deliver::kinds`) needs of it.
pub struct Github;

impl Kind for Github {
    const KIND: DestinationKind = DestinationKind::Github;
    type Config = GitHubConfig;
    const LIMITS: Limits = Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: Encoder = payload::encode;
    type Template = template::GitHubDef;
    const ARGO: Option<ArgoService> = Some(ArgoService {
        name: "github",
        settings: &[
            ("appID", "appID"),
            ("installationID", "installationID"),
            ("privateKey", "privateKey"),
            ("enterpriseBaseURL", "enterpriseBaseURL"),
        ],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn validate(c: &GitHubConfig) -> Result<(), SettingsError> {
        let app = [&c.app_id, &c.installation_id, &c.private_key].iter().all(|x| x.is_some());
        let none = [&c.app_id, &c.installation_id, &c.private_key].iter().all(|x| x.is_none());
        if !((c.token.is_some() && none) || (c.token.is_none() && app)) {
            return Err(SettingsError::Rule("a github service needs either token, or appID, installationID and privateKey".into()));
        }
        for r in c.repositories.iter().flatten() {
            let valid = r.split_once('/').is_some_and(|(o, n)| !o.is_empty() && !n.is_empty() && !n.contains('/'));
            if !valid {
                return Err(SettingsError::Rule(format!("repositories: {r:?} is not owner/name or owner/*")));
            }
        }
        Ok(())
    }

    fn secrets(c: &GitHubConfig) -> Vec<&str> {
        [&c.token, &c.private_key].into_iter().flatten().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &GitHubConfig, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(GitHubClient::new(c, env)?))
    }
}
