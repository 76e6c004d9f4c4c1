//! Loads `driftwatch.yaml`, the trigger and template files and the built-in catalog,
//! and compiles them into a [`Runtime`]. Everything is validated here, once; every
//! error names file, line, column and key, and all errors are reported, not just the
//! first.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::deliver::kinds::TemplateDef;
use crate::deliver::services::ServiceSpec;
use crate::drift::classes::{ClassMap, ClassRule};
use crate::model::{Destination, DestinationKind};
use crate::route::tree::{RouteDef, RouteTree};
use crate::route::{GlobalSubscription, Router, Selector};
use crate::secret::{Redactor, Secret, Secrets};
use crate::source::{At, ConfigError, SourceFile, in_range};
use crate::state::Retention;
use crate::template::{TemplateSet, Warning};
use crate::trigger::{Trigger, TriggerDef, TriggerEngine};

mod audit;
pub mod clusters;
mod schema;
mod sections;

pub use audit::{ARGOCD_CONTROLLER_IDENTITY, ArgoIdentities, AuditSettings, FLEET_IDENTITIES, FLUX_IDENTITIES, ServerTls, SpokeFeed};
pub use schema::*;
pub use sections::AttributionSettings;

/// The built-in catalog, embedded by `build.rs` from `triggers/` and `templates/`.
pub mod catalog {
    include!(concat!(env!("OUT_DIR"), "/catalog.rs"));
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
    /// The store is in PostgreSQL (`state.postgres`), not in the file.
    pub postgres: Option<crate::state::PgOptions>,
}

/// Everything compiled from one configuration: what the pipeline runs with. Built whole
/// or not at all, so a reload can swap it in only when every part is valid.
/// The cluster Fleet's own `local` cluster is, as a BundleDeployment names it
/// (`<cluster namespace>/<cluster>`).
pub const FLEET_LOCAL: &str = "fleet-local/local";

pub struct Runtime {
    pub context: BTreeMap<String, String>,
    pub engine: Arc<TriggerEngine>,
    pub triggers: BTreeMap<String, Trigger>,
    /// What the triggers' scripts read of a pass's values: all a pass converts.
    pub reads: crate::trigger::reads::Reads,
    pub templates: TemplateSet,
    pub services: BTreeMap<String, Service>,
    pub router: Router,
    pub state: StateSettings,
    /// `sharding.shards`: 1 without sharding.
    pub shards: u32,
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

    /// The cluster a unit of any engine deploys to: an Application's destination as
    /// [`Runtime::target`] resolves it; a Flux unit without `kubeConfig` and a Fleet
    /// bundle for Fleet's `local` cluster deploy here; another is a configured spoke of
    /// that name, else elsewhere.
    pub fn target_of(&self, app: &crate::model::App) -> clusters::Target {
        use crate::unit::Engine;
        let cluster = app.unit.destination.cluster.as_str();
        match app.engine() {
            Engine::ArgoCd => self.target(&app.object),
            _ if cluster.is_empty() => clusters::Target::Local,
            // Fleet's local cluster, as its labels say and as Fleet names its namespace
            // (a label alone can be rewritten).
            Engine::Fleet if cluster == FLEET_LOCAL && app.namespace.starts_with("cluster-fleet-local-local-") => clusters::Target::Local,
            _ => match self.clusters.iter().find(|c| c.name == cluster) {
                Some(c) => clusters::Target::Spoke(c.label.clone()),
                None => clusters::Target::Elsewhere(cluster.to_string()),
            },
        }
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
/// The configuration file (or none) and the trigger and template definitions layered
/// on the built-in catalog: the catalog, then the files of `triggers/` and
/// `templates/`, then the configuration's own.
struct Files {
    cfg: ConfigFile,
    cfg_file: SourceFile,
    /// The configuration file's directory (relative paths are resolved against it).
    base: PathBuf,
    /// What a reload watches.
    sources: Vec<PathBuf>,
    trigger_defs: Vec<Sourced<TriggerDef>>,
    template_defs: Vec<Sourced<TemplateDef>>,
}

/// Reads the configuration file and the definition files; an unreadable or
/// unparsable configuration file is the one error returned.
fn read_files(config: Option<&Path>, errors: &mut Vec<ConfigError>) -> Result<Files, Vec<ConfigError>> {
    let mut trigger_layers = vec![builtin_defs::<TriggerDef>(catalog::TRIGGERS, "trigger", errors)];
    let mut template_layers = vec![builtin_defs::<TemplateDef>(catalog::TEMPLATES, "template", errors)];
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
                    trigger_layers.push(read_dir_defs(&dir, "trigger", errors));
                } else {
                    template_layers.push(read_dir_defs(&dir, "template", errors));
                }
            }
        }
        trigger_layers.push(std::mem::take(&mut cfg.triggers).into_iter().map(|(n, d)| (n, d, cfg_file.clone())).collect());
        template_layers.push(std::mem::take(&mut cfg.templates).into_iter().map(|(n, d)| (n, d, cfg_file.clone())).collect());
    }
    Ok(Files { cfg, cfg_file, base, sources, trigger_defs: merge(trigger_layers), template_defs: merge(template_layers) })
}

