//! Signing: pure functions, tested without a network.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::deliver::http::HttpRequest;

type HmacSha256 = Hmac<Sha256>;

/// `sha256=<hex of HMAC-SHA256(key, body)>`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Checks a signature in constant time (what a receiver does).
pub fn verify(key: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex) = header.strip_prefix("sha256=") else { return false };
    let Ok(bytes) =
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16)).collect::<Result<Vec<u8>, _>>()
    else {
        return false;
    };
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else { return false };
    mac.update(body);
    mac.verify_slice(&bytes).is_ok()
}

/// The signed POST of an ECS record, or of an array of OCSF records (its
/// `X-Driftwatch-Event` the first one's type).
pub fn signed_request(url: &str, key: &[u8], record: &serde_json::Value, timestamp: i64) -> HttpRequest {
    let body = record.to_string();
    let mut headers = std::collections::BTreeMap::new();
    headers.insert("Content-Type".to_string(), "application/json".to_string());
    headers.insert("X-Signature".to_string(), signature(key, body.as_bytes()));
    headers.insert("X-Signature-Timestamp".to_string(), timestamp.to_string());
    if let Some(action) = record.pointer("/event/action").or_else(|| record.pointer("/0/type_name")).and_then(serde_json::Value::as_str) {
        headers.insert("X-Driftwatch-Event".to_string(), action.to_string());
    }
    HttpRequest { method: "POST".into(), url: url.to_string(), headers, body }
}

/// This kind's encoder: the payload it is sent, shaped from a template's fields
/// (`deliver::kinds::encoder` picks it for the kind).
pub fn encode(f: &crate::template::Fields<'_>, _: &crate::template::Target<'_>, _: &crate::model::App) -> crate::template::Payload {
    f.message_trimmed()
}
