//! Loads `driftwatch.yaml`, the trigger and template files and the built-in catalog,
//! and compiles them into a [`Runtime`]. Everything is validated here, once; every
//! error names file, line, column and key, and all errors are reported, not just the
//! first.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use crate::deliver::kinds::TemplateDef;
use crate::deliver::services::ServiceSpec;
use crate::drift::classes::{ClassMap, ClassRule};
use crate::model::{Destination, DestinationKind};
use crate::route::tree::{RouteDef, RouteTree};
use crate::route::{GlobalSubscription, Router, Selector};
use crate::secret::{Redactor, Secrets};
use crate::source::{At, ConfigDuration, ConfigError, SourceFile, in_range};
use crate::state::Retention;
use crate::template::{TemplateSet, Warning};
use crate::trigger::{Trigger, TriggerDef, TriggerEngine};

pub mod clusters;

/// The built-in catalog, embedded by `build.rs` from `triggers/` and `templates/`.
pub mod catalog {
    include!(concat!(env!("OUT_DIR"), "/catalog.rs"));
}

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
    /// The approver must be in one of these groups (empty or absent: any group).
    #[serde(default)]
    pub groups: Vec<String>,
    /// A ServiceAccount may approve (false when absent).
    pub service_accounts: Option<bool>,
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
}

/// Attribution settings, validated.
#[derive(Debug, Clone)]
pub struct AttributionSettings {
    pub ignore_managers: Vec<String>,
    pub enabled: bool,
    pub concurrency: usize,
    pub ttl: std::time::Duration,
    pub destinations: Vec<String>,
    pub read_secrets: bool,
}

impl Default for AttributionSettings {
    fn default() -> Self {
        AttributionSettings {
            ignore_managers: Vec::new(),
            enabled: true,
            concurrency: 4,
            ttl: std::time::Duration::from_secs(60),
            destinations: vec!["https://kubernetes.default.svc".into(), "in-cluster".into()],
            read_secrets: false,
        }
    }
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
    /// Identities whose requests are desired state (Argo CD's own).
    pub argocd_identities: Option<Vec<String>>,
    /// Largest request body accepted (`16777216`, 16 MiB; 1 KiB to 256 MiB).
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

/// A listener's TLS files (`audit.tls`, `operations.tls`), validated (paths resolved
/// against the config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    /// Names one of which the client certificate must carry (empty: any the CA signed).
    pub client_names: Vec<String>,
}

/// The audit input, validated.
#[derive(Debug, Clone)]
pub struct AuditSettings {
    pub listen: Option<std::net::SocketAddr>,
    pub tls: Option<ServerTls>,
    pub token: Option<crate::secret::Secret>,
    pub file: Option<PathBuf>,
    pub argocd_identities: Vec<String>,
    pub max_body_bytes: usize,
    pub window: chrono::Duration,
    pub queue: usize,
    /// The credential rules of `diff:` (what a request set is masked by them too).
    pub mask: crate::drift::mask::Masker,
    /// How far from now an event may be dated.
    pub times: crate::drift::audit::TimeBounds,
}

/// The identity Argo CD's application controller writes with.
/// The most episodes `history.maxEpisodes` may keep: ten million, a few GB of state.
const MAX_HISTORY_EPISODES: usize = 10_000_000;
/// The most dedup keys `state.maxKeysPerApp` may keep per Application.
const MAX_KEYS_PER_APP: usize = 100_000;

pub const ARGOCD_CONTROLLER_IDENTITY: &str = "system:serviceaccount:argocd:argocd-application-controller";

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            listen: None,
            tls: None,
            token: None,
            file: None,
            argocd_identities: vec![ARGOCD_CONTROLLER_IDENTITY.into()],
            max_body_bytes: 16 << 20,
            window: chrono::Duration::minutes(10),
            queue: 10_000,
            mask: crate::drift::mask::Masker::default(),
            times: crate::drift::audit::TimeBounds { max_age: chrono::Duration::hours(1), max_ahead: chrono::Duration::minutes(5) },
        }
    }
}

