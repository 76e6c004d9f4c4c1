//! The Grafana dashboard (`deploy/grafana/driftwatch.json`, also in the Helm chart) and
//! the chart's alert rules cannot rot: every metric they query is one the real binary
//! exposes at `/metrics`, with the labels they group and filter by, and the chart
//! ships the same dashboard file.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::apiserver::FakeApiServer;
use common::daemon::Daemon;
use common::receiver::get;
use driftwatch::metrics::Metrics;
use serde_json::Value;

/// Labels Prometheus adds to every scraped series (the target's), not driftwatch's.
const TARGET_LABELS: &[&str] = &["instance", "job", "pod", "namespace", "service"];

fn repo(p: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// Every `expr` and legend of the dashboard's panels (rows' panels included).
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &[Value], out: &mut Vec<(String, String)>) {
        for p in panels {
            for t in p["targets"].as_array().map(Vec::as_slice).unwrap_or_default() {
                let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                out.push((s("expr"), s("legendFormat")));
            }
            walk(p["panels"].as_array().map(Vec::as_slice).unwrap_or_default(), out);
        }
    }
    let mut out = Vec::new();
    walk(dashboard["panels"].as_array().map(Vec::as_slice).unwrap_or_default(), &mut out);
    out
}

/// The `driftwatch_*` names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("driftwatch_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The label names an expression uses: in selectors (`{reason=~"…"}`) and in
/// `by (…)` / `without (…)`.
fn label_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_quotes = false;
    let mut selector = String::new();
    let mut depth = 0;
    for c in expr.chars() {
        match c {
            '"' => in_quotes = !in_quotes,
            '{' if !in_quotes => {
                depth += 1;
                selector.clear();
            }
            '}' if !in_quotes => {
                depth -= 1;
                for part in selector.split(',') {
                    let name: String = part.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
            }
            _ if depth > 0 && !in_quotes => selector.push(c),
            _ if depth > 0 => {}
            _ => {}
        }
    }
    for kw in ["by (", "without ("] {
        let mut rest = expr;
        while let Some(i) = rest.find(kw) {
            let tail = &rest[i + kw.len()..];
            let end = tail.find(')').unwrap_or(tail.len());
            out.extend(tail[..end].split(',').map(|l| l.trim().to_string()).filter(|l| !l.is_empty()));
            rest = &tail[end..];
        }
    }
    out
}

/// The family a sample name belongs to, with its label names (`le` for buckets).
fn family_of(sample: &str) -> Option<(&'static str, Vec<&'static str>)> {
    Metrics::families().iter().find_map(|(name, kind, labels)| {
        let fits = match *kind {
            "counter" => sample == format!("{name}_total"),
            "histogram" => ["_bucket", "_sum", "_count"].iter().any(|s| sample == format!("{name}{s}")),
            _ => sample == *name,
        };
        let mut labels = labels.to_vec();
        if sample.ends_with("_bucket") {
            labels.push("le");
        }
        fits.then_some((*name, labels))
    })
}

/// Checks one query: every metric exists, every label it uses (and its legend names)
/// belongs to one of its metrics or to the scrape target. Returns the families.
fn check(expr: &str, legend: &str, what: &str) -> Vec<&'static str> {
    let names = metric_names(expr);
    assert!(!names.is_empty(), "{what}: {expr:?} queries no driftwatch metric");
    let mut families = Vec::new();
    let mut allowed: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    for n in &names {
        let (family, labels) = family_of(n).unwrap_or_else(|| panic!("{what}: {n} in {expr:?} is not a metric driftwatch exposes"));
        families.push(family);
        allowed.extend(labels.iter().map(|l| l.to_string()));
    }
    for l in label_names(expr) {
        assert!(allowed.contains(&l), "{what}: label {l:?} in {expr:?} is not one of {allowed:?}");
    }
    let mut rest = legend;
    while let Some(i) = rest.find("{{") {
        let tail = &rest[i + 2..];
        let end = tail.find("}}").unwrap_or(tail.len());
        let l = tail[..end].trim();
        assert!(allowed.contains(l), "{what}: legend {{{{{l}}}}} is not a label of {names:?}");
        rest = &tail[end..];
    }
    families
}

