//! The e-mail (SMTP) destination: its requests, and the compliance harness (success, retry, permanent, timeout, `Retry-After`, no secret leaked).

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::*;
use crate::deliver::ecs::tests::sample;
use crate::deliver::kind::Spec;
use crate::deliver::testkit::{Receiver, Scenario, TestTls, check_scenario, test_tls};
use crate::model::DestinationKind;
use crate::secret::Secrets;

const PASSWORD: &str = "smtp-pass-SECRET-42";

/// A real SMTP server process (aiosmtpd, see tests/support/smtp_server.py).
struct SmtpServer {
    child: Child,
    port: u16,
    spool: tempfile::TempDir,
    next: AtomicUsize,
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl SmtpServer {
    fn start(mode: &str, tls: Option<&TestTls>, auth: bool) -> SmtpServer {
        let spool = tempfile::tempdir().unwrap();
        let port = free_port();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/smtp_server.py");
        let mut cmd = Command::new("python3");
        cmd.arg(&script).args(["--port", &port.to_string(), "--mode", mode, "--spool"]).arg(spool.path());
        let (_cert, _key);
        if let Some(t) = tls {
            let cert = tempfile::NamedTempFile::new().unwrap();
            let key = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(cert.path(), &t.cert_pem).unwrap();
            std::fs::write(key.path(), &t.key_pem).unwrap();
            cmd.arg("--cert").arg(cert.path()).arg("--key").arg(key.path());
            (_cert, _key) = (Some(cert), Some(key));
        }
        if auth {
            cmd.args(["--user", "driftwatch", "--password", PASSWORD]);
        }
        let mut child =
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("python3 runs (scripts/test.sh installs aiosmtpd)");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the SMTP server did not start: is aiosmtpd installed? (scripts/test.sh installs it)");
        SmtpServer { child, port, spool, next: AtomicUsize::new(0) }
    }

    fn messages(&self) -> Vec<String> {
        let mut files: Vec<_> = std::fs::read_dir(self.spool.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "eml"))
            .collect();
        files.sort();
        files.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect()
    }
}

impl Receiver for SmtpServer {
    fn arrange(&self, s: Scenario) -> Option<String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Some(match s {
            Scenario::Success | Scenario::RateLimitedThenSuccess => format!("ops-{n}@example.com, lead-{n}@example.com"),
            Scenario::RetryableThenSuccess => format!("tempfail-once-{n}@example.com"),
            Scenario::Permanent => "permfail@example.com".to_string(),
            Scenario::TimeoutThenSuccess => format!("slow-once-{n}@example.com"),
        })
    }
    fn accepted(&self) -> Vec<String> {
        self.messages()
    }
    fn attempt_times(&self) -> Vec<Instant> {
        Vec::new()
    }
}

fn notification() -> crate::model::Notification {
    let mut n = sample(DestinationKind::Email, "mail");
    n.payload = serde_json::json!({"subject": "Application guestbook is out of sync", "body": "guestbook drifted from a1b2c3d.\n", "html": "<p><b>guestbook</b> drifted</p>"});
    n
}

fn spec(port: u16, tls: &str, ca: Option<&std::path::Path>, auth: bool) -> Spec<super::Email> {
    let mut v = serde_json::json!({"host": "localhost", "port": port, "from": "driftwatch@example.com", "tls": tls});
    if let Some(ca) = ca {
        v["caFile"] = serde_json::json!(ca.to_str().unwrap());
    }
    if auth {
        v["username"] = serde_json::json!("driftwatch");
        v["password"] = serde_json::json!("$smtp-password");
    }
    Spec::<super::Email>::parse(v).unwrap()
}

#[test]
fn message_parts_and_recipients() {
    let mut n = notification();
    n.destination.recipient = "a@example.com, b@example.com".into();
    let m = String::from_utf8(message("driftwatch@example.com", &n).unwrap().formatted()).unwrap();
    assert!(m.contains("From: driftwatch@example.com"), "{m}");
    assert!(m.contains("To: a@example.com, b@example.com"), "{m}");
    assert!(m.contains("Subject: Application guestbook is out of sync"), "{m}");
    assert!(m.contains("multipart/alternative") && m.contains("text/plain") && m.contains("text/html"), "{m}");
    assert!(recipients("not an address").is_err());
    assert!(recipients(" , ").is_err());
}

#[tokio::test]
async fn compliance_starttls_with_authentication() {
    let tls = test_tls();
    let server = SmtpServer::start("starttls", Some(&tls), true);
    let secrets = Secrets::from_map([("smtp-password", PASSWORD)]);
    let s = spec(server.port, "starttls", Some(tls.ca_file.path()), true);
    let make = |env: &crate::deliver::env::Env| s.build("mail", env).unwrap();
    for scenario in [Scenario::Success, Scenario::RetryableThenSuccess, Scenario::Permanent, Scenario::TimeoutThenSuccess] {
        check_scenario(scenario, &server, &make, &notification(), &secrets, PASSWORD).await;
    }
    let first = &server.messages()[0];
    assert!(first.contains("X-Envelope-To: ops-0@example.com, lead-0@example.com"), "{first}");
    assert!(first.contains("Subject: Application guestbook is out of sync"), "{first}");
}

#[tokio::test]
async fn implicit_tls_and_plain() {
    let tls = test_tls();
    let implicit = SmtpServer::start("implicit", Some(&tls), false);
    let s = spec(implicit.port, "implicit", Some(tls.ca_file.path()), false);
    let make = |env: &crate::deliver::env::Env| s.build("mail", env).unwrap();
    check_scenario(Scenario::Success, &implicit, &make, &notification(), &Secrets::default(), PASSWORD).await;
    let plain = SmtpServer::start("plain", None, false);
    let s = spec(plain.port, "none", None, false);
    let make = |env: &crate::deliver::env::Env| s.build("mail", env).unwrap();
    check_scenario(Scenario::Success, &plain, &make, &notification(), &Secrets::default(), PASSWORD).await;
    // Without the private CA, the server's certificate is not trusted: nothing is sent.
    let s = spec(implicit.port, "implicit", None, false);
    let make = |env: &crate::deliver::env::Env| s.build("mail", env).unwrap();
    let before = implicit.messages().len();
    let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
    let client = make(&crate::deliver::testkit::env(state, Secrets::default()));
    let outcome = client.deliverer.deliver(&[notification_to("x@example.com")]).await;
    assert!(!matches!(outcome, crate::deliver::outcome::Outcome::Delivered), "{outcome:?}");
    assert_eq!(implicit.messages().len(), before);
}

fn notification_to(r: &str) -> crate::model::Notification {
    let mut n = notification();
    n.destination.recipient = r.into();
    n
}