impl AuditSettings {
    /// Whether any audit input is configured.
    pub fn enabled(&self) -> bool {
        self.listen.is_some() || self.file.is_some()
    }
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

/// A named service, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    pub spec: ServiceSpec,
}

/// Settings for the state store, resolved against the config file's directory.
#[derive(Debug, Clone, Default)]
pub struct StateSettings {
    pub path: Option<PathBuf>,
    pub max_keys_per_app: Option<usize>,
}

/// Everything compiled from one configuration: what the pipeline runs with. Built whole
/// or not at all, so a reload can swap it in only when every part is valid.
pub struct Runtime {
    pub context: BTreeMap<String, String>,
    pub engine: Arc<TriggerEngine>,
    pub triggers: BTreeMap<String, Trigger>,
    pub templates: TemplateSet,
    pub services: BTreeMap<String, Service>,
    pub router: Router,
    pub state: StateSettings,
    pub secrets: Secrets,
    /// Scrubs the value of every secret the configuration holds or references (from the
    /// secrets file or the environment) from anything printed or sent for preview.
    pub redactor: Redactor,
    /// Non-fatal findings for `check` (paths that cannot exist, unset secrets).
    pub warnings: Vec<Warning>,
    /// Secrets services reference that are not set (`services.<name>: secret $key is
    /// not set: ...where it was looked for`). `check` warns about them; `run` refuses
    /// to start, and a reload to swap, while any is missing.
    pub missing_secrets: Vec<String>,
    /// Files and directories this configuration was read from (what a reload watches).
    pub sources: Vec<PathBuf>,
    /// Resource classes of drifted resources.
    pub classes: ClassMap,
    /// Destinations by what drifted, on top of subscriptions.
    pub routes: RouteTree,
    /// How much drift history is kept.
    pub retention: Retention,
    /// Break-glass exceptions (`breakGlass:`; `audited` when the audit input is on).
    pub break_glass: crate::drift::break_glass::Settings,
    pub attribution: AttributionSettings,
    /// The bearer token the operations endpoints require (`operations.token`).
    pub operations_token: Option<crate::secret::Secret>,
    /// `operations.open`: without a token, the history is served to anyone.
    pub operations_open: bool,
    /// `operations.tls`: the operations endpoints over TLS (read at start-up).
    pub operations_tls: Option<ServerTls>,
    /// The audit input (`audit:`).
    pub audit: AuditSettings,
    /// Spoke clusters whose live objects are read (`clusters:`).
    pub clusters: Vec<clusters::ClusterSpec>,
    /// Argo CD's API as the source of desired values (`argocd:`).
    pub argocd: Option<clusters::ArgocdApi>,
    /// How drifted resources are diffed (`diff:`).
    pub diff: clusters::DiffSettings,
}

impl Runtime {
    /// The cluster an Application's resources are read from.
    pub fn target(&self, app: &serde_json::Value) -> clusters::Target {
        clusters::target(app, &self.attribution.destinations, &self.clusters)
    }

    /// The server and name of `app`'s destination cluster, each from the other where a
    /// configured cluster (or Argo CD's own `in-cluster`) says.
    pub fn destination_of(&self, app: &serde_json::Value) -> (String, String) {
        const IN_CLUSTER: (&str, &str) = ("https://kubernetes.default.svc", "in-cluster");
        let (server, name) = clusters::destination(app);
        let known = self
            .clusters
            .iter()
            .map(|c| (c.server.as_str(), c.name.as_str()))
            .chain(std::iter::once(IN_CLUSTER))
            .find(|(s, n)| (!name.is_empty() && *n == name) || (!server.is_empty() && *s == server));
        match known {
            // A cluster from Argo CD's Secret has its server only at run time: a project
            // destination `server: '*'` matches it, a specific server does not.
            Some(("", n)) if server.is_empty() => (crate::project::UNKNOWN_SERVER.to_string(), n.to_string()),
            Some((s, n)) => (if server.is_empty() { s } else { server }.to_string(), if name.is_empty() { n } else { name }.to_string()),
            None => (server.to_string(), name.to_string()),
        }
    }
}

