//! The owned types passed between stages (a deployment unit, a destination, a
//! notification). No I/O and no rhai or handlebars types live here.

mod app;

#[cfg(test)]
use app::parse_time;
pub use app::{App, ObjectError, Project, STALE_SKEW};

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::Pointer;
use crate::unit::Engine;

/// Every destination kind, one line each (`folder::Type = "name"`, with its doc, and the
/// other name its template section is read under, if any): the one
/// list a new kind is added to. This file expands it into [`DestinationKind`]; the
/// registry (`deliver/kinds/mod.rs`) into the kinds' folders and their dispatch.
macro_rules! destination_kinds {
    ($then:ident) => {
        $then! {
            /// Each notification as one JSON line on stdout.
            console::Console = "console",
            /// Slack, through the Web API (edits on resolve) or an incoming webhook.
            slack::Slack = "slack",
            /// E-mail over SMTP.
            email::Email = "email",
            /// PagerDuty's Events API v2 (trigger, resolve by `dedup_key`).
            pagerduty::Pagerduty = "pagerduty" | "pagerdutyv2",
            /// One HTTP request per notification.
            webhook::Webhook = "webhook",
            /// Splunk HTTP Event Collector (SIEM).
            splunk::Splunk = "splunk",
            /// A JSON webhook signed with HMAC-SHA256 (SIEM).
            signed_webhook::SignedWebhook = "signed-webhook",
            /// Syslog RFC 5424 over UDP, TCP or TLS (SIEM).
            syslog::Syslog = "syslog",
            /// Microsoft Teams incoming webhooks (MessageCard).
            teams::Teams = "teams",
            /// Opsgenie alerts (create, close by alias).
            opsgenie::Opsgenie = "opsgenie",
            /// Prometheus Alertmanager's v2 alerts API (fire, resolve with `endsAt`).
            alertmanager::Alertmanager = "alertmanager",
            /// Google Chat incoming webhooks (cards v2, threads).
            googlechat::Googlechat = "googlechat",
            /// GitHub commit statuses, deployments, pull-request comments.
            github::Github = "github",
            /// Telegram's Bot API.
            telegram::Telegram = "telegram",
            /// Mattermost posts.
            mattermost::Mattermost = "mattermost",
            /// Grafana annotations.
            grafana::Grafana = "grafana",
            /// Webex messages.
            webex::Webex = "webex",
            /// Microsoft Teams through a Power Automate workflow (Adaptive Cards).
            teams_workflows::TeamsWorkflows = "teams-workflows",
            /// Pushover notifications.
            pushover::Pushover = "pushover",
            /// New Relic deployment markers.
            newrelic::Newrelic = "newrelic",
            /// Rocket.Chat messages.
            rocketchat::Rocketchat = "rocketchat",
            /// Elasticsearch or OpenSearch `_bulk` into a data stream (SIEM).
            elasticsearch::Elasticsearch = "elasticsearch",
            /// Grafana Loki's push API (SIEM).
            loki::Loki = "loki",
            /// OpenTelemetry logs over OTLP/HTTP, protobuf and gzip (SIEM).
            otlp::Otlp = "otlp",
            /// Microsoft Sentinel through Azure Monitor's Logs Ingestion API (SIEM).
            sentinel::Sentinel = "sentinel",
            /// Google Security Operations (Chronicle) through the Chronicle API's `logs.import` (SIEM).
            secops::Secops = "secops",
            /// Amazon Security Lake: OCSF in Parquet files under a custom source's S3 prefix (SIEM).
            securitylake::SecurityLake = "securitylake",
        }
    };
}
pub(crate) use destination_kinds;

