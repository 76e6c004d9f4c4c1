//! The keys requests are signed with: the configured access key (and session
//! token), or the temporary credentials of a role assumed with it through STS
//! `AssumeRole`, kept and fetched again before they expire. A failure to get them is
//! the notifications' retry, never a dead letter (a role being set up, a key being
//! rotated).

use std::time::{Duration, Instant};

use super::sigv4::{self, Keys, Scope};
use crate::deliver::http;
use crate::deliver::oauth::refresh_in;
use crate::deliver::outcome::{Outcome, classify_status};
use crate::secret::Secret;

/// STS's API version, and how long an assumed role's credentials are asked for.
const STS_VERSION: &str = "2011-06-15";
const SESSION_SECONDS: u64 = 3600;
/// The session name the role's CloudTrail events show.
const SESSION_NAME: &str = "driftwatch";

/// The role to assume, and with what.
pub struct Role {
    pub arn: String,
    pub external_id: Option<String>,
    /// STS's URL (`https://sts.<region>.amazonaws.com/`).
    pub url: String,
    pub region: String,
}

/// Where the signing keys come from.
pub struct Credentials {
    base: Keys,
    role: Option<Role>,
    /// Always a verifying client: the keys go to STS.
    http: reqwest::Client,
    /// The assumed role's keys, and when to fetch them again. The lock is held across
    /// a fetch, so concurrent requests wait for the one STS call.
    kept: tokio::sync::Mutex<Option<(Keys, Instant)>>,
}

impl Credentials {
    pub fn new(base: Keys, role: Option<Role>, http: reqwest::Client) -> Credentials {
        Credentials { base, role, http, kept: tokio::sync::Mutex::new(None) }
    }

    /// The keys to sign with now.
    pub async fn keys(&self) -> Result<Keys, Outcome> {
        let Some(role) = &self.role else { return Ok(self.base.clone()) };
        let mut kept = self.kept.lock().await;
        if let Some((keys, refresh_at)) = kept.as_ref()
            && Instant::now() < *refresh_at
        {
            return Ok(keys.clone());
        }
        let (keys, lifetime) = self.assume(role).await?;
        *kept = Some((keys.clone(), Instant::now() + refresh_in(lifetime)));
        Ok(keys)
    }

    /// Forgets the assumed role's keys if they are still `refused` (S3 said they
    /// expired): the retry fetches new ones.
    pub async fn forget(&self, refused: &Keys) {
        let mut kept = self.kept.lock().await;
        if kept.as_ref().is_some_and(|(k, _)| k == refused) {
            *kept = None;
        }
    }

    /// One `AssumeRole` call, signed with the configured keys.
    async fn assume(&self, role: &Role) -> Result<(Keys, Duration), Outcome> {
        let seconds = SESSION_SECONDS.to_string();
        let mut form = vec![
            ("Action", "AssumeRole"),
            ("Version", STS_VERSION),
            ("RoleArn", role.arn.as_str()),
            ("RoleSessionName", SESSION_NAME),
            ("DurationSeconds", seconds.as_str()),
        ];
        if let Some(id) = &role.external_id {
            form.push(("ExternalId", id.as_str()));
        }
        let body: String = form.iter().map(|(k, v)| format!("{k}={}", sigv4::uri_encode(v, true))).collect::<Vec<_>>().join("&");
        let url = reqwest::Url::parse(&role.url).map_err(|e| Outcome::retry(format!("STS endpoint: {e}")))?;
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let req = sigv4::Request {
            method: "POST",
            path: if url.path().is_empty() { "/" } else { url.path() },
            query: &[],
            headers: vec![("content-type".into(), content_type.into()), ("host".into(), super::client::host_of(&url))],
            payload_hash: &sigv4::hex_sha256(body.as_bytes()),
        };
        let signed = sigv4::sign(req, &self.base, &Scope { region: &role.region, service: "sts" }, chrono::Utc::now());
        let mut builder = self.http.post(url).header(reqwest::header::CONTENT_TYPE, content_type).body(body);
        for (k, v) in signed {
            builder = builder.header(k, v);
        }
        let failed = |o: Outcome| Outcome::retry(format!("STS AssumeRole: {}", o.reason()));
        let resp = builder.send().await.map_err(|e| failed(http::transport_error(e)))?;
        let status = resp.status().as_u16();
        let after = http::retry_after(&resp);
        let text = http::read_body(resp).await;
        if !(200..300).contains(&status) {
            return Err(match classify_status(status, after, &text) {
                Outcome::Retry { reason, after } => Outcome::Retry { reason: format!("STS AssumeRole: {reason}"), after },
                other => failed(other),
            });
        }
        parse_assumed(&text, chrono::Utc::now()).ok_or_else(|| Outcome::retry("STS AssumeRole: the answer holds no credentials"))
    }
}

/// The credentials of an `AssumeRoleResponse` and how long they last (taken between
/// a minute and a day; an hour when the answer does not say).
pub fn parse_assumed(xml: &str, now: chrono::DateTime<chrono::Utc>) -> Option<(Keys, Duration)> {
    let creds = element(xml, "Credentials")?;
    let keys = Keys {
        access_key_id: Secret::new(element(creds, "AccessKeyId")?.trim().to_string()),
        secret_access_key: Secret::new(element(creds, "SecretAccessKey")?.trim().to_string()),
        session_token: element(creds, "SessionToken").map(|t| Secret::new(t.trim().to_string())),
    };
    let lifetime = element(creds, "Expiration")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t.trim()).ok())
        .and_then(|t| (t.with_timezone(&chrono::Utc) - now).to_std().ok())
        .unwrap_or(Duration::from_secs(SESSION_SECONDS))
        .clamp(Duration::from_secs(60), Duration::from_secs(24 * 3600));
    Some((keys, lifetime))
}

/// The text of the first `<name>…</name>` in `xml` (STS's answers have no attributes
/// on these elements, and their values no markup).
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(&xml[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// STS's answer read: keys, token, and a lifetime from its expiration.
    #[test]
    fn an_assume_role_answer_is_read() {
        let xml = r#"<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult>
            <AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/r/driftwatch</Arn></AssumedRoleUser>
            <Credentials><AccessKeyId>ASIAEXAMPLE</AccessKeyId><SecretAccessKey>secret/key</SecretAccessKey>
            <SessionToken>token==</SessionToken><Expiration>2026-03-01T01:00:00Z</Expiration></Credentials>
            </AssumeRoleResult></AssumeRoleResponse>"#;
        let now = chrono::DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z").unwrap().with_timezone(&chrono::Utc);
        let (keys, lifetime) = parse_assumed(xml, now).unwrap();
        assert_eq!(keys.access_key_id.expose(), "ASIAEXAMPLE");
        assert_eq!(keys.secret_access_key.expose(), "secret/key");
        assert_eq!(keys.session_token.unwrap().expose(), "token==");
        assert_eq!(lifetime, Duration::from_secs(3600));
        assert!(parse_assumed("<Error><Code>AccessDenied</Code></Error>", now).is_none());
    }
}
