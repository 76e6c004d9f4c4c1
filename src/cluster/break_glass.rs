//! The API calls of `driftwatch break-glass`, with the operator's own credentials: who
//! the API server says the caller is (`SelfSubjectReview`), the Application as it is,
//! and the break-glass annotation written on the version read (a concurrent change
//! makes the API server answer 409 and nothing is written). What to write is decided
//! by the command (`cli/break_glass.rs`) from `drift::break_glass`.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::drift::break_glass::ANNOTATION;

/// Why a call did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server could not be reached, or answered with an error.
    #[error("{0}")]
    Failed(String),
    /// The API server did not say who the caller is.
    #[error("the API server did not say who you are (SelfSubjectReview has no username)")]
    NoUsername,
}

/// The Applications of one namespace, through the operator's client.
pub struct Applications {
    client: kube::Client,
    api: Api<DynamicObject>,
}

impl Applications {
    /// A client with the operator's kubeconfig (and context), naming itself `agent`
    /// in its user agent so the audit log shows the write was made with the command.
    pub async fn connect(
        kubeconfig: Option<&std::path::Path>,
        context: Option<&str>,
        agent: &str,
        namespace: &str,
    ) -> Result<Applications, Error> {
        let client = super::client::client_as(kubeconfig, context, Some(agent)).await.map_err(|e| Error::Failed(e.into()))?;
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"), "applications");
        let api = Api::namespaced_with(client.clone(), namespace, &ar);
        Ok(Applications { client, api })
    }

    /// Who the API server says the caller is.
    pub async fn whoami(&self) -> Result<String, Error> {
        let api: Api<SelfSubjectReview> = Api::all(self.client.clone());
        let review = api
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
            .map_err(|e| Error::Failed(format!("asking the API server who you are (SelfSubjectReview): {e}")))?;
        let name = review.status.and_then(|s| s.user_info).and_then(|u| u.username).unwrap_or_default();
        if name.is_empty() {
            return Err(Error::NoUsername);
        }
        Ok(name)
    }

    /// The Application `name` as JSON, or `None` when there is none.
    pub async fn get(&self, name: &str) -> Result<Option<Value>, Error> {
        match self.api.get_opt(name).await {
            Ok(Some(a)) => serde_json::to_value(&a).map(Some).map_err(|e| Error::Failed(e.to_string())),
            Ok(None) => Ok(None),
            Err(e) => Err(Error::Failed(format!("reading Application {name}: {e}"))),
        }
    }

    /// Sets (or removes) the break-glass annotation of `name`, on `version`.
    pub async fn write(&self, name: &str, version: &str, value: Option<String>) -> Result<(), Error> {
        let patch = json!({"metadata": {"resourceVersion": version, "annotations": {ANNOTATION: value}}});
        let params = PatchParams { field_manager: Some("driftwatch-break-glass".into()), ..PatchParams::default() };
        match self.api.patch(name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Err(Error::Failed(format!("the Application changed while this ran ({}); run the command again", s.message)))
            }
            Err(kube::Error::Api(s)) if s.code == 403 => Err(Error::Failed(format!(
                "the API server refused the write ({}): break-glass needs `patch` on applications.argoproj.io (deploy/kubernetes/break-glass-operators.yaml)",
                s.message
            ))),
            Err(e) => Err(Error::Failed(format!("writing the exception: {e}"))),
        }
    }
}
