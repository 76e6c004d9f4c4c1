//! The process's TLS set-up: ring as rustls's crypto provider, shared by the HTTP
//! destinations, SMTP, syslog over TLS and the Kubernetes client; and the server side
//! of the audit and operations listeners (their certificate, and the client
//! certificates they require).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};

/// Installs ring as the process's rustls crypto provider. Idempotent; must run before
/// any TLS client or server is built (kube and reqwest panic without one).
pub fn init_crypto() {
    // An error only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A listener's TLS files (`audit.tls`, `operations.tls`), validated (paths resolved
/// against the config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    /// Names one of which the client certificate must carry (empty: any the CA signed).
    pub client_names: Vec<String>,
}

/// A TLS file that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {reason}")]
pub struct TlsFileError {
    pub file: String,
    pub reason: String,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|e| TlsFileError { file: path.display().to_string(), reason: e.to_string() })
}

/// A listener's TLS server configuration: a client certificate the CA signed is
/// required when `client_ca` is set, and one naming one of `client_names` when those
/// are set (`name_refused` is called for each certificate refused for its name).
pub fn server_config(t: &ServerTls, name_refused: fn()) -> Result<rustls::ServerConfig, TlsFileError> {
    let bad = |p: &Path, reason: String| TlsFileError { file: p.display().to_string(), reason };
    let (cert, key) = (t.cert.as_path(), t.key.as_path());
    let certs: Vec<_> = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| bad(cert, format!("not a PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(bad(cert, "holds no certificate".into()));
    }
    let key_der = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|e| bad(key, format!("not a PEM key: {e}")))?
        .ok_or_else(|| bad(key, "holds no private key".into()))?;
    let builder = rustls::ServerConfig::builder();
    let builder = match &t.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls_pemfile::certs(&mut read(ca)?.as_slice()) {
                let c = c.map_err(|e| bad(ca, format!("not a PEM certificate: {e}")))?;
                roots.add(c).map_err(|e| bad(ca, e.to_string()))?;
            }
            let inner = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).build().map_err(|e| bad(ca, e.to_string()))?;
            if t.client_names.is_empty() {
                builder.with_client_cert_verifier(inner)
            } else {
                let names = t
                    .client_names
                    .iter()
                    .map(|n| ServerName::try_from(n.clone()).map_err(|e| bad(ca, format!("clientNames: {n:?}: {e}"))))
                    .collect::<Result<_, _>>()?;
                builder.with_client_cert_verifier(Arc::new(Pinned { inner, names, name_refused }))
            }
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(certs, key_der).map_err(|e| bad(cert, e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// A client certificate the CA signed that must also name one of `names` (a DNS or IP
/// subject alternative name, checked the way a server's name is; the subject's common
/// name is not read, as no current TLS library reads it).
#[derive(Debug)]
struct Pinned {
    inner: Arc<dyn ClientCertVerifier>,
    names: Vec<ServerName<'static>>,
    name_refused: fn(),
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
        if self.names.iter().any(|n| cert.verify_is_valid_for_subject_name(n).is_ok()) {
            Ok(verified)
        } else {
            (self.name_refused)();
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
