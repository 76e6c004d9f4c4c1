//! A deployment unit as the pipeline takes it (`App`: an Argo CD Application, a Flux
//! or Fleet unit) and an Argo CD AppProject, read from the API server's JSON.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::json::Pointer;
use crate::unit::{Engine, Unit};

/// Why a document could not be taken as an Argo CD Application (or AppProject).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ObjectError {
    #[error("not an object: expected a mapping with apiVersion, kind and metadata")]
    NotAnObject,
    #[error("kind is {found:?}, expected {expected:?}")]
    WrongKind { expected: &'static str, found: String },
    #[error("apiVersion is {found:?}, expected {expected}")]
    WrongApiVersion { expected: &'static str, found: String },
    #[error("field {field} has the wrong type: expected {expected}")]
    WrongType { field: &'static str, expected: &'static str },
}

/// A deployment unit as the pipeline takes it — an Argo CD `Application`, a Flux
/// `Kustomization` or `HelmRelease`, a Fleet `BundleDeployment` — kept as the JSON the
/// API server sent (triggers and templates see every field, as in Argo CD, as `app`),
/// plus the few metadata fields the pipeline itself needs and the unit read into one
/// shape (`unit`), read once.
#[derive(Debug, Clone, PartialEq)]
pub struct App {
    /// The whole object, exactly as received.
    pub object: Value,
    pub name: String,
    pub namespace: String,
    /// `metadata.uid`; empty for hand-written files that have none.
    pub uid: String,
    /// `spec.project`, `default` when absent (as Argo CD does).
    pub project: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The object read as a deployment unit of its engine.
    pub unit: Unit,
}

/// Checks the shape the pipeline relies on; anything past it is the triggers' business
/// (a field of an unexpected type there only makes a condition false).
fn check_kind(object: &Value, expected: &'static str) -> Result<(), ObjectError> {
    let map = object.as_object().ok_or(ObjectError::NotAnObject)?;
    match map.get("kind") {
        Some(Value::String(k)) if k == expected => {}
        Some(Value::String(k)) => {
            return Err(ObjectError::WrongKind { expected, found: k.clone() });
        }
        Some(_) => {
            return Err(ObjectError::WrongType { field: "kind", expected: "a string" });
        }
        None => {
            return Err(ObjectError::WrongKind { expected, found: String::new() });
        }
    }
    if let Some(v) = map.get("apiVersion") {
        match v.as_str() {
            Some(found) if found == expected_api_version(expected) => {}
            Some(other) => {
                return Err(ObjectError::WrongApiVersion { expected: expected_api_version(expected), found: other.to_string() });
            }
            None => {
                return Err(ObjectError::WrongType { field: "apiVersion", expected: "a string" });
            }
        }
    }
    for field in ["metadata", "spec", "status"] {
        if let Some(v) = map.get(field)
            && !v.is_object()
            && !v.is_null()
        {
            let field: &'static str = match field {
                "metadata" => "metadata",
                "spec" => "spec",
                _ => "status",
            };
            return Err(ObjectError::WrongType { field, expected: "a mapping" });
        }
    }
    Ok(())
}

/// The `apiVersion` objects of `kind` are read at (an AppProject: Argo CD's).
fn expected_api_version(kind: &str) -> &'static str {
    Engine::of_kind(kind).unwrap_or(Engine::ArgoCd).api_version()
}

/// The engine whose unit `object` claims to be, by its kind alone (its apiVersion is
/// checked after): a kind no engine has is refused naming the ones there are.
fn engine_of(object: &Value) -> Result<Engine, ObjectError> {
    match object.get("kind") {
        Some(Value::String(k)) => Engine::of_kind(k).ok_or_else(|| ObjectError::WrongKind {
            expected: "Application, Kustomization, HelmRelease or BundleDeployment",
            found: k.clone(),
        }),
        _ => Ok(Engine::ArgoCd),
    }
}

fn string_map(meta: Option<&Value>, field: &'static str) -> Result<BTreeMap<String, String>, ObjectError> {
    let Some(v) = meta.and_then(|m| m.get(field)) else {
        return Ok(BTreeMap::new());
    };
    if v.is_null() {
        return Ok(BTreeMap::new());
    }
    let obj = v.as_object().ok_or(ObjectError::WrongType { field, expected: "a mapping of strings" })?;
    obj.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(ObjectError::WrongType { field, expected: "a mapping of strings" }),
        })
        .collect()
}

fn meta_str(meta: Option<&Value>, field: &'static str) -> Result<String, ObjectError> {
    match meta.and_then(|m| m.get(field)) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ObjectError::WrongType { field, expected: "a string" }),
    }
}

impl App {
    /// Takes a decoded document as an Application, or says why it is not one.
    pub fn from_value(object: Value) -> Result<App, ObjectError> {
        let engine = engine_of(&object)?;
        check_kind(&object, engine.kind())?;
        let meta = object.get("metadata");
        let name = meta_str(meta, "name")?;
        let namespace = meta_str(meta, "namespace")?;
        let uid = meta_str(meta, "uid")?;
        let labels = string_map(meta, "labels")?;
        let annotations = string_map(meta, "annotations")?;
        let project = match object.at("/spec/project") {
            // Flux and Fleet have no projects: their tenancy is the unit's (`unit.tenancy`).
            _ if engine != Engine::ArgoCd => String::new(),
            None | Some(Value::Null) => "default".to_string(),
            Some(Value::String(p)) if p.is_empty() => "default".to_string(),
            Some(Value::String(p)) => p.clone(),
            Some(_) => {
                return Err(ObjectError::WrongType { field: "spec.project", expected: "a string" });
            }
        };
        let unit = Unit::read(&object).unwrap_or_else(|_| Unit {
            engine,
            kind: engine.kind(),
            namespace: namespace.clone(),
            name: name.clone(),
            ..Unit::default()
        });
        Ok(App { object, name, namespace, uid, project, labels, annotations, unit })
    }

