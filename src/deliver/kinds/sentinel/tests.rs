//! The Sentinel destination against loopback stand-ins: an Entra ID token endpoint
//! (client credentials, or a federated token) and a data collection endpoint answering
//! as the Logs Ingestion API does (`204`; `429` with `Retry-After`; `400` for a record
//! the rule refuses). Every call is checked for the token the endpoint issued, the
//! API version, the rule and stream, and the 1 MB bound.

use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::outcome::Outcome;
use crate::deliver::testkit::{
    HttpReceiver, Recorded, Reply, batch_with_a_poisoned_record, form, check_all_scenarios, check_http_kind, deliver, deliver_as_one_batch, maker,
    service,
};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const CLIENT_SECRET: &str = "Qx8~SECRET-sentinel-client-7f3a";
const TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.access-token-issued-by-the-stand-in";
const DCR: &str = "dcr-00112233445566778899aabbccddeeff";
const STREAM: &str = "Custom-DriftwatchOcsf";

fn token_reply(expires_in: u64) -> Reply {
    Reply::new(200, &format!(r#"{{"token_type":"Bearer","expires_in":{expires_in},"ext_expires_in":{expires_in},"access_token":"{TOKEN}"}}"#))
}

fn config(entra: &HttpReceiver, dce: &HttpReceiver, format: &str) -> serde_json::Value {
    serde_json::json!({"endpoint": dce.url(), "dcrImmutableId": DCR, "stream": STREAM, "tenantId": "tenant-1",
        "clientId": "app-1", "clientSecret": "$sentinel-secret", "authorityHost": entra.url(), "format": format})
}

fn secrets() -> Secrets {
    Secrets::from_map([("sentinel-secret", CLIENT_SECRET)])
}

/// What every call to the data collection endpoint must be.
fn check_call(r: &Recorded) -> serde_json::Value {
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, format!("/dataCollectionRules/{DCR}/streams/{STREAM}?api-version=2023-01-01"));
    assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"), "the token the endpoint issued");
    assert_eq!(r.headers["content-type"], "application/json");
    assert!(r.body.len() <= 1_000_000, "a call within 1 MB: {}", r.body.len());
    let records: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert!(records.is_array(), "a JSON array");
    for rec in records.as_array().unwrap() {
        assert!(chrono::DateTime::parse_from_rfc3339(rec["TimeGenerated"].as_str().unwrap()).is_ok(), "TimeGenerated: {rec}");
    }
    records
}

/// The token request: client credentials for Monitor's scope, the secret in the form.
fn check_token_request(r: &Recorded) {
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/tenant-1/oauth2/v2.0/token"));
    let form = form(&r.body);
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["client_id"], "app-1");
    assert_eq!(form["scope"], "https://monitor.azure.com//.default");
    assert_eq!(form["client_secret"], CLIENT_SECRET);
}

