//! The Google Security Operations destination against loopback stand-ins that check
//! what they are sent as Google would: a token endpoint that verifies the JWT's RS256
//! signature with the test key's public half and its claims, then issues a new access
//! token; an ingestion endpoint that takes only a token it issued, on the instance's
//! and log type's path, a body of the API's shape within 1 MB whose entries decode to
//! records; a metadata server. Every record is validated against the OCSF schema.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{Value, json};

use super::payload;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::{Kind, Spec};
use crate::deliver::outcome::Outcome;
use crate::deliver::testkit::{
    HttpReceiver, Recorded, Reply, batch_with_a_poisoned_record, check_all_scenarios, check_http_kind, deliver, deliver_as_one_batch, form, maker,
    service,
};
use crate::deliver::{Deliverer, siem};
use crate::model::{DestinationKind, Notification};
use crate::secret::Secrets;

/// The throwaway key the client signs with (tests/data/keys/README.md).
const KEY_PEM: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/keys/service-account-test-key.pem"));
/// Another throwaway key (tests/data/keys/README.md): what the token endpoint must refuse.
const OTHER_KEY_PEM: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/keys/github-app-test-key.pem"));
const EMAIL: &str = "driftwatch@driftwatch-test.iam.gserviceaccount.com";
const KEY_ID: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c";
/// Every access token the stand-ins issue starts so.
const TOKEN_PREFIX: &str = "ya29.stand-in-token-";
const INSTANCE: &str = "00112233-4455-6677-8899-aabbccddeeff";
const PATH: &str = "/v1alpha/projects/driftwatch-test/locations/us/instances/00112233-4455-6677-8899-aabbccddeeff/logTypes/DRIFTWATCH_OCSF/logs:import";

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap_or_default()
}

/// Google's error body.
fn google_error(code: u16, status: &str, message: &str) -> String {
    json!({"error": {"code": code, "message": message, "status": status}}).to_string()
}

/// A line of the private key's PEM: what must never show anywhere.
fn key_line() -> &'static str {
    KEY_PEM.lines().nth(5).unwrap()
}

/// A service account key file signed with `pem` whose token endpoint is `token_uri`.
fn key_file(pem: &str, token_uri: &str) -> String {
    json!({"type": "service_account", "project_id": "driftwatch-test", "private_key_id": KEY_ID, "private_key": pem,
        "client_email": EMAIL, "client_id": "100000000000000000001", "token_uri": token_uri})
    .to_string()
}

/// The stand-ins: Google's token endpoint and the Chronicle API.
struct Google {
    token: HttpReceiver,
    api: HttpReceiver,
    /// The access tokens the token endpoint issued (and any a test adds): the only
    /// ones the API takes.
    issued: Arc<Mutex<Vec<String>>>,
    /// The API refuses (400) an entry whose record holds this text.
    refuse: Arc<Mutex<Option<String>>>,
}

