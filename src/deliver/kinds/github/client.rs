//! The GitHub client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::sync::Mutex;

use ring::signature::RsaKeyPair;
use serde_json::{Value, json};

use super::auth::{app_jwt, load_private_key};
use super::config::GitHubConfig;
use super::payload::{comment, deployment, repo_of, status};
use crate::deliver::http;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer, one_by_one};
use crate::model::Notification;
use crate::secret::Secret;

enum Auth {
    Token(Secret),
    App { app_id: String, installation_id: String, key: Box<RsaKeyPair> },
}

/// An installation token and when it stops working (unix seconds).
struct Cached {
    token: Secret,
    expires: i64,
}

pub struct GitHubClient {
    http: reqwest::Client,
    api: String,
    auth: Auth,
    cached: Mutex<Option<Cached>>,
    /// `repositories`: where statuses and deployments may be written (all when empty).
    repositories: Vec<String>,
}

impl GitHubClient {
    pub fn new(cfg: &GitHubConfig, env: &Env) -> Result<GitHubClient, crate::deliver::kind::BuildError> {
        let auth = match (&cfg.token, &cfg.app_id, &cfg.installation_id, &cfg.private_key) {
            (Some(t), None, None, None) => Auth::Token(env.secret(t)?),
            (None, Some(app), Some(inst), Some(pem)) => {
                let pem = env.secret(pem)?;
                Auth::App { app_id: app.clone(), installation_id: inst.clone(), key: Box::new(load_private_key(pem.expose())?) }
            }
            _ => return Err(crate::deliver::kind::BuildError::Setting("a github service needs either token, or appID, installationID and privateKey".into())),
        };
        let api = cfg.enterprise_base_url.clone().unwrap_or_else(|| "https://api.github.com".into()).trim_end_matches('/').to_string();
        let repositories = cfg.repositories.clone().unwrap_or_default();
        Ok(GitHubClient { http: env.http.clone(), api, auth, cached: Mutex::new(None), repositories })
    }

