//! What a destination kind is: the [`Kind`] trait each `deliver::kinds::<kind>/` folder
//! implements, and the machinery that turns a kind's settings into a running service
//! without knowing which kind it is ([`Spec`]). The registry that lists the kinds is
//! `deliver::kinds`; nothing here names one.

use std::sync::Arc;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::deliverer::{Deliverer, ServiceRuntime};
use super::env::Env;
use super::outcome::{ConfigDuration, DeliverySettings, RateSettings, RetrySettings};
use crate::model::DestinationKind;
use crate::secret::Secrets;
use crate::source::At;
use crate::template::{Encoder, FieldKind, Section};

/// Why a service's settings are refused at load (`check`, `run` and reloads say it
/// with the service's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// An unknown, missing or mistyped setting (serde's words, naming the setting).
    #[error("{0}")]
    Invalid(String),
    /// A rule across settings or a range ("exactly one of token and webhookUrl",
    /// "concurrency must be from 1 to 64").
    #[error("{0}")]
    Rule(String),
}

/// Why a service's client cannot be built; never holds a secret value.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A `$secret` the service references is not set (names the key and where it was
    /// looked for).
    #[error(transparent)]
    Secret(#[from] crate::secret::SecretError),
    /// A CA, certificate or key file that cannot be read or used.
    #[error("{0}")]
    Tls(String),
    /// A setting that cannot be used once resolved (a URL that does not parse, a key
    /// that is not PEM).
    #[error("{0}")]
    Setting(String),
    /// The HTTP client cannot be built.
    #[error("HTTP client: {0}")]
    Http(String),
}

/// A kind's default rate limit and how many deliveries it has in flight at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub per_second: f64,
    pub burst: u32,
    pub concurrency: usize,
}

/// How Argo CD's settings for a service of this kind (`service.<name>` in
/// argocd-notifications-cm) become driftwatch's; `driftwatch import` reads it.
#[derive(Debug, Clone, Copy)]
pub struct ArgoService {
    /// The service type Argo CD names it by (`pagerdutyv2` for `pagerduty`).
    pub name: &'static str,
    /// Each Argo CD setting driftwatch takes, and its name here.
    pub settings: &'static [(&'static str, &'static str)],
    /// Argo CD settings driftwatch does not need, and why (noted, not marked).
    pub not_needed: &'static [(&'static str, &'static str)],
    /// Whether the converted service says its `type:` (Argo CD's `slack` service is
    /// driftwatch's by name; every other is written with its type).
    pub typed: bool,
    /// Settings in the order Argo CD's were written (`true`), or in the table's.
    pub written_order: bool,
}

/// What an import makes of one Argo CD service's settings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Imported {
    /// The driftwatch settings (ordered as [`ArgoService::written_order`] says).
    pub settings: Map<String, Value>,
    /// Argo CD settings this kind does not have: the import marks them.
    pub unknown: Vec<String>,
    /// Settings not needed, with why.
    pub notes: Vec<(String, &'static str)>,
}

impl ArgoService {
    /// The settings by the table: each known one renamed, each not needed noted, the
    /// rest unknown.
    pub fn convert(&self, argo: &Map<String, Value>) -> Imported {
        let mut out = Imported::default();
        let renamed = |from: &str| self.settings.iter().find(|(f, _)| *f == from).map(|(_, to)| *to);
        if !self.written_order {
            for (from, to) in self.settings {
                if let Some(v) = argo.get(*from) {
                    out.settings.insert((*to).to_string(), v.clone());
                }
            }
        }
        for (k, v) in argo {
            match (renamed(k), self.not_needed.iter().find(|(n, _)| n == k)) {
                (Some(to), _) if self.written_order => {
                    out.settings.insert(to.to_string(), v.clone());
                }
                (Some(_), _) => {}
                (None, Some((_, why))) => out.notes.push((k.clone(), why)),
                (None, None) => out.unknown.push(k.clone()),
            }
        }
        out
    }
}

/// Everything about one destination kind that the rest of driftwatch needs.
pub trait Kind {
    /// Its name in `type:` and in `service:recipient`.
    const KIND: DestinationKind;
    /// Its settings under `services.<name>` (besides the common ones).
    type Config: DeserializeOwned + Clone + std::fmt::Debug + PartialEq;
    /// Its default rate limit and concurrency (a service may override both).
    const LIMITS: Limits;
    /// Shapes its payload from a template's fields.
    const ENCODE: Encoder;
    /// Whether it wakes a person up: what a break-glass exception holds back.
    const PAGES: bool = false;
    /// Whether it feeds a SIEM (one ECS record per notification): grouped routes still
    /// send it one record per Application.
    const SIEM: bool = false;

    /// The template section this kind's encoder reads (`slack:`), typed: the template
    /// files' schema for it. [`NoSection`] for a kind that reads the message only.
    type Template: Section;

    /// Argo CD's service of this kind, when Argo CD has one (`None`: an import never
    /// produces it).
    const ARGO: Option<ArgoService>;

    /// Argo CD's settings (`settings`, of the service `argo` describes) as this kind's;
    /// the table does it unless a kind needs more.
    fn import(argo: &ArgoService, settings: &Map<String, Value>) -> Imported {
        argo.convert(settings)
    }