impl Runtime {
    /// The kind of a service named in a subscription: its configured kind, or the name
    /// itself when it names a kind (`slack`, `email`...) and no service is configured.
    pub fn service_kind(&self, service: &str) -> Option<DestinationKind> {
        match self.services.get(service) {
            Some(s) => Some(s.spec.config.kind()),
            None => DestinationKind::parse(service),
        }
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("triggers", &self.triggers.keys().collect::<Vec<_>>())
            .field("templates", &self.templates)
            .field("services", &self.services.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A trigger or template definition with the file it came from.
type Sourced<T> = (String, T, SourceFile);

fn read_dir_defs<T: serde::de::DeserializeOwned>(dir: &Path, what: &str, errors: &mut Vec<ConfigError>) -> Vec<Sourced<T>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            errors.push(ConfigError::new(None, format!("{what}s directory {}", dir.display()), e.to_string()));
            return out;
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if !path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
            continue;
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let file = SourceFile::new(path.display().to_string(), text);
                errors.extend(crate::source::import_todos(&file));
                match file.parse::<T>(&format!("{what} {name}")) {
                    Ok(def) => out.push((name, def, file)),
                    Err(e) => errors.push(e),
                }
            }
            Err(e) => errors.push(ConfigError::new(None, path.display().to_string(), e.to_string())),
        }
    }
    out
}

fn builtin_defs<T: serde::de::DeserializeOwned>(list: &[(&str, &str, &str)], what: &str, errors: &mut Vec<ConfigError>) -> Vec<Sourced<T>> {
    let mut out = Vec::new();
    for (name, file, text) in list {
        let file = SourceFile::new(*file, *text);
        match file.parse::<T>(&format!("{what} {name}")) {
            Ok(def) => out.push((name.to_string(), def, file)),
            Err(e) => errors.push(e),
        }
    }
    out
}

/// Later definitions override earlier ones with the same name.
fn merge<T>(layers: Vec<Vec<Sourced<T>>>) -> Vec<Sourced<T>> {
    let mut by_name: BTreeMap<String, Sourced<T>> = BTreeMap::new();
    for layer in layers {
        for item in layer {
            by_name.insert(item.0.clone(), item);
        }
    }
    by_name.into_values().collect()
}