    /// The key the state store files this Application's records under. The UID is part
    /// of it so that a deleted and re-created Application starts afresh, as it does in
    /// Argo CD (whose state lives in an annotation on the object itself).
    /// A Flux or Fleet unit's key starts with its kind (`Kustomization:ns/name@uid`).
    pub fn state_key(&self) -> String {
        let name = match self.engine() {
            Engine::ArgoCd => format!("{}/{}", self.namespace, self.name),
            _ => self.qualified_name(),
        };
        if self.uid.is_empty() { name } else { format!("{name}@{}", self.uid) }
    }

    /// `namespace/name` (a Flux or Fleet unit: `Kind:namespace/name`), for logs and output.
    pub fn qualified_name(&self) -> String {
        crate::unit::qualified(self.engine(), &self.namespace, &self.name)
    }

    /// The shard of this unit among `shards`: by its destination cluster, whatever its
    /// engine (an Application's `spec.destination`, a Flux unit's kubeconfig, a Fleet
    /// bundle's cluster).
    pub fn shard(&self, shards: u32) -> u32 {
        match self.engine() {
            Engine::ArgoCd => crate::shard::of_app(&self.object, shards),
            _ => crate::shard::of_cluster(&self.unit.destination.cluster, shards),
        }
    }

    /// `what` of its engine for a Flux or Fleet unit; empty for an Argo CD Application
    /// (what records stored before other engines were watched hold, and keep meaning).
    pub fn not_argocd(&self, what: fn(Engine) -> &'static str) -> String {
        match self.engine() {
            Engine::ArgoCd => String::new(),
            e => what(e).to_string(),
        }
    }

    /// The engine this unit belongs to.
    pub fn engine(&self) -> Engine {
        self.unit.engine
    }

    /// Its sync status in Argo CD's words (`Synced`, `OutOfSync`, `Unknown`; empty when
    /// not said): an Application's own `status.sync.status`, another engine's as its
    /// unit reads it (a HelmRelease `Drifted`, a Fleet bundle `Modified`: `OutOfSync`).
    pub fn sync_status(&self) -> &str {
        match self.engine() {
            Engine::ArgoCd => self.str_at("/status/sync/status").unwrap_or_default(),
            _ => match self.unit.sync {
                Some(crate::unit::Sync::Synced) => "Synced",
                Some(crate::unit::Sync::OutOfSync) => "OutOfSync",
                Some(crate::unit::Sync::Unknown) => "Unknown",
                None => "",
            },
        }
    }

    /// Its health in Argo CD's words (`Healthy`, `Progressing`, `Degraded`,
    /// `Suspended`, `Missing`, `Unknown`; empty when not said).
    pub fn health_status(&self) -> &str {
        use crate::unit::Health;
        match self.engine() {
            Engine::ArgoCd => self.str_at("/status/health/status").unwrap_or_default(),
            _ => match self.unit.health {
                Some(Health::Healthy) => "Healthy",
                Some(Health::Progressing) => "Progressing",
                Some(Health::Degraded) => "Degraded",
                Some(Health::Suspended) => "Suspended",
                Some(Health::Unknown) => "Unknown",
                None => "",
            },
        }
    }

    fn str_at(&self, pointer: &str) -> Option<&str> {
        self.object.at(pointer).and_then(Value::as_str)
    }

    /// Argo CD skips an Application while its sync status is stale: the operation has
    /// finished and `operationState.finishedAt` is later than both `status.reconciledAt`
    /// and `status.observedAt`. It is evaluated again once Argo CD has re-reconciled.
    ///
    /// The status is anyone's to write who may patch the Application (no status
    /// subresource): a `finishedAt` dated after `now` (beyond [`STALE_SKEW`]) is a
    /// forgery meant to keep the Application skipped for good, and is not stale.
    pub fn sync_status_is_stale(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        let phase = self.str_at("/status/operationState/phase");
        if !matches!(phase, Some("Succeeded" | "Failed" | "Error")) {
            return false;
        }
        let Some(finished) = self.str_at("/status/operationState/finishedAt").and_then(parse_time) else {
            return false;
        };
        if now.checked_add_signed(STALE_SKEW).is_none_or(|limit| finished > limit) {
            return false;
        }
        let later_than = |pointer: &str| match self.str_at(pointer).and_then(parse_time) {
            Some(t) => finished > t,
            // Go's zero time: a missing timestamp is earlier than any finishedAt.
            None => true,
        };
        later_than("/status/reconciledAt") && later_than("/status/observedAt")
    }
}

/// How far ahead of driftwatch's clock an operation's `finishedAt` may be (clocks
/// apart) and still make the sync status stale.
pub const STALE_SKEW: chrono::Duration = chrono::Duration::minutes(1);

pub(super) fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&chrono::Utc))
}

/// An Argo CD `AppProject`: its annotations (project-level subscriptions apply to all
/// its Applications) and its rule for what its Applications may hold (what driftwatch
/// may read for them: `drift::scope`).
#[derive(Debug, Clone, PartialEq)]
pub struct Project {
    pub name: String,
    pub namespace: String,
    pub annotations: BTreeMap<String, String>,
    pub policy: crate::project::ProjectPolicy,
}

impl Project {
    pub fn from_value(object: &Value) -> Result<Project, ObjectError> {
        check_kind(object, "AppProject")?;
        let meta = object.get("metadata");
        Ok(Project {
            name: meta_str(meta, "name")?,
            namespace: meta_str(meta, "namespace")?,
            annotations: string_map(meta, "annotations")?,
            policy: crate::project::ProjectPolicy::of(object),
        })
    }
}
