//! The process's metrics, as typed prometheus-client families exposed in the
//! OpenMetrics text format (label values escaped by the encoder). Labels are bounded:
//! they are event types, destination kinds, service and trigger names from the
//! configuration, reasons from a fixed set — never an Application name — and each
//! family keeps at most [`MAX_SERIES`] label values (more fold into `other`).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as PromFamily;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram as PromHistogram;
use prometheus_client::registry::Registry;

/// Most label values one family keeps.
pub const MAX_SERIES: usize = 200;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// The label set of `value` for a family's label names: one label, or two from
/// `first:second` (split at the first `:`).
fn labels(names: (&'static str, Option<&'static str>), value: &str) -> Labels {
    match names {
        (a, None) => vec![(a, value.to_string())],
        (a, Some(b)) => {
            let (x, y) = value.split_once(':').unwrap_or((value, ""));
            vec![(a, x.to_string()), (b, y.to_string())]
        }
    }
}

/// A family's label names as [`labels`] takes them: the first and, for two, the second.
/// The table in [`Metrics`] gives one or two (a test renders every family and checks
/// its labels).
fn label_names(names: &'static [&'static str]) -> (&'static str, Option<&'static str>) {
    (names.first().copied().unwrap_or_default(), names.get(1).copied())
}

/// A counter or gauge family with one label (two for `kind:reason`, split at the
/// first `:`), bounded to [`MAX_SERIES`] label values.
#[derive(Clone)]
pub struct Family<M: Clone + Default + Send + Sync + 'static = Counter<u64, AtomicU64>> {
    names: (&'static str, Option<&'static str>),
    family: PromFamily<Labels, M>,
    /// How many label sets the family holds (prometheus-client does not say).
    created: Arc<Mutex<usize>>,
}

impl<M: Clone + Default + Send + Sync + 'static> Family<M> {
    fn with_labels(labels: &'static [&'static str]) -> Self {
        Family { names: label_names(labels), family: PromFamily::default(), created: Arc::default() }
    }

    fn labels_of(&self, value: &str) -> Labels {
        labels(self.names, value)
    }

    /// The series of `value`, or `other` once the family is full.
    fn series(&self, value: &str) -> Labels {
        let labels = self.labels_of(value);
        if self.family.get(&labels).is_some() {
            return labels;
        }
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        let labels = if *created < MAX_SERIES { labels } else { self.labels_of("other") };
        if self.family.get(&labels).is_none() {
            *created += 1;
        }
        labels
    }
}

impl Family<Counter<u64, AtomicU64>> {
    pub fn inc(&self, label: &str) {
        self.add(label, 1);
    }

    pub fn add(&self, label: &str, n: u64) {
        self.family.get_or_create(&self.series(label)).inc_by(n);
    }

    pub fn get(&self, label: &str) -> u64 {
        self.family.get(&self.labels_of(label)).map_or(0, |c| c.get())
    }

    /// Gives `label` a series at 0 (if it has none), so a dashboard shows 0, not "No
    /// data", before the first event.
    pub fn zero(&self, label: &str) {
        self.add(label, 0);
    }
}

impl Family<Gauge<i64, std::sync::atomic::AtomicI64>> {
    pub fn set(&self, label: &str, v: u64) {
        self.family.get_or_create(&self.series(label)).set(i64::try_from(v).unwrap_or(i64::MAX));
    }

    pub fn get(&self, label: &str) -> u64 {
        self.family.get(&self.labels_of(label)).map_or(0, |g| u64::try_from(g.get()).unwrap_or(0))
    }

    /// Whether `label` has a series yet.
    pub fn has(&self, label: &str) -> bool {
        self.family.get(&self.labels_of(label)).is_some()
    }
}

/// A latency histogram in seconds.
pub struct Histogram(PromHistogram);

const LATENCY_BOUNDS: &[f64] = &[0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0];

impl Histogram {
    fn new() -> Histogram {
        Histogram(PromHistogram::new(LATENCY_BOUNDS.iter().copied()))
    }

