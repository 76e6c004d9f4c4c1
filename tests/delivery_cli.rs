//! Delivery through the binary: nothing is lost across a crash (`run --replay --deliver`
//! killed with SIGKILL while deliveries are pending, then restarted), and `template
//! notify --send` sends for real.

mod common;

use common::receiver::receiver;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{AppBuilder, REV1};

fn driftwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_driftwatch"));
    c.env_remove("DRIFTWATCH_LOG");
    c
}

#[test]
fn pending_deliveries_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.path().join("driftwatch.yaml");
    std::fs::write(
        &config,
        format!(
            r#"services:
  hook:
    type: webhook
    url: http://127.0.0.1:{port}
    retry: {{maxAttempts: 1000, initialBackoff: 100ms, maxBackoff: 300ms, deadline: 10m}}
templates:
  drift:
    message: "{{{{app.metadata.name}}}} drifted"
    webhook:
      hook:
        path: /drift
        body: '{{"app": "{{{{app.metadata.name}}}}"}}'
triggers:
  on-drift:
    - when: app.status.sync.status == "OutOfSync"
      oncePer: app.status.sync.revision
      send: [drift]
"#
        ),
    )
    .unwrap();
    let replay = dir.path().join("replay.yaml");
    let docs: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            serde_json::to_string(
                &AppBuilder::new(n).sync("OutOfSync", REV1).annotate("notifications.argoproj.io/subscribe.on-drift.hook", "").build(),
            )
            .unwrap()
        })
        .collect();
    std::fs::write(&replay, docs.join("\n---\n")).unwrap();
    let state = dir.path().join("state.redb");
    let args = |wait: &str| {
        vec![
            "run".to_string(),
            "--replay".into(),
            replay.display().to_string(),
            "--config".into(),
            config.display().to_string(),
            "--state".into(),
            state.display().to_string(),
            format!("--deliver={wait}"),
        ]
    };

    // 1. The receiver is down: deliveries stay pending; the process is killed.
    let mut child = driftwatch().args(args("60")).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("driftwatch exited early").unwrap();
        if line.contains("delivering (waiting") {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let o = driftwatch().args(["deliveries", "--state", state.to_str().unwrap(), "-o", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pending"].as_array().unwrap().len(), 3, "{v}");
    assert!(v["pending"][0]["attempts"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["pending"][0]["lastError"].as_str().unwrap().contains("onnect"), "{v}");

    // 2. The receiver is up; the same replay, the same state: each delivered once.
    let got = receiver(TcpListener::bind(("127.0.0.1", port)).unwrap());
    let o = driftwatch().args(args("20")).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("0 still pending, 0 dead letter(s)"), "{stdout}");
    let mut bodies = got.lock().unwrap().clone();
    bodies.sort();
    assert_eq!(bodies, [r#"{"app": "a"}"#, r#"{"app": "b"}"#, r#"{"app": "c"}"#]);

    // 3. Once more: everything is recorded, nothing is sent again.
    let o = driftwatch().args(args("5")).output().unwrap();
    assert!(o.status.success());
    assert_eq!(got.lock().unwrap().len(), 3);
}

#[test]
fn template_notify_send_delivers_for_real() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    let config = dir.path().join("driftwatch.yaml");
    std::fs::write(
        &config,
        format!("services:\n  hook:\n    type: webhook\n    url: http://127.0.0.1:{port}\n    bearerToken: $hook-token\ntemplates:\n  t:\n    message: hi\n    webhook:\n      hook:\n        body: '{{\"app\": \"{{{{app.metadata.name}}}}\"}}'\n"),
    )
    .unwrap();
    let app = dir.path().join("app.json");
    std::fs::write(&app, serde_json::to_string(&AppBuilder::new("web").build()).unwrap()).unwrap();
    let o = driftwatch()
        .args(["template", "notify", "t", app.to_str().unwrap(), "--config", config.to_str().unwrap(), "--recipient", "hook:", "--send"])
        .env("DRIFTWATCH_SECRET_HOOK_TOKEN", "tok-123456")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("sent 1 of 1 notification(s)"), "{stderr}");
    assert_eq!(got.lock().unwrap().clone(), [r#"{"app": "web"}"#]);
    // A service that is not configured is an error, not a silent no-op.
    let o = driftwatch()
        .args(["template", "notify", "t", app.to_str().unwrap(), "--config", config.to_str().unwrap(), "--recipient", "slack:x", "--send"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("service \"slack\" is not configured"));
}
