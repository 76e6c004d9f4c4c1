//! The syslog destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, UdpSocket};

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{Receiver, Scenario, check_scenario, test_tls};
use crate::model::DestinationKind;
use crate::secret::Secrets;

fn header() -> super::payload::Header {
    super::payload::Header { facility: 16, hostname: "dw-1".into(), app_name: "driftwatch".into(), procid: "42".into() }
}

#[test]
fn rfc5424_line() {
    let n = sample(DestinationKind::Syslog, "syslog");
    let now = chrono::DateTime::parse_from_rfc3339("2026-03-02T03:12:30Z").unwrap().with_timezone(&chrono::Utc);
    let line = rfc5424(&header(), &n, "{\"a\":1}", now);
    // local0 (16) * 8 + warning (4) = 132
    assert_eq!(
        line,
        "<132>1 2026-03-02T03:12:30.000Z dw-1 driftwatch 42 on-out-of-sync [driftwatch@32473 app=\"guestbook\" namespace=\"argocd\" project=\"default\" trigger=\"on-out-of-sync\" action=\"fire\"] {\"a\":1}"
    );
    let mut odd = n.clone();
    odd.meta.name = "a\"b]c\\d".into();
    assert!(rfc5424(&header(), &odd, "m", now).contains("app=\"a\\\"b\\]c\\\\d\""));
}

#[test]
fn cef_escaping() {
    let n = sample(DestinationKind::Syslog, "syslog");
    let record = crate::deliver::ecs::record(
        &n,
        &crate::deliver::ecs::Origin { cluster: "prod".into(), argocd_url: String::new() },
        chrono::Utc::now(),
    );
    let c = cef(&n, &record);
    // Header: `|` and `\` escaped; the name is the message's first line.
    assert!(
        c.starts_with(&format!(
            "CEF:0|driftwatch|driftwatch|{}|on-out-of-sync|guestbook drifted \\| a=b \\\\ c|5|",
            env!("CARGO_PKG_VERSION")
        )),
        "{c}"
    );
    // Extension: `=`, `\` and newlines escaped; ECS names present.
    assert!(c.contains("msg=guestbook drifted | a\\=b \\\\ c\\nline two"), "{c}");
    assert!(
        c.contains("rule.name=on-out-of-sync") && c.contains("orchestrator.cluster.name=prod") && c.contains("event.kind=alert"),
        "{c}"
    );
    assert!(c.contains("cs1Label=application cs1=argocd/guestbook"), "{c}");
}

#[test]
fn octet_counting() {
    assert_eq!(frame("héllo"), b"6 h\xc3\xa9llo".to_vec());
}

/// Syslog lines a listener received.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<(Instant, String)>>>);

impl Lines {
    fn push(&self, s: String) {
        self.0.lock().unwrap().push((Instant::now(), s));
    }
}

impl Receiver for Lines {
    fn arrange(&self, _: Scenario) -> Option<String> {
        None
    }
    fn accepted(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|(_, s)| s.clone()).collect()
    }
    fn attempt_times(&self) -> Vec<Instant> {
        self.0.lock().unwrap().iter().map(|(t, _)| *t).collect()
    }
}

/// Reads octet-counted frames from a stream.
async fn read_frames<S: tokio::io::AsyncRead + Unpin>(mut s: S, lines: Lines) {
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let mut rest = &buf[..];
    while let Some(sp) = rest.iter().position(|b| *b == b' ') {
        let Ok(len) = std::str::from_utf8(&rest[..sp]).unwrap_or("x").parse::<usize>() else { break };
        let msg = &rest[sp + 1..(sp + 1 + len).min(rest.len())];
        lines.push(String::from_utf8_lossy(msg).to_string());
        rest = &rest[(sp + 1 + len).min(rest.len())..];
    }
}

fn spec(v: serde_json::Value) -> Spec<super::Syslog> {
    Spec::<super::Syslog>::parse(v).unwrap()
}

#[tokio::test]
async fn udp_json() {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let lines = Lines::default();
    let l = lines.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, _)) = sock.recv_from(&mut buf).await {
            l.push(String::from_utf8_lossy(&buf[..n]).to_string());
        }
    });
    let s = spec(serde_json::json!({"address": addr.to_string(), "protocol": "udp", "format": "json"}));
    let make = |env: &crate::deliver::env::Env| s.build("syslog", env).unwrap();
    check_scenario(Scenario::Success, &lines, &make, &sample(DestinationKind::Syslog, "syslog"), &Secrets::default(), "no-secret-here")
        .await;
    let got = lines.accepted();
    let line = &got[0];
    assert!(line.starts_with("<132>1 "), "{line}");
    let json = &line[line.find("] ").unwrap() + 2..];
    let record: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(record["event"]["action"], "on-out-of-sync");
    assert_eq!(record["orchestrator"]["cluster"]["name"], "prod");
}

