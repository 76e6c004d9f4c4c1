//! Process metrics in Prometheus text format. Labels are bounded: they are event types,
//! destination kinds, service and trigger names from the configuration, reasons from a
//! fixed set — never an Application name — and each metric keeps at most
//! [`MAX_SERIES`] label values (more fold into `other`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// Most label values one metric keeps.
pub const MAX_SERIES: usize = 200;

/// A counter (or gauge) family with one label.
#[derive(Default)]
pub struct Family {
    series: Mutex<BTreeMap<String, u64>>,
}

impl Family {
    fn key(map: &BTreeMap<String, u64>, label: &str) -> String {
        if map.contains_key(label) || map.len() < MAX_SERIES { label.to_string() } else { "other".to_string() }
    }

    pub fn inc(&self, label: &str) {
        self.add(label, 1);
    }

    pub fn add(&self, label: &str, n: u64) {
        let mut m = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let k = Self::key(&m, label);
        *m.entry(k).or_default() += n;
    }

    pub fn set(&self, label: &str, v: u64) {
        let mut m = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let k = Self::key(&m, label);
        m.insert(k, v);
    }

    pub fn get(&self, label: &str) -> u64 {
        self.series.lock().unwrap_or_else(|p| p.into_inner()).get(label).copied().unwrap_or(0)
    }

    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.series.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A latency histogram in seconds.
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

const LATENCY_BOUNDS: &[f64] = &[0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0];

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            bounds: LATENCY_BOUNDS,
            counts: LATENCY_BOUNDS.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if s <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros.fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Every metric driftwatch exports.
pub struct Metrics {
    /// Watch events received, by `type` (`application_apply`, `appproject_delete`, ...).
    pub events: Family,
    /// Objects skipped because they were not valid, by `kind`.
    pub malformed: Family,
    pub evaluations: AtomicU64,
    /// Conditions that held and produced a notification, by `trigger`.
    pub fired: Family,
    /// Delivered notifications, by destination `kind`.
    pub sent: Family,
    /// Failed attempts and dead letters, by `kind:reason` (reason: retry, permanent, exhausted).
    pub failed: Family,
    /// Undelivered notifications per `service`.
    pub queue_depth: Family,
    /// Watch stream errors/restarts, by resource `kind`.
    pub watch_restarts: Family,
    pub evaluation_latency: Histogram,
    pub delivery_latency: Histogram,
    pub leader: AtomicU64,
    pub reload_ok: AtomicU64,
    pub ready: AtomicU64,
    /// Drift episode transitions, by `event` (opened, escalated, resolved).
    pub episodes: Family,
    /// Live objects read for attribution, and the reads that failed.
    pub live_reads: AtomicU64,
    pub live_read_errors: AtomicU64,
    /// Reads of live objects the RBAC refused (or a refusal remembered for the kind),
    /// by `resource` (`deployments.apps`: API resources the cluster serves).
    pub live_reads_forbidden: Family,
    /// Why the last configuration reload was refused (empty after a good one): not a
    /// metric, the text `/readyz` adds for whoever looks (never a secret value).
    reload_errors: Mutex<Vec<String>>,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    events: Family::default(),
    malformed: Family::default(),
    evaluations: AtomicU64::new(0),
    fired: Family::default(),
    sent: Family::default(),
    failed: Family::default(),
    queue_depth: Family::default(),
    watch_restarts: Family::default(),
    evaluation_latency: Histogram::new(),
    delivery_latency: Histogram::new(),
    leader: AtomicU64::new(0),
    reload_ok: AtomicU64::new(1),
    ready: AtomicU64::new(0),
    episodes: Family::default(),
    live_reads: AtomicU64::new(0),
    live_read_errors: AtomicU64::new(0),
    live_reads_forbidden: Family::default(),
    reload_errors: Mutex::new(Vec::new()),
});

/// A label value as the Prometheus text format wants it: `\`, `"` and newlines escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, help: &str, kind: &str, label: &str, f: &Family) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (k, v) in f.snapshot() {
        let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {v}", escape_label(&k));
    }
}

fn two_labels(out: &mut String, name: &str, help: &str, labels: (&str, &str), f: &Family) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (k, v) in f.snapshot() {
        let (a, b) = k.split_once(':').unwrap_or((k.as_str(), ""));
        let _ = writeln!(out, "{name}{{{}=\"{}\",{}=\"{}\"}} {v}", labels.0, escape_label(a), labels.1, escape_label(b));
    }
}

fn scalar(out: &mut String, name: &str, help: &str, kind: &str, v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (b, c) in h.bounds.iter().zip(&h.counts) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", c.load(Ordering::Relaxed));
    }
    let count = h.count.load(Ordering::Relaxed);
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum {}", h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
    let _ = writeln!(out, "{name}_count {count}");
}

