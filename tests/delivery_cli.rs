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
    // Attempted while the receiver was down (once it is seen down, one probe at a
    // time goes, so not necessarily every entry was tried).
    let tried: Vec<&serde_json::Value> = v["pending"].as_array().unwrap().iter().filter(|p| p["attempts"].as_u64() >= Some(1)).collect();
    assert!(!tried.is_empty(), "{v}");
    assert!(tried.iter().all(|p| p["lastError"].as_str().unwrap_or_default().contains("onnect")), "{v}");

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

/// A dead letter is re-driven: a receiver refuses a notification for good (400), the
/// operator fixes the receiver and runs `deliveries retry`; the next run delivers it,
/// once, and the dead letter is gone.
#[test]
fn a_dead_letter_is_requeued_by_deliveries_retry() {
    use common::receiver::{Mode, Scripted};
    let dir = tempfile::tempdir().unwrap();
    let hook = Scripted::start(Mode::Status(400));
    let config = dir.path().join("driftwatch.yaml");
    std::fs::write(
        &config,
        format!(
            "services:\n  hook:\n    type: webhook\n    url: http://127.0.0.1:{}\ntemplates:\n  drift:\n    message: drifted\n    webhook:\n      hook:\n        body: '{{\"app\": \"{{{{app.metadata.name}}}}\"}}'\ntriggers:\n  on-drift:\n    - when: app.status.sync.status == \"OutOfSync\"\n      send: [drift]\n",
            hook.port
        ),
    )
    .unwrap();
    let replay = dir.path().join("replay.yaml");
    let app = AppBuilder::new("a").sync("OutOfSync", REV1).annotate("notifications.argoproj.io/subscribe.on-drift.hook", "").build();
    std::fs::write(&replay, serde_json::to_string(&app).unwrap()).unwrap();
    let state = dir.path().join("state.redb");
    let run = || {
        driftwatch()
            .args([
                "run",
                "--replay",
                replay.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
                "--state",
                state.to_str().unwrap(),
                "--deliver=10",
            ])
            .output()
            .unwrap()
    };
    let list = |failed: bool| {
        let mut args = vec!["deliveries", "--state", state.to_str().unwrap(), "-o", "json"];
        if failed {
            args.push("--failed");
        }
        let o = driftwatch().args(&args).output().unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    assert_eq!(run().status.code(), Some(1), "the delivery failed");
    let failed = list(true);
    assert_eq!(failed["failed"].as_array().unwrap().len(), 1, "{failed}");
    assert_eq!(failed["failed"][0]["permanent"], true, "{failed}");
    let id = failed["failed"][0]["id"].as_u64().unwrap().to_string();

    let o = driftwatch().args(["deliveries", "retry", "--state", state.to_str().unwrap(), "999999"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "an unknown id: {}", String::from_utf8_lossy(&o.stderr));
    let o = driftwatch().args(["deliveries", "retry", "--state", state.to_str().unwrap(), &id]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("queued again for hook"));
    let now = list(false);
    assert_eq!((now["failed"].as_array().unwrap().len(), now["pending"].as_array().unwrap().len()), (0, 1), "{now}");

    hook.set(Mode::Up);
    let o = run();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(hook.delivered(), [r#"{"app": "a"}"#], "delivered once");
    let after = list(false);
    assert_eq!((after["failed"].as_array().unwrap().len(), after["pending"].as_array().unwrap().len()), (0, 0), "{after}");
}
