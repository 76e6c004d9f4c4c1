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
    pub fn new(spec: &crate::config::clusters::ArgocdApi) -> Result<ArgocdApi, String> {
        let ca = spec.ca_file.as_ref().map(|p| p.display().to_string());
        let http = crate::deliver::http::client(ca.as_deref(), false).map_err(|e| format!("argocd: {e}"))?;
        Ok(ArgocdApi { http, server: spec.server.clone(), token: spec.token.clone() })
    }

    /// The resource's target state as Argo CD renders it, `None` when Argo CD has none
    /// (a resource to prune), or why it could not be had (for the diff's note).
    pub async fn target(&self, r: &Resource<'_>) -> Result<Option<Value>, String> {
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
