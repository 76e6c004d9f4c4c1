//! The Kubernetes client: from an explicit kubeconfig (and context), or inferred
//! (in-cluster service account, then `$KUBECONFIG` / `~/.kube/config`).

use std::time::Duration;

/// The Kubernetes client, as the rest of the program holds it: a handle passed on to
/// what in `cluster/` talks to the API server.
pub type ApiClient = kube::Client;

/// A client from an explicit kubeconfig (and context), or the usual inference:
/// in-cluster service account, then `$KUBECONFIG` / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&std::path::Path>, context: Option<&str>) -> Result<kube::Client, ConnectError> {
    client_as(kubeconfig, context, None).await
}

/// Why no client could be made (the kubeconfig, the cluster's entry, its Secret), as
/// text naming the cluster and the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConnectError(pub String);

impl From<ConnectError> for String {
    fn from(e: ConnectError) -> String {
        e.0
    }
}

/// [`client`], sending `user_agent` with every request (what the API server's audit
/// log records: `driftwatch break-glass` names itself so).
pub async fn client_as(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    user_agent: Option<&str>,
) -> Result<kube::Client, ConnectError> {
    client_config(kubeconfig, context, user_agent).await.map_err(ConnectError)
}

/// [`client_as`], its refusal as text.
async fn client_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    user_agent: Option<&str>,
) -> Result<kube::Client, String> {
    crate::tls::init_crypto();
    let options = kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await.map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await.map_err(|e| format!("kubeconfig: {e}"))?,
        None => kube::Config::infer().await.map_err(|e| format!("no cluster configuration found (in-cluster or kubeconfig): {e}"))?,
    };
    config.read_timeout = Some(Duration::from_secs(330));
    if let Some(agent) = user_agent {
        let value = reqwest::header::HeaderValue::from_str(agent).map_err(|e| format!("user agent {agent:?}: {e}"))?;
        config.headers.push((reqwest::header::USER_AGENT, value));
    }
    kube::Client::try_from(config).map_err(|e| format!("kubernetes client: {e}"))
}

/// A client for a spoke cluster (`clusters:`): its kubeconfig, its server with a
/// bearer token and CA file, or (opt-in) Argo CD's own cluster Secret for it, read
/// through the hub's client. Reads from it give up as the in-cluster ones do
/// (`live::READ_TIMEOUT`); the connection itself is given 10 s.
pub async fn spoke(spec: &crate::config::clusters::ClusterSpec, hub: &kube::Client) -> Result<kube::Client, ConnectError> {
    spoke_config(spec, hub).await.map_err(ConnectError)
}

/// [`spoke`], its refusal as text.
async fn spoke_config(spec: &crate::config::clusters::ClusterSpec, hub: &kube::Client) -> Result<kube::Client, String> {
    use crate::config::clusters::ClusterAuth;
    crate::tls::init_crypto();
    let who = &spec.label;
    let mut config = match &spec.auth {
        ClusterAuth::Kubeconfig { path, context } => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| format!("cluster {who}: kubeconfig {}: {e}", path.display()))?;
            let options = kube::config::KubeConfigOptions { context: context.clone(), ..Default::default() };
            let config = kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| format!("cluster {who}: kubeconfig {}: {e}", path.display()))?;
            // The same rule as for `server:` with a token: the kubeconfig's credential
            // never crosses the network in clear, and skipping verification is said.
            crate::config::clusters::server_url(&config.cluster_url.to_string())
                .map_err(|e| format!("cluster {who}: kubeconfig {}: server {e}", path.display()))?;
            if config.accept_invalid_certs {
                tracing::warn!(cluster = %who, kubeconfig = %path.display(),
                    "the kubeconfig says insecure-skip-tls-verify: the spoke's certificate is not verified");
            }
            config
        }
        ClusterAuth::Token { token, ca_file } => {
            // An in-memory kubeconfig: kube reads the CA file and keeps the token as a
            // secret string, as it does for a kubeconfig on disk.
            let mut cluster = serde_json::json!({"server": spec.server});
            if let Some(ca) = ca_file {
                cluster["certificate-authority"] = serde_json::json!(ca.display().to_string());
            }
            let kc: kube::config::Kubeconfig = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Config", "current-context": "spoke",
                "clusters": [{"name": "spoke", "cluster": cluster}],
                "users": [{"name": "driftwatch", "user": {"token": token.expose()}}],
                "contexts": [{"name": "spoke", "context": {"cluster": "spoke", "user": "driftwatch"}}],
            }))
            .map_err(|e| format!("cluster {who}: {e}"))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("cluster {who}: {e}"))?
        }
        ClusterAuth::ArgocdSecret { namespace, name } => {
            let kc = argocd_cluster_secret(hub, namespace, name).await.map_err(|e| format!("cluster {who}: {e}"))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("cluster {who}: {e}"))?
        }
    };
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    kube::Client::try_from(config).map_err(|e| format!("cluster {who}: kubernetes client: {e}"))
}

