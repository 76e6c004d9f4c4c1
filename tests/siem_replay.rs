//! The production example replayed through the binary with its SIEM Microsoft Sentinel
//! (`type: sentinel`), then Google SecOps (`type: secops`), each against loopback
//! stand-ins this test starts and that check what they are sent as the real services
//! would: for Sentinel an Entra ID token endpoint (client credentials) and a data
//! collection endpoint (the Logs Ingestion API) taking only the token it issued, the
//! `api-version=2023-01-01` query, the rule's immutable id and stream in the path, a
//! JSON array of at most 1 MB per call; for SecOps Google's token endpoint (a
//! service-account JWT, its RS256 signature verified with the test key's public half,
//! `tests/data/keys/`) and `logs:import` taking only the token it issued, on the
//! instance's and log type's path. Every record received is the production example's,
//! OCSF 1.8.0, valid against its class's schema (`tests/common/ocsf.rs`).
//!
//! The stand-ins record each request before answering it, and the replay ends when its
//! deliveries are done (`--deliver`): what they recorded is read once the process has
//! exited, without waiting on a clock.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{Value, json};

/// What the Logs Ingestion API takes in one call.
const ONE_MB: usize = 1_048_576;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One request as a stand-in read it.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    /// The path without the query.
    path: String,
    /// The query's pairs, decoded.
    query: BTreeMap<String, String>,
    /// Header names in lower case.
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Request {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The bearer token of `Authorization`, if any.
    fn bearer(&self) -> &str {
        self.headers.get("authorization").and_then(|a| a.strip_prefix("Bearer ")).unwrap_or_default()
    }

    /// The body as an `application/x-www-form-urlencoded` form.
    fn form(&self) -> BTreeMap<String, String> {
        pairs(&self.text())
    }
}

fn pairs(encoded: &str) -> BTreeMap<String, String> {
    let url = reqwest::Url::parse(&format!("http://x/?{encoded}")).unwrap();
    url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

/// How a stand-in answers a request: `Ok((status, body))`, or `Err(why)` when the
/// request is not what the real service takes (answered `400` with the reason, which
/// the daemon takes as final, and kept for the test to show).
type Handler = dyn Fn(&Request) -> Result<(u16, String), String> + Send + Sync;

/// Each request a stand-in answered, with the status it got or why it was refused.
type Seen = Arc<Mutex<Vec<(Request, Result<u16, String>)>>>;

/// A loopback HTTP/1.1 server on a port it picked: one request per connection, each
/// recorded with the answer's status before it is answered.
struct StandIn {
    url: String,
    seen: Seen,
}

impl StandIn {
    fn start(handler: impl Fn(&Request) -> Result<(u16, String), String> + Send + Sync + 'static) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Seen = Arc::default();
        let (s, handler): (_, Arc<Handler>) = (seen.clone(), Arc::new(handler));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (s, handler) = (s.clone(), handler.clone());
                std::thread::spawn(move || serve(stream, &*handler, &s));
            }
        });
        StandIn { url, seen }
    }

    /// The requests answered so far, with the status each got or why it was refused.
    fn seen(&self) -> Vec<(Request, Result<u16, String>)> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests answered, after checking none was refused.
    fn accepted(&self, who: &str) -> Vec<Request> {
        let seen = self.seen();
        let refused: Vec<String> =
            seen.iter().filter_map(|(r, a)| a.as_ref().err().map(|e| format!("{} {}: {e}", r.method, r.path))).collect();
        assert!(refused.is_empty(), "{who} refused: {refused:#?}");
        seen.into_iter().map(|(r, _)| r).collect()
    }
}