    pub fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

type GaugeFamily = Family<Gauge<i64, std::sync::atomic::AtomicI64>>;

/// Bounds of the detection and resolution histograms (seconds: 1 s to 1 week).
const EPISODE_BOUNDS: &[f64] = &[1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0, 604800.0];

fn episode_histogram() -> PromHistogram {
    PromHistogram::new(EPISODE_BOUNDS.iter().copied())
}

/// Bounds of the notification latency histogram (seconds: 1 ms to 2 min), fine where
/// driftwatch's own share lies.
const NOTIFY_BOUNDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

fn notify_histogram() -> PromHistogram {
    PromHistogram::new(NOTIFY_BOUNDS.iter().copied())
}

/// A histogram family with one label, bounded to [`MAX_SERIES`] label values.
pub struct HistogramFamily {
    /// One label, or two (`first:second` values, split at the first `:`).
    labels: (&'static str, Option<&'static str>),
    family: PromFamily<Labels, PromHistogram, fn() -> PromHistogram>,
    created: Mutex<std::collections::BTreeSet<String>>,
}

impl HistogramFamily {
    /// Gives `label` an empty histogram (if it has none): see [`Family::zero`].
    pub fn zero(&self, label: &str) {
        let labels = labels(self.labels, label);
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        if created.len() < MAX_SERIES && created.insert(label.to_string()) {
            let _ = self.family.get_or_create(&labels);
        }
    }

    fn with_labels(labels: &'static [&'static str]) -> Self {
        HistogramFamily::with_buckets(labels, episode_histogram)
    }

    fn with_buckets(labels: &'static [&'static str], buckets: fn() -> PromHistogram) -> Self {
        HistogramFamily { labels: label_names(labels), family: PromFamily::new_with_constructor(buckets), created: Mutex::default() }
    }

    /// Observes `secs` under `value` (`class`, or `class:resolution` for a family of
    /// two labels), or `other` once the family is full.
    pub fn observe(&self, value: &str, secs: f64) {
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        let v = if created.contains(value) || created.len() < MAX_SERIES {
            created.insert(value.to_string());
            value
        } else {
            "other"
        };
        self.family.get_or_create(&labels(self.labels, v)).observe(secs);
    }
}

/// Sets a gauge family to `values`, and to zero the series it had that `values` lacks.
fn set_all(family: &GaugeFamily, known: &Mutex<std::collections::BTreeSet<String>>, values: &std::collections::BTreeMap<String, u64>) {
    let mut known = known.lock().unwrap_or_else(|p| p.into_inner());
    for label in known.iter() {
        family.set(label, values.get(label).copied().unwrap_or(0));
    }
    for (label, n) in values {
        family.set(label, *n);
        if known.len() < MAX_SERIES {
            known.insert(label.clone());
        }
    }
}

/// What a row of the [`Metrics`] table can be: a kind of metric that is built from its
/// label names, has an OpenMetrics type, and registers under a name and help.
trait Kind {
    /// The type `/metrics` prints after `# TYPE`.
    const TYPE: &'static str;
    fn build(labels: &'static [&'static str]) -> Self;
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str);
}

impl Kind for Counter {
    const TYPE: &'static str = "counter";
    fn build(_: &'static [&'static str]) -> Self {
        Counter::default()
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.clone());
    }
}

impl Kind for Gauge {
    const TYPE: &'static str = "gauge";
    fn build(_: &'static [&'static str]) -> Self {
        Gauge::default()
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.clone());
    }
}

impl Kind for Family {
    const TYPE: &'static str = "counter";
    fn build(labels: &'static [&'static str]) -> Self {
        Family::with_labels(labels)
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.family.clone());
    }
}

impl Kind for GaugeFamily {
    const TYPE: &'static str = "gauge";
    fn build(labels: &'static [&'static str]) -> Self {
        Family::with_labels(labels)
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.family.clone());
    }
}

impl Kind for Histogram {
    const TYPE: &'static str = "histogram";
    fn build(_: &'static [&'static str]) -> Self {
        Histogram::new()
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.0.clone());
    }
}

/// A [`HistogramFamily`] with the notification latency's bounds (milliseconds to
/// minutes) rather than an episode's (seconds to a week).
pub struct LatencyFamily(HistogramFamily);

impl LatencyFamily {
    pub fn observe(&self, value: &str, secs: f64) {
        self.0.observe(value, secs);
    }

