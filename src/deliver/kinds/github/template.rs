//! The `github:` section of a template: its fields, typed, as the template files write
//! them (the kind's template schema).

use serde::Deserialize;

use crate::source::At;
use crate::template::FieldKind::{self, Text};
use crate::template::Section;

/// GitHub fields (Argo CD's names). Without `status`, `deployment` or
/// `pullRequestComment` a template is not sent to a github service.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubDef {
    /// The repository; `app.spec.source.repoURL` (or the first source's) when absent.
    #[serde(rename = "repoURLPath")]
    pub repo_url_path: Option<At<String>>,
    /// The commit; `app.status.operationState.syncResult.revision` (else
    /// `app.status.sync.revision`) when absent.
    pub revision_path: Option<At<String>>,
    pub status: Option<GitHubStatusDef>,
    pub deployment: Option<GitHubDeploymentDef>,
    pub pull_request_comment: Option<GitHubCommentDef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitHubStatusDef {
    /// `error`, `failure`, `pending` or `success` (default).
    pub state: Option<At<String>>,
    /// The status context; `continuous-delivery/<app>` when absent.
    pub label: Option<At<String>>,
    #[serde(rename = "targetURL")]
    pub target_url: Option<At<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubDeploymentDef {
    pub state: Option<At<String>>,
    pub environment: Option<At<String>>,
    #[serde(rename = "environmentURL")]
    pub environment_url: Option<At<String>>,
    #[serde(rename = "logURL")]
    pub log_url: Option<At<String>>,
    /// The ref deployed; the revision when absent.
    pub reference: Option<At<String>>,
    #[serde(default)]
    pub required_contexts: Vec<String>,
    pub auto_merge: Option<bool>,
    pub transient_environment: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubCommentDef {
    pub content: Option<At<String>>,
    /// A comment carrying the tag is updated instead of adding another.
    pub comment_tag: Option<At<String>>,
}

impl Section for GitHubDef {
    const FIELDS: &'static [(&'static str, FieldKind)] = &[
        ("github.repoURLPath", Text),
        ("github.revisionPath", Text),
        ("github.status.state", Text),
        ("github.status.label", Text),
        ("github.status.targetURL", Text),
        ("github.deployment.state", Text),
        ("github.deployment.environment", Text),
        ("github.deployment.environmentURL", Text),
        ("github.deployment.logURL", Text),
        ("github.deployment.reference", Text),
        ("github.pullRequestComment.content", Text),
        ("github.pullRequestComment.commentTag", Text),
    ];
    const SETTINGS: &'static [&'static str] =
        &["github.deployment.requiredContexts", "github.deployment.autoMerge", "github.deployment.transientEnvironment"];

    /// Every field of a `github:` section, with its path and whether it renders to JSON.
    fn fields<'a>(&'a self, all: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {
        let g = self;
        all.push(("github.repoURLPath".into(), Text, g.repo_url_path.as_ref()));
        all.push(("github.revisionPath".into(), Text, g.revision_path.as_ref()));
        if let Some(st) = &g.status {
            all.push(("github.status.state".into(), Text, st.state.as_ref()));
            all.push(("github.status.label".into(), Text, st.label.as_ref()));
            all.push(("github.status.targetURL".into(), Text, st.target_url.as_ref()));
        }
        if let Some(d) = &g.deployment {
            for (f, v) in [
                ("state", &d.state),
                ("environment", &d.environment),
                ("environmentURL", &d.environment_url),
                ("logURL", &d.log_url),
                ("reference", &d.reference),
            ] {
                all.push((format!("github.deployment.{f}"), Text, v.as_ref()));
            }
        }
        if let Some(c) = &g.pull_request_comment {
            all.push(("github.pullRequestComment.content".into(), Text, c.content.as_ref()));
            all.push(("github.pullRequestComment.commentTag".into(), Text, c.comment_tag.as_ref()));
        }
    }

    fn settings(&self) -> Option<Box<dyn std::any::Any + Send + Sync>> {
        Some(Box::new(self.clone()))
    }
}