fn serve(stream: TcpStream, handler: &Handler, seen: &Mutex<Vec<(Request, Result<u16, String>)>>) {
    let Some(request) = read_request(&stream) else { return };
    let answer = handler(&request);
    let (status, body) = match &answer {
        Ok((status, body)) => (*status, body.clone()),
        Err(why) => (400, json!({"error": {"code": "Refused", "message": why}}).to_string()),
    };
    seen.lock().unwrap().push((request, answer.map(|(s, _)| s)));
    let mut stream = stream;
    let reason = if status < 300 { "OK" } else { "Refused" };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// One request (its body by `content-length`), or `None` if it broke off.
fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok().filter(|n| *n > 0)?;
    let mut words = first.split_whitespace();
    let method = words.next()?.to_string();
    let target = words.next()?.to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok().filter(|n| *n > 0)?;
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let len = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, path: path.to_string(), query: pairs(query), headers, body })
}

/// A token endpoint's answer, and the token remembered as issued.
fn issue(issued: &Mutex<Vec<String>>, token: String) -> Result<(u16, String), String> {
    issued.lock().unwrap().push(token.clone());
    Ok((200, json!({"token_type": "Bearer", "expires_in": 3599, "access_token": token}).to_string()))
}

/// `examples/production` replayed with its SIEM service `siem` (YAML of the service's
/// settings, indented for `services.siem`; chat and paging to the console, no audit
/// listener), with `secrets` as `DRIFTWATCH_SECRET_*` variables, every notification
/// delivered; the process's output.
fn replay_production(siem: &str, secrets: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let production = std::fs::read_to_string(root().join("examples/production/driftwatch.yaml")).unwrap();
    let (head, rest) = production.split_once("services:\n").unwrap();
    let (_, rest) = rest.split_once("\ntriggers:\n").unwrap();
    let rest = rest.split("\n# Kubernetes audit events").next().unwrap();
    let config = format!("{head}services:\n  chat: {{type: console}}\n  oncall: {{type: console}}\n  siem:\n{siem}\ntriggers:\n{rest}\n");
    let config_path = dir.path().join("driftwatch.yaml");
    std::fs::write(&config_path, config).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_driftwatch"));
    c.args(["run", "--replay", root().join("examples/production").to_str().unwrap(), "--config", config_path.to_str().unwrap()])
        .args(["--state", dir.path().join("state.redb").to_str().unwrap(), "--deliver=60"])
        .env_remove("DRIFTWATCH_LOG");
    for (name, value) in secrets {
        c.env(format!("DRIFTWATCH_SECRET_{name}"), value);
    }
    let o = c.output().unwrap();
    let out = format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{siem}\n{out}");
    // Every notification delivered: no dead letter, nothing left waiting.
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["deliveries", "--state", dir.path().join("state.redb").to_str().unwrap(), "--output", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{siem}: dead letters: {v}\n{out}");
    assert_eq!(v["pending"].as_array().map(Vec::len), Some(0), "{siem}: still waiting: {v}\n{out}");
    out
}

// ---------------------------------------------------------------- Microsoft Sentinel

const TENANT: &str = "tenant-1";
const CLIENT_ID: &str = "app-1";
const CLIENT_SECRET: &str = "Qx8~SECRET-sentinel-client-7f3a";
const DCR: &str = "dcr-00112233445566778899aabbccddeeff";
const STREAM: &str = "Custom-DriftwatchOcsf";

/// Entra ID's token endpoint for the tenant: the client-credentials grant of the
/// application with its secret, for Monitor's scope; a new token each time.
fn entra(issued: Arc<Mutex<Vec<String>>>) -> StandIn {
    let count = AtomicUsize::new(0);
    StandIn::start(move |r| {
        if (r.method.as_str(), r.path.as_str()) != ("POST", &format!("/{TENANT}/oauth2/v2.0/token")) {
            return Err(format!("not the tenant's token endpoint: {} {}", r.method, r.path));
        }
        let form = r.form();
        let get = |k: &str| form.get(k).map(String::as_str);
        let expected = (Some("client_credentials"), Some(CLIENT_ID), Some("https://monitor.azure.com//.default"), Some(CLIENT_SECRET));
        if (get("grant_type"), get("client_id"), get("scope"), get("client_secret")) != expected {
            return Err(format!("not the application's client credentials for Monitor: {form:?}"));
        }
        issue(&issued, format!("eyJ0eXAiOiJKV1QifQ.entra-stand-in-token-{}", count.fetch_add(1, Ordering::SeqCst) + 1))
    })
}

/// A data collection endpoint: the rule's stream, the API's version, a token Entra ID
/// issued, a JSON array within 1 MB whose records each have `TimeGenerated`; `204`.
fn dce(issued: Arc<Mutex<Vec<String>>>) -> StandIn {
    StandIn::start(move |r| {
        if !issued.lock().unwrap().iter().any(|t| t == r.bearer()) {
            return Err(format!("a bearer token Entra ID did not issue: {:?}", r.headers.get("authorization")));
        }
        if (r.method.as_str(), r.path.as_str()) != ("POST", &format!("/dataCollectionRules/{DCR}/streams/{STREAM}")) {
            return Err(format!("not the rule's stream: {} {}", r.method, r.path));
        }
        if r.query.get("api-version").map(String::as_str) != Some("2023-01-01") || r.query.len() != 1 {
            return Err(format!("the query is not api-version=2023-01-01: {:?}", r.query));
        }
        if r.headers.get("content-type").map(String::as_str) != Some("application/json") {
            return Err(format!("content-type {:?}", r.headers.get("content-type")));
        }
        if r.body.len() > ONE_MB {
            return Err(format!("a call of {} bytes, past 1 MB", r.body.len()));
        }
        let records: Vec<Value> = serde_json::from_slice(&r.body).map_err(|e| format!("not a JSON array: {e}"))?;
        if records.is_empty() {
            return Err("an empty array".into());
        }
        for rec in &records {
            let generated = rec["TimeGenerated"].as_str().unwrap_or_default();
            chrono::DateTime::parse_from_rfc3339(generated).map_err(|e| format!("TimeGenerated {generated:?}: {e}"))?;
        }
        Ok((204, String::new()))
    })
}

/// The production example into Sentinel in OCSF: tokens from the stand-in Entra ID,
/// every call one the Logs Ingestion API takes, every record the example's, valid.
#[test]
fn the_production_example_reaches_sentinel_through_the_logs_ingestion_api() {
    let issued: Arc<Mutex<Vec<String>>> = Arc::default();
    let (entra, dce) = (entra(issued.clone()), dce(issued.clone()));
    let siem = format!(
        "    type: sentinel\n    endpoint: {}\n    dcrImmutableId: {DCR}\n    stream: {STREAM}\n    tenantId: {TENANT}\n    \
         clientId: {CLIENT_ID}\n    clientSecret: $sentinel-secret\n    authorityHost: {}\n    format: ocsf\n",
        dce.url, entra.url
    );
    let out = replay_production(&siem, &[("SENTINEL_SECRET", CLIENT_SECRET)]);
    let tokens = entra.accepted("Entra ID");
    assert!(!tokens.is_empty(), "a token was fetched");
    assert!(tokens.len() <= 2, "the token is kept, not fetched per call: {}", tokens.len());
    let calls = dce.accepted("the data collection endpoint");
    assert!(!calls.is_empty(), "no call reached the data collection endpoint\n{out}");
    let mut records = Vec::new();
    for call in &calls {
        assert!(call.body.len() <= ONE_MB);
        assert!(!call.text().contains(CLIENT_SECRET), "the client secret in a call");
        for mut rec in serde_json::from_slice::<Vec<Value>>(&call.body).unwrap() {
            // The column the rule adds to every row, not an OCSF attribute.
            rec.as_object_mut().unwrap().remove("TimeGenerated");
            records.push(rec);
        }
    }
    assert!(!out.contains(CLIENT_SECRET), "the client secret in the output");
    common::ocsf::check("sentinel", &records);
    each_once("sentinel", &records);
}

/// Every record received once (`metadata.uid`).
fn each_once(kind: &str, records: &[Value]) {
    let mut uids: Vec<&str> = records.iter().map(|r| r["metadata"]["uid"].as_str().unwrap()).collect();
    let n = uids.len();
    uids.sort_unstable();
    uids.dedup();
    assert_eq!(uids.len(), n, "{kind}: a record received twice");
}

// ------------------------------------------------------------------- Google SecOps

/// The throwaway service account key (tests/data/keys/README.md).
const KEY_PEM: &str = include_str!("data/keys/service-account-test-key.pem");
const EMAIL: &str = "driftwatch@driftwatch-test.iam.gserviceaccount.com";
const KEY_ID: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c";
const PROJECT: &str = "driftwatch-test";
const INSTANCE: &str = "00112233-4455-6677-8899-aabbccddeeff";
/// The log type when `logType` is absent.
const LOG_TYPE: &str = "DRIFTWATCH_OCSF";
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

fn b64url(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).map_err(|e| format!("base64url: {e}"))
}

