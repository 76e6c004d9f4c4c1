//! Deployment units: what a GitOps engine deploys as one thing, read from the engine's
//! own object into one shape. An Argo CD `Application`, a Flux `Kustomization` or
//! `HelmRelease` and a Fleet `BundleDeployment` are each a [`Unit`]: its engine and
//! identity, the revision it wants and the one applied, whether its last reconcile
//! failed, its sync and health, the drift its engine reported, the objects it manages,
//! where it deploys and its tenancy boundary.
//!
//! Pure and bounded: an object is read once ([`Unit::read`]); an inventory past
//! [`MAX_MANAGED`] entries, a drift report past [`MAX_MODIFIED`] and a recorded patch
//! past [`MAX_PATCH_CHARS`] are cut and say so. Values in Fleet's recorded patches are
//! kept as recorded: whoever shows them masks them (`drift::mask`).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::Pointer;

mod argocd;
mod conditions;
mod fleet;
mod flux;

pub use conditions::Conditions;

/// At most this many managed objects are kept per unit; past it `managed_more` counts
/// the rest.
pub const MAX_MANAGED: usize = 10_000;
/// At most this many drifted objects are kept per unit (Fleet itself stops at 10).
pub const MAX_MODIFIED: usize = 100;
/// At most this many inputs are kept per unit.
pub const MAX_INPUTS: usize = 64;
/// A recorded patch is cut past this many characters.
pub const MAX_PATCH_CHARS: usize = 4_096;
/// A controller's reason and message are cut past this many characters.
pub const MAX_MESSAGE_CHARS: usize = 2_048;

/// The engine a unit belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Engine {
    /// Argo CD's `Application` (`argoproj.io/v1alpha1`).
    #[default]
    ArgoCd,
    /// Flux's `Kustomization` (`kustomize.toolkit.fluxcd.io/v1`).
    FluxKustomization,
    /// Flux's `HelmRelease` (`helm.toolkit.fluxcd.io/v2`).
    FluxHelmRelease,
    /// Fleet's `BundleDeployment` (`fleet.cattle.io/v1alpha1`).
    Fleet,
}

impl Engine {
    /// Every engine, with the `apiVersion`, kind and resource (plural) of its unit.
    pub const ALL: [(Engine, &'static str, &'static str, &'static str); 4] = [
        (Engine::ArgoCd, "argoproj.io/v1alpha1", "Application", "applications"),
        (Engine::FluxKustomization, "kustomize.toolkit.fluxcd.io/v1", "Kustomization", "kustomizations"),
        (Engine::FluxHelmRelease, "helm.toolkit.fluxcd.io/v2", "HelmRelease", "helmreleases"),
        (Engine::Fleet, "fleet.cattle.io/v1alpha1", "BundleDeployment", "bundledeployments"),
    ];

    /// The engine's name as rhai, templates, routes and subscriptions say it:
    /// `argocd`, `flux` or `fleet` (a Flux unit's kind tells a Kustomization from a
    /// HelmRelease).
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::ArgoCd => "argocd",
            Engine::FluxKustomization | Engine::FluxHelmRelease => "flux",
            Engine::Fleet => "fleet",
        }
    }

    /// The kind of this engine's unit (`Application`, `Kustomization`, `HelmRelease`,
    /// `BundleDeployment`).
    pub fn kind(self) -> &'static str {
        self.gvk().2
    }

    /// The engine whose unit an object of `api_version` and `kind` is.
    pub fn of(api_version: &str, kind: &str) -> Option<Engine> {
        Engine::ALL.iter().find(|(_, a, k, _)| *a == api_version && *k == kind).map(|(e, ..)| *e)
    }

    /// The engine whose unit has the kind `kind` (whatever its `apiVersion`).
    pub fn of_kind(kind: &str) -> Option<Engine> {
        Engine::ALL.iter().find(|(_, _, k, _)| *k == kind).map(|(e, ..)| *e)
    }

    /// The engine whose units the API resource `group/resource` holds.
    pub fn of_resource(group: &str, resource: &str) -> Option<Engine> {
        Engine::ALL.iter().find(|(e, _, _, r)| *r == resource && e.gvk().0 == group).map(|(e, ..)| *e)
    }

    /// The `apiVersion` of this engine's unit.
    pub fn api_version(self) -> &'static str {
        Engine::ALL[self as usize].1
    }

    /// The API resource (plural) of this engine's unit, as audit events name it.
    pub fn resource(self) -> &'static str {
        Engine::ALL[self as usize].3
    }

    /// The API group, version and kind of this engine's unit.
    pub fn gvk(self) -> (&'static str, &'static str, &'static str) {
        let (_, api_version, kind, _) = Engine::ALL[self as usize];
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        (group, version, kind)
    }
}

