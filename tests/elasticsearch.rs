//! The Elasticsearch / OpenSearch destination through the binary, against a loopback
//! Elasticsearch that answers `_bulk` item by item (`tests/common/elasticsearch.rs`):
//! each notification a document created once by its `_id`; a `200` answer's item
//! failures told apart (throttled: retried; refused: dead-lettered with the reason);
//! and no duplicate document when the process is killed during a drain.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::elasticsearch::FakeElasticsearch;
use common::{AppBuilder, REV1};

const STREAM: &str = "logs-driftwatch-default";

fn driftwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_driftwatch"));
    c.env_remove("DRIFTWATCH_LOG");
    c.env("DRIFTWATCH_SECRET_ES_KEY", "ZXMta2V5LWlkOnNlY3JldA==");
    c
}

/// A config with an Elasticsearch service, a replay of `apps` drifting, and the
/// arguments of a `run --replay --deliver` on a state file.
fn setup(dir: &Path, es: &FakeElasticsearch, apps: &[&str], format: &str) -> impl Fn(&str) -> Vec<String> {
    let config = dir.join("driftwatch.yaml");
    std::fs::write(
        &config,
        format!(
            r#"services:
  es:
    type: elasticsearch
    url: {}
    apiKey: $es-key
    format: {format}
    retry: {{maxAttempts: 5, initialBackoff: 100ms, maxBackoff: 300ms, deadline: 10m}}
{}"#,
            es.url(),
            common::DRIFT_TRIGGER
        ),
    )
    .unwrap();
    let replay = dir.join("replay.yaml");
    let docs: Vec<String> = apps
        .iter()
        .map(|n| {
            serde_json::to_string(
                &AppBuilder::new(n).sync("OutOfSync", REV1).annotate("notifications.argoproj.io/subscribe.on-drift.es", "").build(),
            )
            .unwrap()
        })
        .collect();
    std::fs::write(&replay, docs.join("\n---\n")).unwrap();
    let state = dir.join("state.redb");
    move |wait: &str| {
        ["run", "--replay", replay.to_str().unwrap(), "--config", config.to_str().unwrap(), "--state", state.to_str().unwrap()]
            .iter()
            .map(|s| s.to_string())
            .chain([format!("--deliver={wait}")])
            .collect()
    }
}

fn deliveries(dir: &Path) -> serde_json::Value {
    let state = dir.join("state.redb");
    let o = driftwatch().args(["deliveries", "--state", state.to_str().unwrap(), "-o", "json"]).output().unwrap();
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn each_notification_is_one_document_and_item_failures_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let es = FakeElasticsearch::start();
    // b's document is throttled once (429 in a 200 answer), d's refused by the mapping.
    es.throttle_once("b drifted");
    es.refuse("d drifted");
    let args = setup(dir.path(), &es, &["a", "b", "c", "d"], "ecs");
    let o = driftwatch().args(args("30")).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "a dead letter fails the run: {stdout}");
    assert!(stdout.contains("0 still pending, 1 dead letter(s)"), "{stdout}");

    let docs = es.docs(STREAM);
    let messages: Vec<&str> = docs.values().map(|d| d["message"].as_str().unwrap()).collect();
    let mut sorted = messages.clone();
    sorted.sort();
    assert_eq!(sorted, ["a drifted", "b drifted", "c drifted"], "{docs:#?}");
    // Each document's `_id` is its delivery's idempotency key (ECS `event.id`).
    assert!(docs.iter().all(|(id, d)| d["event"]["id"] == id.as_str()));
    let b: Vec<u16> =
        es.creates().iter().filter(|(id, _)| docs.get(id).is_some_and(|d| d["message"] == "b drifted")).map(|(_, s)| *s).collect();
    assert_eq!(b, [429, 201], "the throttled document was sent again, alone of its request's");
    assert!(es.auth().iter().all(|a| a == "ApiKey ZXMta2V5LWlkOnNlY3JldA=="), "{:?}", es.auth());

    let v = deliveries(dir.path());
    let dead = v["failed"].as_array().unwrap();
    assert_eq!(dead.len(), 1, "{v}");
    assert!(dead[0]["error"].as_str().unwrap().contains("mapper_parsing_exception"), "{v}");
}

#[test]
fn three_crashes_during_a_drain_leave_no_duplicate_document() {
    let dir = tempfile::tempdir().unwrap();
    let es = FakeElasticsearch::start();
    let args = setup(dir.path(), &es, &["a", "b", "c"], "ocsf");
    // Three times: a request is indexed and never answered, and the process is killed
    // while it waits, so its outbox still holds what Elasticsearch already has.
    for _ in 0..3 {
        let before = es.creates().len();
        es.hold_next();
        let mut child = driftwatch().args(args("60")).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while !lines.next().expect("driftwatch exited early").unwrap().contains("delivering (waiting") {}
        es.wait_creates(before + 1);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert!(!deliveries(dir.path())["pending"].as_array().unwrap().is_empty(), "the held request was not settled");
    }
    // Restarted on the same state: what was indexed is answered 409 and counted as
    // delivered; nothing is indexed twice.
    let o = driftwatch().args(args("30")).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("0 still pending, 0 dead letter(s)"), "{stdout}");
    let docs = es.docs(STREAM);
    assert_eq!(docs.len(), 3, "one OCSF finding per Application: {:#?}", docs.keys());
    assert!(docs.values().all(|d| d["class_uid"] == 2004 && d["@timestamp"].is_string()));
    // Each document is the OCSF record (valid against its class's schema) plus the
    // `@timestamp` a data stream requires.
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ocsf/1.8.0/detection_finding.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for d in docs.values() {
        let mut record = d.clone();
        record.as_object_mut().unwrap().remove("@timestamp");
        let errors: Vec<String> = validator.iter_errors(&record).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
    let conflicts = es.creates().iter().filter(|(_, s)| *s == 409).count();
    assert!(conflicts >= 1, "the copies the crashes made were answered 409: {:?}", es.creates());
    assert_eq!(es.creates().iter().filter(|(_, s)| *s == 201).count(), 3);
}
