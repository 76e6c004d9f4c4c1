//! The Security Lake destination against a loopback stand-in answering as S3 does
//! (`200` for a `PutObject`; `503 SlowDown`; `400` for an object it refuses), through the shared
//! compliance harness and the outbox. Every request is checked for its SigV4
//! signature's scope and signed headers, and its body for a Parquet file. A real S3
//! server (moto) and the files read back with pyarrow are `tests/securitylake.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::deliver::Delivery;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Recorded, Reply, check_all_scenarios, check_http_kind, fast_settings, maker};
use crate::model::{DestinationKind, Notification};
use crate::secret::Secrets;

const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY-lake";
const KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";

fn config(s3: &HttpReceiver) -> serde_json::Value {
    serde_json::json!({"bucket": "aws-security-data-lake-eu-west-1-abc", "region": "eu-west-1", "accountId": "123456789012",
        "sourceName": "driftwatch", "endpoint": s3.url(), "pathStyle": true,
        "accessKeyId": "$aws-key-id", "secretAccessKey": "$aws-secret-key"})
}

fn secrets() -> Secrets {
    Secrets::from_map([("aws-key-id", KEY_ID), ("aws-secret-key", SECRET_KEY)])
}

/// What every `PutObject` must be: under the bucket and the source's partition,
/// signed for S3 in the bucket's region with the payload's hash, a Parquet body.
fn check_put(r: &Recorded) {
    assert_eq!(r.method, "PUT");
    let prefix = "/aws-security-data-lake-eu-west-1-abc/ext/driftwatch/1.0/region%3Deu-west-1/accountId%3D123456789012/eventDay%3D";
    assert!(r.path.starts_with(prefix) && r.path.ends_with(".parquet"), "{}", r.path);
    let auth = &r.headers["authorization"];
    assert!(auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={KEY_ID}/")), "{auth}");
    assert!(auth.contains("/eu-west-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature="), "{auth}");
    assert_eq!(r.headers["x-amz-content-sha256"].len(), 64);
    assert!(r.body.starts_with("PAR1"), "a Parquet file");
}

#[tokio::test]
async fn compliance() {
    let s3 = HttpReceiver::start(Reply::new(200, "")).await;
    let spec = Spec::<super::SecurityLake>::parse(config(&s3)).unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("lake", env).unwrap();
    let n = sample(DestinationKind::SecurityLake, "lake");
    // S3's refusal of the object itself (a 403 is retried: a key being rotated).
    let refused = Reply::new(400, "<Error><Code>EntityTooLarge</Code><Message>Your proposed upload exceeds the maximum allowed size</Message></Error>");
    let r = check_http_kind(&s3, &make, &n, &secrets(), SECRET_KEY, Reply::new(200, ""), refused.clone()).await;
    check_put(&r);
    s3.requests().iter().for_each(|r| assert!(!r.headers.values().any(|v| v.contains(SECRET_KEY))));
    check_all_scenarios(&s3, &make, &n, &secrets(), KEY_ID, Reply::new(200, ""), refused).await;
}

/// Three notifications, each with its own record key and Application.
fn three() -> Vec<Notification> {
    (0..3)
        .map(|i| {
            let mut n = sample(DestinationKind::SecurityLake, "securitylake");
            n.app = format!("argocd/app-{i}");
            n.meta.name = format!("app-{i}");
            if let Some(r) = n.record.as_mut() {
                r.key = format!("{}-{i}", r.key);
            }
            n
        })
        .collect()
}

/// The paths of the accepted (or all) `PUT`s so far.
fn puts(s3: &HttpReceiver, accepted_only: bool) -> Vec<String> {
    s3.requests().into_iter().filter(|r| r.method == "PUT" && (r.accepted || !accepted_only)).map(|r| r.path).collect()
}

/// A file marked before a crash (its first object refused here) is sent again whole,
/// to the same object key, and holds only its own notifications although another
/// was queued meanwhile: that one goes in a file of its own. Each is delivered once.
#[tokio::test]
async fn a_marked_file_is_sent_again_to_the_same_objects_and_later_notifications_wait() {
    let s3 = HttpReceiver::start(Reply::new(200, "")).await;
    let state = Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), secrets());
    let mut svc = maker::<super::SecurityLake>(config(&s3))(&env);
    svc.settings = fast_settings(svc.settings);
    let batch = three();
    let now = crate::state::to_millis(chrono::Utc::now());
    state.enqueue(&batch[..2], now).unwrap();
    // What a worker does before it sends a file: the file is the first two.
    let ids: Vec<u64> = state.outbox().entries(Some("securitylake")).unwrap().iter().map(|e| e.id).collect();
    state.outbox().mark_file("securitylake", ids[1]).unwrap();
    state.enqueue(&batch[2..], now).unwrap();
    s3.script(vec![Reply::new(503, "<Error><Code>SlowDown</Code></Error>")]);
    let delivery = Delivery::start(vec![svc], state.clone());
    delivery.close_files();
    assert!(delivery.settle(Duration::from_secs(60), Duration::from_secs(20)).await);
    delivery.shutdown(Duration::from_secs(1)).await;
    let all = puts(&s3, false);
    let accepted = puts(&s3, true);
    assert_eq!(all.len(), 3, "the refused object, again, then the third notification's: {all:?}");
    assert_eq!(all[0], all[1], "the file sent again is written under the same key");
    assert_eq!(accepted.len(), 2);
    assert_ne!(accepted[0], accepted[1], "the notification queued later is a file of its own");
    s3.requests().iter().for_each(check_put);
    assert!(state.outbox().dead_letters().unwrap().is_empty());
    assert!(state.outbox().entries(None).unwrap().is_empty());
}

/// What cannot work is refused when the configuration loads.
#[test]
fn settings_are_checked_at_load() {
    let base = serde_json::json!({"bucket": "aws-security-data-lake-eu-west-1-abc", "region": "eu-west-1", "accountId": "123456789012",
        "sourceName": "driftwatch", "accessKeyId": "$k", "secretAccessKey": "$s"});
    assert!(Spec::<super::SecurityLake>::parse(base.clone()).is_ok());
    let refused = |key: &str, value: serde_json::Value| {
        let mut c = base.clone();
        c[key] = value;
        Spec::<super::SecurityLake>::parse(c).err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert!(refused("fileAge", serde_json::json!("4m")).contains("5m to 24h"));
    assert!(refused("fileAge", serde_json::json!("25h")).contains("5m to 24h"));
    assert!(refused("maxFileBytes", serde_json::json!(300_000_000u64)).contains("256 MiB"));
    assert!(refused("maxFileBytes", serde_json::json!(10)).contains("from 1024"));
    assert!(refused("format", serde_json::json!("ecs")).contains("OCSF only"));
    assert!(refused("accountId", serde_json::json!("12345")).contains("12-digit"));
    assert!(refused("bucket", serde_json::json!("Bad_Bucket")).contains("bucket"));
    assert!(refused("sourceName", serde_json::json!("a/../b")).contains("only letters"));
    assert!(refused("endpoint", serde_json::json!("http://minio.example.com")).contains("https://"));
    assert!(refused("roleArn", serde_json::json!("my-role")).contains("ARN"));
    assert!(refused("externalId", serde_json::json!("x")).contains("roleArn"));
    assert!(refused("classSources", serde_json::json!({"findings": "x"})).contains("class uid"));
    assert!(Spec::<super::SecurityLake>::parse({
        let mut c = base.clone();
        c["fileAge"] = serde_json::json!("24h");
        c["maxFileBytes"] = serde_json::json!(268_435_456u64);
        c
    })
    .is_ok());
}
