//! Certificates for the tests' TLS listeners and the control plane: a private CA and
//! serving certificates it signs for 127.0.0.1 and localhost.
#![allow(dead_code)]

use std::path::Path;

/// A private CA.
pub struct Pki {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        Pki { ca: rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap() }
    }

    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// A serving certificate for 127.0.0.1 and localhost: (cert PEM, key PEM).
    pub fn serving(&self) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap()
            .signed_by(&key, &self.ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A CA and a serving certificate for 127.0.0.1 written to `dir` as `tls.crt` and
/// `tls.key` (a listener's `certFile`/`keyFile`); returns the CA's PEM.
pub fn serving_tls(dir: &Path) -> String {
    let pki = Pki::new("driftwatch test CA");
    let (cert, key) = pki.serving();
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    pki.ca_pem()
}
