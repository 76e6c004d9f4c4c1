//! A tenant's annotations and the values it chooses: bounded before they are
//! expanded, and one Application's bad input fails that Application, never the daemon or
//! the store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::daemon::{Daemon, has, wait_for};
use crate::common::{AppBuilder, DRIFT_TRIGGER, REV1, REV2};

const SUBSCRIPTIONS: &str = "notifications.argoproj.io/subscriptions";

/// The `hook` webhook at `port`, the `on-drift` trigger (OutOfSync, once per
/// revision) with a body naming the Application and its revision.
fn hook_config(port: u16) -> String {
    format!(
        "services:\n  hook:\n    type: webhook\n    url: http://127.0.0.1:{port}\n    retry: {{initialBackoff: 100ms, maxBackoff: 500ms}}\n{DRIFT_TRIGGER}"
    )
}

fn sent(got: &Arc<Mutex<Vec<String>>>, name: &str) -> bool {
    has(got, &format!(r#""app": "{name}""#))
}

/// The highest resident set the daemon process has had (`VmHWM`), in bytes.
fn peak_rss(d: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// The subscriptions annotation of the review's N5: `triggers` trigger names × `destinations`
/// destinations in one entry (flow lists, as `kubectl annotate` takes them).
fn product_annotation(triggers: usize, destinations: usize) -> String {
    let t: Vec<String> = (0..triggers).map(|i| format!("t{i:04}")).collect();
    let d: Vec<String> = (0..destinations).map(|i| format!("{{service: hook-{i:04}}}")).collect();
    format!("- trigger: [{}]\n  destinations: [{}]\n", t.join(", "), d.join(", "))
}

mod on_a_real_api_server {
    use super::*;
    use crate::common::audited::{application, hook, put_app};
    use crate::common::control_plane::{self as cp, ADMIN, block_on};

    /// The tenant of Application `bomb` (anyone who may patch it) writes
    /// `notifications.argoproj.io/subscriptions` with 4,000 triggers × 4,000
    /// destinations in one entry (about 116 KB, under the API server's 256 KiB; 16
    /// million subscriptions once expanded), and the Application drifts. Then Argo CD
    /// reports another Application, `victim`, OutOfSync.
    /// Expected: the annotation is refused as it is parsed (a list past 1,024 items),
    /// said once in the log, counted under `reason="limits"`, and kept as the
    /// Application's note; the configuration's own subscription still sends `bomb`'s
    /// drift; the daemon's peak RSS stays under 200 MB (before: 1.7 GB, OOM-killed under
    /// the chart's 256 MiB limit); `victim`'s alert arrives within 5 s.
    #[test]
    fn a_subscriptions_annotation_of_4000_by_4000_is_refused_within_bounded_memory() {
        let cpl = cp::shared();
        let dir = tempfile::tempdir().unwrap();
        let api = cpl.start_api_server("attack-annotations", &[]);
        let admin = block_on(async {
            api.namespaces(&["argocd"]).await;
            api.client(ADMIN).await
        });
        let (got, port) = hook();
        let config = format!("{}subscriptions:\n  - recipients: [hook]\n    triggers: [on-drift]\n", hook_config(port));
        std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
        api.kubeconfig(&dir.path().join("kubeconfig"), ADMIN);
        block_on(put_app(&admin, application(AppBuilder::new("victim").sync("Synced", REV1).healthy())));
        let d = Daemon::start_with(dir.path(), &[]);

        let bomb = product_annotation(4000, 4000);
        assert!((100_000..256 * 1024).contains(&bomb.len()), "{} bytes", bomb.len());
        block_on(put_app(&admin, application(AppBuilder::new("bomb").sync("OutOfSync", REV1).healthy().annotate(SUBSCRIPTIONS, &bomb))));
        wait_for("bomb's drift, by the configuration's subscription", Duration::from_secs(60), || sent(&got, "bomb"));
        let peak = peak_rss(&d);
        assert!(peak < 200 * 1024 * 1024, "the daemon's peak RSS is {} MB", peak / (1024 * 1024));

        block_on(put_app(&admin, application(AppBuilder::new("victim").sync("OutOfSync", REV2).healthy())));
        wait_for("victim's alert within 5 s", Duration::from_secs(5), || sent(&got, "victim"));

        assert_eq!(d.metric(r#"driftwatch_subscription_annotations_refused_total{reason="limits"}"#), Some(1.0));
        let said = d.log_lines("subscription annotation refused");
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("argocd/bomb") && said[0].contains("1024"), "{}", said[0]);
        let peak = peak_rss(&d);
        assert!(peak < 200 * 1024 * 1024, "the daemon's peak RSS is {} MB", peak / (1024 * 1024));
        assert!(d.stop().success());
    }
}

/// With the state in PostgreSQL (whose index refuses a key over 2,000 bytes), three
/// tenants' Applications drift at once:
/// - `long-once-per`'s writer sets `status.sync.revision` (writable: the CRD has no
///   status subresource) to 2,100 characters, the `oncePer` value of `on-drift`;
/// - `long-recipient`'s writer subscribes `subscribe.on-drift.hook` with a recipient of
///   2,100 characters;
/// - `other` is an ordinary OutOfSync Application.
///
/// Expected: `long-once-per`'s notification is delivered (its key holds the value cut
/// and digested); `long-recipient`'s annotation is refused (`reason="limits"`);
/// `other`'s alert is delivered; no pass is refused by the store and the store is
/// never reopened (before: every pass of the first two failed the write and the store
/// was reopened every 2 s, its workers stopped each time).
#[test]
fn a_tenant_value_past_postgresqls_key_bound_never_fails_the_store() {
    let pg = driftwatch::state::pgtest::server().expect("a private PostgreSQL");
    let dir = tempfile::tempdir().unwrap();
    let api = crate::common::apiserver::FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = crate::common::receiver::receiver(listener);
    let schema = driftwatch::state::pgtest::fresh_schema();
    let config = format!("{}secretsFile: secrets.yaml\nstate:\n  postgres:\n    url: $pg-url\n    schema: {schema}\n", hook_config(port));
    std::fs::write(dir.path().join("driftwatch.yaml"), config).unwrap();
    std::fs::write(dir.path().join("secrets.yaml"), format!("pg-url: {:?}\n", pg.url())).unwrap();

    let long = "0123456789abcdef".repeat(132);
    assert!(long.len() > 2_100);
    let subscribed = |name: &str, rev: &str, recipient: &str| {
        AppBuilder::new(name)
            .sync("OutOfSync", rev)
            .healthy()
            .annotate("notifications.argoproj.io/subscribe.on-drift.hook", recipient)
            .build()
    };
    api.apply(subscribed("long-once-per", &long, ""));
    api.apply(subscribed("long-recipient", REV1, &long));
    api.apply(subscribed("other", REV1, ""));
    let d = Daemon::start_with(dir.path(), &[]);

    wait_for("other's alert", Duration::from_secs(15), || sent(&got, "other"));
    wait_for("long-once-per's alert", Duration::from_secs(15), || sent(&got, "long-once-per"));
    assert!(has(&got, &long), "the value itself is sent as it is");
    wait_for("the refused recipient counted", Duration::from_secs(15), || {
        d.metric(r#"driftwatch_subscription_annotations_refused_total{reason="limits"}"#) == Some(1.0)
    });
    assert!(!sent(&got, "long-recipient"));
    assert_eq!(d.metric("driftwatch_evaluations_refused_total"), Some(0.0));
    // A change after them is still delivered by the same store.
    api.apply(subscribed("other", REV2, ""));
    wait_for("other's second alert", Duration::from_secs(15), || has(&got, REV2));
    assert_eq!(d.log_lines("reopening the state store"), Vec::<String>::new());
    assert!(d.log_lines("will retry").is_empty(), "{:?}", d.log_lines("will retry"));
    assert!(d.stop().success());
}
