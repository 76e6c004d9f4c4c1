//! Grouped notifications end to end: the `driftwatch` binary against the fake API
//! server, a route with `group: {by: [revision]}` to Slack's Web API (a loopback
//! stand-in) and PagerDuty (a loopback receiver), and 50 Applications that one Git
//! push moves OutOfSync together.
//!
//! - One Slack message lists the 50 (25 by name, "… and 25 more"), is edited in place
//!   as members resolve, and says "Resolved" when the last one does; PagerDuty gets
//!   one incident (the group's `dedup_key`), resolved with the last member.
//! - Killed (SIGKILL) inside `wait` and started again: still one message.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use common::AppBuilder;
use common::apiserver::FakeApiServer;
use common::daemon::{Daemon, records, wait_for};
use common::receiver::{SlackApi, receiver};

const APPS: usize = 50;

fn config(slack: u16, pd: u16, wait: &str) -> String {
    format!(
        r#"services:
  chat:
    type: slack
    token: $slack-token
    apiUrl: http://127.0.0.1:{slack}
    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}
  oncall:
    type: pagerduty
    apiUrl: http://127.0.0.1:{pd}
    routingKeys: {{platform: R0UTINGKEY}}
    retry: {{initialBackoff: 100ms, maxBackoff: 300ms}}
secretsFile: secrets
routes:
  - name: fleet
    triggers: [on-out-of-sync]
    recipients: [chat:drift, oncall:platform]
    group: {{by: [revision], wait: {wait}, interval: 1s}}
"#
    )
}

fn app(i: usize, status: &str) -> serde_json::Value {
    AppBuilder::new(&format!("shop-{i:02}")).sync(status, common::REV2).healthy().build()
}

struct Setup {
    dir: tempfile::TempDir,
    api: FakeApiServer,
    slack: SlackApi,
    pages: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn setup(wait: &str) -> Setup {
    driftwatch::tls::init_crypto();
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let slack = SlackApi::start();
    let pd = TcpListener::bind("127.0.0.1:0").unwrap();
    let pd_port = pd.local_addr().unwrap().port();
    let pages = receiver(pd);
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/slack-token"), "xoxb-test-token").unwrap();
    std::fs::write(dir.path().join("driftwatch.yaml"), config(slack.port, pd_port, wait)).unwrap();
    for i in 0..APPS {
        api.apply(app(i, "Synced"));
    }
    Setup { dir, api, slack, pages }
}

fn start(dir: &Path) -> Daemon {
    let d = Daemon::start(dir);
    wait_for("the first pass over every Application", Duration::from_secs(30), || {
        d.metric("driftwatch_evaluations_total").is_some_and(|n| n >= APPS as f64)
    });
    d
}

fn fired(d: &Daemon) -> f64 {
    d.metric("driftwatch_triggers_fired_total{trigger=\"on-out-of-sync\"}").unwrap_or(0.0)
}

/// Every Application Synced again, and the group's message resolved (Slack edited in
/// place, PagerDuty's incident resolved): returns PagerDuty's events.
fn resolve_all(s: &Setup) -> Vec<serde_json::Value> {
    for i in 0..APPS {
        s.api.apply(app(i, "Synced"));
    }
    wait_for("the group's message resolved", Duration::from_secs(30), || {
        s.slack.texts().last().is_some_and(|t| t.contains(&format!("Resolved: all {APPS} Applications of on-out-of-sync")))
            && records(&s.pages).iter().any(|e| e["event_action"] == "resolve")
    });
    records(&s.pages)
}

#[test]
fn fifty_applications_on_one_revision_are_one_message_and_one_incident() {
    let s = setup("5s");
    let d = start(s.dir.path());
    for i in 0..APPS {
        s.api.apply(app(i, "OutOfSync"));
    }
    wait_for("the group's message", Duration::from_secs(30), || !s.slack.of("chat.postMessage").is_empty());
    wait_for("the group's message showing all 50", Duration::from_secs(30), || {
        s.slack.texts().last().is_some_and(|t| t.contains(&format!("on-out-of-sync: {APPS} of {APPS} Applications")))
    });
    let shown = s.slack.texts().last().cloned().unwrap_or_default();
    assert!(shown.contains(&format!("revision {}", common::REV2)), "what they share: {shown}");
    assert!(shown.contains("- argocd/shop-00\n") && shown.contains("- argocd/shop-24\n"), "25 by name: {shown}");
    assert!(!shown.contains("shop-25"), "the rest counted, not listed: {shown}");
    assert!(shown.contains("… and 25 more"), "{shown}");

    // Half of them synced: the message is edited to say so.
    for i in 0..APPS / 2 {
        s.api.apply(app(i, "Synced"));
    }
    wait_for("the message updated as members resolve", Duration::from_secs(30), || {
        s.slack.of("chat.update").iter().any(|b| b["text"].as_str().is_some_and(|t| t.contains(&format!("25 of {APPS} Applications"))))
    });
    let update = s.slack.of("chat.update").into_iter().last().unwrap();
    assert_eq!((update["channel"].as_str(), update["ts"].as_str()), (Some("C1"), Some("1700000000.000001")), "edits the one message");
    assert!(update["text"].as_str().unwrap_or_default().contains("- argocd/shop-00 (resolved)"), "{update}");

    let events = resolve_all(&s);
    assert_eq!(s.slack.of("chat.postMessage").len(), 1, "one message for the 50: {:?}", s.slack.texts());
    let keys: std::collections::BTreeSet<&str> = events.iter().filter_map(|e| e["dedup_key"].as_str()).collect();
    assert_eq!(keys.len(), 1, "one incident: {events:?}");
    assert!(keys.iter().all(|k| k.starts_with("driftwatch/group/")), "{keys:?}");
    let triggers: Vec<&serde_json::Value> = events.iter().filter(|e| e["event_action"] == "trigger").collect();
    assert!(!triggers.is_empty() && triggers.len() < 10, "a few updates of one incident, not 50 pages: {}", triggers.len());
    assert!(
        triggers[0]["payload"]["summary"].as_str().is_some_and(
            |t| t.starts_with("on-out-of-sync: ") && t.ends_with(&format!(" of {APPS} Applications revision={}", common::REV2))
        ),
        "{}",
        triggers[0]
    );
    assert_eq!(events.last().map(|e| e["event_action"].clone()), Some("resolve".into()), "resolved at the end");
    d.stop();
}

#[test]
fn a_sigkill_inside_wait_neither_loses_nor_doubles_the_message() {
    let s = setup("10s");
    let mut d = start(s.dir.path());
    for i in 0..APPS {
        s.api.apply(app(i, "OutOfSync"));
    }
    wait_for("every member's notification decided", Duration::from_secs(30), || fired(&d) >= (2 * APPS) as f64);
    assert!(s.slack.of("chat.postMessage").is_empty(), "killed inside wait");
    d.signal("KILL");
    let _ = d.child.wait();
    drop(d);

    let d = start(s.dir.path());
    wait_for("the group's message after the restart", Duration::from_secs(30), || !s.slack.of("chat.postMessage").is_empty());
    let first = s.slack.texts().remove(0);
    assert!(first.contains(&format!("on-out-of-sync: {APPS} of {APPS} Applications")), "nothing lost: {first}");
    let events = resolve_all(&s);
    assert_eq!(s.slack.of("chat.postMessage").len(), 1, "not doubled: {:?}", s.slack.texts());
    let keys: std::collections::BTreeSet<&str> = events.iter().filter_map(|e| e["dedup_key"].as_str()).collect();
    assert_eq!(keys.len(), 1, "one incident: {events:?}");
    d.stop();
}