impl Google {
    async fn start() -> Google {
        let issued = Arc::new(Mutex::new(Vec::new()));
        let refuse = Arc::new(Mutex::new(None::<String>));
        let token = HttpReceiver::start(Reply::new(500, "unused")).await;
        let (token_uri, count, tokens) = (format!("{}/token", token.url()), Arc::new(AtomicUsize::new(0)), issued.clone());
        let public = crate::deliver::jwt::rsa_key(KEY_PEM, "the test key").unwrap().public().as_ref().to_vec();
        token.answer_with(move |r| {
            Some(match verify_token_request(r, &public, &token_uri) {
                Ok(()) => {
                    let t = format!("{TOKEN_PREFIX}{}", count.fetch_add(1, Ordering::SeqCst) + 1);
                    tokens.lock().unwrap().push(t.clone());
                    Reply::new(200, &json!({"access_token": t, "expires_in": 3599, "token_type": "Bearer"}).to_string())
                }
                Err(why) => Reply::new(400, &json!({"error": "invalid_grant", "error_description": why}).to_string()),
            })
        });
        let api = HttpReceiver::start(Reply::new(200, "")).await;
        let (tokens, refused) = (issued.clone(), refuse.clone());
        api.answer_with(move |r| {
            let bearer = r.headers.get("authorization").and_then(|a| a.strip_prefix("Bearer ")).unwrap_or_default();
            if !tokens.lock().unwrap().iter().any(|t| t == bearer) {
                return Some(Reply::new(401, &google_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")));
            }
            if (r.method.as_str(), r.path.as_str()) != ("POST", PATH) {
                return Some(Reply::new(404, &google_error(404, "NOT_FOUND", "not found")));
            }
            if r.body.len() > payload::MAX_CALL_BYTES {
                return Some(Reply::new(413, "request too large"));
            }
            let records = match read_call(r) {
                Ok(records) => records,
                Err(why) => return Some(Reply::new(400, &google_error(400, "INVALID_ARGUMENT", &why))),
            };
            let needle = refused.lock().unwrap().clone();
            let poisoned = needle.is_some_and(|n| records.iter().any(|rec| rec.to_string().contains(&n)));
            poisoned.then(|| Reply::new(400, &google_error(400, "INVALID_ARGUMENT", "log entry 0: the log type's parser refused it")))
        });
        Google { token, api, issued, refuse }
    }

    fn secrets(&self) -> Secrets {
        Secrets::from_map([("secops-key", key_file(KEY_PEM, &format!("{}/token", self.token.url())))])
    }

    fn config(&self, format: &str) -> Value {
        json!({"endpoint": self.api.url(), "project": "driftwatch-test", "location": "us", "instance": INSTANCE,
            "credentials": "$secops-key", "format": format})
    }
}

/// Why a token request is not the JWT bearer grant with a JWT the test key signed for
/// Google's token endpoint, valid at most an hour (`Ok`: it is).
fn verify_token_request(r: &Recorded, public: &[u8], token_uri: &str) -> Result<(), String> {
    if (r.method.as_str(), r.path.as_str()) != ("POST", "/token") {
        return Err(format!("{} {}", r.method, r.path));
    }
    if r.headers.get("content-type").map(String::as_str) != Some("application/x-www-form-urlencoded") {
        return Err("not a form".into());
    }
    let form = form(&r.body);
    if form.get("grant_type").map(String::as_str) != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
        return Err("grant_type".into());
    }
    let jwt = form.get("assertion").ok_or("no assertion")?;
    let parts: Vec<&str> = jwt.split('.').collect();
    let [header, claims, signature] = parts[..] else { return Err("not a JWT".into()) };
    let key = ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, public);
    key.verify(format!("{header}.{claims}").as_bytes(), &b64(signature)).map_err(|_| "Invalid JWT Signature.".to_string())?;
    let header: Value = serde_json::from_slice(&b64(header)).map_err(|e| e.to_string())?;
    if header != json!({"alg": "RS256", "typ": "JWT", "kid": KEY_ID}) {
        return Err(format!("header {header}"));
    }
    let c: Value = serde_json::from_slice(&b64(claims)).map_err(|e| e.to_string())?;
    let now = chrono::Utc::now().timestamp();
    let (iat, exp) = (c["iat"].as_i64().unwrap_or_default(), c["exp"].as_i64().unwrap_or_default());
    let expected = (Some(EMAIL), Some(super::token::SCOPE), Some(token_uri));
    if (c["iss"].as_str(), c["scope"].as_str(), c["aud"].as_str()) != expected {
        return Err(format!("claims {c}"));
    }
    if (iat - now).abs() > 60 || exp <= iat || exp - iat > 3600 {
        return Err(format!("iat {iat}, exp {exp}, now {now}"));
    }
    Ok(())
}

/// The records of a call, or why its body is not what `logs:import` takes: an
/// `inlineSource` with `logs`, each a base64 record and the two times, the collection
/// after the entry's.
fn read_call(r: &Recorded) -> Result<Vec<Value>, String> {
    if r.headers.get("content-type").map(String::as_str) != Some("application/json") {
        return Err("not JSON".into());
    }
    let body: Value = serde_json::from_str(&r.body).map_err(|e| e.to_string())?;
    let source = body.get("inlineSource").and_then(Value::as_object).ok_or("no inlineSource")?;
    let logs = source.get("logs").and_then(Value::as_array).filter(|l| !l.is_empty()).ok_or("no logs")?;
    let time = |v: &Value| v.as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).ok_or(format!("not a time: {v}"));
    let mut records = Vec::new();
    for log in logs {
        let data = base64::engine::general_purpose::STANDARD.decode(log["data"].as_str().ok_or("no data")?).map_err(|e| e.to_string())?;
        let record: Value = serde_json::from_slice(&data).map_err(|e| e.to_string())?;
        let (logged, collected) = (time(&log["logEntryTime"])?, time(&log["collectionTime"])?);
        if collected <= logged {
            return Err("collectionTime must be after logEntryTime".into());
        }
        records.push(record);
    }
    Ok(records)
}

