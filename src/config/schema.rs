//! The configuration file as written: `driftwatch.yaml`'s sections (`*Def`), each
//! deserialized with unknown keys refused and positions kept (`At`), before any
//! validation (`sections.rs`, `audit.rs`, `clusters.rs`).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use super::clusters;
use crate::deliver::kinds::TemplateDef;
use crate::drift::classes::ClassRule;
use crate::route::tree::RouteDef;
use crate::source::{At, ConfigDuration};
use crate::trigger::TriggerDef;

/// A config-level subscription as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionDef {
    /// `service:recipient` strings, e.g. `slack:prod-alerts`.
    pub recipients: Vec<String>,
    /// Trigger names; the default triggers when empty.
    #[serde(default)]
    pub triggers: Vec<String>,
    /// A Kubernetes label selector on the Application (`env=prod,tier in (web)`).
    #[serde(default)]
    pub selector: Option<At<String>>,
    /// The units' engine: `argocd`, `flux`, `fleet` (one or a list; any when absent).
    #[serde(default)]
    pub engine: crate::route::tree::OneOrMany,
    /// The units' kind: `Application`, `Kustomization`, `HelmRelease`, `BundleDeployment`.
    #[serde(default)]
    pub kind: crate::route::tree::OneOrMany,
    /// The units' namespace.
    #[serde(default)]
    pub namespace: crate::route::tree::OneOrMany,
    /// The units' name (`*`: any).
    #[serde(default)]
    pub name: crate::route::tree::OneOrMany,
}

/// Where notification state is kept.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StateDef {
    /// The state database file; relative to the config file.
    pub path: Option<String>,
    /// Most dedup keys kept per Application (oldest pruned first); 256 when absent
    /// (1 to 100000).
    pub max_keys_per_app: Option<At<usize>>,
    /// Keep the state in PostgreSQL instead of a file: replicas without a shared
    /// volume (fenced by the leader's Lease).
    pub postgres: Option<At<PostgresDef>>,
}

/// `state.postgres:`: where the state lives in PostgreSQL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PostgresDef {
    /// A secret reference (`$key`) to a PostgreSQL URL or connection string (it holds
    /// the password). `sslmode=disable` only for a server on this machine.
    pub url: At<String>,
    /// The PostgreSQL schema of driftwatch's tables; `driftwatch` when absent.
    pub schema: Option<At<String>>,
    /// Most connections held open (1 to 64); 8 when absent.
    pub max_connections: Option<At<usize>>,
    /// How long to wait for a connection (1s to 5m); 10s when absent.
    pub connect_timeout: Option<At<ConfigDuration>>,
    /// A PEM CA bundle that verifies the server's certificate (relative to the config
    /// file); the public web roots when absent.
    pub ca_file: Option<String>,
}

/// `sharding:`: Applications split between replicas by their destination cluster.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardingDef {
    /// How many shards (1 to 256); each is held through a Lease of its own and keeps
    /// its state in a PostgreSQL schema of its own. 1 when absent: no sharding.
    pub shards: Option<At<usize>>,
}

/// `history:`: how much drift history the state store keeps.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HistoryDef {
    /// Most episodes kept (oldest dropped first); 10000 when absent (1 to 10000000).
    pub max_episodes: Option<At<usize>>,
    /// Resolved episodes older than this are dropped (`90d` when absent).
    pub max_age: Option<ConfigDuration>,
}

/// `breakGlass:`: emergency exceptions (`driftwatch break-glass`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BreakGlassDef {
    /// The longest exception accepted (72h; 1m to 30d); a longer one is refused.
    pub max_for: Option<At<ConfigDuration>>,
    /// Only an approval the audit input verified takes effect (false: without the
    /// audit input an approval is `unverifiable`, and takes effect marked so).
    pub require_verified: Option<bool>,
    /// Who may approve, checked against the approving write in the audit log.
    pub approvers: Option<ApproversDef>,
}

/// `breakGlass.approvers:`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApproversDef {
    /// The approver must be in one of these groups. Required when a route matches
    /// `breakGlass: true`; empty or absent: no audited approval takes effect.
    #[serde(default)]
    pub groups: Vec<String>,
    /// A ServiceAccount may approve (false when absent).
    pub service_accounts: Option<bool>,
    /// Groups of machine identities, refused as openers and approvers (besides
    /// `system:serviceaccounts` and `system:nodes`).
    #[serde(default)]
    pub refuse_groups: Vec<String>,
    /// Username patterns (`*` for any run) of machine identities, refused as openers
    /// and approvers (besides `system:*` and `*.gserviceaccount.com`).
    #[serde(default)]
    pub refuse_users: Vec<String>,
}

/// `limits:`: what one Application's subscription annotations may ask for.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitsDef {
    /// Distinct triggers an Application's annotations may subscribe (32; 1 to 1000).
    pub max_triggers_per_app: Option<At<usize>>,
    /// Distinct destinations an Application's annotations may name (64; 1 to 10000).
    pub max_recipients_per_app: Option<At<usize>>,
}