/// Google's token endpoint at `/token`: the JWT bearer grant with a JWT the test key
/// signed (RS256, its key id) for the Chronicle API's scope, addressed to this
/// endpoint, valid at most an hour from about now; a new token each time.
fn google_token(issued: Arc<Mutex<Vec<String>>>, token_uri: Arc<Mutex<String>>) -> StandIn {
    let public = driftwatch::deliver::jwt::rsa_key(KEY_PEM, "the test key").unwrap().public().as_ref().to_vec();
    let count = AtomicUsize::new(0);
    StandIn::start(move |r| {
        if (r.method.as_str(), r.path.as_str()) != ("POST", "/token") {
            return Err(format!("not the token endpoint: {} {}", r.method, r.path));
        }
        if r.headers.get("content-type").map(String::as_str) != Some("application/x-www-form-urlencoded") {
            return Err("not a form".into());
        }
        let form = r.form();
        if form.get("grant_type").map(String::as_str) != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
            return Err(format!("grant_type {:?}", form.get("grant_type")));
        }
        let jwt = form.get("assertion").ok_or("no assertion")?;
        let [header, claims, signature] = jwt.split('.').collect::<Vec<_>>()[..] else { return Err("not a JWT".into()) };
        let key = ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, &public);
        key.verify(format!("{header}.{claims}").as_bytes(), &b64url(signature)?).map_err(|_| "Invalid JWT Signature.".to_string())?;
        let header: Value = serde_json::from_slice(&b64url(header)?).map_err(|e| e.to_string())?;
        if header != json!({"alg": "RS256", "typ": "JWT", "kid": KEY_ID}) {
            return Err(format!("header {header}"));
        }
        let c: Value = serde_json::from_slice(&b64url(claims)?).map_err(|e| e.to_string())?;
        let aud = token_uri.lock().unwrap().clone();
        if (c["iss"].as_str(), c["scope"].as_str(), c["aud"].as_str()) != (Some(EMAIL), Some(SCOPE), Some(aud.as_str())) {
            return Err(format!("claims {c}"));
        }
        let (now, iat, exp) = (chrono::Utc::now().timestamp(), c["iat"].as_i64().unwrap_or(0), c["exp"].as_i64().unwrap_or(0));
        if (iat - now).abs() > 60 || exp <= iat || exp - iat > 3600 {
            return Err(format!("iat {iat}, exp {exp}, now {now}"));
        }
        issue(&issued, format!("ya29.stand-in-token-{}", count.fetch_add(1, Ordering::SeqCst) + 1))
    })
}

