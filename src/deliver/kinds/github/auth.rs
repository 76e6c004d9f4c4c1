//! GitHub App authentication: an RS256 JWT signed with the App's private key
//! (`iss` the app id, valid ten minutes, issued a minute back for clock drift),
//! exchanged for an installation token.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};

use crate::deliver::kind::BuildError;

/// The App's private key from PEM (PKCS#1, as GitHub hands it out, or PKCS#8).
pub fn load_private_key(pem: &str) -> Result<RsaKeyPair, BuildError> {
    let mut reader = std::io::BufReader::new(pem.as_bytes());
    let key = rustls_pemfile::private_key(&mut reader)
        .map_err(|e| BuildError::Setting(format!("the GitHub App private key is not PEM: {e}")))?
        .ok_or_else(|| BuildError::Setting("the GitHub App private key holds no private key".into()))?;
    match key {
        rustls::pki_types::PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
        rustls::pki_types::PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
        _ => return Err(BuildError::Setting("the GitHub App private key must be an RSA key".into())),
    }
    .map_err(|e| BuildError::Setting(format!("the GitHub App private key is not a usable RSA key: {e}")))
}

/// The key could not sign (ring gives no detail).
#[derive(Debug, thiserror::Error)]
#[error("signing the GitHub App JWT failed")]
pub struct SigningFailed;

/// The JWT that asks GitHub for an installation token.
pub fn app_jwt(key: &RsaKeyPair, app_id: &str, now: i64) -> Result<String, SigningFailed> {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = serde_json::json!({"iat": now - 60, "exp": now + 540, "iss": app_id});
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{header}.{claims}");
    let mut sig = vec![0; key.public().modulus_len()];
    key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut sig)
        .map_err(|_| SigningFailed)?;
    Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig)))
}