/// Where a path setting in the config points: relative to the config file.
pub(crate) fn relative_to(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

/// Loads the built-in catalog and, when given, a user configuration on top of it.
pub fn load(config: Option<&Path>) -> Result<Runtime, Vec<ConfigError>> {
    load_with(config, Arc::new(TriggerEngine::new()))
}

/// As [`load`], compiling with an existing engine (a reload keeps the engine).
pub fn load_with(config: Option<&Path>, engine: Arc<TriggerEngine>) -> Result<Runtime, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let mut trigger_layers = vec![builtin_defs::<TriggerDef>(catalog::TRIGGERS, "trigger", &mut errors)];
    let mut template_layers = vec![builtin_defs::<TemplateDef>(catalog::TEMPLATES, "template", &mut errors)];
    let mut cfg = ConfigFile::default();
    let mut cfg_file = SourceFile::new("<no config>", "");
    let mut base = PathBuf::from(".");
    let mut sources: Vec<PathBuf> = Vec::new();

    if let Some(path) = config {
        base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let text = std::fs::read_to_string(path)
            .map_err(|e| vec![ConfigError::new(None, path.display().to_string(), format!("cannot read the configuration: {e}"))])?;
        cfg_file = SourceFile::new(path.display().to_string(), text);
        errors.extend(crate::source::import_todos(&cfg_file));
        cfg = cfg_file.parse::<ConfigFile>("the configuration").map_err(|e| vec![e])?;
        sources.push(path.to_path_buf());
        for (setting, dir_name, is_triggers) in [(&cfg.triggers_dir, "triggers", true), (&cfg.templates_dir, "templates", false)] {
            let dir = match setting {
                Some(d) => Some(relative_to(&base, d)),
                None => Some(base.join(dir_name)).filter(|d| d.is_dir()),
            };
            if let Some(dir) = dir {
                sources.push(dir.clone());
                if is_triggers {
                    trigger_layers.push(read_dir_defs(&dir, "trigger", &mut errors));
                } else {
                    template_layers.push(read_dir_defs(&dir, "template", &mut errors));
                }
            }
        }
        trigger_layers.push(std::mem::take(&mut cfg.triggers).into_iter().map(|(n, d)| (n, d, cfg_file.clone())).collect());
        template_layers.push(std::mem::take(&mut cfg.templates).into_iter().map(|(n, d)| (n, d, cfg_file.clone())).collect());
    }

    // Compile everything, collecting every error.
    let mut triggers = BTreeMap::new();
    let trigger_defs = merge(trigger_layers);
    for (name, def, file) in &trigger_defs {
        match engine.compile(name, def, file) {
            Ok(t) => {
                triggers.insert(name.clone(), t);
            }
            Err(e) => errors.extend(e),
        }
    }
    let template_defs = merge(template_layers);
    let (templates, mut warnings) = match TemplateSet::compile(&template_defs) {
        Ok(t) => (Some(t.0), t.1),
        Err(e) => {
            errors.extend(e);
            (None, Vec::new())
        }
    };
    let template_names: Vec<&str> = template_defs.iter().map(|(n, _, _)| n.as_str()).collect();
    for (name, def, file) in &trigger_defs {
        for (i, c) in def.iter().enumerate() {
            for t in c.send.iter().filter(|t| !template_names.contains(&t.as_str())) {
                errors.push(ConfigError::new(
                    file.pos(&c.when.referenced),
                    format!("trigger {name}[{i}].send"),
                    format!("template {t:?} does not exist"),
                ));
            }
            if c.send.is_empty() {
                warnings.push(Warning {
                    pos: file.pos(&c.when.referenced),
                    message: format!("trigger {name}[{i}].send is empty: the condition sends nothing (as in Argo CD)"),
                });
            }
        }
    }

    let services = build_services(&cfg, &cfg_file, &mut errors);
    let secrets = match &cfg.secrets_file {
        Some(p) => match Secrets::load(&{
            let path = relative_to(&base, p);
            // A reload follows a rotated Secret too.
            sources.push(path.clone());
            path
        }) {
            Ok(s) => s,
            Err(e) => {
                errors.push(ConfigError::new(None, "secretsFile", e.to_string()));
                Secrets::default()
            }
        },
        None => Secrets::default(),
    };
    let mut referenced = Vec::new();
    let mut missing_secrets = Vec::new();
    for s in services.values() {
        for value in s.spec.config.strings() {
            for key in Secrets::references(value) {
                match secrets.get(&key) {
                    Ok(v) => referenced.push(v),
                    Err(e) => {
                        missing_secrets.push(format!("services.{}: {e}", s.name));
                    }
                }
            }
        }
    }
    let mut limits = crate::route::Limits::default();
    for (value, key, max, slot) in [
        (&cfg.limits.max_triggers_per_app, "limits.maxTriggersPerApp", 1_000, &mut limits.max_triggers),
        (&cfg.limits.max_recipients_per_app, "limits.maxRecipientsPerApp", 10_000, &mut limits.max_recipients),
    ] {
        if let Some(v) = value.as_ref().and_then(|v| in_range(&cfg_file, key, v, 1, max, &mut errors)) {
            *slot = v;
        }
    }
    let mut operations_token = None;
    if let Some(token) = &cfg.operations.token {
        let pos = cfg_file.pos(&token.referenced);
        if Secrets::references(&token.value).is_empty() {
            errors.push(ConfigError::new(pos, "operations.token", "must reference a secret ($key), not hold the token itself"));
        } else {
            match secrets.resolve(&token.value) {
                Ok(v) if v.expose().is_empty() => {
                    errors.push(ConfigError::new(pos, "operations.token", "the secret it references is empty"))
                }
                Ok(v) => {
                    referenced.push(v.clone());
                    operations_token = Some(v);
                }
                Err(e) => missing_secrets.push(format!("operations.token: {e}")),
            }
        }
    }
    let audit = audit_settings(&cfg.audit, &base, &secrets, &cfg_file, &mut errors, &mut referenced, &mut missing_secrets);
    let local_destinations = cfg.attribution.destinations.clone().unwrap_or_else(|| AttributionSettings::default().destinations);
    let mut sink = clusters::SecretSink { secrets: &secrets, referenced: &mut referenced, missing: &mut missing_secrets };
    let spokes = clusters::clusters(&cfg.clusters, &local_destinations, &base, &cfg_file, &mut sink, &mut errors);
    let argocd = cfg.argocd.as_ref().and_then(|a| clusters::argocd(a, &base, &cfg_file, &mut sink, &mut errors));
    let diff = clusters::diff(&cfg.diff, &cfg_file, &mut errors);
    let audit = AuditSettings { mask: diff.mask.clone(), ..audit };
    // Every secret `run` refuses to start without (services, operations, audit, clusters,
    // Argo CD), reported by `check` in the same words.
    warnings
        .extend(missing_secrets.iter().map(|m| Warning { pos: None, message: format!("{m} (driftwatch run will not start without it)") }));
    let redactor = secrets.redactor(referenced);

    let known_trigger = |t: &str| triggers.contains_key(t) || trigger_defs.iter().any(|(n, _, _)| n == t);
    let mut global = Vec::new();
    for (i, spanned) in cfg.subscriptions.iter().enumerate() {
        let (s, pos) = (&spanned.value, cfg_file.pos(&spanned.referenced));
        let selector = match &s.selector {
            None => Selector::default(),
            Some(sel) => Selector::parse(&sel.value).unwrap_or_else(|e| {
                errors.push(ConfigError::new(cfg_file.pos(&sel.referenced), format!("subscriptions[{i}].selector"), e.to_string()));
                Selector::default()
            }),
        };
        for t in s.triggers.iter().filter(|t| !known_trigger(t)) {
            errors.push(ConfigError::new(pos.clone(), format!("subscriptions[{i}].triggers"), format!("trigger {t:?} does not exist")));
        }
        let recipients: Vec<Destination> = s.recipients.iter().map(|r| Destination::parse(r)).collect();
        for d in &recipients {
            if !services.contains_key(&d.service) && DestinationKind::parse(&d.service).is_none() {
                errors.push(ConfigError::new(
                    pos.clone(),
                    format!("subscriptions[{i}].recipients"),
                    format!("service {:?} is not configured", d.service),
                ));
            }
        }
        global.push(GlobalSubscription { recipients, triggers: s.triggers.clone(), selector });
    }
    let default_lists = cfg
        .default_triggers
        .iter()
        .map(|l| ("defaultTriggers".to_string(), l))
        .chain(cfg.default_triggers_by_service.iter().map(|(s, l)| (format!("defaultTriggers.{s}"), l)));
    for (key, list) in default_lists {
        for t in list.value.iter().filter(|t| !known_trigger(t)) {
            errors.push(ConfigError::new(cfg_file.pos(&list.referenced), key.clone(), format!("trigger {t:?} does not exist")));
        }
    }

    let classes = match &cfg.resource_classes {
        Some(rules) => ClassMap::with_rules(&rules.value).unwrap_or_else(|e| {
            errors.push(ConfigError::new(cfg_file.pos(&rules.referenced), "resourceClasses", e.to_string()));
            ClassMap::default()
        }),
        None => ClassMap::default(),
    };
    let known_service = |s: &str| services.contains_key(s) || DestinationKind::parse(s).is_some();
    let routes = match &cfg.routes {
        Some(defs) => RouteTree::build(
            &defs.value,
            &crate::route::tree::Known {
                trigger: &known_trigger,
                service: &known_service,
                template: &|t: &str| template_names.contains(&t),
            },
        )
        .unwrap_or_else(|errs| {
            errors.extend(errs.into_iter().map(|(key, msg, at)| {
                ConfigError::new(at.as_ref().and_then(|l| cfg_file.pos(l)).or_else(|| cfg_file.pos(&defs.referenced)), key, msg)
            }));
            RouteTree::default()
        }),
        None => RouteTree::default(),
    };
    let defaults = Retention::default();
    let retention = Retention {
        max_episodes: cfg
            .history
            .max_episodes
            .as_ref()
            .and_then(|v| in_range(&cfg_file, "history.maxEpisodes", v, 1, MAX_HISTORY_EPISODES, &mut errors))
            .unwrap_or(defaults.max_episodes),
        max_age: cfg.history.max_age.and_then(|d| chrono::Duration::from_std(d.0).ok()).unwrap_or(defaults.max_age),
    };
    let mut break_glass = crate::drift::break_glass::Settings {
        require_verified: cfg.break_glass.require_verified.unwrap_or(false),
        audited: audit.listen.is_some() || audit.file.is_some(),
        approver_groups: cfg.break_glass.approvers.as_ref().map(|a| a.groups.clone()).unwrap_or_default(),
        service_account_approvers: cfg.break_glass.approvers.as_ref().and_then(|a| a.service_accounts).unwrap_or(false),
        ..Default::default()
    };
    if let Some(v) = &cfg.break_glass.max_for {
        match chrono::Duration::from_std(v.value.0).ok().filter(|d| (chrono::Duration::minutes(1)..=chrono::Duration::days(30)).contains(d))
        {
            Some(d) => break_glass.max_for = d,
            None => errors.push(ConfigError::new(
                cfg_file.pos(&v.referenced),
                "breakGlass.maxFor",
                format!(
                    "{} is out of range (1m to 30d)",
                    crate::duration::format(chrono::Duration::from_std(v.value.0).unwrap_or(chrono::Duration::MAX))
                ),
            )),
        }
    }
    let attribution_defaults = AttributionSettings::default();
    let attribution = AttributionSettings {
        ttl: cfg.attribution.ttl.map_or(attribution_defaults.ttl, |d| d.0),
        ignore_managers: cfg.attribution.ignore_managers.clone(),
        enabled: cfg.attribution.enabled.unwrap_or(true),
        concurrency: cfg
            .attribution
            .concurrency
            .as_ref()
            .and_then(|v| in_range(&cfg_file, "attribution.concurrency", v, 1, 64, &mut errors))
            .unwrap_or(attribution_defaults.concurrency),
        destinations: cfg.attribution.destinations.clone().unwrap_or(attribution_defaults.destinations),
        read_secrets: cfg.attribution.read_secrets.unwrap_or(attribution_defaults.read_secrets),
    };
    let state = StateSettings {
        path: cfg.state.path.as_deref().map(|p| relative_to(&base, p)),
        max_keys_per_app: cfg
            .state
            .max_keys_per_app
            .as_ref()
            .and_then(|v| in_range(&cfg_file, "state.maxKeysPerApp", v, 1, MAX_KEYS_PER_APP, &mut errors)),
    };
    match templates {
        Some(templates) if errors.is_empty() => Ok(Runtime {
            operations_token,
            operations_open: cfg.operations.open.unwrap_or(false),
            operations_tls: cfg.operations.tls.as_ref().map(|t| ServerTls {
                cert: relative_to(&base, &t.cert_file),
                key: relative_to(&base, &t.key_file),
                client_ca: None,
                client_names: Vec::new(),
            }),
            audit,
            clusters: spokes,
            argocd,
            diff,
            routes,
            retention,
            break_glass,
            attribution,
            classes,
            context: cfg.context,
            engine,
            triggers,
            templates,
            services,
            router: Router {
                global,
                default_triggers: cfg.default_triggers.map(|l| l.value).unwrap_or_default(),
                default_triggers_by_service: cfg.default_triggers_by_service.into_iter().map(|(s, l)| (s, l.value)).collect(),
                limits,
            },
            state,
            secrets,
            redactor,
            warnings,
            missing_secrets,
            sources,
        }),
        _ => Err(errors),
    }
}