impl Serialize for Engine {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Whether the live objects match what the unit wants, as far as its engine says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Sync {
    Synced,
    OutOfSync,
    Unknown,
}

/// The unit's health, in Argo CD's words (what templates and routes already read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Health {
    Healthy,
    Progressing,
    Degraded,
    Suspended,
    Unknown,
}

/// The revision a unit wants and the one its engine applied.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// What the engine is trying to apply: Argo CD's `status.sync.revision`, Flux's
    /// `lastAttemptedRevision`, Fleet's `spec.deploymentID`.
    pub desired: String,
    /// What it applied last: Argo CD's newest history entry, Flux's
    /// `lastAppliedRevision` (a HelmRelease: its newest history entry's chart version),
    /// Fleet's `status.appliedDeploymentID`.
    pub applied: String,
    /// The Git commit, when the engine says it (Fleet's `fleet.cattle.io/commit` label;
    /// Flux's `<branch>@sha1:<commit>` revisions; Argo CD's revision).
    pub commit: String,
    /// Where the desired state comes from: Argo CD's repository, Flux's source
    /// (`GitRepository/flux-system/podinfo`), Fleet's GitRepo (`GitRepo/fleet-default/apps`).
    pub source: String,
    /// A HelmRelease's chart and the Helm release number of its newest history entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chart: Option<Chart>,
}

/// A Helm chart as a HelmRelease's history records it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Chart {
    pub name: String,
    pub version: String,
    pub app_version: String,
    /// The Helm release number (`sh.helm.release.v1.<name>.v<N>`).
    pub release: i64,
    /// The release's status (`deployed`, `failed`, `superseded`).
    pub status: String,
}

/// Whether the unit's last reconcile failed, with its controller's reason and message
/// (`on-reconcile-failed`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reconcile {
    pub failed: bool,
    /// The controller gave up until the unit changes (Flux's `Stalled=True`).
    pub stalled: bool,
    pub reason: String,
    pub message: String,
    /// When the condition that says so last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
}

/// How a managed object differs from what its engine wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Changed in place.
    Modified,
    /// Deleted from the cluster (Fleet's `missing`, Flux's "removed").
    Missing,
    /// There, but not owned by this unit (Fleet's `exist`).
    NotOwned,
    /// Present but no longer wanted (Fleet's `delete`).
    Extra,
}

/// One drifted object, as the engine reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Modified {
    pub object: ResourceRef,
    pub change: Change,
    /// The patch the engine would apply (Fleet), cut at [`MAX_PATCH_CHARS`]; empty when
    /// not recorded. Unmasked: mask before showing.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub patch: String,
    /// Flux's count of what changed (`1 additions, 2 changes, 0 removals`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

/// The drift a unit's engine itself reports (a HelmRelease's `Drifted` condition,
/// Fleet's `modifiedStatus`); Argo CD's is read from `status.resources` by `drift`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineDrift {
    pub drifted: bool,
    pub reason: String,
    pub message: String,
    pub modified: Vec<Modified>,
    /// The engine's list was cut before it reached us (Fleet's `incompleteState`: it
    /// stops at 10 entries), or we cut it at [`MAX_MODIFIED`].
    pub incomplete: bool,
}