#[test]
fn the_dashboard_and_the_alerts_query_what_the_binary_exposes() {
    let text = std::fs::read_to_string(repo("deploy/grafana/driftwatch.json")).unwrap();
    assert_eq!(
        text,
        std::fs::read_to_string(repo("deploy/helm/driftwatch/dashboards/driftwatch.json")).unwrap(),
        "the chart ships the same dashboard (cp deploy/grafana/driftwatch.json deploy/helm/driftwatch/dashboards/)"
    );
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(dashboard["uid"], "driftwatch");
    let mut ids = BTreeSet::new();
    for p in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel ids are unique");
        let g = &p["gridPos"];
        assert!(g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24, "{} fits the grid", p["title"]);
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{} uses the dashboard's data source variable", p["title"]);
        }
    }
    let queries = queries(&dashboard);
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let mut used = BTreeSet::new();
    for (expr, legend) in &queries {
        used.extend(check(expr, legend, "the dashboard"));
    }
    // What the issue asks the dashboard to show.
    for family in [
        "driftwatch_notifications_sent",
        "driftwatch_notifications_failed",
        "driftwatch_queue_depth",
        "driftwatch_queue_oldest_seconds",
        "driftwatch_dead_letters",
        "driftwatch_episode_detection_seconds",
        "driftwatch_episode_resolution_seconds",
        "driftwatch_episodes_open",
        "driftwatch_config_reloads",
        "driftwatch_leader",
    ] {
        assert!(used.contains(family), "the dashboard shows {family}");
    }
    // The chart's alert rules, as rendered.
    let rendered = std::fs::read_to_string(repo("tests/helm/ha.yaml")).unwrap();
    let rules: Vec<&str> = rendered.lines().filter_map(|l| l.trim().strip_prefix("expr: ")).collect();
    assert!(rules.len() >= 5, "{rules:?}");
    for r in &rules {
        used.extend(check(r, "", "the PrometheusRule"));
    }
    assert!(rendered.contains("grafana_dashboard: \"1\"") && rendered.contains("driftwatch.json: |-"), "the chart renders the dashboard");

    // The real binary's /metrics has each of them.
    let dir = tempfile::tempdir().unwrap();
    let api = FakeApiServer::start();
    api.kubeconfig(&dir.path().join("kubeconfig"));
    std::fs::write(dir.path().join("driftwatch.yaml"), "context: {argocdUrl: https://argocd.example.com}\n").unwrap();
    let d = Daemon::start(dir.path());
    let mut body = String::new();
    common::daemon::wait_for("/metrics", Duration::from_secs(10), || {
        body = get(&d.admin, "/metrics").map(|(_, b)| b).unwrap_or_default();
        !body.is_empty()
    });
    // Everything the binary exposes is in the list the dashboard was checked against,
    // with its type.
    let listed = Metrics::families();
    for line in body.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let (name, kind) = line.split_once(' ').unwrap();
        assert!(listed.iter().any(|(n, k, _)| *n == name && *k == kind), "the binary exposes {name} ({kind}), not in Metrics::families");
    }
    // Issue 40: every family the dashboard and the alert rules read has a series from
    // the start, at 0, so a panel shows 0, not "No data" (a counter's samples end in
    // `_total`, a histogram's in `_bucket`...). The queue depth is per configured
    // service: with none configured there is none, and one appears with the first. An
    // audit feed's last batch time is per configured feed (primed at 0 when the audit
    // input starts): without one there is none.
    let has_sample = |family: &str| body.lines().any(|l| !l.starts_with('#') && l.starts_with(family));
    let per_configured = ["driftwatch_queue_depth", "driftwatch_audit_last_batch_timestamp_seconds"];
    for family in used.iter().filter(|f| !per_configured.contains(f)) {
        assert!(has_sample(family), "/metrics has no series of {family} before the first event:\n{body}");
    }
    assert!(!has_sample("driftwatch_queue_depth"), "a queue depth without a service");
    assert!(!has_sample("driftwatch_audit_last_batch_timestamp_seconds"), "a feed's time without an audit input");
    std::fs::write(
        dir.path().join("driftwatch.yaml"),
        "context: {argocdUrl: https://argocd.example.com}\nservices:\n  hook: {type: webhook, url: http://127.0.0.1:9}\noperations:\n  open: true\n",
    )
    .unwrap();
    d.signal("HUP");
    common::daemon::wait_for("the new service's queue depth", Duration::from_secs(15), || {
        get(&d.admin, "/metrics").is_some_and(|(_, b)| b.contains("driftwatch_queue_depth{service=\"hook\"} 0"))
    });
    assert!(d.stop().success());
}

/// The checks above refuse what would rot: a renamed metric, a label it does not have,
/// a legend naming one.
#[test]
fn a_query_of_a_missing_metric_or_label_is_refused() {
    let refused = |expr: &'static str, legend: &'static str| std::panic::catch_unwind(|| check(expr, legend, "probe")).is_err();
    assert!(!refused(r#"sum by (service) (rate(driftwatch_notifications_sent_total[5m]))"#, "{{service}}"));
    assert!(refused("rate(driftwatch_notifications_delivered_total[5m])", ""), "a metric that does not exist");
    assert!(refused(r#"sum by (cluster) (driftwatch_queue_depth)"#, ""), "a label the family does not have");
    assert!(refused(r#"driftwatch_queue_depth{service="hook"}"#, "{{class}}"), "a legend of a label it does not have");
    assert!(refused("up", ""), "a query of no driftwatch metric");
}
