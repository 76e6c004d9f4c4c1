//! GitHub App authentication: an RS256 JWT signed with the App's private key
//! (`iss` the app id, valid ten minutes, issued a minute back for clock drift),
//! exchanged for an installation token.

use ring::signature::RsaKeyPair;

use crate::deliver::jwt::{self, SigningFailed};
use crate::deliver::kind::BuildError;

/// The App's private key from PEM (PKCS#1, as GitHub hands it out, or PKCS#8).
pub fn load_private_key(pem: &str) -> Result<RsaKeyPair, BuildError> {
    jwt::rsa_key(pem, "the GitHub App private key")
}

/// The JWT that asks GitHub for an installation token.
pub fn app_jwt(key: &RsaKeyPair, app_id: &str, now: i64) -> Result<String, SigningFailed> {
    jwt::rs256(key, None, &serde_json::json!({"iat": now - 60, "exp": now + 540, "iss": app_id}))
}