macro_rules! kind_enum {
    ($($(#[$doc:meta])* $module:ident :: $kind:ident = $name:literal $(| $alias:literal)?),* $(,)?) => {
        /// The kinds of destination a template can render for. A service in the config
        /// has exactly one kind.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum DestinationKind {
            $($(#[$doc])* #[serde(rename = $name)] $kind),*
        }

        impl DestinationKind {
            pub const ALL: [DestinationKind; [$($name),*].len()] = [$(DestinationKind::$kind),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(DestinationKind::$kind => $name),*
                }
            }

            /// A kind by name, or by the other name Argo CD gives it (`pagerdutyv2`,
            /// Argo CD's name for PagerDuty's Events API v2, is `pagerduty`).
            pub fn parse(s: &str) -> Option<DestinationKind> {
                $(if s == $name $(|| s == $alias)? {
                    return Some(DestinationKind::$kind);
                })*
                None
            }
        }
    };
}

destination_kinds!(kind_enum);

impl fmt::Display for DestinationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one notification goes: a configured service (by name) and a recipient in it
/// (a Slack channel, an e-mail address, a PagerDuty routing-key name...). Argo CD's
/// subscriptions speak of exactly this pair.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Destination {
    pub service: String,
    pub recipient: String,
}

impl Destination {
    pub fn new(service: impl Into<String>, recipient: impl Into<String>) -> Self {
        Destination { service: service.into(), recipient: recipient.into() }
    }

    /// Parses `service:recipient` (the recipient may itself contain `:`); a bare
    /// `service` has an empty recipient.
    ///
    /// ```
    /// use driftwatch::model::Destination;
    /// assert_eq!(Destination::parse("slack:prod-alerts"), Destination::new("slack", "prod-alerts"));
    /// assert_eq!(Destination::parse("webhook:a:b").recipient, "a:b");
    /// assert_eq!(Destination::parse("siem").recipient, "");
    /// ```
    pub fn parse(s: &str) -> Destination {
        match s.split_once(':') {
            Some((service, recipient)) => Destination::new(service.trim(), recipient.trim()),
            None => Destination::new(s.trim(), ""),
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.service, self.recipient)
    }
}

/// Whether a notification announces that a condition holds, or that it cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    #[default]
    Fire,
    /// The condition of a trigger marked `resolve: true` turned false after it had
    /// been notified: PagerDuty gets `resolve`, Slack updates the original message.
    Resolve,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Fire => "fire",
            Action::Resolve => "resolve",
        }
    }
}

pub use crate::unit::ResourceRef;

/// What a destination may need to know about the Application beyond the rendered
/// payload (SIEM records, PagerDuty dedup keys, links). Read once per notification.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AppMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub project: String,
    #[serde(default)]
    pub sync_status: String,
    #[serde(default)]
    pub health_status: String,
    #[serde(default)]
    pub revision: String,
    /// The unit's engine and kind (`flux`, `Kustomization`); empty for an Argo CD
    /// Application (and in notifications queued before other engines were watched).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub engine: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

impl AppMeta {
    /// The resource a SIEM record names: `applications.argoproj.io`,
    /// `kustomizations.kustomize.toolkit.fluxcd.io`, ...
    pub fn resource_type(&self) -> &'static str {
        match self.kind.as_str() {
            "Kustomization" => "kustomizations.kustomize.toolkit.fluxcd.io",
            "HelmRelease" => "helmreleases.helm.toolkit.fluxcd.io",
            "BundleDeployment" => "bundledeployments.fleet.cattle.io",
            _ => "applications.argoproj.io",
        }
    }

    /// The unit's page in Argo CD's UI under `base` (`context.argocdUrl`): none for a
    /// Flux or Fleet unit (an Application's page of the same name is another's), or
    /// without a base.
    pub fn argocd_link(&self, base: &str) -> Option<String> {
        (self.engine.is_empty() && !base.is_empty())
            .then(|| format!("{}/applications/{}/{}", base.trim_end_matches('/'), self.namespace, self.name))
    }

    /// The unit's kind (`Application` for an Argo CD Application).
    pub fn kind(&self) -> &str {
        if self.kind.is_empty() { "Application" } else { &self.kind }
    }

    pub fn of(app: &App) -> AppMeta {
        let s = |p: &str| app.object.at(p).and_then(Value::as_str).unwrap_or_default().to_string();
        AppMeta {
            name: app.name.clone(),
            namespace: app.namespace.clone(),
            uid: app.uid.clone(),
            project: app.project.clone(),
            sync_status: app.sync_status().to_string(),
            health_status: app.health_status().to_string(),
            revision: match app.engine() {
                Engine::ArgoCd => s("/status/sync/revision"),
                _ => app.unit.revision.desired.clone(),
            },
            engine: app.not_argocd(Engine::as_str),
            kind: app.not_argocd(Engine::kind),
        }
    }
}

/// Severity of a notification, as templates write it (`critical`, `error`, `warning`,
/// `info`); PagerDuty takes it as is, SIEM records as a syslog severity number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Error,
    Warning,
    #[default]
    Info,
}