/// `operations:`: the operations endpoints (`--listen`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperationsDef {
    /// A secret reference (`$key`): when set, every endpoint but `/healthz`, `/readyz`
    /// and `/metrics` (the drift history names resources, managers and recipients)
    /// answers only a request with `Authorization: Bearer <that value>`.
    pub token: Option<At<String>>,
    /// Without a token, `/history` and the web view's data answer anyone who reaches
    /// the port only when this says so (false: they refuse with 403).
    pub open: Option<bool>,
    /// Serve the operations endpoints over TLS (the token and the history then never
    /// cross the network in clear). Read at start-up.
    pub tls: Option<OperationsTlsDef>,
}

/// `operations.tls`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OperationsTlsDef {
    pub cert_file: String,
    pub key_file: String,
}

/// `attribution:`: reading the live objects of drifted resources.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AttributionDef {
    /// Field managers whose fields count as desired state, besides Argo CD's
    /// (`argocd-controller`, `argocd-application-controller`).
    #[serde(default)]
    pub ignore_managers: Vec<String>,
    /// Whether to read live objects at all (true when absent).
    pub enabled: Option<bool>,
    /// Live objects read at the same time; 4 when absent (1 to 64).
    pub concurrency: Option<At<usize>>,
    /// How long a read stays fresh (`1m` when absent).
    pub ttl: Option<ConfigDuration>,
    /// Application destinations (`spec.destination.server` or `.name`) that are the
    /// cluster driftwatch talks to; resources of other destinations are not read.
    /// `https://kubernetes.default.svc` and `in-cluster` when absent.
    pub destinations: Option<Vec<String>>,
    /// Whether drifted Secrets are read too (false when absent). Needs the opt-in RBAC
    /// (`deploy/kubernetes/attribution-secrets.yaml`), which lets whoever holds
    /// driftwatch's token read every Secret's data: off, a drifted Secret is still
    /// classified and reported, with its attribution marked as not read.
    pub read_secrets: Option<bool>,
    /// The namespace Argo CD runs in (`argocd` when absent): where its AppProjects are,
    /// and the only namespace whose Applications may use any project; an Application
    /// elsewhere may use only a project whose `sourceNamespaces` lists its namespace,
    /// as Argo CD decides. It bounds what is read and indexed for each Application.
    pub argocd_namespace: Option<At<String>>,
}

/// `audit:`: Kubernetes audit events as an input (a webhook backend, a log file).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditDef {
    /// Where `POST /audit` listens (`0.0.0.0:9443`).
    pub listen: Option<At<String>>,
    pub tls: Option<AuditTlsDef>,
    /// A secret reference: the bearer token the API server presents (its webhook
    /// kubeconfig's user token).
    pub token: Option<At<String>>,
    /// An audit log file to follow (`--audit-log-path`, JSON lines), instead of or
    /// besides the listener.
    pub file: Option<String>,
    /// Identities whose requests are desired state (Argo CD's controllers).
    pub argocd_identities: Option<Vec<String>>,
    /// Argo CD's API server's identities: their writes of an Application's `operation`
    /// (a sync through Argo CD) and refresh are Argo CD's; anything else they write is
    /// an attempt.
    pub argocd_api_identities: Option<Vec<String>>,
    /// Identities whose writes are Flux's desired state, but only on objects a Flux
    /// unit manages (kustomize-controller's and helm-controller's ServiceAccounts).
    pub flux_identities: Option<Vec<String>>,
    /// Identities whose writes are Fleet's desired state, but only on objects a Fleet
    /// bundle manages (the fleet-agent's ServiceAccounts).
    pub fleet_identities: Option<Vec<String>>,
    /// The largest audit event kept whole (`16777216`, 16 MiB; 1 KiB to 256 MiB); a
    /// larger one is kept without its request and response objects.
    pub max_body_bytes: Option<At<usize>>,
    /// How long one actor's attempts on one resource are one attempt (`10m`; 1m to 24h).
    pub window: Option<At<ConfigDuration>>,
    /// Relevant events waiting for the evaluation at most (`10000`; 100 to 1000000).
    pub queue: Option<At<usize>>,
    /// An event the API server received longer ago than this is refused as a replay
    /// (`1h`; 5m to 24h).
    pub max_event_age: Option<At<ConfigDuration>>,
    /// An event dated later than this from now is refused as forged (`5m`; 1s to 1h).
    pub max_event_ahead: Option<At<ConfigDuration>>,
}

/// `audit.tls`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditTlsDef {
    pub cert_file: String,
    pub key_file: String,
    /// When set, a client certificate signed by it is required.
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<String>,
    /// With `clientCAFile`: the client certificate must name one of these (a DNS or IP
    /// subject alternative name; `kube-apiserver`). Required when there is no token:
    /// a CA often signs more than the API server's certificate.
    pub client_names: Option<At<Vec<String>>>,
}

