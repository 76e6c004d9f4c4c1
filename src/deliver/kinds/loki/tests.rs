//! The Loki destination: the push body (streams by a fixed label set, structured
//! metadata), and the compliance harness against a loopback receiver answering as Loki
//! does (`204`; `429` with `Retry-After`; `400` for an entry too far behind).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind};
use crate::model::{DestinationKind, Severity};
use crate::secret::Secrets;

const PASSWORD: &str = "glc_SECRET-loki-321";

#[test]
fn streams_are_few_and_entries_carry_their_identity() {
    let origin = crate::deliver::ecs::Origin::default();
    let now = chrono::Utc::now();
    let mut a = sample(DestinationKind::Loki, "loki");
    a.episode = Some(serde_json::json!({"id": "argocd/guestbook@1", "classes": ["rbac", "workload"]}));
    let mut b = a.clone();
    b.meta.name = "other".into();
    let mut c = a.clone();
    c.severity = Severity::Critical;
    let entries: Vec<_> = [&a, &b, &c]
        .iter()
        .flat_map(|n| payload::entries(n, crate::deliver::siem::Schema::Ecs.records(n, &origin, now), now))
        .collect();
    let body = payload::push_body(entries);
    let streams = body["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "two Applications of one namespace, project, class and severity share a stream: {body:#}");
    let labels: Vec<&String> = streams[0]["stream"].as_object().unwrap().keys().collect();
    assert_eq!(labels, ["class", "namespace", "project", "service_name", "severity"]);
    assert_eq!(streams[0]["stream"]["class"], "rbac");
    let entry = &streams[0]["values"][0];
    assert!(entry[0].as_str().unwrap().parse::<i128>().unwrap() > 1_700_000_000_000_000_000, "a nanosecond timestamp string");
    let line: serde_json::Value = serde_json::from_str(entry[1].as_str().unwrap()).unwrap();
    assert_eq!(line["ecs"]["version"], "8.11.0", "the line is the record");
    assert_eq!(entry[2]["episode"], "argocd/guestbook@1");
    assert!(entry[2]["app"].is_string() && entry[2].get("namespace").is_none(), "metadata is what the labels are not");
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(204, "")).await;
    let secrets = Secrets::from_map([("loki-password", PASSWORD)]);
    let spec = Spec::<super::Loki>::parse(serde_json::json!({"url": rx.url(), "tenant": "platform", "username": "123456",
        "password": "$loki-password", "format": "ocsf"}))
    .unwrap();
    let make = |env: &crate::deliver::env::Env| spec.build("loki", env).unwrap();
    let n = sample(DestinationKind::Loki, "loki");
    let refused = Reply::new(400, "entry for stream '{service_name=\"driftwatch\"}' has timestamp too old: 2026-11-01T00:00:00Z");
    let r = check_http_kind(&rx, &make, &n, &secrets, PASSWORD, Reply::new(204, ""), refused).await;
    assert_eq!(r.path, "/loki/api/v1/push");
    assert_eq!(r.headers["x-scope-orgid"], "platform");
    assert!(r.headers["authorization"].starts_with("Basic "));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let line: serde_json::Value = serde_json::from_str(body["streams"][0]["values"][0][1].as_str().unwrap()).unwrap();
    crate::deliver::ocsf::tests::assert_valid(&line);
}

#[test]
fn settings_are_checked() {
    let cfg = |v: serde_json::Value| crate::deliver::kind::config::<super::Loki>(v);
    assert!(cfg(serde_json::json!({"url": "https://loki:3100"})).is_ok());
    assert_eq!(
        cfg(serde_json::json!({"url": "u", "username": "1"})).unwrap_err().to_string(),
        "username and password go together"
    );
    assert_eq!(cfg(serde_json::json!({"url": "u", "batchSize": 501})).unwrap_err().to_string(), "batchSize must be from 1 to 500, not 501");
}

/// Three notifications pushed as one batch, the second poisoned (review L-b: a value
/// its tenant wrote makes Loki answer `400`); the receiver refuses any push holding
/// it and takes the others: the batch is refused, each notification is pushed again
/// alone, the two others are delivered and only the poisoned one is dead-lettered,
/// permanent. Before (the fix stashed): all three dead-lettered, permanent, on the
/// batch's one `400`.
#[tokio::test]
async fn a_refused_batch_dead_letters_only_the_notification_loki_refuses_alone() {
    let rx = HttpReceiver::start(Reply::new(204, "")).await;
    rx.answer_when_body_contains("poisoned", Reply::new(400, "stream '{project=\"…\"}' has label value too long"));
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), Secrets::default());
    let service = crate::deliver::testkit::maker::<super::Loki>(serde_json::json!({"url": rx.url()}))(&env);
    let batch = crate::deliver::testkit::batch_with_a_poisoned_record(DestinationKind::Loki, "loki");
    let dead = crate::deliver::testkit::deliver_as_one_batch(service, state.clone(), &batch).await;
    let names: Vec<&str> = dead.iter().map(|d| d.notification.meta.name.as_str()).collect();
    assert_eq!(names, ["poisoned"], "only the poisoned notification is dead-lettered: {dead:#?}");
    assert!(dead[0].permanent && dead[0].error.contains("HTTP 400"), "{:?}", dead[0]);
    // What each push held: the `app` of its entries.
    let apps = |body: &str| -> Vec<String> {
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        let streams = body["streams"].as_array().unwrap();
        streams.iter().flat_map(|s| s["values"].as_array().unwrap()).map(|v| v[2]["app"].as_str().unwrap().to_string()).collect()
    };
    let reqs = rx.requests();
    let pushed: Vec<(Vec<String>, bool)> = reqs.iter().map(|r| (apps(&r.body), r.accepted)).collect();
    assert_eq!(reqs.len(), 4, "the batch, then each alone: {pushed:?}");
    assert_eq!(pushed[0].0.len(), 3);
    let mut delivered: Vec<String> = pushed[1..].iter().filter(|(_, ok)| *ok).flat_map(|(a, _)| a.clone()).collect();
    delivered.sort();
    assert_eq!(delivered, ["good-0", "good-2"]);
    for n in &batch {
        let r = n.record.as_ref().unwrap();
        assert!(state.pass().is_notified(&r.app_key, &r.key).unwrap(), "each recorded as handled: {}", n.meta.name);
    }
}