/// Where a unit deploys.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// The cluster: empty for the cluster the engine runs in; Argo CD's
    /// `spec.destination.server` or `name`; Flux's `kubeconfig:<namespace>/<Secret>`;
    /// Fleet's `<cluster namespace>/<cluster>`.
    pub cluster: String,
    /// The namespace objects without one go to (Argo CD's `spec.destination.namespace`,
    /// Flux's `targetNamespace`; Fleet's `defaultNamespace`).
    pub namespace: String,
}

/// Who a unit acts as and whose it is: its tenancy boundary.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tenancy {
    /// Argo CD's project; Flux's and Fleet's unit namespace.
    pub boundary: String,
    /// The ServiceAccount its engine impersonates (Flux's `serviceAccountName`; Fleet's
    /// `serviceAccount` option); empty: the controller's own.
    pub service_account: String,
}

/// A deployment unit, read from its engine's object.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    pub engine: Engine,
    /// The unit's kind (`Application`, `Kustomization`, `HelmRelease`, `BundleDeployment`).
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub revision: Revision,
    pub reconcile: Reconcile,
    pub sync: Option<Sync>,
    pub health: Option<Health>,
    /// Reconciling is paused (Flux's `spec.suspend`, Fleet's `spec.paused`).
    pub suspended: bool,
    pub drift: EngineDrift,
    /// The objects it manages (Flux's `status.inventory`, Fleet's `status.resources`,
    /// Argo CD's `status.resources`), at most [`MAX_MANAGED`]. Not in the view rhai and
    /// templates see (`managedCount` is): the audit index reads it.
    #[serde(skip)]
    pub managed: Vec<ResourceRef>,
    /// How many objects it manages (also those past [`MAX_MANAGED`]).
    pub managed_count: usize,
    pub managed_more: usize,
    /// What the unit reads to decide what it applies, besides its own object: Flux's
    /// source (`sourceRef`, a HelmRelease's chart source or `chartRef`), the ConfigMaps
    /// and Secrets of `postBuild.substituteFrom` and `valuesFrom`, its `kubeConfig` and
    /// decryption Secrets; Fleet's Bundle and GitRepo. A person's write of one changes
    /// what the unit applies as surely as a write of the unit (at most [`MAX_INPUTS`]).
    #[serde(skip)]
    pub inputs: Vec<ResourceRef>,
    pub destination: Destination,
    pub tenancy: Tenancy,
}

/// Why an object is not a unit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAUnit {
    #[error("{api_version} {kind} is not a deployment unit of Argo CD, Flux or Fleet")]
    UnknownKind { api_version: String, kind: String },
    #[error("the {0} has no metadata.name")]
    NoName(&'static str),
}

