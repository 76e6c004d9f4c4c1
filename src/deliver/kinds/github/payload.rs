//! What one notification asks of GitHub: pure functions.

use serde_json::{Value, json};

use crate::deliver::outcome::Unsendable;
use crate::model::Notification;

/// A repository on GitHub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    pub owner: String,
    pub name: String,
}

/// `owner/name` of a Git URL: `https://github.com/o/r(.git)`, `git@github.com:o/r.git`,
/// `ssh://git@github.example.com:22/o/r.git`.
pub fn repo_of(url: &str) -> Option<Repo> {
    let url = url.trim().trim_end_matches('/');
    let path = if let Some((_, rest)) = url.split_once("://") { rest.split_once('/')?.1 } else { url.split_once(':')?.1 };
    let path = path.trim_end_matches(".git");
    let mut parts = path.rsplitn(2, '/');
    let name = parts.next()?.to_string();
    let owner = parts.next()?.rsplit('/').next()?.to_string();
    (owner_name(&owner) && repo_name(&name)).then_some(Repo { owner, name })
}

/// A GitHub account name: letters, digits and `-`, at most 39. The repository URL is
/// written by whoever may patch the Application, and the name goes into an API path
/// that carries the App's token: `..` or `%2e` must not reach another path.
fn owner_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 39 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A GitHub repository name: letters, digits, `-`, `_` and `.`, at most 100, not `.`
/// or `..`.
fn repo_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 100 && s != "." && s != ".." && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A commit SHA as the statuses and deployments paths take it: 7 to 64 hexadecimal
/// digits (a revision is read from the Application's status, which its writers write).
pub fn commit_sha(s: &str) -> bool {
    (7..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `repo` is one of `allowed` (`owner/name`, or `owner/*`); every repository
/// when none is configured.
pub fn allowed(repo: &Repo, allowed: &[String]) -> bool {
    allowed.is_empty()
        || allowed.iter().any(|a| match a.split_once('/') {
            Some((owner, "*")) => owner.eq_ignore_ascii_case(&repo.owner),
            Some((owner, name)) => owner.eq_ignore_ascii_case(&repo.owner) && name.eq_ignore_ascii_case(&repo.name),
            None => false,
        })
}

fn text<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

/// The description GitHub shows beside a status or deployment: the message's first
/// line, at most 140 characters (GitHub's limit for statuses).
fn description(n: &Notification) -> String {
    text(&n.payload, "message").and_then(|m| m.lines().next()).unwrap_or_default().chars().take(140).collect()
}

const STATES: &[&str] = &["error", "failure", "pending", "success"];
const DEPLOYMENT_STATES: &[&str] = &["error", "failure", "inactive", "in_progress", "queued", "pending", "success"];

/// `POST /repos/{owner}/{repo}/statuses/{sha}`.
pub fn status(n: &Notification) -> Option<Result<Value, Unsendable>> {
    let s = n.payload.get("status")?;
    let state = text(s, "state").unwrap_or("success");
    if !STATES.contains(&state) {
        return Some(Err(Unsendable(format!("github.status.state {state:?} is not one of {}", STATES.join(", ")))));
    }
    let context = text(s, "label").map(str::to_string).unwrap_or_else(|| format!("continuous-delivery/{}", n.meta.name));
    let mut body = json!({"state": state, "context": context, "description": description(n)});
    if let Some(u) = text(s, "targetURL") {
        body["target_url"] = json!(u);
    }
    Some(Ok(body))
}

/// `POST /repos/{owner}/{repo}/deployments` and then its status.
pub fn deployment(n: &Notification, sha: &str) -> Option<Result<(Value, Value), Unsendable>> {
    let d = n.payload.get("deployment")?;
    let state = text(d, "state").unwrap_or("success");
    if !DEPLOYMENT_STATES.contains(&state) {
        return Some(Err(Unsendable(format!("github.deployment.state {state:?} is not one of {}", DEPLOYMENT_STATES.join(", ")))));
    }
    let environment = text(d, "environment").unwrap_or("production");
    let contexts = d.get("requiredContexts").cloned().filter(Value::is_array).unwrap_or_else(|| json!([]));
    let mut create = json!({
        "ref": text(d, "reference").unwrap_or(sha),
        "environment": environment,
        "required_contexts": contexts,
        "auto_merge": d.get("autoMerge").and_then(Value::as_bool).unwrap_or(false),
        "description": description(n),
    });
    if let Some(t) = d.get("transientEnvironment").and_then(Value::as_bool) {
        create["transient_environment"] = json!(t);
    }
    let mut status = json!({"state": state, "environment": environment, "description": description(n)});
    for (from, to) in [("environmentURL", "environment_url"), ("logURL", "log_url")] {
        if let Some(u) = text(d, from) {
            status[to] = json!(u);
        }
    }
    Some(Ok((create, status)))
}

/// The comment for the pull requests of the revision, and the tag that finds a comment
/// to update instead of adding another.
pub fn comment(n: &Notification) -> Option<(String, Option<String>)> {
    let c = n.payload.get("pullRequestComment")?;
    let content = c.get("content").and_then(Value::as_str).unwrap_or_default().to_string();
    let tag = text(c, "commentTag").map(str::to_string);
    Some(match &tag {
        Some(t) => (format!("{content}\n<!-- argocd-notifications {t} -->"), tag),
        None => (content, None),
    })
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, app: &crate::model::App) -> crate::template::Payload {
    let no_fields = || crate::template::RenderError::NoKindFields { template: f.template().into(), kind: "github" };
    let gh = f.settings::<super::template::GitHubDef>("github").ok_or_else(no_fields)?;
    if gh.status.is_none() && gh.deployment.is_none() && gh.pull_request_comment.is_none() {
        return Err(no_fields());
    }
    let mut out = serde_json::Map::new();
    out.insert("message".into(), f.message.clone().into());
    let o = &app.object;
    let text_at =
        |paths: [&str; 2]| paths.iter().find_map(|p| o.pointer(p)).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
    let repo = match f.text("github.repoURLPath")? {
        Some(s) => s.trim().to_string(),
        None => text_at(["/spec/source/repoURL", "/spec/sources/0/repoURL"]),
    };
    let revision = match f.text("github.revisionPath")? {
        Some(s) => s.trim().to_string(),
        None => text_at(["/status/operationState/syncResult/revision", "/status/sync/revision"]),
    };
    out.insert("repoURL".into(), repo.into());
    out.insert("revision".into(), revision.into());
    let trimmed = |section: &str, names: &[&str]| -> Result<serde_json::Map<String, serde_json::Value>, crate::template::RenderError> {
        let mut m = serde_json::Map::new();
        for name in names {
            if let Some(v) = f.text(&format!("github.{section}.{name}"))? {
                m.insert((*name).into(), v.trim().into());
            }
        }
        Ok(m)
    };
    if gh.status.is_some() {
        out.insert("status".into(), trimmed("status", &["state", "label", "targetURL"])?.into());
    }
    if let Some(d) = &gh.deployment {
        let mut m = trimmed("deployment", &["state", "environment", "environmentURL", "logURL", "reference"])?;
        m.insert("requiredContexts".into(), d.required_contexts.clone().into());
        if let Some(b) = d.auto_merge {
            m.insert("autoMerge".into(), b.into());
        }
        if let Some(b) = d.transient_environment {
            m.insert("transientEnvironment".into(), b.into());
        }
        out.insert("deployment".into(), m.into());
    }
    if gh.pull_request_comment.is_some() {
        let mut m = serde_json::Map::new();
        m.insert("content".into(), f.text("github.pullRequestComment.content")?.unwrap_or_default().into());
        if let Some(t) = f.text("github.pullRequestComment.commentTag")? {
            m.insert("commentTag".into(), t.trim().into());
        }
        out.insert("pullRequestComment".into(), m.into());
    }
    Ok(out)
}