    fn request(&self, method: reqwest::Method, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.api))
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .header("User-Agent", "driftwatch")
            .bearer_auth(token)
    }

    /// The token for a request: the configured one, or an installation token (fetched
    /// when none is cached or it expires within a minute).
    async fn token(&self) -> Result<Secret, Outcome> {
        let (app_id, installation_id, key) = match &self.auth {
            Auth::Token(t) => return Ok(t.clone()),
            Auth::App { app_id, installation_id, key } => (app_id, installation_id, key),
        };
        let now = chrono::Utc::now().timestamp();
        if let Ok(c) = self.cached.lock()
            && let Some(c) = c.as_ref()
            && c.expires - 60 > now
        {
            return Ok(c.token.clone());
        }
        let jwt = app_jwt(key, app_id, now).map_err(|e| Outcome::Permanent(format!("GitHub App: {e}")))?;
        let path = format!("/app/installations/{installation_id}/access_tokens");
        let (outcome, body) = http::send(self.request(reqwest::Method::POST, &path, &jwt)).await;
        if outcome != Outcome::Delivered {
            return Err(prefix(outcome, "getting an installation token"));
        }
        let v: Value = serde_json::from_str(body.as_deref().unwrap_or_default())
            .map_err(|_| Outcome::retry("GitHub's installation token answer is not JSON"))?;
        let token = v["token"].as_str().ok_or_else(|| Outcome::retry("GitHub's installation token answer has no token"))?;
        let expires =
            v["expires_at"].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map_or(now + 3000, |t| t.timestamp());
        let token = Secret::new(token.to_string());
        if let Ok(mut c) = self.cached.lock() {
            *c = Some(Cached { token: token.clone(), expires });
        }
        Ok(token)
    }

    async fn deliver_one(&self, n: &Notification) -> Outcome {
        let p = &n.payload;
        let repo_url = p.get("repoURL").and_then(Value::as_str).unwrap_or_default();
        let Some(repo) = repo_of(repo_url) else {
            return Outcome::Permanent(format!("no GitHub repository in the Application's repoURL {repo_url:?} (github.repoURLPath)"));
        };
        if !super::payload::allowed(&repo, &self.repositories) {
            return Outcome::Permanent(format!(
                "repository {}/{} is not one of this service's repositories (services.<name>.repositories)",
                repo.owner, repo.name
            ));
        }
        let sha = p.get("revision").and_then(Value::as_str).map(str::trim).unwrap_or_default();
        if sha.is_empty() {
            return Outcome::Permanent("no revision to report on (github.revisionPath)".into());
        }
        if !super::payload::commit_sha(sha) {
            return Outcome::Permanent(format!("revision {:?} is not a commit SHA (github.revisionPath)", crate::text::clip(sha, 80)));
        }
        let token = match self.token().await {
            Ok(t) => t,
            Err(o) => return o,
        };
        let token = token.expose();
        let base = format!("/repos/{}/{}", repo.owner, repo.name);
        if let Some(body) = status(n) {
            let body = match body {
                Ok(b) => b,
                Err(e) => return e.into(),
            };
            let req = self.request(reqwest::Method::POST, &format!("{base}/statuses/{sha}"), token).json(&body);
            let (o, _) = http::send(req).await;
            if o != Outcome::Delivered {
                return prefix(o, "setting the commit status");
            }
        }
        if let Some(d) = deployment(n, sha) {
            let (create, status) = match d {
                Ok(d) => d,
                Err(e) => return e.into(),
            };
            let (o, body) = http::send(self.request(reqwest::Method::POST, &format!("{base}/deployments"), token).json(&create)).await;
            if o != Outcome::Delivered {
                return prefix(o, "creating the deployment");
            }
            let id = serde_json::from_str::<Value>(body.as_deref().unwrap_or_default()).ok().and_then(|v| v["id"].as_u64());
            let Some(id) = id else { return Outcome::retry("GitHub's deployment answer has no id") };
            let req = self.request(reqwest::Method::POST, &format!("{base}/deployments/{id}/statuses"), token).json(&status);
            let (o, _) = http::send(req).await;
            if o != Outcome::Delivered {
                return prefix(o, "setting the deployment status");
            }
        }
        if let Some((content, tag)) = comment(n) {
            let (o, body) = http::send(self.request(reqwest::Method::GET, &format!("{base}/commits/{sha}/pulls"), token)).await;
            if o != Outcome::Delivered {
                return prefix(o, "finding the revision's pull requests");
            }
            let prs: Vec<u64> = serde_json::from_str::<Value>(body.as_deref().unwrap_or_default())
                .ok()
                .and_then(|v| v.as_array().map(|a| a.iter().filter_map(|pr| pr["number"].as_u64()).collect()))
                .unwrap_or_default();
            for pr in prs {
                let o = self.comment_on(&base, pr, &content, tag.as_deref(), token).await;
                if o != Outcome::Delivered {
                    return o;
                }
            }
        }
        Outcome::Delivered
    }

    /// Adds the comment to a pull request, or updates the one that carries the tag.
    async fn comment_on(&self, base: &str, pr: u64, content: &str, tag: Option<&str>, token: &str) -> Outcome {
        if let Some(tag) = tag {
            let marker = format!("<!-- argocd-notifications {tag} -->");
            let path = format!("{base}/issues/{pr}/comments?per_page=100");
            let (o, body) = http::send(self.request(reqwest::Method::GET, &path, token)).await;
            if o != Outcome::Delivered {
                return prefix(o, "reading the pull request's comments");
            }
            let existing = serde_json::from_str::<Value>(body.as_deref().unwrap_or_default()).ok().and_then(|v| {
                v.as_array()?.iter().find(|c| c["body"].as_str().is_some_and(|b| b.contains(&marker))).and_then(|c| c["id"].as_u64())
            });
            if let Some(id) = existing {
                let req =
                    self.request(reqwest::Method::PATCH, &format!("{base}/issues/comments/{id}"), token).json(&json!({"body": content}));
                return prefix(http::send(req).await.0, "updating the pull request comment");
            }
        }
        let req = self.request(reqwest::Method::POST, &format!("{base}/issues/{pr}/comments"), token).json(&json!({"body": content}));
        prefix(http::send(req).await.0, "commenting on the pull request")
    }
}

/// Says which step an outcome is about.
fn prefix(o: Outcome, step: &str) -> Outcome {
    match o {
        Outcome::Delivered => Outcome::Delivered,
        Outcome::Permanent(m) => Outcome::Permanent(format!("{step}: {m}")),
        Outcome::Retry { reason, after } => Outcome::Retry { reason: format!("{step}: {reason}"), after },
    }
}

impl Deliverer for GitHubClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(one_by_one(batch, |n| self.deliver_one(n)))
    }
}