/// An Application's `spec.project` of 5,000 characters (text its tenant writes; Loki
/// refuses a label value past 2,048 bytes by default), pushed to a loopback Loki:
/// the `project` label sent is within `MAX_LABEL_VALUE_BYTES`, starts as the project
/// does, and two such projects that differ only at their end stay two streams; a
/// project of a normal length is sent as it is. Before (the fix stashed): the label
/// sent was the 5,000 bytes.
#[tokio::test]
async fn a_project_of_5000_characters_is_sent_as_a_label_within_the_bound() {
    let rx = HttpReceiver::start(Reply::new(204, "")).await;
    let service = crate::deliver::testkit::service(&crate::deliver::testkit::maker::<super::Loki>(serde_json::json!({"url": rx.url()})), &Secrets::default());
    let mut projects = Vec::new();
    for p in [format!("{}a", "p".repeat(4_999)), format!("{}b", "p".repeat(4_999)), "payments".to_string()] {
        let mut n = sample(DestinationKind::Loki, "loki");
        n.meta.project = p;
        assert_eq!(crate::deliver::testkit::deliver(&service, &n).await, crate::deliver::outcome::Outcome::Delivered);
        let reqs = rx.requests();
        let body: serde_json::Value = serde_json::from_str(&reqs.last().unwrap().body).unwrap();
        projects.push(body["streams"][0]["stream"]["project"].as_str().unwrap().to_string());
    }
    for p in &projects[..2] {
        assert!(p.len() <= payload::MAX_LABEL_VALUE_BYTES, "{} bytes", p.len());
        assert!(p.starts_with("pppp"), "{p}");
    }
    assert_ne!(projects[0], projects[1], "two projects stay two streams");
    assert_eq!(projects[2], "payments", "a normal value is sent as it is");
}

/// The labels of a notification whose values Loki would refuse or nobody could
/// select: a project of 3,000 two-byte characters (6,000 bytes: the bound is in
/// bytes, as Loki's) and one holding a line break are within `MAX_LABEL_VALUE_BYTES`
/// and hold no control character; the namespace and severity are as they were.
/// Before (the fix stashed): failed at the first value, its 6,000 bytes copied into
/// the label.
#[test]
fn label_values_are_bounded_in_bytes_and_hold_no_control_character() {
    let mut n = sample(DestinationKind::Loki, "loki");
    for project in ["é".repeat(3_000), "team-a\nteam-b".to_string()] {
        n.meta.project = project.clone();
        let labels = payload::labels(&n);
        let sent = &labels["project"];
        assert!(sent.len() <= payload::MAX_LABEL_VALUE_BYTES, "{} bytes", sent.len());
        assert!(!sent.chars().any(char::is_control), "{sent:?}");
        assert_ne!(sent, &project);
        assert_eq!((labels["namespace"].as_str(), labels["severity"].as_str()), ("argocd", "warning"));
    }
    n.meta.project = "team-a\nteam-b".into();
    let a = payload::labels(&n)["project"].clone();
    n.meta.project = "team-a\rteam-b".into();
    assert_ne!(a, payload::labels(&n)["project"], "values that differ only in what was replaced stay two streams");
    assert!(a.starts_with("team-a_team-b#"), "{a}");
}