#[tokio::test]
async fn compliance() {
    let entra = HttpReceiver::start(token_reply(3599)).await;
    let dce = HttpReceiver::start(Reply::new(204, "")).await;
    let spec = Spec::<super::Sentinel>::parse(config(&entra, &dce, "ocsf")).unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("sentinel", env).unwrap();
    let n = sample(DestinationKind::Sentinel, "sentinel");
    let refused = Reply::new(400, r#"{"error":{"code":"InvalidStream","message":"Data does not match the stream's columns"}}"#);
    let r = check_http_kind(&dce, &make, &n, &secrets(), CLIENT_SECRET, Reply::new(204, ""), refused).await;
    let records = check_call(&r);
    for rec in records.as_array().unwrap() {
        let mut rec = rec.clone();
        rec.as_object_mut().unwrap().remove("TimeGenerated");
        crate::deliver::ocsf::tests::assert_valid(&rec);
    }
    entra.requests().iter().for_each(check_token_request);
    assert!(dce.requests().iter().all(|r| !r.body.contains(CLIENT_SECRET)));
    // The access token, which no configuration names, stays out of the logs, dead
    // letters, outbox and counters too.
    let refused = Reply::new(400, r#"{"error":{"code":"InvalidStream"}}"#);
    check_all_scenarios(&dce, &make, &n, &secrets(), TOKEN, Reply::new(204, ""), refused).await;
}

/// Only the notification whose record the rule refuses is dead-lettered; the others
/// of its batch are delivered (each sent again alone after the batch's refusal).
#[tokio::test]
async fn a_record_the_rule_refuses_dead_letters_only_its_notification() {
    let entra = HttpReceiver::start(token_reply(3599)).await;
    let dce = HttpReceiver::start(Reply::new(204, "")).await;
    dce.answer_when_body_contains("poisoned", Reply::new(400, r#"{"error":{"code":"InvalidRecord","message":"column type mismatch"}}"#));
    let batch = batch_with_a_poisoned_record(DestinationKind::Sentinel, "sentinel");
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), secrets());
    let svc = maker::<super::Sentinel>(config(&entra, &dce, "ecs"))(&env);
    let dead = deliver_as_one_batch(svc, state, &batch).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].permanent && dead[0].error.contains("InvalidRecord"), "{dead:?}");
    let accepted: Vec<String> = dce.requests().into_iter().filter(|r| r.accepted).map(|r| r.body).collect();
    assert!(accepted.iter().any(|b| b.contains("good-0")) && accepted.iter().any(|b| b.contains("good-2")), "{accepted:?}");
}

