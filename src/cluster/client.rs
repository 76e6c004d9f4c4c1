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