impl Severity {
    pub fn parse(s: &str) -> Option<Severity> {
        match s.trim().to_ascii_lowercase().as_str() {
            "critical" => Some(Severity::Critical),
            "error" => Some(Severity::Error),
            "warning" => Some(Severity::Warning),
            "info" => Some(Severity::Info),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }

    /// RFC 5424 severity: critical 2, error 3, warning 4, informational 6.
    pub fn syslog(self) -> u8 {
        match self {
            Severity::Critical => 2,
            Severity::Error => 3,
            Severity::Warning => 4,
            Severity::Info => 6,
        }
    }
}

/// One rendered notification, ready for a destination, with what the state store must
/// record once it has been delivered. Serialized whole into the outbox, so it survives
/// a crash between evaluation and delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// `namespace/name` of the Application.
    pub app: String,
    pub meta: AppMeta,
    pub trigger: String,
    /// Index of the trigger condition that fired.
    pub condition: usize,
    /// Stable identity of the condition (`[index].<hash of when>`).
    pub condition_key: String,
    pub template: String,
    pub destination: Destination,
    pub kind: DestinationKind,
    #[serde(default)]
    pub action: Action,
    #[serde(default)]
    pub severity: Severity,
    /// The payload for `kind`, secrets redacted.
    pub payload: Value,
    /// What the state store learns once this notification was delivered.
    pub record: Option<StateRecord>,
    /// The Application's drift episode when this was decided (`episode` as templates
    /// see it): SIEM records carry it, and the delivery is noted in its history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode: Option<Value>,
    /// The sync operation this notification is about (an `oncePer` of its id): a SIEM
    /// record of it is an operation record (`event.action` sync or rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Value>,
    /// Set by the outbox when the notification is queued: the same for every attempt
    /// at this entry (across crashes), sent as `Idempotency-Key` (webhooks, the SIEM
    /// HTTP sinks) and as the ECS `event.id`, so a receiver can drop the copy a crash
    /// between sending and recording makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Set when a grouped route (`group:`) took it: one message for the group's
    /// Applications, kept in the outbox's group (`state::outbox::groups`) rather than sent alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupRef>,
    /// When the watch or audit event that decided it reached the daemon (wall-clock
    /// ms; none in replays): its delivery's latency runs from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_ms: Option<u64>,
}

impl Notification {
    /// The incident a paging destination keeps for this notification (PagerDuty's
    /// `dedup_key`, Opsgenie's alias): the same for every notification of one
    /// Application, trigger and condition (across restarts and replicas), or of one run
    /// of a group. Not bounded here; each kind bounds it its way.
    ///
    /// A trigger with `oncePer` fires once per value, and each value is an incident of its
    /// own (a second person's attempt while the first one's page is open is a new page,
    /// not a note on it): the value is part of the key, hashed. The value is the one
    /// the state store recorded the notification under, so the resolve finds the same
    /// incident.
    pub fn incident_key(&self) -> String {
        if let Some(g) = &self.group {
            return format!("driftwatch/group/{}", g.instance);
        }
        let app = if self.meta.uid.is_empty() { self.app.as_str() } else { self.meta.uid.as_str() };
        // The record's key holds each part bounded (`state::dedup_key`), so the suffix is
        // built the same way.
        use crate::text::key_part;
        let suffix = format!(
            ":{}:{}:{}:{}",
            key_part(&self.trigger),
            key_part(&self.condition_key),
            key_part(&self.destination.service),
            key_part(&self.destination.recipient)
        );
        match self.record.as_ref().and_then(|r| r.key.strip_suffix(&suffix)).filter(|v| !v.is_empty()) {
            Some(once_per) => {
                // FNV-1a: short and stable; the key only has to tell values apart.
                let h = once_per.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
                format!("driftwatch/{app}/{}/{}/{h:016x}", self.trigger, self.condition_key)
            }
            None => format!("driftwatch/{app}/{}/{}", self.trigger, self.condition_key),
        }
    }
}

/// What a notification of a grouped route carries: the group it belongs to, the member
/// it is about, and (once the outbox hands it out) the group's state it shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRef {
    /// The group: route, trigger, destination and the `by` values (hashed, 32 hex digits).
    pub key: String,
    /// This run of the group (the key and when it opened): the chat message it edits and
    /// PagerDuty's `dedup_key` are this run's.
    pub instance: String,
    /// The `by` values that define the group, as `label=value`.
    pub labels: BTreeMap<String, String>,
    /// The route's `group.wait` and `group.interval`.
    pub wait_ms: u64,
    pub interval_ms: u64,
    /// The Application this notification is about (`namespace/name`), its state key, and
    /// whether it joins (fires) or leaves (resolves) the group.
    pub member: String,
    pub member_key: String,
    pub joins: bool,
    /// The group's revision this notification's payload shows (every member change is
    /// one revision); set by the outbox when it hands the entry out.
    #[serde(default)]
    pub revision: u64,
}

