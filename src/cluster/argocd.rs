//! Argo CD's API as the source of a drifted resource's desired state (`argocd:`): the
//! Application's managed resource (`GET /api/v1/applications/{name}/managed-resources`,
//! filtered to the one resource), whose `targetState` is what Argo CD renders from
//! Git, after its own normalization. Read only for resources that drifted, off the
//! evaluation path, bounded in time and size.

use std::time::Duration;

use serde_json::Value;

use crate::secret::Secret;

/// One answer is at most this large (one resource's states).
const MAX_ANSWER_BYTES: usize = 8 << 20;
const TIMEOUT: Duration = Duration::from_secs(10);

/// The API client.
#[derive(Clone)]
pub struct ArgocdApi {
    http: reqwest::Client,
    server: String,
    token: Secret,
}

/// Which resource of which Application.
pub struct Resource<'a> {
    pub app_namespace: &'a str,
    pub app_name: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl ArgocdApi {
    pub fn new(spec: &crate::config::clusters::ArgocdApi) -> Result<ArgocdApi, ClientError> {
        Self::new_text(spec).map_err(ClientError)
    }

    /// [`new`], its refusal as text.
    fn new_text(spec: &crate::config::clusters::ArgocdApi) -> Result<ArgocdApi, String> {
        let ca = spec.ca_file.as_ref().map(|p| p.display().to_string());
        let http = crate::deliver::http::client(ca.as_deref(), false).map_err(|e| format!("argocd: {e}"))?;
        Ok(ArgocdApi { http, server: spec.server.clone(), token: spec.token.clone() })
    }

    /// The resource's target state as Argo CD renders it, `None` when Argo CD has none
    /// (a resource to prune), or why it could not be had (for the diff's note).
    pub async fn target(&self, r: &Resource<'_>) -> Result<Option<Value>, ApiError> {
        self.target_text(r).await.map_err(ApiError)
    }

    /// [`Self::target`], its refusal as text.
    async fn target_text(&self, r: &Resource<'_>) -> Result<Option<Value>, String> {
        let path: String = form_urlencoded::byte_serialize(r.app_name.as_bytes()).collect();
        let url = format!("{}/api/v1/applications/{path}/managed-resources", self.server);
        let pairs = [
            ("appNamespace", r.app_namespace),
            ("group", r.group),
            ("version", r.version),
            ("kind", r.kind),
            ("namespace", r.namespace),
            ("name", r.name),
        ];
        let query: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
        let url = format!("{url}?{query}");
        let send = self.http.get(&url).bearer_auth(self.token.expose()).timeout(TIMEOUT).send();
        let mut resp = send.await.map_err(|e| format!("Argo CD API: {}", without_url(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("Argo CD API answered {status} for {} {}/{}", r.kind, r.namespace, r.name));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("Argo CD API: {}", without_url(&e)))? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(format!("Argo CD API: the answer is larger than {MAX_ANSWER_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        let v: Value = serde_json::from_slice(&body).map_err(|e| format!("Argo CD API: the answer is not JSON: {e}"))?;
        let item = v.get("items").and_then(Value::as_array).and_then(|items| {
            items.iter().find(|i| {
                let s = |k: &str| i.get(k).and_then(Value::as_str).unwrap_or_default();
                s("kind") == r.kind && s("name") == r.name && s("namespace") == r.namespace
            })
        });
        let Some(item) = item else { return Err(format!("Argo CD API: {} {}/{} is not a managed resource", r.kind, r.namespace, r.name)) };
        match item.get("targetState").and_then(Value::as_str) {
            None | Some("") | Some("null") => Ok(None),
            Some(s) => match serde_json::from_str::<Value>(s) {
                Ok(t @ Value::Object(_)) => Ok(Some(t)),
                _ => Err("Argo CD API: targetState is not a JSON object".into()),
            },
        }
    }
}

/// A reqwest error without its URL (the query names the resource, harmless, but the
/// message is clearer without it).
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(&format!(" for url ({u})"), "");
    }
    s
}

/// Why the Argo CD API client could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(pub String);

impl From<ClientError> for String {
    fn from(e: ClientError) -> String {
        e.0
    }
}

/// Why Argo CD's target state could not be had (for the diff's note).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApiError(pub String);

impl From<ApiError> for String {
    fn from(e: ApiError) -> String {
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::RawQuery;
    use axum::http::{HeaderMap, StatusCode};
    use serde_json::json;

    /// Argo CD's API on loopback: the managed resources of `shop`, for the token
    /// `t0k3n` only, filtered by the query as Argo CD filters them.
    async fn serve() -> String {
        async fn managed(
            axum::extract::Path(app): axum::extract::Path<String>,
            headers: HeaderMap,
            RawQuery(raw): RawQuery,
        ) -> Result<String, StatusCode> {
            let q: std::collections::HashMap<String, String> =
                form_urlencoded::parse(raw.unwrap_or_default().as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
            if headers.get("authorization").and_then(|h| h.to_str().ok()) != Some("Bearer t0k3n") {
                return Err(StatusCode::UNAUTHORIZED);
            }
            if app != "shop" || q.get("appNamespace").map(String::as_str) != Some("argocd") {
                return Err(StatusCode::NOT_FOUND);
            }
            let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 3}});
            let item = json!({"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web", "targetState": target.to_string(),
                              "liveState": "{}", "normalizedLiveState": "{}", "predictedLiveState": "{}"});
            let wanted = q.get("name").map(String::as_str) == Some("web") && q.get("kind").map(String::as_str) == Some("Deployment");
            Ok(json!({"items": if wanted { vec![item] } else { vec![] }}).to_string())
        }
        let app = axum::Router::new().route("/api/v1/applications/{name}/managed-resources", axum::routing::get(managed));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    fn resource<'a>(name: &'a str) -> Resource<'a> {
        Resource { app_namespace: "argocd", app_name: "shop", group: "apps", version: "v1", kind: "Deployment", namespace: "shop", name }
    }

    #[tokio::test]
    async fn the_target_state_comes_from_argo_cds_managed_resources() {
        crate::tls::init_crypto();
        let server = serve().await;
        let spec = |token: &str| crate::config::clusters::ArgocdApi {
            server: server.clone(),
            token: crate::secret::Secret::new(token.into()),
            ca_file: None,
        };
        let api = ArgocdApi::new(&spec("t0k3n")).unwrap();
        let t = api.target(&resource("web")).await.unwrap().unwrap();
        assert_eq!(t.pointer("/spec/replicas"), Some(&json!(3)));
        let e = api.target(&resource("other")).await.unwrap_err();
        assert!(e.0.contains("is not a managed resource"), "{e}");
        let e = ArgocdApi::new(&spec("wrong")).unwrap().target(&resource("web")).await.unwrap_err();
        assert!(e.0.contains("401"), "{e}");
        assert!(!e.0.contains("wrong"), "the token is not in the message: {e}");
    }
}