/// What every call must be, and its records.
fn check_call(r: &Recorded) -> Vec<Value> {
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", PATH));
    assert!(r.headers["authorization"].starts_with(&format!("Bearer {TOKEN_PREFIX}")), "a token the stand-in issued");
    assert!(r.body.len() <= 1_000_000, "a call within 1 MB: {}", r.body.len());
    read_call(r).unwrap()
}

fn big(name: &str) -> Notification {
    let mut n = sample(DestinationKind::Secops, "secops");
    n.meta.name = name.into();
    n.payload = json!({"message": format!("{name} {}", "x".repeat(300_000))});
    n
}

#[tokio::test]
async fn compliance() {
    let google = Google::start().await;
    let spec = Spec::<super::Secops>::parse(google.config("ocsf")).unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("secops", env).unwrap();
    let mut n = sample(DestinationKind::Secops, "secops");
    n.episode = Some(crate::deliver::ocsf::tests::an_episode_with_requests());
    let refused = Reply::new(400, &google_error(400, "INVALID_ARGUMENT", "Invalid log entry"));
    let r = check_http_kind(&google.api, &make, &n, &google.secrets(), key_line(), Reply::new(200, ""), refused.clone()).await;
    let records = check_call(&r);
    assert_eq!(records.len(), 3, "a Detection Finding and the API Activity of each audited request, one entry each");
    records.iter().for_each(crate::deliver::ocsf::tests::assert_valid);
    let body: Value = serde_json::from_str(&r.body).unwrap();
    for (log, record) in body["inlineSource"]["logs"].as_array().unwrap().iter().zip(&records) {
        // The time the record says; a moment before the collection if that is not before.
        let collected = chrono::DateTime::parse_from_rfc3339(log["collectionTime"].as_str().unwrap()).unwrap();
        let expected = siem::record_time(record).unwrap().min(collected.to_utc() - chrono::Duration::milliseconds(1));
        assert_eq!(log["logEntryTime"].as_str().unwrap(), expected.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
    assert!(google.token.requests().iter().all(|r| r.accepted), "every JWT verified");
    // The access tokens, which no configuration names, stay out of the logs, dead
    // letters, outbox and counters too.
    check_all_scenarios(&google.api, &make, &n, &google.secrets(), TOKEN_PREFIX, Reply::new(200, ""), refused).await;
}

/// ECS when `format` says so: the same entries, each an ECS record.
#[tokio::test]
async fn format_ecs_imports_ecs_records() {
    let google = Google::start().await;
    let svc = service(&maker::<super::Secops>(google.config("ecs")), &google.secrets());
    assert_eq!(deliver(&svc, &sample(DestinationKind::Secops, "secops")).await, Outcome::Delivered);
    let records = check_call(&google.api.requests()[0]);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["ecs"]["version"], "8.11.0");
}

/// A batch of more than 1 MB of entries goes in several calls (the stand-in refuses a
/// larger one), cut between notifications: every record once, in order.
#[tokio::test]
async fn a_batch_over_one_megabyte_is_split_between_notifications() {
    let google = Google::start().await;
    let svc = service(&maker::<super::Secops>(google.config("ocsf")), &google.secrets());
    let names = ["first", "second", "third", "fourth", "fifth"];
    let batch: Vec<Notification> = names.iter().map(|n| big(n)).collect();
    let outcomes = svc.deliverer.deliver_each(&batch).await;
    assert!(outcomes.iter().all(|o| *o == Outcome::Delivered), "{outcomes:?}");
    let calls = google.api.requests();
    assert!(calls.len() >= 3, "{} calls for five entries of ~400 KB", calls.len());
    let mut seen = Vec::new();
    for c in &calls {
        for r in check_call(c) {
            crate::deliver::ocsf::tests::assert_valid(&r);
            seen.push(r["message"].as_str().unwrap().split(' ').next().unwrap().to_string());
        }
    }
    assert_eq!(seen, names, "each notification once, in order");
}

/// A `429` is retried after its `Retry-After`; the earlier calls' notifications are
/// delivered and not sent again, the later ones wait with it, without a call.
#[tokio::test]
async fn a_429_is_retried_after_its_retry_after_and_the_calls_after_it_wait() {
    let google = Google::start().await;
    let svc = service(&maker::<super::Secops>(google.config("ocsf")), &google.secrets());
    let batch: Vec<Notification> = ["first", "second", "third", "fourth"].iter().map(|n| big(n)).collect();
    let throttled = Reply::new(429, &google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded")).header("Retry-After", "7");
    google.api.script(vec![Reply::new(200, ""), throttled]);
    let outcomes = svc.deliverer.deliver_each(&batch).await;
    let delivered = outcomes.iter().take_while(|o| **o == Outcome::Delivered).count();
    assert!((1..4).contains(&delivered), "some in the first call, not all: {outcomes:?}");
    for o in &outcomes[delivered..] {
        let Outcome::Retry { reason, after } = o else { panic!("{outcomes:?}") };
        assert_eq!((reason.as_str(), *after), ("HTTP 429 RESOURCE_EXHAUSTED: Quota exceeded", Some(std::time::Duration::from_secs(7))));
    }
    assert_eq!(google.api.requests().len(), 2, "no call after the one to be retried");
    assert!(svc.deliverer.deliver_each(&batch[delivered..]).await.iter().all(|o| *o == Outcome::Delivered));
}

/// A `400` dead-letters only the notification whose entry the API refuses, with
/// Google's message; the others of its batch are delivered (each sent again alone).
#[tokio::test]
async fn a_400_dead_letters_only_its_notification_with_googles_message() {
    let google = Google::start().await;
    *google.refuse.lock().unwrap() = Some("poisoned".into());
    let batch = batch_with_a_poisoned_record(DestinationKind::Secops, "secops");
    let state = Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), google.secrets());
    let svc = maker::<super::Secops>(google.config("ocsf"))(&env);
    let dead = deliver_as_one_batch(svc, state, &batch).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].permanent, "{dead:?}");
    assert_eq!(dead[0].error, "HTTP 400 INVALID_ARGUMENT: log entry 0: the log type's parser refused it");
    let accepted: Vec<String> =
        google.api.requests().iter().filter(|r| r.accepted).flat_map(check_call).map(|r| r.to_string()).collect();
    assert!(accepted.iter().any(|r| r.contains("good-0")) && accepted.iter().any(|r| r.contains("good-2")), "{accepted:?}");
    assert!(!accepted.iter().any(|r| r.contains("poisoned")));
}