/// `audit:` validated: addresses parsed, values in range, the token a secret
/// reference, and a listener that only an authenticated API server can use.
fn audit_settings(
    def: &AuditDef,
    base: &Path,
    secrets: &Secrets,
    file: &SourceFile,
    errors: &mut Vec<ConfigError>,
    referenced: &mut Vec<crate::secret::Secret>,
    missing: &mut Vec<String>,
) -> AuditSettings {
    let mut out = AuditSettings::default();
    if let Some(l) = &def.listen {
        match l.value.parse::<std::net::SocketAddr>() {
            Ok(a) => out.listen = Some(a),
            Err(_) => {
                errors.push(ConfigError::new(file.pos(&l.referenced), "audit.listen", format!("{:?} is not an address:port", l.value)))
            }
        }
    }
    out.tls = def.tls.as_ref().map(|t| ServerTls {
        cert: relative_to(base, &t.cert_file),
        key: relative_to(base, &t.key_file),
        client_ca: t.client_ca_file.as_deref().map(|c| relative_to(base, c)),
        client_names: t.client_names.as_ref().map(|n| n.value.clone()).unwrap_or_default(),
    });
    if let Some(names) = def.tls.as_ref().and_then(|t| t.client_names.as_ref()) {
        let (pos, key) = (file.pos(&names.referenced), "audit.tls.clientNames");
        if def.tls.as_ref().is_some_and(|t| t.client_ca_file.is_none()) {
            errors.push(ConfigError::new(pos.clone(), key, "needs audit.tls.clientCAFile (no client certificate is asked for)"));
        }
        if names.value.is_empty() {
            errors.push(ConfigError::new(pos.clone(), key, "is empty: name the API server's client certificate"));
        }
        for n in &names.value {
            if rustls::pki_types::ServerName::try_from(n.as_str()).is_err() {
                errors.push(ConfigError::new(pos.clone(), key, format!("{n:?} is not a DNS name or an IP address")));
            }
        }
    }
    out.file = def.file.as_deref().map(|f| relative_to(base, f));
    if let Some(ids) = &def.argocd_identities {
        out.argocd_identities = ids.clone();
    }
    if let Some(token) = &def.token {
        let pos = file.pos(&token.referenced);
        if Secrets::references(&token.value).is_empty() {
            errors.push(ConfigError::new(pos, "audit.token", "must reference a secret ($key), not hold the token itself"));
        } else {
            match secrets.resolve(&token.value) {
                Ok(v) if v.expose().is_empty() => errors.push(ConfigError::new(pos, "audit.token", "the secret it references is empty")),
                Ok(v) => {
                    referenced.push(v.clone());
                    out.token = Some(v);
                }
                Err(e) => missing.push(format!("audit.token: {e}")),
            }
        }
    }
    let listen_pos = def.listen.as_ref().and_then(|l| file.pos(&l.referenced));
    if let Some(addr) = out.listen {
        let client_ca = def.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some());
        let pinned = def.tls.as_ref().is_some_and(|t| t.client_names.as_ref().is_some_and(|n| !n.value.is_empty()));
        if def.token.is_none() && !client_ca {
            errors.push(ConfigError::new(
                listen_pos.clone(),
                "audit.listen",
                "needs audit.token or audit.tls.clientCAFile: an unauthenticated caller must not be able to create alerts",
            ));
        } else if def.token.is_none() && !pinned {
            errors.push(ConfigError::new(
                listen_pos.clone(),
                "audit.listen",
                "needs audit.token or audit.tls.clientNames besides audit.tls.clientCAFile: any certificate the CA signed \
                 (a tenant's, from a shared issuer) would be let in",
            ));
        }
        if def.tls.is_none() && !addr.ip().is_loopback() {
            errors.push(ConfigError::new(
                listen_pos,
                "audit.listen",
                "needs audit.tls unless it listens on loopback (the token would cross the network in clear)",
            ));
        }
    }
    for (key, slot, value, min, max) in [
        ("audit.maxBodyBytes", &mut out.max_body_bytes, &def.max_body_bytes, 1024, 256 << 20),
        ("audit.queue", &mut out.queue, &def.queue, 100, 1_000_000),
    ] {
        if let Some(v) = value.as_ref().and_then(|v| in_range(file, key, v, min, max, errors)) {
            *slot = v;
        }
    }
    if let Some(w) = &def.window {
        match chrono::Duration::from_std(w.value.0) {
            Ok(d) if d >= chrono::Duration::minutes(1) && d <= chrono::Duration::hours(24) => out.window = d,
            _ => errors.push(ConfigError::new(file.pos(&w.referenced), "audit.window", "is out of range (1m to 24h)")),
        }
    }
    let secs = chrono::Duration::seconds;
    for (key, slot, value, min, max, range) in [
        ("audit.maxEventAge", &mut out.times.max_age, &def.max_event_age, secs(300), secs(86_400), "5m to 24h"),
        ("audit.maxEventAhead", &mut out.times.max_ahead, &def.max_event_ahead, secs(1), secs(3_600), "1s to 1h"),
    ] {
        if let Some(v) = value {
            match chrono::Duration::from_std(v.value.0) {
                Ok(d) if d >= min && d <= max => *slot = d,
                _ => errors.push(ConfigError::new(file.pos(&v.referenced), key, format!("is out of range ({range})"))),
            }
        }
    }
    out
}