/// A change to one Application's dedup keys, applied after delivery succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    pub app_key: String,
    pub key: String,
    /// `Set` after a firing; `Clear` after a resolve (the trigger re-arms).
    #[serde(default)]
    pub op: RecordOp,
    /// What the pass's snapshot held for `key` when it decided (the delivery time of
    /// the last send, or nothing). The enqueue drops the notification if a settle
    /// changed it since: that settle delivered (or resolved) what this would repeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordOp {
    #[default]
    Set,
    Clear,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn application_metadata_is_read_once() {
        let app = App::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "guestbook", "namespace": "argocd", "uid": "u1",
                          "labels": {"env": "prod"}, "annotations": {"a": "b"}},
            "spec": {}
        }))
        .unwrap();
        assert_eq!(app.project, "default");
        assert_eq!(app.state_key(), "argocd/guestbook@u1");
        assert_eq!(app.labels["env"], "prod");
    }

    /// A Flux or Fleet unit is taken as an Application is: its kind in its key and name
    /// (a Kustomization and an Application of one name are two), no project, its sync
    /// and health in Argo CD's words from its unit.
    #[test]
    fn a_flux_unit_is_taken_with_its_kind_in_its_key() {
        let k = App::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system", "uid": "k1"},
            "spec": {"project": "ignored"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded"}],
                "lastAppliedRevision": "main@sha1:a", "lastAttemptedRevision": "main@sha1:a"}
        }))
        .unwrap();
        assert_eq!(
            (k.state_key(), k.qualified_name()),
            ("Kustomization:flux-system/apps@k1".to_string(), "Kustomization:flux-system/apps".to_string())
        );
        assert_eq!((k.project.as_str(), k.sync_status(), k.health_status()), ("", "Synced", "Healthy"));
        let a =
            App::from_value(json!({"kind": "Application", "metadata": {"name": "apps", "namespace": "flux-system", "uid": "k1"}})).unwrap();
        assert_ne!(a.state_key(), k.state_key());
        // Sharded by its destination cluster, as an Application is: one deploying here
        // shares the shard of the local cluster's Applications.
        let remote = App::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "team-a"},
            "spec": {"kubeConfig": {"secretRef": {"name": "prod-eu"}}}
        }))
        .unwrap();
        assert_eq!(k.shard(64), crate::shard::of_cluster("", 64));
        assert_eq!(remote.shard(64), crate::shard::of_cluster("kubeconfig:team-a/prod-eu", 64));
    }

    #[test]
    fn non_applications_are_refused_with_a_reason() {
        let err = App::from_value(json!({"kind": "ConfigMap", "metadata": {}})).unwrap_err();
        assert_eq!(err.to_string(), "kind is \"ConfigMap\", expected \"Application, Kustomization, HelmRelease or BundleDeployment\"");
        let err = App::from_value(json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1beta2", "kind": "Kustomization", "metadata": {}}))
            .unwrap_err();
        assert_eq!(err.to_string(), "apiVersion is \"kustomize.toolkit.fluxcd.io/v1beta2\", expected kustomize.toolkit.fluxcd.io/v1");
        let err = App::from_value(json!({"kind": "Application", "status": "broken"})).unwrap_err();
        assert_eq!(err.to_string(), "field status has the wrong type: expected a mapping");
        assert_eq!(App::from_value(json!([1])).unwrap_err(), ObjectError::NotAnObject);
    }

    #[test]
    fn stale_sync_status_follows_argo_cd() {
        let app = |finished: &str, reconciled: &str| {
            App::from_value(json!({"kind": "Application", "metadata": {"name": "a"},
                "status": {"reconciledAt": reconciled, "observedAt": reconciled,
                           "operationState": {"phase": "Succeeded", "finishedAt": finished}}}))
            .unwrap()
        };
        let now = parse_time("2026-01-01T10:00:20Z").unwrap();
        assert!(app("2026-01-01T10:00:10Z", "2026-01-01T10:00:00Z").sync_status_is_stale(now));
        assert!(!app("2026-01-01T10:00:00Z", "2026-01-01T10:00:10Z").sync_status_is_stale(now));
        // A finishedAt written far ahead (the status is anyone's to write) would keep
        // the Application skipped for good: not stale.
        assert!(!app("2099-01-01T10:00:10Z", "2026-01-01T10:00:00Z").sync_status_is_stale(now));
        assert!(app("2026-01-01T10:01:00Z", "2026-01-01T10:00:00Z").sync_status_is_stale(now), "within the skew");
    }

    #[test]
    fn destinations_parse_like_argo_cd_recipients() {
        assert_eq!(Destination::parse("slack:my-channel"), Destination::new("slack", "my-channel"));
        assert_eq!(Destination::parse("webhook:a:b"), Destination::new("webhook", "a:b"));
        assert_eq!(Destination::parse("console"), Destination::new("console", ""));
    }
}