/// Argo CD's cluster Secret (`server`, `config` with `bearerToken` and
/// `tlsClientConfig`) as an in-memory kubeconfig. Exec and cloud-provider auth
/// (`execProviderConfig`, `awsAuthConfig`) need tools driftwatch does not run: refused
/// with why (use a kubeconfig entry instead).
async fn argocd_cluster_secret(hub: &kube::Client, namespace: &str, name: &str) -> Result<kube::config::Kubeconfig, String> {
    use base64::Engine;
    use k8s_openapi::api::core::v1::Secret;
    let api: kube::Api<Secret> = kube::Api::namespaced(hub.clone(), namespace);
    let secret = match api.get_opt(name).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(format!("Argo CD cluster Secret {namespace}/{name} does not exist")),
        Err(e) => return Err(format!("reading Argo CD cluster Secret {namespace}/{name}: {e}")),
    };
    let data = secret.data.unwrap_or_default();
    let text = |k: &str| data.get(k).map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default();
    let server = text("server");
    if server.is_empty() {
        return Err(format!("Argo CD cluster Secret {namespace}/{name} has no server"));
    }
    // Argo CD's credential can usually write: it never crosses the network in clear.
    crate::config::clusters::server_url(&server).map_err(|e| format!("Argo CD cluster Secret {namespace}/{name}: server {e}"))?;
    let config: serde_json::Value =
        serde_json::from_str(&text("config")).map_err(|e| format!("Argo CD cluster Secret {namespace}/{name}: config is not JSON: {e}"))?;
    for unsupported in ["execProviderConfig", "awsAuthConfig"] {
        if config.get(unsupported).is_some_and(|v| !v.is_null()) {
            return Err(format!(
                "Argo CD cluster Secret {namespace}/{name} uses {unsupported}, which driftwatch does not run: use a kubeconfig"
            ));
        }
    }
    let tls = config.get("tlsClientConfig").cloned().unwrap_or_default();
    let s = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
    // caData, certData and keyData are PEM, base64-encoded as kubeconfig data fields are.
    let valid_b64 = |x: &str| base64::engine::general_purpose::STANDARD.decode(x).is_ok();
    let mut cluster = serde_json::json!({"server": server});
    if !s(&tls, "caData").is_empty() && valid_b64(&s(&tls, "caData")) {
        cluster["certificate-authority-data"] = serde_json::json!(s(&tls, "caData"));
    }
    if tls.get("insecure").and_then(serde_json::Value::as_bool) == Some(true) {
        // Argo CD's own choice for this cluster, kept; said once, at start-up.
        tracing::warn!(secret = %format!("{namespace}/{name}"), server = %server,
            "the Argo CD cluster Secret says insecure: true: the spoke's certificate is not verified");
        cluster["insecure-skip-tls-verify"] = serde_json::json!(true);
    }
    if !s(&tls, "serverName").is_empty() {
        cluster["tls-server-name"] = serde_json::json!(s(&tls, "serverName"));
    }
    let mut user = serde_json::json!({});
    if !s(&config, "bearerToken").is_empty() {
        user["token"] = serde_json::json!(s(&config, "bearerToken"));
    }
    if !s(&tls, "certData").is_empty() && !s(&tls, "keyData").is_empty() {
        user["client-certificate-data"] = serde_json::json!(s(&tls, "certData"));
        user["client-key-data"] = serde_json::json!(s(&tls, "keyData"));
    }
    if !s(&config, "username").is_empty() {
        user["username"] = serde_json::json!(s(&config, "username"));
        user["password"] = serde_json::json!(s(&config, "password"));
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "spoke",
        "clusters": [{"name": "spoke", "cluster": cluster}],
        "users": [{"name": "driftwatch", "user": user}],
        "contexts": [{"name": "spoke", "context": {"cluster": "spoke", "user": "driftwatch"}}],
    }))
    .map_err(|e| format!("Argo CD cluster Secret {namespace}/{name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::clusters::{ClusterAuth, ClusterSpec};

    /// Review L2: a spoke's kubeconfig naming an `http://` server off loopback builds no
    /// client (its token would cross in clear); on loopback it does.
    #[tokio::test]
    async fn a_spoke_kubeconfig_over_plain_http_off_loopback_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let hub = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let spec = |server: &str| {
            let path = dir.path().join(format!("{}.kubeconfig", server.len()));
            std::fs::write(
                &path,
                format!(
                    "apiVersion: v1\nkind: Config\ncurrent-context: s\nclusters: [{{name: s, cluster: {{server: \"{server}\"}}}}]\n\
                     users: [{{name: u, user: {{token: t0ken}}}}]\ncontexts: [{{name: s, context: {{cluster: s, user: u}}}}]\n"
                ),
            )
            .unwrap();
            ClusterSpec {
                label: "spoke-1".into(),
                name: "spoke-1".into(),
                server: server.into(),
                auth: ClusterAuth::Kubeconfig { path, context: None },
                audit: None,
            }
        };
        let refused = spoke(&spec("http://spoke.example.com:6443"), &hub).await.map(|_| ()).unwrap_err().0;
        assert!(refused.contains("must be https://") && refused.contains("spoke-1"), "{refused}");
        assert!(spoke(&spec("http://127.0.0.1:6443"), &hub).await.is_ok());
    }
}