/// `format: ocsf`: one message per record, each valid OCSF; over UDP each fits a
/// datagram.
#[tokio::test]
async fn udp_ocsf_one_message_per_record() {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, _)) = sock.recv_from(&mut buf).await {
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).to_string());
        }
    });
    let s = spec(serde_json::json!({"address": addr.to_string(), "protocol": "udp", "format": "ocsf"}));
    let make = |env: &crate::deliver::env::Env| s.build("syslog", env).unwrap();
    let mut n = sample(DestinationKind::Syslog, "syslog");
    n.payload["message"] = serde_json::json!("x".repeat(20_000));
    let actor = serde_json::json!({"username": "alice", "sourceIps": ["10.1.2.3"]});
    n.episode = Some(serde_json::json!({"id": "argocd/guestbook@1", "open": true, "openedAt": "2026-12-06T09:00:00Z",
        "attempts": [{"auditId": "au-1", "verb": "patch", "decision": "allowed", "code": 200, "kind": "Deployment",
        "namespace": "argocd", "name": "web", "time": "2026-12-06T08:59:58Z", "actor": actor}]}));
    let outcome = crate::deliver::testkit::deliver(&crate::deliver::testkit::service(&make, &Secrets::default()), &n).await;
    assert_eq!(outcome, crate::deliver::outcome::Outcome::Delivered);
    // Each datagram as it arrives (bounded only so that a regression fails, not hangs).
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap());
    }
    let records: Vec<serde_json::Value> = got.iter().map(|line| serde_json::from_str(&line[line.find("] ").unwrap() + 2..]).unwrap()).collect();
    records.iter().for_each(crate::deliver::ocsf::tests::assert_valid);
    assert_eq!((records[0]["class_uid"].as_u64(), records[1]["class_uid"].as_u64()), (Some(2004), Some(6003)));
    assert!(got.iter().all(|l| l.len() <= 8192));
}

#[tokio::test]
async fn tcp_cef_with_a_receiver_that_comes_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let lines = Lines::default();
    let serve = |listener: TcpListener, lines: Lines| async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(read_frames(s, lines.clone()));
        }
    };
    let server = tokio::spawn(serve(listener, lines.clone()));
    let s = spec(serde_json::json!({"address": addr.to_string(), "protocol": "tcp", "format": "cef"}));
    let make = |env: &crate::deliver::env::Env| s.build("syslog", env).unwrap();
    let n = sample(DestinationKind::Syslog, "syslog");
    check_scenario(Scenario::Success, &lines, &make, &n, &Secrets::default(), "no-secret-here").await;
    assert!(lines.accepted()[0].contains("] CEF:0|driftwatch|"), "{:?}", lines.accepted());
    // The receiver goes away (connections refused) and comes back 300 ms later.
    server.abort();
    let _ = server.await;
    let l2 = lines.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listener = TcpListener::bind(addr).await.unwrap();
        serve(listener, l2).await;
    });
    check_scenario(Scenario::RetryableThenSuccess, &lines, &make, &n, &Secrets::default(), "no-secret-here").await;
}

#[tokio::test]
async fn tls_verified_timeout_and_untrusted() {
    let tls = test_tls();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let lines = Lines::default();
    let stall_next = Arc::new(Mutex::new(false));
    let (l, stall, acceptor) = (lines.clone(), stall_next.clone(), tokio_rustls::TlsAcceptor::from(tls.server.clone()));
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            if std::mem::take(&mut *stall.lock().unwrap()) {
                // Accept TCP, never answer the TLS handshake.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    drop(s);
                });
                continue;
            }
            let (l, acceptor) = (l.clone(), acceptor.clone());
            tokio::spawn(async move {
                if let Ok(s) = acceptor.accept(s).await {
                    read_frames(s, l).await;
                }
            });
        }
    });
    let address = format!("localhost:{}", addr.port());
    let trusted = spec(serde_json::json!({"address": address, "protocol": "tls", "caFile": tls.ca_file.path().to_str().unwrap()}));
    let make = |env: &crate::deliver::env::Env| trusted.build("syslog", env).unwrap();
    let n = sample(DestinationKind::Syslog, "syslog");
    check_scenario(Scenario::Success, &lines, &make, &n, &Secrets::default(), "no-secret-here").await;
    *stall_next.lock().unwrap() = true;
    check_scenario(Scenario::TimeoutThenSuccess, &lines, &make, &n, &Secrets::default(), "no-secret-here").await;
    let untrusted = spec(serde_json::json!({"address": address, "protocol": "tls"}));
    let make = |env: &crate::deliver::env::Env| untrusted.build("syslog", env).unwrap();
    // A certificate the client does not trust is found by its type and retried (a
    // rotation in progress), not recorded as handled.
    let outcome = crate::deliver::testkit::deliver(&crate::deliver::testkit::service(&make, &Secrets::default()), &n).await;
    assert!(
        matches!(&outcome, crate::deliver::outcome::Outcome::Retry { reason, .. } if reason.contains("certificate not accepted")),
        "{outcome:?}"
    );
}

#[test]
fn a_facility_out_of_range_is_refused() {
    let with = |n: u8| crate::deliver::kind::config::<super::Syslog>(serde_json::json!({"address": "siem:514", "facility": n}));
    assert!(with(0).is_ok() && with(23).is_ok(), "{:?}", with(0));
    assert_eq!(with(24).unwrap_err().to_string(), "facility must be from 0 to 23, not 24");
}
