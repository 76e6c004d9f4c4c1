//! AWS Signature Version 4 for the requests this kind makes (an S3 `PutObject`, an
//! STS `AssumeRole`): the canonical request, the string to sign, the derived key and
//! the `Authorization` header. Pure; tested against AWS's published SigV4 test suite.
//!
//! Written here rather than taken from a crate: the maintained signer (`aws-sigv4`)
//! comes with the AWS SDK's runtime crates (smithy types, its own HTTP abstractions),
//! a large tree for two request shapes; what is signed here is a few lines of HMAC
//! over `hmac` and `sha2`, which the crate already has.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The signing algorithm's name, first in the string to sign and the header.
const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// What a request is signed with: an access key, and the session token of temporary
/// credentials (sent, and signed, as `x-amz-security-token`).
#[derive(Clone, PartialEq)]
pub struct Keys {
    pub access_key_id: crate::secret::Secret,
    pub secret_access_key: crate::secret::Secret,
    pub session_token: Option<crate::secret::Secret>,
}

/// One request to sign. `path` is already in its canonical form (each segment
/// [`uri_encode`]d, `/` kept), and is the path the request is sent with, so the
/// receiver canonicalises it to the same string. `headers` are every header to sign
/// (names lower-case, with `host`), besides `x-amz-date` and the session token, which
/// [`sign`] adds.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a [(&'a str, &'a str)],
    pub headers: Vec<(String, String)>,
    /// Hex SHA-256 of the body ([`hex_sha256`]).
    pub payload_hash: &'a str,
}

/// Where the signature is valid: the region and service of the credential scope.
pub struct Scope<'a> {
    pub region: &'a str,
    pub service: &'a str,
}

/// The headers to add to the request: `x-amz-date`, the session token if any, and
/// `authorization`, signed at `at`.
pub fn sign(req: Request<'_>, keys: &Keys, scope: &Scope<'_>, at: chrono::DateTime<chrono::Utc>) -> Vec<(String, String)> {
    let amz_date = at.format("%Y%m%dT%H%M%SZ").to_string();
    let mut headers = req.headers;
    headers.push(("x-amz-date".into(), amz_date.clone()));
    if let Some(t) = &keys.session_token {
        headers.push(("x-amz-security-token".into(), t.expose().to_string()));
    }
    let signature = signature(
        &Request { headers: headers.clone(), ..req },
        keys.secret_access_key.expose(),
        scope,
        &amz_date,
    );
    let signed = signed_headers(&headers);
    let credential = format!("{}/{}/{}/{}/aws4_request", keys.access_key_id.expose(), &amz_date[..8], scope.region, scope.service);
    let mut out: Vec<(String, String)> = headers.into_iter().filter(|(k, _)| k == "x-amz-date" || k == "x-amz-security-token").collect();
    out.push(("authorization".into(), format!("{ALGORITHM} Credential={credential}, SignedHeaders={signed}, Signature={signature}")));
    out
}

/// The hex signature of `req` (its headers as given, `x-amz-date` among them).
fn signature(req: &Request<'_>, secret: &str, scope: &Scope<'_>, amz_date: &str) -> String {
    let day = &amz_date[..amz_date.len().min(8)];
    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{day}/{}/{}/aws4_request\n{}",
        scope.region,
        scope.service,
        hex_sha256(canonical_request(req).as_bytes())
    );
    let key = [day, scope.region, scope.service, "aws4_request"].iter().fold(format!("AWS4{secret}").into_bytes(), |k, part| hmac(&k, part.as_bytes()));
    hex(&hmac(&key, string_to_sign.as_bytes()))
}