/// Compiles every trigger and the template set, collecting every error; a trigger
/// sending a template that does not exist is an error, one sending none a warning.
fn compile(
    engine: &TriggerEngine,
    trigger_defs: &[Sourced<TriggerDef>],
    template_defs: &[Sourced<TemplateDef>],
    errors: &mut Vec<ConfigError>,
) -> (BTreeMap<String, Trigger>, Option<TemplateSet>, Vec<Warning>) {
    let mut triggers = BTreeMap::new();
    for (name, def, file) in trigger_defs {
        match engine.compile(name, def, file) {
            Ok(t) => {
                triggers.insert(name.clone(), t);
            }
            Err(e) => errors.extend(e),
        }
    }
    let (templates, mut warnings) = match TemplateSet::compile(template_defs) {
        Ok(t) => (Some(t.0), t.1),
        Err(e) => {
            errors.extend(e);
            (None, Vec::new())
        }
    };
    let template_names: Vec<&str> = template_defs.iter().map(|(n, _, _)| n.as_str()).collect();
    for (name, def, file) in trigger_defs {
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
    (triggers, templates, warnings)
}

pub fn load_with(config: Option<&Path>, engine: Arc<TriggerEngine>) -> Result<Runtime, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let Files { cfg, cfg_file, base, mut sources, trigger_defs, template_defs } = read_files(config, &mut errors)?;
    let (triggers, templates, mut warnings) = compile(&engine, &trigger_defs, &template_defs, &mut errors);
    let template_names: Vec<&str> = template_defs.iter().map(|(n, _, _)| n.as_str()).collect();

    let services = build_services(&cfg, &cfg_file, &mut errors);
    let secrets = load_secrets(cfg.secrets_file.as_deref(), &base, &mut sources, &mut errors);
    let (mut referenced, mut missing_secrets) = service_secrets(&services, &secrets);
    let mut ctx = sections::Ctx { file: &cfg_file, base: &base, errors: &mut errors };
    let limits = sections::limits(&cfg.limits, &mut ctx);
    let mut sink = clusters::SecretSink { secrets: &secrets, referenced: &mut referenced, missing: &mut missing_secrets };
    let operations = sections::operations(&cfg.operations, &mut ctx, &mut sink);
    let audit = audit::settings(&cfg.audit, &mut ctx, &mut sink);
    let local_destinations = cfg.attribution.destinations.clone().unwrap_or_else(|| AttributionSettings::default().destinations);
    let spokes = clusters::clusters(&cfg.clusters, &local_destinations, ctx.base, ctx.file, &mut sink, ctx.errors);
    let argocd = cfg.argocd.as_ref().and_then(|a| clusters::argocd(a, ctx.base, ctx.file, &mut sink, ctx.errors));
    let diff = clusters::diff(&cfg.diff, ctx.file, ctx.errors);
    let state = sections::state(&cfg.state, &mut ctx, &mut sink);
    let shards = sections::sharding(cfg.sharding.as_ref(), &state, &audit, &mut ctx);
    let audit = AuditSettings { mask: diff.mask.clone(), ..audit };
    let audit = audit::with_spokes(audit, &spokes, &cfg.clusters, ctx.file, ctx.errors);
    // Every secret `run` refuses to start without (services, operations, audit, clusters,
    // Argo CD), reported by `check` in the same words.
    warnings
        .extend(missing_secrets.iter().map(|m| Warning { pos: None, message: format!("{m} (driftwatch run will not start without it)") }));
    let redactor = secrets.redactor(referenced);

    let known_trigger = |t: &str| triggers.contains_key(t) || trigger_defs.iter().any(|(n, _, _)| n == t);
    let known_service = |s: &str| services.contains_key(s) || DestinationKind::parse(s).is_some();
    let known =
        crate::route::tree::Known { trigger: &known_trigger, service: &known_service, template: &|t: &str| template_names.contains(&t) };
    let global = sections::subscriptions(&cfg, &known, &mut ctx);
    let classes = sections::classes(cfg.resource_classes.as_ref(), &mut ctx);
    let routes = sections::routes(cfg.routes.as_ref(), &known, &mut ctx);
    let retention = sections::retention(&cfg.history, &mut ctx);
    let break_glass = sections::break_glass(&cfg.break_glass, cfg.routes.as_ref(), audit.enabled(), &mut ctx);
    let attribution = sections::attribution(&cfg.attribution, &mut ctx);
    match templates {
        Some(templates) if errors.is_empty() => Ok(Runtime {
            operations_token: operations.token,
            operations_open: operations.open,
            operations_tls: operations.tls,
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
            reads: {
                let mut reads = crate::trigger::reads::Reads::default();
                triggers.values().for_each(|t| reads.merge(&t.reads()));
                reads
            },
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
            shards,
            secrets,
            redactor,
            warnings,
            missing_secrets,
            sources,
        }),
        _ => Err(errors),
    }
}

/// The `secretsFile` (none: no secrets), added to the files a reload follows (a rotated
/// Secret is read again); one that cannot be read is an error.
fn load_secrets(file: Option<&str>, base: &Path, sources: &mut Vec<PathBuf>, errors: &mut Vec<ConfigError>) -> Secrets {
    let Some(p) = file else { return Secrets::default() };
    let path = relative_to(base, p);
    sources.push(path.clone());
    Secrets::load(&path).unwrap_or_else(|e| {
        errors.push(ConfigError::new(None, "secretsFile", e.to_string()));
        Secrets::default()
    })
}

/// The secrets the services' configurations reference (`$key`), and for each that is
/// missing, the service and why.
fn service_secrets(services: &BTreeMap<String, Service>, secrets: &Secrets) -> (Vec<Secret>, Vec<String>) {
    let (mut referenced, mut missing) = (Vec::new(), Vec::new());
    for s in services.values() {
        for value in s.spec.config.strings() {
            for key in Secrets::references(value) {
                match secrets.get(&key) {
                    Ok(v) => referenced.push(v),
                    Err(e) => missing.push(format!("services.{}: {e}", s.name)),
                }
            }
        }
    }
    (referenced, missing)
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