/// One token serves many calls while it is fresh; it is fetched again five minutes
/// before it expires (never sent stale), and at once after a `401`.
#[tokio::test]
async fn the_token_is_kept_refreshed_before_expiry_and_replaced_after_a_401() {
    let google = Google::start().await;
    let cfg = <super::Secops as Kind>::config(google.config("ocsf")).unwrap();
    let state = Arc::new(crate::state::Store::in_memory().unwrap());
    let client = super::SecopsClient::new(&cfg, &crate::deliver::testkit::env(state, google.secrets())).unwrap();
    let n = [sample(DestinationKind::Secops, "secops")];
    let bearer = |i: usize| google.api.requests()[i].headers["authorization"].clone();
    for _ in 0..3 {
        assert_eq!(client.deliver(&n).await, Outcome::Delivered);
    }
    assert_eq!((google.token.requests().len(), google.api.requests().len()), (1, 3), "one token, three calls");
    // It lasts 3599 s: kept until 300 s before.
    client.age_token(std::time::Duration::from_secs(3298)).await;
    assert_eq!(client.deliver(&n).await, Outcome::Delivered);
    assert_eq!(bearer(3), format!("Bearer {TOKEN_PREFIX}1"));
    client.age_token(std::time::Duration::from_secs(2)).await;
    assert_eq!(client.deliver(&n).await, Outcome::Delivered);
    assert_eq!(bearer(4), format!("Bearer {TOKEN_PREFIX}2"), "a new token before the old one expired");

    google.issued.lock().unwrap().clear();
    let o = client.deliver(&n).await;
    assert!(matches!(&o, Outcome::Retry { reason, .. } if reason.starts_with("HTTP 401 UNAUTHENTICATED")), "{o:?}");
    assert_eq!(client.deliver(&n).await, Outcome::Delivered);
    assert_eq!(bearer(6), format!("Bearer {TOKEN_PREFIX}3"), "a new token after the 401");
    assert_eq!(google.token.requests().len(), 3);
    assert!(google.token.requests().iter().all(|r| r.accepted), "every JWT verified");
    google.api.requests().iter().filter(|r| r.accepted).for_each(|r| drop(check_call(r)));
}