/// A batch that needs several calls is cut between notifications; a later call to be
/// retried leaves the earlier calls' notifications delivered (not sent again) and
/// keeps the rest waiting, without making the calls after it.
#[tokio::test]
async fn a_later_call_that_fails_retries_only_its_notifications_and_those_after() {
    let entra = HttpReceiver::start(token_reply(3599)).await;
    let dce = HttpReceiver::start(Reply::new(204, "")).await;
    let svc = service(&maker::<super::Sentinel>(config(&entra, &dce, "ocsf")), &secrets());
    let big = |name: &str| {
        let mut n = sample(DestinationKind::Sentinel, "sentinel");
        n.meta.name = name.into();
        n.payload = serde_json::json!({"message": format!("{name} {}", "x".repeat(150_000))});
        n
    };
    let batch = [big("first"), big("second"), big("third"), big("fourth")];
    dce.script(vec![Reply::new(204, ""), Reply::new(503, "busy").header("Retry-After", "3")]);
    let outcomes = svc.deliverer.deliver_each(&batch).await;
    let delivered = outcomes.iter().take_while(|o| **o == Outcome::Delivered).count();
    assert!((1..4).contains(&delivered), "some in the first call, not all: {outcomes:?}");
    assert!(outcomes[delivered..].iter().all(|o| matches!(o, Outcome::Retry { after: Some(d), .. } if d.as_secs() == 3)), "{outcomes:?}");
    let calls = dce.requests();
    assert_eq!(calls.len(), 2, "no call after the one to be retried");
    let first = check_call(&calls[0]);
    let names: Vec<&str> = first.as_array().unwrap().iter().map(|r| r["message"].as_str().unwrap().split(' ').next().unwrap()).collect();
    assert_eq!(names, ["first", "second", "third", "fourth"][..delivered], "the first call held whole notifications, in order");
    // `TimeGenerated` is the time the record itself says (OCSF's `time`).
    let again = svc.deliverer.deliver_each(&batch[delivered..]).await;
    assert!(again.iter().all(|o| *o == Outcome::Delivered));
    let resent = check_call(&dce.requests()[2]);
    let time = chrono::DateTime::from_timestamp_millis(resent[0]["time"].as_i64().unwrap()).unwrap();
    assert_eq!(resent[0]["TimeGenerated"], time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
}

/// A token request Entra ID refuses with a 400 (an expired federated assertion, a
/// credential being rotated) is a retry of the notifications, not a dead letter.
#[tokio::test]
async fn a_refused_token_request_is_retried_not_dead_lettered() {
    let entra = HttpReceiver::start(Reply::new(400, r#"{"error":"invalid_client","error_description":"AADSTS700024: Client assertion is not within its valid time range."}"#)).await;
    let dce = HttpReceiver::start(Reply::new(204, "")).await;
    let svc = service(&maker::<super::Sentinel>(config(&entra, &dce, "ecs")), &secrets());
    let o = deliver(&svc, &sample(DestinationKind::Sentinel, "sentinel")).await;
    assert!(matches!(&o, Outcome::Retry { reason, .. } if reason.starts_with("Entra ID token: HTTP 400")), "{o:?}");
    assert!(dce.requests().is_empty());
}

/// One token serves many calls while it is fresh; one about to expire is fetched
/// again first; a 401 drops the kept token and the retry carries a new one.
#[tokio::test]
async fn the_token_is_kept_refreshed_before_expiry_and_replaced_after_a_401() {
    let entra = HttpReceiver::start(token_reply(3599)).await;
    let dce = HttpReceiver::start(Reply::new(204, "")).await;
    let svc = service(&maker::<super::Sentinel>(config(&entra, &dce, "ecs")), &secrets());
    let n = sample(DestinationKind::Sentinel, "sentinel");
    for _ in 0..3 {
        assert_eq!(deliver(&svc, &n).await, Outcome::Delivered);
    }
    assert_eq!((entra.requests().len(), dce.requests().len()), (1, 3), "one token, three calls");
    dce.requests().iter().for_each(|r| drop(check_call(r)));

    dce.script(vec![Reply::new(401, r#"{"error":{"code":"InvalidToken"}}"#)]);
    let o = deliver(&svc, &n).await;
    assert!(matches!(o, Outcome::Retry { .. }), "a refused token is retried: {o:?}");
    assert_eq!(deliver(&svc, &n).await, Outcome::Delivered);
    assert_eq!(entra.requests().len(), 2, "a new token after the 401");

    // A token that lasts a minute is fetched again at half its life, never sent stale:
    // here every delivery within the test's few seconds reuses it.
    let entra = HttpReceiver::start(token_reply(60)).await;
    let svc = service(&maker::<super::Sentinel>(config(&entra, &dce, "ecs")), &secrets());
    assert_eq!(deliver(&svc, &n).await, Outcome::Delivered);
    assert_eq!(deliver(&svc, &n).await, Outcome::Delivered);
    assert_eq!(entra.requests().len(), 1);
}

/// A token endpoint that refuses or throttles is the notifications' retry, with its
/// `Retry-After`; nothing is posted without a token.
#[tokio::test]
async fn a_token_endpoint_that_throttles_is_retried_with_its_retry_after() {
    let entra = HttpReceiver::start(Reply::new(429, r#"{"error":"temporarily_unavailable"}"#).header("Retry-After", "7")).await;
    let dce = HttpReceiver::start(Reply::new(204, "")).await;
    let svc = service(&maker::<super::Sentinel>(config(&entra, &dce, "ecs")), &secrets());
    let o = deliver(&svc, &sample(DestinationKind::Sentinel, "sentinel")).await;
    assert_eq!(o, Outcome::Retry { reason: "Entra ID token: HTTP 429: {\"error\":\"temporarily_unavailable\"}".into(), after: Some(std::time::Duration::from_secs(7)) });
    assert!(dce.requests().is_empty());
}

/// Workload identity: the federated token file's content is the client assertion, read
/// at each token request (the kubelet rotates it), and no client secret is sent.
#[tokio::test]
async fn a_federated_token_file_is_the_client_assertion() {
    let entra = HttpReceiver::start(token_reply(3599)).await;
    let dce = HttpReceiver::start(Reply::new(204, "")).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("azure-identity-token");
    std::fs::write(&file, "federated-jwt-1\n").unwrap();
    let mut c = config(&entra, &dce, "ecs");
    c.as_object_mut().unwrap().remove("clientSecret");
    c["federatedTokenFile"] = serde_json::json!(file.to_str().unwrap());
    let svc = service(&maker::<super::Sentinel>(c), &Secrets::default());
    assert_eq!(deliver(&svc, &sample(DestinationKind::Sentinel, "sentinel")).await, Outcome::Delivered);
    let form = form(&entra.requests()[0].body);
    assert_eq!(form["client_assertion"], "federated-jwt-1");
    assert_eq!(form["client_assertion_type"], "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
    assert!(!form.contains_key("client_secret"));
}

/// The shipped rule (`deploy/sentinel/`) declares every top-level field the records
/// carry, so the rule drops none: for ECS and for OCSF, for a finding with its API
/// Activities and for a sync.
#[test]
fn the_shipped_rules_declare_every_field_the_records_carry() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/sentinel");
    let columns = |file: &str, stream: &str| -> std::collections::BTreeSet<String> {
        let rule: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join(file)).unwrap()).unwrap();
        let declared = &rule["resources"][0]["properties"]["streamDeclarations"][stream]["columns"];
        declared.as_array().unwrap_or_else(|| panic!("{file}: no {stream}")).iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
    };
    let origin = crate::deliver::ecs::Origin { cluster: "prod-eu".into(), argocd_url: "https://argocd.example.com".into() };
    let now = chrono::Utc::now();
    let mut n = sample(DestinationKind::Sentinel, "sentinel");
    n.episode = Some(crate::deliver::ocsf::tests::an_episode_with_requests());
    let mut op = sample(DestinationKind::Sentinel, "sentinel");
    op.operation = Some(serde_json::json!({"phase": "Succeeded", "revision": "abc", "initiatedBy": {"username": "alice"}}));
    for (schema, file, stream) in [
        (crate::deliver::siem::Schema::Ocsf, "dcr-ocsf.json", "Custom-DriftwatchOcsf"),
        (crate::deliver::siem::Schema::Ecs, "dcr-ecs.json", "Custom-DriftwatchEcs"),
    ] {
        let declared = columns(file, stream);
        assert!(declared.contains("TimeGenerated"));
        for r in [&n, &op].iter().flat_map(|n| schema.records(n, &origin, now)) {
            for key in r.as_object().unwrap().keys().filter(|k| *k != "@timestamp") {
                assert!(declared.contains(key), "{file}: {key} is not a column of {stream}");
            }
        }
    }
}

/// What cannot work is refused when the configuration loads: a rule id or stream of
/// the wrong shape, both credentials or none, and a token sent in clear.
#[test]
fn settings_are_checked_at_load() {
    let base = serde_json::json!({"endpoint": "https://dce.westeurope-1.ingest.monitor.azure.com", "dcrImmutableId": DCR,
        "stream": STREAM, "tenantId": "t", "clientId": "c", "clientSecret": "$s"});
    assert!(Spec::<super::Sentinel>::parse(base.clone()).is_ok());
    let refused = |key: &str, value: serde_json::Value| {
        let mut c = base.clone();
        match value {
            serde_json::Value::Null => drop(c.as_object_mut().unwrap().remove(key)),
            v => c[key] = v,
        }
        Spec::<super::Sentinel>::parse(c).err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert!(refused("dcrImmutableId", serde_json::json!("my-rule")).contains("dcr-"));
    assert!(refused("stream", serde_json::json!("DriftwatchOcsf_CL")).contains("Custom-"));
    assert!(refused("clientSecret", serde_json::Value::Null).contains("federatedTokenFile"));
    assert!(refused("federatedTokenFile", serde_json::json!("/t")).contains("not both"));
    assert!(refused("endpoint", serde_json::json!("http://dce.example.com")).contains("https://"));
    assert!(refused("authorityHost", serde_json::json!("http://login.example.com")).contains("https://"));
    assert!(refused("batchSize", serde_json::json!(101)).contains("1 to 100"));
    assert!(refused("stream", serde_json::json!("Custom-X/../y#z")).contains("only letters"));
    assert!(refused("tenantId", serde_json::json!("t?x=1")).contains("only letters"));
}
