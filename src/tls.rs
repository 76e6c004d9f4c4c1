//! The process's TLS set-up: ring as rustls's crypto provider, shared by the HTTP
//! destinations, SMTP, syslog over TLS and the Kubernetes client.

/// Installs ring as the process's rustls crypto provider. Idempotent; must run before
/// any TLS client or server is built (kube and reqwest panic without one).
pub fn init_crypto() {
    // An error only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