/// The Chronicle API's `logs:import` for the instance and log type: a token the token
/// endpoint issued, a body within 1 MB of the API's shape whose entries' `data` decode
/// to JSON records, with RFC 3339 `logEntryTime` no later than `collectionTime`.
fn logs_import(issued: Arc<Mutex<Vec<String>>>) -> StandIn {
    let path = format!("/v1alpha/projects/{PROJECT}/locations/us/instances/{INSTANCE}/logTypes/{LOG_TYPE}/logs:import");
    StandIn::start(move |r| {
        if !issued.lock().unwrap().iter().any(|t| t == r.bearer()) {
            return Err(format!("a bearer token Google did not issue: {:?}", r.headers.get("authorization")));
        }
        if (r.method.as_str(), r.path.as_str()) != ("POST", path.as_str()) || !r.query.is_empty() {
            return Err(format!("not the log type's logs:import: {} {} {:?}", r.method, r.path, r.query));
        }
        if r.body.len() > ONE_MB {
            return Err(format!("a call of {} bytes, past 1 MB", r.body.len()));
        }
        secops_records(&r.body).map(|_| (200, "{}".to_string()))
    })
}

/// The records of a `logs:import` body, or why it is not one the API takes.
fn secops_records(body: &[u8]) -> Result<Vec<Value>, String> {
    let body: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let logs = body["inlineSource"]["logs"].as_array().filter(|l| !l.is_empty()).ok_or(format!("no inlineSource.logs: {body}"))?;
    let time = |e: &Value, k: &str| {
        let t = e[k].as_str().unwrap_or_default();
        chrono::DateTime::parse_from_rfc3339(t).map_err(|err| format!("{k} {t:?}: {err}"))
    };
    let mut records = Vec::new();
    for entry in logs {
        if time(entry, "logEntryTime")? > time(entry, "collectionTime")? {
            return Err(format!("collected before it was logged: {entry}"));
        }
        let data = base64::engine::general_purpose::STANDARD
            .decode(entry["data"].as_str().unwrap_or_default())
            .map_err(|e| format!("data is not base64: {e}"))?;
        records.push(serde_json::from_slice(&data).map_err(|e| format!("data is not a JSON record: {e}"))?);
    }
    Ok(records)
}

