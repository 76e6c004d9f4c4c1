//! The Kubernetes client: from an explicit kubeconfig (and context), or inferred
//! (in-cluster service account, then `$KUBECONFIG` / `~/.kube/config`).

use std::time::Duration;

/// A client from an explicit kubeconfig (and context), or the usual inference:
/// in-cluster service account, then `$KUBECONFIG` / `~/.kube/config`.
pub async fn client(kubeconfig: Option<&std::path::Path>, context: Option<&str>) -> Result<kube::Client, String> {
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
    kube::Client::try_from(config).map_err(|e| format!("kubernetes client: {e}"))
}

/// A client for a spoke cluster (`clusters:`): its kubeconfig, or its server with a
/// bearer token and CA file. Reads from it give up as the in-cluster ones do
/// (`live::READ_TIMEOUT`); the connection itself is given 10 s.
pub async fn spoke(spec: &crate::config::clusters::ClusterSpec) -> Result<kube::Client, String> {
    use crate::config::clusters::ClusterAuth;
    crate::tls::init_crypto();
    let who = &spec.label;
    let mut config = match &spec.auth {
        ClusterAuth::Kubeconfig { path, context } => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| format!("cluster {who}: kubeconfig {}: {e}", path.display()))?;
            let options = kube::config::KubeConfigOptions { context: context.clone(), ..Default::default() };
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| format!("cluster {who}: kubeconfig {}: {e}", path.display()))?
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
    };
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(30));
    kube::Client::try_from(config).map_err(|e| format!("cluster {who}: kubernetes client: {e}"))
}