/// A token endpoint that throttles, or refuses the assertion (here one signed with
/// another key, which the stand-in's verification catches), is the notifications'
/// retry, with its `Retry-After`; nothing is posted without a token.
#[tokio::test]
async fn a_token_endpoint_that_throttles_or_refuses_is_retried() {
    let google = Google::start().await;
    let n = sample(DestinationKind::Secops, "secops");
    let throttling = HttpReceiver::start(Reply::new(429, r#"{"error":"rate_limit_exceeded"}"#).header("Retry-After", "7")).await;
    let secrets = Secrets::from_map([("secops-key", key_file(KEY_PEM, &format!("{}/token", throttling.url())))]);
    let o = deliver(&service(&maker::<super::Secops>(google.config("ocsf")), &secrets), &n).await;
    let throttled = "Google token: HTTP 429: {\"error\":\"rate_limit_exceeded\"}";
    assert_eq!(o, Outcome::Retry { reason: throttled.into(), after: Some(std::time::Duration::from_secs(7)) });

    let forged = Secrets::from_map([("secops-key", key_file(OTHER_KEY_PEM, &format!("{}/token", google.token.url())))]);
    let o = deliver(&service(&maker::<super::Secops>(google.config("ocsf")), &forged), &n).await;
    assert!(matches!(&o, Outcome::Retry { reason, .. } if reason.starts_with("Google token: HTTP 400") && reason.contains("Invalid JWT Signature")), "{o:?}");
    assert!(google.api.requests().is_empty());
}

/// Workload identity: the metadata server's token for the workload's own account,
/// asked with `Metadata-Flavor: Google`, and no key anywhere.
#[tokio::test]
async fn workload_identity_sends_the_metadata_servers_token() {
    let google = Google::start().await;
    let token = format!("{TOKEN_PREFIX}metadata");
    google.issued.lock().unwrap().push(token.clone());
    let metadata = HttpReceiver::start(Reply::new(200, &json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}).to_string())).await;
    let mut c = google.config("ocsf");
    c.as_object_mut().unwrap().remove("credentials");
    c["workloadIdentity"] = json!(true);
    c["metadataUrl"] = json!(metadata.url());
    let svc = service(&maker::<super::Secops>(c), &Secrets::default());
    assert_eq!(deliver(&svc, &sample(DestinationKind::Secops, "secops")).await, Outcome::Delivered);
    let asked = &metadata.requests()[0];
    let path = "/computeMetadata/v1/instance/service-accounts/default/token?scopes=https://www.googleapis.com/auth/cloud-platform";
    assert_eq!((asked.method.as_str(), asked.path.as_str()), ("GET", path));
    assert_eq!(asked.headers["metadata-flavor"], "Google");
    assert_eq!(google.api.requests()[0].headers["authorization"], format!("Bearer {token}"));
    assert!(google.token.requests().is_empty());
}