    /// Reads its settings; serde's own message names the setting at fault.
    fn config(v: Value) -> Result<Self::Config, SettingsError> {
        serde_json::from_value(v).map_err(|e| SettingsError::Invalid(e.to_string()))
    }

    /// Checks across settings that serde cannot express ("one of a and b").
    fn validate(_: &Self::Config) -> Result<(), SettingsError> {
        Ok(())
    }

    /// Every setting that may hold a `$secret` reference.
    fn secrets(config: &Self::Config) -> Vec<&str>;

    /// Its client; errors name what is missing (an unset secret, an unreadable CA
    /// file), never a secret value.
    fn client(name: &str, config: &Self::Config, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError>;
}

/// The template section of a kind that reads the message only: a template that has one
/// is refused at load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoSection;

impl Section for NoSection {
    const PRESENT: bool = false;

    fn fields<'a>(&'a self, _: &mut Vec<(String, FieldKind, Option<&'a At<String>>)>) {}
}

impl<'de> Deserialize<'de> for NoSection {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<NoSection, D::Error> {
        Err(serde::de::Error::custom("this destination kind reads no template fields of its own (only `message`)"))
    }
}

/// Settings every service may override (`timeout`, `retry`, `rateLimit`, `concurrency`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CommonDef {
    /// One attempt's time limit; 10s.
    timeout: Option<ConfigDuration>,
    retry: Option<RetrySettings>,
    rate_limit: Option<RateSettings>,
    /// Deliveries in flight at once (1 to 64); a default per kind.
    concurrency: Option<usize>,
}

const COMMON_KEYS: [&str; 4] = ["timeout", "retry", "rateLimit", "concurrency"];

/// A kind's delivery settings before any service overrides them.
pub fn default_settings(limits: Limits) -> DeliverySettings {
    DeliverySettings::with_limits(limits.per_second, limits.burst, limits.concurrency)
}

/// Splits a service's mapping (without `type`) into the delivery settings (the kind's
/// defaults with the common keys applied, each checked) and the kind's own settings.
pub fn split_common(v: Value, limits: Limits) -> Result<(Value, DeliverySettings), SettingsError> {
    let mut map = match v {
        Value::Object(m) => m,
        Value::Null => serde_json::Map::new(),
        _ => return Err(SettingsError::Invalid("a service must be a mapping".into())),
    };
    let mut common = serde_json::Map::new();
    for k in COMMON_KEYS {
        if let Some(v) = map.remove(k) {
            common.insert(k.into(), v);
        }
    }
    let common: CommonDef = serde_json::from_value(Value::Object(common)).map_err(|e| SettingsError::Invalid(e.to_string()))?;
    let mut settings = default_settings(limits);
    if let Some(t) = common.timeout {
        settings.timeout = t.0;
    }
    if let Some(r) = common.retry {
        settings.retry = r;
    }
    if let Some(r) = common.rate_limit {
        if !(r.per_second > 0.0 && r.per_second.is_finite()) {
            return Err(SettingsError::Rule("rateLimit.perSecond must be a positive number".into()));
        }
        settings.rate = r;
    }
    if let Some(c) = common.concurrency {
        if !(1..=64).contains(&c) {
            return Err(SettingsError::Rule(format!("concurrency must be from 1 to 64, not {c}")));
        }
        settings.concurrency = c;
    }
    Ok((Value::Object(map), settings))
}

/// A kind's settings read and checked: what the registry holds per service.
pub fn config<K: Kind>(v: Value) -> Result<K::Config, SettingsError> {
    let c = K::config(v)?;
    K::validate(&c)?;
    Ok(c)
}

/// A service as the workers run it: its client, its settings, and a redactor for the
/// secret values its settings reference.
pub fn assemble(
    name: &str,
    kind: DestinationKind,
    deliverer: Arc<dyn Deliverer>,
    settings: DeliverySettings,
    strings: &[&str],
    env: &Env,
) -> ServiceRuntime {
    let mut referenced = Vec::new();
    for s in strings {
        for key in Secrets::references(s) {
            if let Ok(v) = env.secrets.get(&key) {
                referenced.push(v);
            }
        }
    }
    ServiceRuntime { name: name.to_string(), kind, deliverer, settings, redactor: env.secrets.redactor(referenced) }
}

/// One kind's service configuration, typed: how a kind's own tests build it without
/// the registry.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec<K: Kind> {
    pub config: K::Config,
    pub settings: DeliverySettings,
}

impl<K: Kind> Spec<K> {
    /// The mapping under `services.<name>` (without `type`).
    pub fn parse(v: Value) -> Result<Spec<K>, SettingsError> {
        let (rest, settings) = split_common(v, K::LIMITS)?;
        Ok(Spec { config: config::<K>(rest)?, settings })
    }

    /// The running service.
    pub fn build(&self, name: &str, env: &Env) -> Result<ServiceRuntime, BuildError> {
        let deliverer = K::client(name, &self.config, env)?;
        Ok(assemble(name, K::KIND, deliverer, self.settings, &K::secrets(&self.config), env))
    }
}