impl Metrics {
    /// Records why the last reload was refused (at most 20 lines kept).
    pub fn set_reload_errors(&self, mut errors: Vec<String>) {
        errors.truncate(20);
        *self.reload_errors.lock().unwrap_or_else(|p| p.into_inner()) = errors;
    }

    pub fn reload_errors(&self) -> Vec<String> {
        self.reload_errors.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Services that have a queue-depth series (to reset them to zero).
    pub fn queue_depth_services(&self) -> Vec<(String, u64)> {
        self.queue_depth.snapshot().into_iter().collect()
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut o = String::new();
        family(&mut o, "driftwatch_watch_events_total", "Watch events received, by type.", "counter", "type", &self.events);
        family(
            &mut o,
            "driftwatch_malformed_objects_total",
            "Objects skipped because they were not valid.",
            "counter",
            "kind",
            &self.malformed,
        );
        scalar(&mut o, "driftwatch_evaluations_total", "Application evaluations.", "counter", self.evaluations.load(Ordering::Relaxed));
        family(&mut o, "driftwatch_triggers_fired_total", "Notifications decided, by trigger.", "counter", "trigger", &self.fired);
        family(
            &mut o,
            "driftwatch_notifications_sent_total",
            "Notifications delivered, by destination kind.",
            "counter",
            "kind",
            &self.sent,
        );
        two_labels(
            &mut o,
            "driftwatch_notifications_failed_total",
            "Failed delivery attempts and dead letters.",
            ("kind", "reason"),
            &self.failed,
        );
        family(&mut o, "driftwatch_queue_depth", "Undelivered notifications per service.", "gauge", "service", &self.queue_depth);
        family(
            &mut o,
            "driftwatch_watch_restarts_total",
            "Watch stream errors (each followed by a retry).",
            "counter",
            "kind",
            &self.watch_restarts,
        );
        family(&mut o, "driftwatch_drift_episodes_total", "Drift episode transitions, by event.", "counter", "event", &self.episodes);
        scalar(
            &mut o,
            "driftwatch_live_reads_total",
            "Live objects read for attribution.",
            "counter",
            self.live_reads.load(Ordering::Relaxed),
        );
        scalar(
            &mut o,
            "driftwatch_live_read_errors_total",
            "Reads of live objects that failed.",
            "counter",
            self.live_read_errors.load(Ordering::Relaxed),
        );
        family(
            &mut o,
            "driftwatch_live_reads_forbidden_total",
            "Reads of live objects for attribution that the RBAC does not allow, by resource.",
            "counter",
            "resource",
            &self.live_reads_forbidden,
        );
        histogram(&mut o, "driftwatch_evaluation_duration_seconds", "Time to evaluate one Application.", &self.evaluation_latency);
        histogram(&mut o, "driftwatch_delivery_duration_seconds", "Time of one delivery attempt.", &self.delivery_latency);
        scalar(&mut o, "driftwatch_leader", "1 when this replica sends notifications.", "gauge", self.leader.load(Ordering::Relaxed));
        scalar(
            &mut o,
            "driftwatch_config_last_reload_successful",
            "1 when the last configuration (re)load succeeded.",
            "gauge",
            self.reload_ok.load(Ordering::Relaxed),
        );
        scalar(
            &mut o,
            "driftwatch_ready",
            "1 once the initial lists are done and the configuration is loaded.",
            "gauge",
            self.ready.load(Ordering::Relaxed),
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_bounded_and_rendered() {
        let f = Family::default();
        for i in 0..(MAX_SERIES + 50) {
            f.inc(&format!("l{i}"));
        }
        let snap = f.snapshot();
        assert_eq!(snap.len(), MAX_SERIES + 1);
        assert_eq!(snap["other"], 50);
        let mut out = String::new();
        family(&mut out, "x_total", "help", "counter", "k", &f);
        assert!(out.contains("x_total{k=\"l0\"} 1\n"));
        // Label values from configuration (service, trigger names) are escaped.
        let odd = Family::default();
        odd.inc("a\"b\\c\nd:e\"");
        let mut out = String::new();
        family(&mut out, "y", "help", "counter", "k", &odd);
        assert!(out.contains(r#"y{k="a\"b\\c\nd:e\""} 1"#), "{out}");
        let mut out = String::new();
        two_labels(&mut out, "z", "help", ("kind", "reason"), &odd);
        assert!(out.contains(r#"z{kind="a\"b\\c\nd",reason="e\""} 1"#), "{out}");
        let h = Histogram::new();
        h.observe(Duration::from_millis(3));
        let mut out = String::new();
        histogram(&mut out, "h", "help", &h);
        assert!(
            out.contains("h_bucket{le=\"0.001\"} 0\n") && out.contains("h_bucket{le=\"0.005\"} 1\n") && out.contains("h_count 1\n"),
            "{out}"
        );
    }
}