/// An entry is the record's JSON in base64 with the time it says and the time it is
/// sent; a record too large for a call alone is shrunk to fit; the forwarder, when
/// named, is in the body; the region names the API's host.
#[test]
fn entries_and_the_body_have_the_apis_shape() {
    let now = chrono::Utc::now();
    let record = json!({"time": (now - chrono::Duration::seconds(90)).timestamp_millis(), "message": "m"});
    let e: Value = serde_json::from_str(&payload::entry(siem::Schema::Ocsf, record.clone(), now, 1_000)).unwrap();
    let data = base64::engine::general_purpose::STANDARD.decode(e["data"].as_str().unwrap()).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&data).unwrap(), record);
    let stamp = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert_eq!(e["logEntryTime"], stamp(siem::record_time(&record).unwrap()));
    assert_eq!(e["collectionTime"], stamp(now));
    // A record that says no time, or one ahead of this clock, is logged just before it
    // is collected.
    let ahead = json!({"time": (now + chrono::Duration::seconds(5)).timestamp_millis()});
    let e: Value = serde_json::from_str(&payload::entry(siem::Schema::Ocsf, ahead, now, 1_000)).unwrap();
    assert_eq!(e["logEntryTime"], stamp(now - chrono::Duration::milliseconds(1)));

    let mut n = sample(DestinationKind::Secops, "secops");
    n.episode = Some(crate::deliver::ocsf::tests::an_episode_with_requests());
    let origin = crate::deliver::ocsf::tests::origin();
    let finding = siem::Schema::Ocsf.records(&n, &origin, now).remove(0);
    let whole = payload::entry(siem::Schema::Ocsf, finding.clone(), now, 1_000_000);
    let room = whole.len() / 2;
    let fitted: Value = serde_json::from_str(&payload::entry(siem::Schema::Ocsf, finding, now, room)).unwrap();
    assert!(fitted.to_string().len() <= room, "{} > {room}", fitted.to_string().len());
    let shrunk: Value = serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(fitted["data"].as_str().unwrap()).unwrap()).unwrap();
    crate::deliver::ocsf::tests::assert_valid(&shrunk);

    let size = payload::call_size(Some("projects/p/locations/us/instances/i/forwarders/f-1"));
    let body = payload::body(std::slice::from_ref(&whole), Some("projects/p/locations/us/instances/i/forwarders/f-1"));
    assert!(body.len() <= size.envelope + whole.len() + 1);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["inlineSource"]["forwarder"], "projects/p/locations/us/instances/i/forwarders/f-1");
    assert_eq!(body["inlineSource"]["logs"].as_array().unwrap().len(), 1);
    assert_eq!(serde_json::from_str::<Value>(&payload::body(&[], None)).unwrap(), json!({"inlineSource": {"logs": []}}));
}

/// `region` names the API's host, `logType` and `forwarder` the path and body.
#[tokio::test]
async fn the_region_names_the_host_and_the_forwarder_is_named_whole() {
    let google = Google::start().await;
    let mut c = google.config("ocsf");
    c["logType"] = json!("CUSTOM_DRIFT");
    c["forwarder"] = json!("fw-1");
    let svc = service(&maker::<super::Secops>(c.clone()), &google.secrets());
    // The stand-in knows only the default log type's path.
    let o = deliver(&svc, &sample(DestinationKind::Secops, "secops")).await;
    assert!(matches!(&o, Outcome::Retry { reason, .. } if reason.starts_with("HTTP 404 NOT_FOUND")), "{o:?}");
    let r = &google.api.requests()[0];
    assert_eq!(r.path, PATH.replace("DRIFTWATCH_OCSF", "CUSTOM_DRIFT"));
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["inlineSource"]["forwarder"], format!("projects/driftwatch-test/locations/us/instances/{INSTANCE}/forwarders/fw-1"));

    c.as_object_mut().unwrap().remove("endpoint");
    c["region"] = json!("europe-west2");
    let cfg = <super::Secops as Kind>::config(c).unwrap();
    let client = super::SecopsClient::new(&cfg, &crate::deliver::testkit::env(Arc::new(crate::state::Store::in_memory().unwrap()), google.secrets()));
    assert!(client.unwrap().url().starts_with("https://europe-west2-chronicle.googleapis.com/v1alpha/projects/driftwatch-test/"));
}

