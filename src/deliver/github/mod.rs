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
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use auth::{app_jwt, load_private_key};
pub use client::GitHubClient;
pub use config::GitHubConfig;
pub use payload::{Repo, repo_of};