    pub fn zero(&self, label: &str) {
        self.0.zero(label);
    }
}

impl Kind for LatencyFamily {
    const TYPE: &'static str = "histogram";
    fn build(labels: &'static [&'static str]) -> Self {
        LatencyFamily(HistogramFamily::with_buckets(labels, notify_histogram))
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.0.family.clone());
    }
}

impl Kind for HistogramFamily {
    const TYPE: &'static str = "histogram";
    fn build(labels: &'static [&'static str]) -> Self {
        HistogramFamily::with_labels(labels)
    }
    fn register(&self, registry: &mut Registry, name: &'static str, help: &'static str) {
        registry.register(name, help, self.family.clone());
    }
}

/// Turns the table of metrics below into the [`Metrics`] struct (one public field a
/// row), [`Metrics::new`] (each built from its label names and registered, in the
/// table's order, which is the order `/metrics` lists them) and
/// [`Metrics::families`]. A row reads
/// `field: Kind ["label", ...] = "exported_name", "help";`.
macro_rules! metrics_table {
    ($($(#[$doc:meta])* $field:ident: $kind:ident [$($label:literal),*] = $name:literal, $help:literal;)*) => {
        /// Every metric driftwatch exports.
        pub struct Metrics {
            $($(#[$doc])* pub $field: $kind,)*
            /// Why the last configuration reload was refused (empty after a good one): not a
            /// metric, the text `/readyz` adds for whoever looks (never a secret value).
            reload_errors: Mutex<Vec<String>>,
            /// Services with a queue-depth series.
            depth_services: Mutex<std::collections::BTreeSet<String>>,
            /// Classes with an open-episodes series.
            open_classes: Mutex<std::collections::BTreeSet<String>>,
            registry: Registry,
        }

        impl Metrics {
            fn new() -> Metrics {
                let mut m = Metrics {
                    $($field: <$kind as Kind>::build(&[$($label),*]),)*
                    reload_errors: Mutex::new(Vec::new()),
                    depth_services: Mutex::default(),
                    open_classes: Mutex::default(),
                    registry: Registry::default(),
                };
                // Counters are registered without `_total`: the encoder adds it.
                $(m.$field.register(&mut m.registry, $name, $help);)*
                m.reload_ok.set(1);
                m
            }

            /// Every family as `/metrics` names it (a counter's name is given without the
            /// `_total` its samples carry, a histogram's without `_bucket`, `_sum`, `_count`),
            /// its type and its label names: what dashboards and alerts may query. A test
            /// renders every family and checks this list against the output.
            pub fn families() -> &'static [(&'static str, &'static str, &'static [&'static str])] {
                &[$(($name, <$kind as Kind>::TYPE, &[$($label),*]),)*]
            }
        }
    };
}

metrics_table! {
    /// Watch events received, by `type` (`application_apply`, `appproject_delete`, ...).
    events: Family ["type"] = "driftwatch_watch_events", "Watch events received, by type";
    /// Objects skipped because they were not valid, by `kind`.
    malformed: Family ["kind"] = "driftwatch_malformed_objects", "Objects skipped because they were not valid";
    evaluations: Counter [] = "driftwatch_evaluations", "Application evaluations";
    /// Evaluations whose Application's subscription annotations went past the limits.
    subscriptions_capped: Counter [] = "driftwatch_subscriptions_capped",
        "Evaluations of an Application whose subscription annotations name more than the limits";
    /// Subscription annotations refused, by `reason` (`malformed`: not the annotation's
    /// format; `limits`: past the bounds applied while it is parsed), counted once per
    /// Application and refusal (again when what is refused changes).
    annotations_refused: Family ["reason"] = "driftwatch_subscription_annotations_refused",
        "Subscription annotations refused, by reason (malformed, limits)";
    /// Evaluation passes the state store refused to write for what they held (a key
    /// too long): that Application's pass fails, the store stays open.
    passes_refused: Counter [] = "driftwatch_evaluations_refused", "Evaluation passes the state store refused to write for what they held";
    /// Conditions that held and produced a notification, by `trigger`.
    fired: Family ["trigger"] = "driftwatch_triggers_fired", "Notifications decided, by trigger";
    /// Delivered notifications, by destination `kind`.
    sent: Family ["kind"] = "driftwatch_notifications_sent", "Notifications delivered, by destination kind";
    /// Failed attempts and dead letters, by `kind:reason` (reason: retry, permanent, exhausted).
    failed: Family ["kind", "reason"] = "driftwatch_notifications_failed", "Failed delivery attempts and dead letters";
    /// Undelivered notifications per `service`.
    queue_depth: GaugeFamily ["service"] = "driftwatch_queue_depth", "Undelivered notifications per service";
    /// Age of the oldest undelivered notification, in seconds (0: the outbox is empty).
    queue_oldest: Gauge [] = "driftwatch_queue_oldest_seconds", "Age of the oldest undelivered notification";
    /// Dead letters kept in the store.
    dead_letters: Gauge [] = "driftwatch_dead_letters", "Dead letters kept in the store";
    /// Open drift episodes, by `class` (one of several classes counts in each).
    episodes_open: GaugeFamily ["class"] = "driftwatch_episodes_open", "Open drift episodes, by class";
    /// Configuration reloads, by `result` (`ok`, `refused`).
    reloads: Family ["result"] = "driftwatch_config_reloads", "Configuration reloads, by result";
    /// Notifications not queued, by `service:reason` (`full`: the service's outbox was
    /// at its bound, decided again later; `superseded`: a settle delivered the same
    /// key after the pass decided it).
    not_queued: Family ["service", "reason"] = "driftwatch_notifications_not_queued",
        "Notifications decided but not queued, by service and reason";
    /// Watch stream errors/restarts, by resource `kind`.
    watch_restarts: Family ["kind"] = "driftwatch_watch_restarts", "Watch stream errors (each followed by a retry)";
    /// Drift episode transitions, by `event` (opened, escalated, resolved).
    episodes: Family ["event"] = "driftwatch_drift_episodes", "Drift episode transitions, by event";
    /// Live objects read for attribution, and the reads that failed.
    live_reads: Counter [] = "driftwatch_live_reads", "Live objects read for attribution";
    live_read_errors: Counter [] = "driftwatch_live_read_errors", "Reads of live objects that failed";
    /// Reads of live objects the RBAC refused (or a refusal remembered for the kind),
    /// by `resource` (`deployments.apps`: API resources the cluster serves).
    live_reads_forbidden: Family ["resource"] = "driftwatch_live_reads_forbidden",
        "Reads of live objects for attribution that the RBAC does not allow, by resource";
    /// Connections to the operations listener closed unserved: over its connection
    /// cap, a handshake evicted or refused.
    ops_connections_refused: Counter [] = "driftwatch_operations_connections_refused",
        "Connections to the operations listener closed unserved (over its cap, a TLS handshake evicted or refused)";
    /// History and web-view data requests answered 503: the most that run at once
    /// were running.
    ops_queries_busy: Counter [] = "driftwatch_operations_queries_busy",
        "History and web-view data requests answered 503 because the most that run at once were running";
    /// State store reads made for `/metrics` (its figures are refreshed on a timer,
    /// never per scrape: review N7).
    ops_store_reads: Counter [] = "driftwatch_operations_store_reads",
        "State store reads made for the /metrics figures (refreshed on a timer, not per scrape)";
    /// Resources an Application's status lists outside its AppProject: never read.
    live_reads_outside_project: Counter [] = "driftwatch_live_reads_outside_project",
        "Resources an Application's status lists outside its AppProject (not read, not indexed)";
    /// Live reads by `cluster` (`in-cluster` or a `clusters:` entry) and `result`
    /// (`ok`, `failed`: no answer, `error`: the API server answered with one).
    cluster_reads: Family ["result", "cluster"] = "driftwatch_cluster_reads", "Live reads by cluster and result";
    /// Whether the last read from each cluster succeeded (1) or not (0), by `cluster`.
    cluster_up: GaugeFamily ["cluster"] = "driftwatch_cluster_up", "Whether the last live read from each cluster succeeded";
    /// Drifted resources diffed, and the desired values' source (`argocd`,
    /// `last-applied`, `not-known`).
    diffs: Family ["source"] = "driftwatch_diffs", "Drifted resources diffed, by the source of desired values";
    /// Audit events received, by `result` (`relevant`, or why dropped: `read`,
    /// `argocd`, `unmanaged`, `stage`, `not-a-change`).
    audit_events: Family ["result"] = "driftwatch_audit_events", "Audit events received, by result";
    /// `POST /audit` requests, by `code` (200, 400, 401, 408, 413, 503) and connections
    /// closed unserved (`connection-cap`, `handshake-evicted`, `tls-refused`).
    audit_requests: Family ["code"] = "driftwatch_audit_requests", "Audit webhook requests, by status code";
    /// Relevant audit events not handed to the evaluation, by `reason` (`queue-full`,
    /// `batch-over-queue`, `replayed`, `too-many-apps`, `actor-over-budget`,
    /// `window-full`, `objects-over-limit`, `event-over-limit`, `inbox-full`).
    audit_dropped: Family ["reason"] = "driftwatch_audit_dropped", "Relevant audit events not evaluated, by reason";
    /// With the state in PostgreSQL: audit batches in the inbox that some shard has not
    /// taken yet (as this replica last saw when one of its shards read it).
    /// When each cluster's API server last had a batch taken (unix seconds; 0: never
    /// since start): `in-cluster`, and each spoke with an `auditToken` (bounded by
    /// `clusters:`).
    audit_last_batch: GaugeFamily ["cluster"] = "driftwatch_audit_last_batch_timestamp_seconds", "When each cluster's audit feed last had a batch taken";
    audit_inbox: Gauge [] = "driftwatch_audit_inbox_batches", "Audit batches waiting in the inbox for a shard's leader";
    /// Transitions of break-glass exceptions (opened, approved, active, refused,
    /// expired, overdue, closed).
    break_glass: Family ["event"] = "driftwatch_break_glass",
        "Transitions of break-glass exceptions, by event (refused: malformed or forged, changes nothing)";
    /// From an audit request's arrival to its relevant events evaluated.
    audit_evaluated_latency: Histogram [] = "driftwatch_audit_evaluated_seconds",
        "Time from an audit batch's arrival to its relevant events evaluated";
    /// Seconds from a change to Argo CD reporting it, and from then to its
    /// resolution, by `class`, observed when an episode resolves.
    detection_seconds: HistogramFamily ["class"] = "driftwatch_episode_detection_seconds",
        "Time from a change to Argo CD reporting it, by class";
    resolution_seconds: HistogramFamily ["class", "resolution"] = "driftwatch_episode_resolution_seconds",
        "Time from Argo CD reporting a drift to its resolution, by class and how it resolved";
    evaluation_latency: Histogram [] = "driftwatch_evaluation_duration_seconds", "Time to evaluate one Application";
    delivery_latency: Histogram [] = "driftwatch_delivery_duration_seconds", "Time of one delivery attempt";
    /// From a watch or audit event reaching the daemon to the delivery of a
    /// notification it decided being acknowledged, by destination kind: driftwatch's
    /// own share of the time to page (with the destination's answer).
    notification_latency: LatencyFamily ["kind"] = "driftwatch_notification_latency_seconds",
        "Time from a watch or audit event reaching driftwatch to the delivery it decided being acknowledged, by destination kind";
    /// 1 while this replica sends; with sharding, how many shards it holds.
    leader: Gauge [] = "driftwatch_leader", "1 when this replica sends notifications; with sharding, the shards it holds";
    /// Applications this replica keeps (with sharding, those of the shards it holds).
    applications: Gauge [] = "driftwatch_applications", "Deployment units (Applications, Flux and Fleet units) this replica keeps: with sharding, those of the shards it holds";
    reload_ok: Gauge [] = "driftwatch_config_last_reload_successful", "1 when the last configuration (re)load succeeded";
    ready: Gauge [] = "driftwatch_ready", "1 once the initial lists are done and the configuration is loaded";
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The label values known at start, whose series [`Metrics::prime`] creates at 0.
#[derive(Debug, Default)]
pub struct Prime<'a> {
    /// Destination kinds (`driftwatch_notifications_sent_total{kind}`, `..._failed_total`).
    pub kinds: &'a [&'a str],
    /// Configured services (queue depth, not queued).
    pub services: &'a [&'a str],
    pub triggers: &'a [&'a str],
    /// Drift classes (open episodes, time to detect).
    pub classes: &'a [&'a str],
    /// Audit event results (`relevant` and each reason to drop).
    pub audit_results: &'a [&'a str],
    pub break_glass_events: &'a [&'a str],
    /// Episode transitions (opened, escalated, resolved, attempted).
    pub episode_events: &'a [&'a str],
    /// How episodes resolve (time to resolve, by class and resolution).
    pub resolutions: &'a [&'a str],
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

    /// Sets the queue depth of every service: those given, and zero for those that had
    /// a series and are not given (their queue emptied).
    pub fn set_queue_depths(&self, depths: &std::collections::BTreeMap<String, u64>) {
        set_all(&self.queue_depth, &self.depth_services, depths);
    }

    /// Sets the open episodes of every class, zero for those no longer open.
    pub fn set_open_episodes(&self, by_class: &std::collections::BTreeMap<String, u64>) {
        set_all(&self.episodes_open, &self.open_classes, by_class);
    }

    /// Gives every series a dashboard or an alert rule reads a value of 0 before the
    /// first event, for the label values known at start: `p` says which.
    pub fn prime(&self, p: &Prime<'_>) {
        for k in p.kinds {
            self.sent.zero(k);
            self.notification_latency.zero(k);
            for reason in ["retry", "exhausted", "permanent"] {
                self.failed.zero(&format!("{k}:{reason}"));
            }
        }
        for s in p.services {
            self.show_queue(s);
            self.not_queued.zero(&format!("{s}:full"));
        }
        self.not_queued.zero("all:superseded");
        p.triggers.iter().for_each(|t| self.fired.zero(t));
        for c in p.classes {
            self.detection_seconds.zero(c);
            for r in p.resolutions {
                self.resolution_seconds.zero(&format!("{c}:{r}"));
            }
        }
        // A class that has no series gets one at 0; one that has keeps its count (a
        // reload primes again while episodes are open).
        {
            let mut known = self.open_classes.lock().unwrap_or_else(|p| p.into_inner());
            for c in p.classes {
                if known.len() < MAX_SERIES && known.insert(c.to_string()) {
                    self.episodes_open.set(c, self.episodes_open.get(c));
                }
            }
        }
        p.audit_results.iter().for_each(|r| self.audit_events.zero(r));
        ["200", "400", "401", "408", "413", "503"].iter().for_each(|c| self.audit_requests.zero(c));
        p.break_glass_events.iter().for_each(|e| self.break_glass.zero(e));
        p.episode_events.iter().for_each(|e| self.episodes.zero(e));
        ["ok", "refused"].iter().for_each(|r| self.reloads.zero(r));
        ["application", "appproject", "kustomization", "helmrelease", "bundledeployment"].iter().for_each(|k| self.watch_restarts.zero(k));
        ["malformed", "limits"].iter().for_each(|r| self.annotations_refused.zero(r));
    }

    /// Gives a service a queue-depth series (0) if it has none yet.
    pub fn show_queue(&self, service: &str) {
        let mut known = self.depth_services.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() < MAX_SERIES && known.insert(service.to_string()) {
            self.queue_depth.set(service, self.queue_depth.get(service));
        }
    }

    /// The OpenMetrics text exposition of every metric ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String does not fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Priming gives every class an open-episodes series, and priming again (a reload)
    /// keeps the counts already set rather than zeroing them until the next scrape.
    #[test]
    fn priming_again_keeps_the_open_episode_counts() {
        let m = Metrics::new();
        let prime = Prime { classes: &["rbac", "workload"], ..Prime::default() };
        m.prime(&prime);
        assert!(m.render().contains("driftwatch_episodes_open{class=\"workload\"} 0"), "{}", m.render());
        m.set_open_episodes(&[("rbac".to_string(), 3)].into());
        m.prime(&prime);
        assert_eq!(m.episodes_open.get("rbac"), 3);
    }

    #[test]
    fn families_are_bounded_and_rendered() {
        let m = Metrics::new();
        for i in 0..(MAX_SERIES + 50) {
            m.fired.inc(&format!("l{i}"));
        }
        assert_eq!(*m.fired.created.lock().unwrap(), MAX_SERIES + 1);
        assert_eq!(m.fired.get("other"), 50);
        let out = m.render();
        assert!(out.contains("driftwatch_triggers_fired_total{trigger=\"l0\"} 1\n"), "{out}");
        // Label values from configuration (service, trigger names) are escaped.
        m.events.inc("a\"b\\c\nd:e\"");
        m.failed.inc("a\"b\\c\nd:e\"");
        let out = m.render();
        assert!(out.contains(r#"driftwatch_watch_events_total{type="a\"b\\c\nd:e\""} 1"#), "{out}");
        assert!(out.contains(r#"driftwatch_notifications_failed_total{kind="a\"b\\c\nd",reason="e\""} 1"#), "{out}");
        m.evaluation_latency.observe(Duration::from_millis(3));
        let out = m.render();
        assert!(
            out.contains("driftwatch_evaluation_duration_seconds_bucket{le=\"0.001\"} 0\n")
                && out.contains("driftwatch_evaluation_duration_seconds_bucket{le=\"0.005\"} 1\n")
                && out.contains("driftwatch_evaluation_duration_seconds_count 1\n"),
            "{out}"
        );
        assert!(out.ends_with("# EOF\n"), "OpenMetrics: {out}");
    }

    /// `Metrics::families` is what `/metrics` shows: with one series in every family,
    /// each `# TYPE` line is listed with its type, and each listed family has a sample
    /// with exactly its label names.
    #[test]
    fn the_family_list_is_what_is_rendered() {
        let m = Metrics::new();
        for f in [&m.events, &m.malformed, &m.fired, &m.sent, &m.watch_restarts, &m.episodes, &m.live_reads_forbidden, &m.diffs] {
            f.inc("x");
        }
        for f in [&m.audit_events, &m.audit_requests, &m.audit_dropped, &m.break_glass, &m.reloads, &m.annotations_refused] {
            f.inc("x");
        }
        m.failed.inc("x:y");
        m.not_queued.inc("x:y");
        m.cluster_reads.inc("x:y");
        m.queue_depth.set("x", 1);
        m.cluster_up.set("x", 1);
        m.audit_last_batch.set("x", 1);
        m.episodes_open.set("x", 1);
        m.detection_seconds.observe("x", 1.0);
        m.resolution_seconds.observe("x:y", 1.0);
        m.notification_latency.observe("x", 0.01);
        let out = m.render();
        let listed = Metrics::families();
        for line in out.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let (name, kind) = line.split_once(' ').unwrap();
            assert!(listed.iter().any(|(n, k, _)| *n == name && *k == kind), "{name} ({kind}) is rendered but not in Metrics::families");
        }
        for (name, kind, labels) in listed {
            assert!(out.contains(&format!("# TYPE {name} {kind}\n")), "{name} is listed but not rendered");
            let sample = match *kind {
                "counter" => format!("{name}_total"),
                "histogram" => format!("{name}_count"),
                _ => name.to_string(),
            };
            let line =
                out.lines().find(|l| l.starts_with(&format!("{sample}{{")) || l.starts_with(&format!("{sample} "))).unwrap_or_default();
            let got: Vec<&str> = match line.split_once('{') {
                Some((_, rest)) => {
                    rest.split('}').next().unwrap_or_default().split(',').filter_map(|kv| kv.split_once('=')).map(|(k, _)| k).collect()
                }
                None => Vec::new(),
            };
            assert!(!line.is_empty(), "{name}: no sample in\n{out}");
            assert_eq!(got, *labels, "{name}'s labels");
        }
    }

    #[test]
    fn queue_depths_of_services_that_emptied_go_to_zero() {
        let m = Metrics::new();
        m.set_queue_depths(&[("odd \"name\"".to_string(), 3), ("hook".to_string(), 2)].into_iter().collect());
        m.set_queue_depths(&[("hook".to_string(), 5)].into_iter().collect());
        assert_eq!((m.queue_depth.get("hook"), m.queue_depth.get("odd \"name\"")), (5, 0));
    }
}