fn build_services(cfg: &ConfigFile, file: &SourceFile, errors: &mut Vec<ConfigError>) -> BTreeMap<String, Service> {
    let mut out = BTreeMap::new();
    for (name, spec) in &cfg.services {
        let pos = file.pos(&spec.referenced);
        let mut map = spec.value.clone();
        let kind_name = match map.remove("type") {
            Some(serde_json::Value::String(t)) => t,
            Some(_) => {
                errors.push(ConfigError::new(pos, format!("services.{name}.type"), "type must be a string"));
                continue;
            }
            None => name.clone(),
        };
        let Some(kind) = DestinationKind::parse(&kind_name) else {
            let kinds: Vec<&str> = DestinationKind::ALL.iter().map(|k| k.as_str()).collect();
            errors.push(ConfigError::new(
                pos,
                format!("services.{name}.type"),
                format!("unknown service type {kind_name:?}; expected one of {}", kinds.join(", ")),
            ));
            continue;
        };
        let value = serde_json::Value::Object(map.into_iter().collect());
        match ServiceSpec::from_value(kind, value) {
            Ok(spec) => {
                out.insert(name.clone(), Service { name: name.clone(), spec });
            }
            Err(e) => errors.push(ConfigError::new(pos, format!("services.{name}"), e.to_string())),
        }
    }
    out
}

#[cfg(test)]
mod tests;
