//! RS256 JSON Web Tokens (RFC 7519, signed as RFC 7515 says) with an RSA private key
//! in PEM: what a GitHub App signs to ask for an installation token, and a Google
//! service account to ask for an access token (RFC 7523's JWT bearer grant).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};

use super::kind::BuildError;

/// An RSA private key from PEM, PKCS#1 (`BEGIN RSA PRIVATE KEY`, as GitHub hands it
/// out) or PKCS#8 (`BEGIN PRIVATE KEY`, as a Google service account key holds it).
/// `what` names the key in errors, which never hold any of it.
pub fn rsa_key(pem: &str, what: &str) -> Result<RsaKeyPair, BuildError> {
    let mut reader = std::io::BufReader::new(pem.as_bytes());
    let key = rustls_pemfile::private_key(&mut reader)
        .map_err(|e| BuildError::Setting(format!("{what} is not PEM: {e}")))?
        .ok_or_else(|| BuildError::Setting(format!("{what} holds no private key")))?;
    match key {
        rustls::pki_types::PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
        rustls::pki_types::PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
        _ => return Err(BuildError::Setting(format!("{what} must be an RSA key"))),
    }
    .map_err(|e| BuildError::Setting(format!("{what} is not a usable RSA key: {e}")))
}

/// The key could not sign (ring gives no detail).
#[derive(Debug, thiserror::Error)]
#[error("signing the JWT failed")]
pub struct SigningFailed;

/// `claims` as a JWT signed with `key` (RS256); `kid` names the key in the header
/// when the issuer has several (a service account's `private_key_id`).
pub fn rs256(key: &RsaKeyPair, kid: Option<&str>, claims: &Value) -> Result<String, SigningFailed> {
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    let signing_input = format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
    let mut sig = vec![0; key.public().modulus_len()];
    key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut sig).map_err(|_| SigningFailed)?;
    Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig)))
}
