//! The Splunk HEC destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::outcome::Outcome;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{HttpReceiver, Reply, check_http_kind};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const TOKEN: &str = "hec-token-SECRET-789";
const OK: &str = r#"{"text":"Success","code":0}"#;

#[test]
fn envelopes_and_batches() {
    let meta = super::payload::EnvelopeMeta {
        host: "h".into(),
        source: "driftwatch".into(),
        sourcetype: "driftwatch:notification".into(),
        index: Some("gitops".into()),
    };
    let at = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:12:30.250Z").unwrap().with_timezone(&chrono::Utc);
    let e = envelope(&meta, serde_json::json!({"a": 1}), at);
    assert_eq!(
        e,
        serde_json::json!({"time": 1772421150.25, "host": "h", "source": "driftwatch", "sourcetype": "driftwatch:notification", "index": "gitops", "event": {"a": 1}})
    );
    assert_eq!(batch_body(&[e.clone(), e.clone()]).lines().count(), 2);
}

#[test]
fn hec_codes() {
    assert_eq!(classify(200, None, OK), Outcome::Delivered);
    assert!(matches!(classify(503, None, r#"{"text":"Server is busy","code":9}"#), Outcome::Retry { .. }));
    assert!(matches!(classify(500, None, r#"{"text":"Internal server error","code":8}"#), Outcome::Retry { .. }));
    // A token being rotated: retried, not recorded as handled.
    assert!(matches!(classify(403, None, r#"{"text":"Invalid token","code":4}"#), Outcome::Retry { .. }));
    assert!(matches!(classify(413, None, r#"{"text":"Content too large","code":27}"#), Outcome::Permanent(_)));
    assert!(matches!(classify(400, None, r#"{"text":"Invalid data format","code":6}"#), Outcome::Permanent(_)));
    assert!(matches!(classify(400, None, r#"{"text":"Server is busy","code":9}"#), Outcome::Retry { .. }));
}

fn spec(url: &str) -> Spec<super::Splunk> {
    Spec::<super::Splunk>::parse(serde_json::json!({"url": url, "token": "$hec", "index": "gitops", "host": "dw-1"}))
        .unwrap()
}

#[tokio::test]
async fn compliance() {
    let rx = HttpReceiver::start(Reply::new(200, OK)).await;
    let secrets = Secrets::from_map([("hec", TOKEN)]);
    let s = spec(&rx.url());
    let make = |env: &crate::deliver::env::Env| s.build("splunk", env).unwrap();
    let n = sample(DestinationKind::Splunk, "splunk");
    let r = check_http_kind(
        &rx,
        &make,
        &n,
        &secrets,
        TOKEN,
        Reply::new(200, OK),
        Reply::new(400, r#"{"text":"Invalid data format","code":6}"#),
    )
    .await;
    assert_eq!(r.path, "/services/collector/event");
    assert_eq!(r.headers["authorization"], format!("Splunk {TOKEN}"));
    let env: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!((env["host"].as_str(), env["index"].as_str(), env["source"].as_str()), (Some("dw-1"), Some("gitops"), Some("driftwatch")));
    assert_eq!(env["event"]["orchestrator"]["resource"]["name"], "guestbook");
}

#[tokio::test]
async fn several_events_share_one_request() {
    let rx = HttpReceiver::start(Reply::new(200, OK)).await;
    let secrets = Secrets::from_map([("hec", TOKEN)]);
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), secrets);
    let mut service = spec(&rx.url()).build("splunk", &env).unwrap();
    service.settings = crate::deliver::testkit::fast_settings(service.settings);
    let batch: Vec<_> = (0..3)
        .map(|i| {
            let mut n = sample(DestinationKind::Splunk, "splunk");
            if let Some(r) = n.record.as_mut() {
                r.key = format!("k{i}");
            }
            n
        })
        .collect();
    // Enqueued before the worker starts, so it finds all three due at once.
    state.enqueue(&batch, 0).unwrap();
    let delivery = crate::deliver::Delivery::start(vec![service], state.clone());
    assert!(delivery.settle(std::time::Duration::from_secs(60), std::time::Duration::from_secs(10)).await);
    delivery.shutdown(std::time::Duration::from_secs(1)).await;
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 1, "one request");
    assert_eq!(reqs[0].body.lines().count(), 3, "three envelopes");
}

#[test]
fn a_batch_size_out_of_range_is_refused() {
    let with = |n: usize| {
        crate::deliver::kind::config::<super::Splunk>(serde_json::json!({"url": "https://splunk:8088", "token": "$t", "batchSize": n}))
    };
    assert!(with(100).is_ok() && with(1).is_ok());
    for n in [0, 101] {
        assert_eq!(with(n).unwrap_err().to_string(), format!("batchSize must be from 1 to 100, not {n}"));
    }
}

/// `format: ocsf`: each event of the request is an OCSF record, valid against its
/// class's schema, with the OCSF sourcetype; an episode's finding travels with the API
/// Activity of each request it names, in one request.
#[tokio::test]
async fn ocsf_records_reach_hec_valid() {
    let rx = HttpReceiver::start(Reply::new(200, OK)).await;
    let secrets = Secrets::from_map([("hec", TOKEN)]);
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), secrets);
    let spec = Spec::<super::Splunk>::parse(serde_json::json!({"url": rx.url(), "token": "$hec", "format": "ocsf"})).unwrap();
    let mut service = spec.build("splunk", &env).unwrap();
    service.settings = crate::deliver::testkit::fast_settings(service.settings);
    let mut n = sample(DestinationKind::Splunk, "splunk");
    let actor = serde_json::json!({"username": "mallory", "sourceIps": ["10.1.2.3"], "groups": ["dev"]});
    n.episode = Some(serde_json::json!({"id": "argocd/guestbook@1", "open": true, "openedAt": "2026-12-06T09:00:00Z",
        "classes": ["rbac"], "attempts": [{"auditId": "au-1", "verb": "delete", "decision": "denied", "code": 403,
        "kind": "Role", "namespace": "argocd", "name": "admin", "resource": "Role argocd/admin", "time": "2026-12-06T08:59:58Z", "actor": actor}]}));
    state.enqueue(&[n], 0).unwrap();
    let delivery = crate::deliver::Delivery::start(vec![service], state.clone());
    assert!(delivery.settle(std::time::Duration::from_secs(60), std::time::Duration::from_secs(10)).await);
    delivery.shutdown(std::time::Duration::from_secs(1)).await;
    let reqs = rx.requests();
    let events: Vec<serde_json::Value> = reqs[0].body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(events.len(), 2, "the finding and the refused delete");
    for e in &events {
        assert_eq!(e["sourcetype"], "driftwatch:ocsf");
        crate::deliver::ocsf::tests::assert_valid(&e["event"]);
    }
    assert_eq!((events[0]["event"]["class_uid"].as_u64(), events[1]["event"]["class_uid"].as_u64()), (Some(2004), Some(6003)));
    assert_eq!(events[1]["event"]["activity_name"], "Delete");
}

/// A loopback HEC with indexer acknowledgement, as Splunk implements it: an event
/// request needs `X-Splunk-Request-Channel` (400, code 10, without), and is answered
/// `{"code":0,"ackId":N}` with N counting per channel; `POST /services/collector/ack`
/// answers `{"acks":{"N":bool}}`, true once the events are indexed — here after
/// `polls` queries, never if `None`.
mod hec {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;

    #[derive(Default)]
    pub struct State {
        pub polls: Option<u32>,
        /// Channel -> next ackId.
        next: BTreeMap<String, u64>,
        /// (channel, ackId) -> queries so far.
        queried: BTreeMap<(String, u64), u32>,
        /// Each event request's channel and its events' `event.id`s.
        pub events: Vec<(String, Vec<String>)>,
    }

    pub async fn start(polls: Option<u32>) -> (String, Arc<Mutex<State>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State { polls, ..State::default() }));
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let st = st.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let channel = req.headers().get("x-splunk-request-channel").and_then(|v| v.to_str().ok()).map(str::to_string);
                            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let (status, answer) = answer(&mut st.lock().unwrap(), &path, channel, &body);
                            Ok::<_, std::convert::Infallible>(hyper::Response::builder().status(status).body(Full::new(Bytes::from(answer))).unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                });
            }
        });
        (url, state)
    }

    fn answer(s: &mut State, path: &str, channel: Option<String>, body: &[u8]) -> (u16, String) {
        let Some(channel) = channel else { return (400, r#"{"text":"Data channel is missing","code":10}"#.into()) };
        if path == "/services/collector/ack" {
            let asked: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
            let mut acks = serde_json::Map::new();
            for id in asked["acks"].as_array().into_iter().flatten().filter_map(serde_json::Value::as_u64) {
                let n = s.queried.entry((channel.clone(), id)).or_default();
                *n += 1;
                acks.insert(id.to_string(), serde_json::json!(s.polls.is_some_and(|p| *n >= p)));
            }
            return (200, serde_json::json!({"acks": acks}).to_string());
        }
        let ids = String::from_utf8_lossy(body)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|e| e["event"]["event"]["id"].as_str().unwrap_or_default().to_string())
            .collect();
        s.events.push((channel.clone(), ids));
        let id = s.next.entry(channel).or_default();
        let ack = *id;
        *id += 1;
        (200, serde_json::json!({"text": "Success", "code": 0, "ackId": ack}).to_string())
    }

    impl State {
        pub fn queried_for(&self, channel: &str, id: u64) -> u32 {
            self.queried.get(&(channel.to_string(), id)).copied().unwrap_or(0)
        }
    }
}

fn ack_service(url: &str, ack_timeout: &str) -> crate::deliver::deliverer::ServiceRuntime {
    let secrets = Secrets::from_map([("hec", TOKEN)]);
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state, secrets);
    let spec = Spec::<super::Splunk>::parse(serde_json::json!({"url": url, "token": "$hec", "useAck": true, "ackTimeout": ack_timeout})).unwrap();
    spec.build("splunk", &env).unwrap()
}

/// `useAck: true`: the delivery counts only once the ack endpoint confirms it, on the
/// channel the events went on.
#[tokio::test]
async fn with_use_ack_a_delivery_counts_once_hec_acknowledges_it() {
    let (url, state) = hec::start(Some(3)).await;
    let service = ack_service(&url, "10s");
    let mut n = sample(DestinationKind::Splunk, "splunk");
    n.idempotency_key = Some("idem-7".into());
    let outcome = crate::deliver::testkit::deliver(&service, &n).await;
    assert_eq!(outcome, Outcome::Delivered);
    let s = state.lock().unwrap();
    assert_eq!(s.events.len(), 1);
    assert_eq!(s.events[0].1, ["idem-7"]);
    assert_eq!(s.queried_for(&s.events[0].0, 0), 3, "polled until acknowledged");
}

/// An acknowledgement that never comes: retried, and the next attempt sends the same
/// event id again (on the same channel).
#[tokio::test]
async fn an_ack_that_never_comes_is_retried_with_the_same_event_id() {
    let (url, state) = hec::start(None).await;
    let service = ack_service(&url, "1s");
    let mut n = sample(DestinationKind::Splunk, "splunk");
    n.idempotency_key = Some("idem-8".into());
    for _ in 0..2 {
        let outcome = crate::deliver::testkit::deliver(&service, &n).await;
        assert!(matches!(&outcome, Outcome::Retry { reason, .. } if reason.contains("did not acknowledge ackId")), "{outcome:?}");
    }
    let s = state.lock().unwrap();
    assert_eq!(s.events.iter().map(|(_, ids)| ids.clone()).collect::<Vec<_>>(), [vec!["idem-8".to_string()], vec!["idem-8".to_string()]]);
    assert_eq!(s.events[0].0, s.events[1].0, "one channel per client");
}

/// A token without indexer acknowledgement answers no ackId: said plainly, once.
#[tokio::test]
async fn use_ack_on_a_token_without_acknowledgement_is_refused_with_the_reason() {
    let rx = HttpReceiver::start(Reply::new(200, OK)).await;
    let service = ack_service(&rx.url(), "5s");
    let outcome = crate::deliver::testkit::deliver(&service, &sample(DestinationKind::Splunk, "splunk")).await;
    assert!(matches!(&outcome, Outcome::Permanent(r) if r.contains("indexer acknowledgement is off")), "{outcome:?}");
    assert!(rx.requests()[0].headers.contains_key("x-splunk-request-channel"));
}

/// Three notifications sent to HEC as one batch, the second poisoned (review L-b);
/// the receiver refuses (`400`, code 6) any request holding it and takes the others:
/// the batch is refused, each notification is sent again alone, the two others are
/// delivered and only the poisoned one is dead-lettered, permanent. Before (the fix
/// stashed): all three dead-lettered, permanent, on the batch's one `400`.
#[tokio::test]
async fn a_refused_batch_dead_letters_only_the_notification_hec_refuses_alone() {
    let rx = HttpReceiver::start(Reply::new(200, OK)).await;
    rx.answer_when_body_contains("poisoned", Reply::new(400, r#"{"text":"Invalid data format","code":6,"invalid-event-number":1}"#));
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let env = crate::deliver::testkit::env(state.clone(), Secrets::from_map([("hec", TOKEN)]));
    let service = spec(&rx.url()).build("splunk", &env).unwrap();
    let batch = crate::deliver::testkit::batch_with_a_poisoned_record(DestinationKind::Splunk, "splunk");
    let dead = crate::deliver::testkit::deliver_as_one_batch(service, state, &batch).await;
    let names: Vec<&str> = dead.iter().map(|d| d.notification.meta.name.as_str()).collect();
    assert_eq!(names, ["poisoned"], "only the poisoned notification is dead-lettered: {dead:#?}");
    assert!(dead[0].permanent && dead[0].error.contains("HEC 400 code 6"), "{:?}", dead[0]);
    // What each request held: its events' resource names.
    let names = |body: &str| -> Vec<String> {
        body.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"]["orchestrator"]["resource"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let reqs = rx.requests();
    let sent: Vec<(Vec<String>, bool)> = reqs.iter().map(|r| (names(&r.body), r.accepted)).collect();
    assert_eq!(reqs.len(), 4, "the batch, then each alone: {sent:?}");
    assert_eq!(sent[0].0.len(), 3);
    let mut delivered: Vec<String> = sent[1..].iter().filter(|(_, ok)| *ok).flat_map(|(n, _)| n.clone()).collect();
    delivered.sort();
    assert_eq!(delivered, ["good-0", "good-2"]);
}