impl Unit {
    /// The unit an engine's object is: an Argo CD Application, a Flux Kustomization or
    /// HelmRelease, or a Fleet BundleDeployment, by its `apiVersion` and `kind`.
    pub fn read(object: &Value) -> Result<Unit, NotAUnit> {
        let text = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (text("/apiVersion"), text("/kind"));
        let engine = Engine::of(api_version, kind)
            .ok_or_else(|| NotAUnit::UnknownKind { api_version: api_version.to_string(), kind: kind.to_string() })?;
        let (_, _, kind) = engine.gvk();
        if text("/metadata/name").is_empty() {
            return Err(NotAUnit::NoName(kind));
        }
        let mut unit = Unit {
            engine,
            kind,
            namespace: text("/metadata/namespace").to_string(),
            name: text("/metadata/name").to_string(),
            uid: text("/metadata/uid").to_string(),
            ..Unit::default()
        };
        match engine {
            Engine::ArgoCd => argocd::read(object, &mut unit),
            Engine::FluxKustomization => flux::read_kustomization(object, &mut unit),
            Engine::FluxHelmRelease => flux::read_helm_release(object, &mut unit),
            Engine::Fleet => fleet::read(object, &mut unit),
        }
        Ok(unit)
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The unit as rhai and templates see it (`unit`): the fields above in camelCase,
    /// the engine as its name. Unmasked: what is shown goes through
    /// [`Unit::view_masked`].
    pub fn view(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// [`Unit::view`] with the text its controller wrote (reasons, messages — an
    /// error may quote a value it failed on) through `mask`, and recorded patches left
    /// out (what they set is shown masked as the drift's changes).
    pub fn view_masked(&self, mask: &dyn Fn(&str) -> String) -> Value {
        // The view holds neither the inventory nor the inputs: masking it in place
        // copies nothing of them.
        let mut v = self.view();
        for p in ["/reconcile/reason", "/reconcile/message", "/drift/reason", "/drift/message"] {
            if let Some(t) = v.pointer_mut(p).filter(|t| t.is_string()) {
                *t = Value::String(mask(t.as_str().unwrap_or_default()));
            }
        }
        for m in v.pointer_mut("/drift/modified").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(m) = m.as_object_mut() {
                m.remove("patch");
                if let Some(Value::String(s)) = m.get_mut("summary") {
                    *s = mask(s);
                }
            }
        }
        v
    }
}

/// How a unit of `engine` is named in logs, the store and the history: `namespace/name`
/// for an Argo CD Application, `Kind:namespace/name` for the others.
pub fn qualified(engine: Engine, namespace: &str, name: &str) -> String {
    match (engine, namespace.is_empty()) {
        (Engine::ArgoCd, true) => name.to_string(),
        (Engine::ArgoCd, false) => format!("{namespace}/{name}"),
        (_, _) => format!("{}:{namespace}/{name}", engine.kind()),
    }
}

/// Keeps at most [`MAX_MANAGED`] objects, counting the rest.
fn push_managed(unit: &mut Unit, object: ResourceRef) {
    unit.managed_count += 1;
    match unit.managed.len() < MAX_MANAGED {
        true => unit.managed.push(object),
        false => unit.managed_more += 1,
    }
}

/// Keeps at most [`MAX_INPUTS`] inputs.
fn push_input(unit: &mut Unit, group: &str, kind: &str, namespace: &str, name: &str) {
    if !kind.is_empty() && !name.is_empty() && unit.inputs.len() < MAX_INPUTS {
        unit.inputs.push(ResourceRef { group: group.into(), kind: kind.into(), namespace: namespace.into(), name: name.into() });
    }
}

/// Keeps at most [`MAX_MODIFIED`] drifted objects, saying when some were left out.
fn push_modified(unit: &mut Unit, m: Modified) {
    match unit.drift.modified.len() < MAX_MODIFIED {
        true => unit.drift.modified.push(m),
        false => unit.drift.incomplete = true,
    }
}

/// A controller's text, cut at [`MAX_MESSAGE_CHARS`].
fn bounded(s: &str) -> String {
    crate::text::clip(s, MAX_MESSAGE_CHARS)
}

/// A Kubernetes object by identity: API group (empty for the core group), kind,
/// namespace (empty for cluster-scoped objects) and name. What an engine's inventory
/// lists and what a drift, an audited write or a live read is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceRef {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ResourceRef {
    /// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group).
    pub fn group_of(api_version: &str) -> &str {
        api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }
}

impl fmt::Display for ResourceRef {
    /// `Kind/namespace/name`, `Kind/name` when cluster-scoped (as Flux and `kubectl` say it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace.is_empty() {
            true => write!(f, "{}/{}", self.kind, self.name),
            false => write!(f, "{}/{}/{}", self.kind, self.namespace, self.name),
        }
    }
}

#[cfg(test)]
mod tests;