/// The canonical request: method, path, sorted query, sorted headers (names
/// lower-case, values trimmed, inner runs of spaces as one), their names, and the
/// payload's hash.
fn canonical_request(req: &Request<'_>) -> String {
    let mut query: Vec<(String, String)> = req.query.iter().map(|(k, v)| (uri_encode(k, true), uri_encode(v, true))).collect();
    query.sort();
    let query: Vec<String> = query.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut headers: Vec<(String, String)> =
        req.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.split_whitespace().collect::<Vec<_>>().join(" "))).collect();
    headers.sort();
    let canonical: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    format!("{}\n{}\n{}\n{canonical}\n{}\n{}", req.method, req.path, query.join("&"), signed_headers(&req.headers), req.payload_hash)
}

/// The signed headers' names, lower-case, sorted, `;`-separated.
fn signed_headers(headers: &[(String, String)]) -> String {
    let mut names: Vec<String> = headers.iter().map(|(k, _)| k.to_ascii_lowercase()).collect();
    names.sort();
    names.dedup();
    names.join(";")
}

/// AWS's URI encoding: every byte but `A-Z a-z 0-9 - . _ ~` as `%XX` (upper-case), and
/// `/` too unless `slash` is false (a path keeps its separators).
pub fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            b'/' if !slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

pub fn hex_sha256(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    /// The credentials of AWS's SigV4 test suite (and of its S3 examples).
    fn suite_keys() -> Keys {
        Keys {
            access_key_id: Secret::new("AKIDEXAMPLE".into()),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into()),
            session_token: None,
        }
    }

    fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&chrono::Utc)
    }

    fn suite(method: &str, path: &str, query: &[(&str, &str)], body: &[u8]) -> String {
        let req = Request {
            method,
            path,
            query,
            headers: vec![("host".into(), "example.amazonaws.com".into())],
            payload_hash: &hex_sha256(body),
        };
        let headers = sign(req, &suite_keys(), &Scope { region: "us-east-1", service: "service" }, at("2015-08-30T12:36:00Z"));
        headers.into_iter().find(|(k, _)| k == "authorization").unwrap().1
    }

    /// AWS's published SigV4 test suite (aws-sig-v4-test-suite): `get-vanilla`,
    /// `get-vanilla-query-order-key-case` (the query sorted), `post-vanilla`, and
    /// `get-utf8` (a path of a non-ASCII character, percent-encoded).
    #[test]
    fn signatures_match_the_aws_test_suite() {
        let prefix = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=";
        for (method, path, query, signature) in [
            ("GET", "/", &[][..], "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
            ("GET", "/", &[("Param2", "value2"), ("Param1", "value1")][..], "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
            ("POST", "/", &[][..], "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
            ("GET", &uri_encode("/\u{1234}", false), &[][..], "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
        ] {
            assert_eq!(suite(method, path, query, b""), format!("{prefix}{signature}"), "{method} {path} {query:?}");
        }
    }

    /// A session token is sent and signed; the date header is the signing time's.
    #[test]
    fn a_session_token_is_signed_and_sent() {
        let mut keys = suite_keys();
        keys.session_token = Some(Secret::new("session-token".into()));
        let req = Request { method: "PUT", path: "/b/k", query: &[], headers: vec![("host".into(), "s3".into())], payload_hash: "UNSIGNED-PAYLOAD" };
        let headers = sign(req, &keys, &Scope { region: "eu-west-1", service: "s3" }, at("2026-03-01T00:00:01Z"));
        let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(get("x-amz-date"), "20260301T000001Z");
        assert_eq!(get("x-amz-security-token"), "session-token");
        let auth = get("authorization");
        assert!(auth.contains("/20260301/eu-west-1/s3/aws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token,"), "{auth}");
        assert!(!auth.contains("wJalrXUtnFEMI"), "the secret key is never sent");
    }

    #[test]
    fn uri_encoding_keeps_only_unreserved_characters() {
        assert_eq!(uri_encode("ext/src/1.0/region=eu-west-1/a b~", false), "ext/src/1.0/region%3Deu-west-1/a%20b~");
        assert_eq!(uri_encode("a/b", true), "a%2Fb");
    }
}