/// A key file that cannot be used is refused when the client is built, saying why and
/// quoting none of it.
#[test]
fn a_key_file_that_cannot_be_used_is_refused_without_quoting_it() {
    let build = |key: String| {
        let spec = Spec::<super::Secops>::parse(json!({"region": "us", "project": "p", "location": "us", "instance": "i",
            "credentials": "$k"}))
        .unwrap();
        let env = crate::deliver::testkit::env(Arc::new(crate::state::Store::in_memory().unwrap()), Secrets::from_map([("k", key)]));
        spec.build("secops", &env).err().map(|e| e.to_string()).unwrap_or_default()
    };
    let secretish = "s3cr3t-Private-Material-0123456789";
    let cases = [
        (format!(r#"{{"type": "service_account", "private_key": "{secretish}", "client_email": 5}}"#), "line 1"),
        (format!(r#"{{"type": "service_account", "private_key": "{secretish}"}}"#), "missing field `client_email`"),
        (json!({"type": "external_account", "private_key": secretish, "client_email": EMAIL}).to_string(), "workloadIdentity"),
        (json!({"private_key": format!("-----BEGIN PRIVATE KEY-----\n{secretish}\n-----END PRIVATE KEY-----\n"), "client_email": EMAIL}).to_string(), "private_key"),
        (key_file(KEY_PEM, "http://oauth2.example.com/token"), "token_uri must be https://"),
        (format!("not json {secretish}"), "not a service account key file"),
    ];
    for (key, says) in cases {
        let e = build(key);
        assert!(e.contains(says), "{e:?} does not say {says:?}");
        assert!(!e.contains(secretish) && !e.contains(key_line()), "{e}");
    }
    assert_eq!(build(key_file(KEY_PEM, "https://oauth2.googleapis.com/token")), "", "a usable key file builds");
}

/// What cannot work is refused when the configuration loads.
#[test]
fn settings_are_checked_at_load() {
    let base = json!({"region": "us", "project": "driftwatch-test", "location": "us", "instance": INSTANCE, "credentials": "$k"});
    assert!(Spec::<super::Secops>::parse(base.clone()).is_ok());
    let parsed = <super::Secops as Kind>::config(base.clone()).unwrap();
    assert_eq!((parsed.format, parsed.batch_size), (siem::Schema::Ocsf, None), "OCSF by default");
    let refused = |changes: Value| {
        let mut c = base.clone();
        for (key, value) in changes.as_object().unwrap() {
            match value {
                Value::Null => drop(c.as_object_mut().unwrap().remove(key)),
                v => c[key] = v.clone(),
            }
        }
        Spec::<super::Secops>::parse(c).err().map(|e| e.to_string()).unwrap_or_default()
    };
    for (changes, says) in [
        (json!({"endpoint": "https://chronicle.us.rep.googleapis.com"}), "not both"),
        (json!({"region": null}), "region"),
        (json!({"region": null, "endpoint": "http://chronicle.example.com"}), "https://"),
        (json!({"region": "us.example.com/x?"}), "region must be"),
        (json!({"project": "../x"}), "project must be"),
        (json!({"project": "a/b"}), "project must be"),
        (json!({"location": "us?x=1"}), "location must be"),
        (json!({"instance": "a#b"}), "instance must be"),
        (json!({"instance": ""}), "instance must be"),
        (json!({"logType": "OCSF/../X"}), "logType must be"),
        (json!({"forwarder": "f/1"}), "forwarder must be"),
        (json!({"batchSize": 0}), "1 to 1000"),
        (json!({"batchSize": 1001}), "1 to 1000"),
        (json!({"credentials": null}), "workloadIdentity"),
        (json!({"workloadIdentity": true}), "not both"),
        (json!({"credentials": "{\"type\": \"service_account\"}"}), "$secret"),
        (json!({"metadataUrl": "http://169.254.169.254"}), "goes with workloadIdentity"),
        (json!({"credentials": null, "workloadIdentity": true, "metadataUrl": "file:///etc/passwd"}), "http://"),
        (json!({"format": "cef"}), "ocsf-1.7.0"),
        (json!({"customerId": "x"}), "unknown field"),
    ] {
        let e = refused(changes.clone());
        assert!(e.contains(says), "{changes}: {e:?} does not say {says:?}");
    }
    assert_eq!(refused(json!({"credentials": null, "workloadIdentity": true})), "", "workload identity alone");
    assert_eq!(refused(json!({"region": null, "endpoint": "http://127.0.0.1:8080"})), "", "loopback over http (tests)");
}