/// `driftwatch.yaml`. Every key is optional; unknown keys are errors.
#[derive(Debug, Default)]
pub struct ConfigFile {
    /// Values templates see as `context.<key>` (`argocdUrl`, ...).
    pub context: BTreeMap<String, String>,
    /// Directory of trigger files; `triggers/` next to the config file when it exists.
    pub triggers_dir: Option<String>,
    /// Directory of template files; `templates/` next to the config file when it exists.
    pub templates_dir: Option<String>,
    /// Inline triggers by name.
    pub triggers: BTreeMap<String, TriggerDef>,
    /// Inline templates by name.
    pub templates: BTreeMap<String, TemplateDef>,
    /// Services by name; `type` says the kind (the name itself when it is one).
    pub services: BTreeMap<String, At<BTreeMap<String, serde_json::Value>>>,
    pub subscriptions: Vec<At<SubscriptionDef>>,
    /// Triggers for subscriptions that name none.
    pub default_triggers: Option<At<Vec<String>>>,
    /// `defaultTriggers.<service>`: the default triggers for one service.
    pub default_triggers_by_service: BTreeMap<String, At<Vec<String>>>,
    pub state: StateDef,
    pub sharding: Option<At<ShardingDef>>,
    /// A secrets file or mounted Secret directory; relative to the config file.
    pub secrets_file: Option<String>,
    /// Extra (group, kind) -> class rules on top of the defaults.
    pub resource_classes: Option<At<Vec<ClassRule>>>,
    /// The route tree (destinations by what drifted).
    pub routes: Option<At<Vec<At<RouteDef>>>>,
    pub history: HistoryDef,
    pub attribution: AttributionDef,
    pub operations: OperationsDef,
    pub limits: LimitsDef,
    pub audit: AuditDef,
    pub clusters: Vec<At<clusters::ClusterDef>>,
    pub argocd: Option<At<clusters::ArgocdDef>>,
    pub diff: clusters::DiffDef,
    pub break_glass: BreakGlassDef,
}

const CONFIG_KEYS: &[&str] = &[
    "context",
    "triggersDir",
    "templatesDir",
    "triggers",
    "templates",
    "services",
    "subscriptions",
    "defaultTriggers",
    "defaultTriggers.<service>",
    "state",
    "sharding",
    "secretsFile",
    "resourceClasses",
    "routes",
    "history",
    "attribution",
    "operations",
    "limits",
    "audit",
    "clusters",
    "argocd",
    "diff",
    "breakGlass",
];

// Written by hand rather than derived: `defaultTriggers.<service>` is a key pattern,
// which `deny_unknown_fields` cannot express, and `flatten` would lose the positions
// of every nested value.
impl<'de> Deserialize<'de> for ConfigFile {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ConfigFile;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the driftwatch configuration mapping")
            }
            fn visit_unit<E: de::Error>(self) -> Result<ConfigFile, E> {
                Ok(ConfigFile::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<ConfigFile, A::Error> {
                let mut c = ConfigFile::default();
                while let Some(key) = m.next_key::<String>()? {
                    match key.as_str() {
                        "context" => c.context = m.next_value()?,
                        "triggersDir" => c.triggers_dir = m.next_value()?,
                        "templatesDir" => c.templates_dir = m.next_value()?,
                        "triggers" => c.triggers = m.next_value()?,
                        "templates" => c.templates = m.next_value()?,
                        "services" => c.services = m.next_value()?,
                        "subscriptions" => c.subscriptions = m.next_value()?,
                        "defaultTriggers" => c.default_triggers = m.next_value()?,
                        "state" => c.state = m.next_value()?,
                        "sharding" => c.sharding = m.next_value()?,
                        "secretsFile" => c.secrets_file = m.next_value()?,
                        "resourceClasses" => c.resource_classes = m.next_value()?,
                        "routes" => c.routes = m.next_value()?,
                        "history" => c.history = m.next_value()?,
                        "attribution" => c.attribution = m.next_value()?,
                        "operations" => c.operations = m.next_value()?,
                        "limits" => c.limits = m.next_value()?,
                        "audit" => c.audit = m.next_value()?,
                        "clusters" => c.clusters = m.next_value()?,
                        "argocd" => c.argocd = m.next_value()?,
                        "diff" => c.diff = m.next_value()?,
                        "breakGlass" => c.break_glass = m.next_value()?,
                        other => match other.strip_prefix("defaultTriggers.") {
                            Some(service) if !service.is_empty() => {
                                c.default_triggers_by_service.insert(service.to_string(), m.next_value()?);
                            }
                            _ => return Err(de::Error::unknown_field(other, CONFIG_KEYS)),
                        },
                    }
                }
                Ok(c)
            }
        }
        d.deserialize_map(V)
    }
}