/// The production example into Google SecOps with a service account key, OCSF by
/// default: tokens from the stand-in token endpoint for a JWT the key signed, every
/// call one `logs:import` takes, every record the example's, valid.
#[test]
fn the_production_example_reaches_google_secops_through_logs_import() {
    let issued: Arc<Mutex<Vec<String>>> = Arc::default();
    let token_uri: Arc<Mutex<String>> = Arc::default();
    let token = google_token(issued.clone(), token_uri.clone());
    *token_uri.lock().unwrap() = format!("{}/token", token.url);
    let api = logs_import(issued.clone());
    let key_file = json!({"type": "service_account", "project_id": PROJECT, "private_key_id": KEY_ID, "private_key": KEY_PEM,
        "client_email": EMAIL, "client_id": "100000000000000000001", "token_uri": format!("{}/token", token.url)})
    .to_string();
    let siem = format!(
        "    type: secops\n    endpoint: {}\n    project: {PROJECT}\n    location: us\n    instance: {INSTANCE}\n    \
         credentials: $secops-key\n",
        api.url
    );
    let out = replay_production(&siem, &[("SECOPS_KEY", &key_file)]);
    let tokens = token.accepted("the token endpoint");
    assert!(!tokens.is_empty(), "a token was fetched");
    assert!(tokens.len() <= 2, "the token is kept, not fetched per call: {}", tokens.len());
    let calls = api.accepted("logs:import");
    assert!(!calls.is_empty(), "no call reached logs:import\n{out}");
    let key_line = KEY_PEM.lines().nth(5).unwrap();
    assert!(!out.contains(key_line), "the private key in the output");
    let records: Vec<Value> = calls
        .iter()
        .flat_map(|c| {
            assert!(!c.text().contains(key_line), "the private key in a call");
            secops_records(&c.body).unwrap()
        })
        .collect();
    common::ocsf::check("secops", &records);
    each_once("secops", &records);
}
