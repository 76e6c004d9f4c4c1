//! Fleet's unit: a `BundleDeployment` (`fleet.cattle.io/v1alpha1`), one Bundle
//! deployed to one cluster, written by Fleet's controller into the cluster's namespace
//! and reconciled by the agent there. Fleet sends no notifications; it records drift
//! on the BundleDeployment (`status.modifiedStatus[]`, at most 10 entries, then
//! `incompleteState`) and marks its state `Modified`.

use serde_json::Value;

use super::ResourceRef;
use super::{Change, Conditions, Health, MAX_PATCH_CHARS, Modified, Sync, Unit, bounded, push_input, push_managed, push_modified};
use crate::json::Pointer;

/// Labels Fleet's controller puts on every BundleDeployment.
const BUNDLE_NAMESPACE: &str = "fleet.cattle.io/bundle-namespace";
const BUNDLE_NAME: &str = "fleet.cattle.io/bundle-name";
const CLUSTER: &str = "fleet.cattle.io/cluster";
const CLUSTER_NAMESPACE: &str = "fleet.cattle.io/cluster-namespace";
const COMMIT: &str = "fleet.cattle.io/commit";
const REPO: &str = "fleet.cattle.io/repo-name";

/// A BundleDeployment's deployment IDs and commit, state, drift, resources, cluster
/// and tenancy.
pub(super) fn read(object: &Value, unit: &mut Unit) {
    let text = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
    let label = |k: &str| object.at("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str).unwrap_or_default();
    unit.revision.desired = text("/spec/deploymentID").to_string();
    unit.revision.applied = text("/status/appliedDeploymentID").to_string();
    unit.revision.commit = label(COMMIT).to_string();
    if !label(REPO).is_empty() {
        unit.revision.source = format!("GitRepo/{}/{}", label(BUNDLE_NAMESPACE), label(REPO));
    }
    unit.suspended = object.at("/spec/paused").and_then(Value::as_bool).unwrap_or(false);
    let state = text("/status/display/state");
    let c = Conditions::of(object);
    // The agent could not apply the bundle: `ErrApplied`, its reason in the failed
    // condition (`Installed` or `Deployed`).
    let failed = ["Installed", "Deployed"].into_iter().find_map(|k| c.get(k).filter(|x| x.status == Some(false)));
    if state == "ErrApplied" || failed.is_some() {
        unit.reconcile.failed = true;
        unit.reconcile.reason = if state.is_empty() { "ErrApplied".into() } else { bounded(state) };
        if let Some(f) = failed {
            (unit.reconcile.message, unit.reconcile.since) = (bounded(f.message), f.since);
        }
    }
    read_drift(object, unit);
    let ready = object.at("/status/ready").and_then(Value::as_bool);
    let applied = !unit.revision.desired.is_empty() && unit.revision.applied == unit.revision.desired;
    unit.sync = Some(match (unit.drift.drifted, applied) {
        (true, _) | (false, false) => Sync::OutOfSync,
        (false, true) if ready.is_some() => Sync::Synced,
        _ => Sync::Unknown,
    });
    unit.health = Some(match state {
        _ if unit.suspended => Health::Suspended,
        "ErrApplied" | "NotReady" => Health::Degraded,
        "WaitApplied" | "Pending" | "OutOfSync" => Health::Progressing,
        _ if ready == Some(true) => Health::Healthy,
        _ if ready == Some(false) => Health::Degraded,
        _ => Health::Unknown,
    });
    for r in object.at("/status/resources").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
        if let Some(r) = object_ref(r) {
            push_managed(unit, r);
        }
    }
    if !label(CLUSTER).is_empty() {
        unit.destination.cluster = format!("{}/{}", label(CLUSTER_NAMESPACE), label(CLUSTER));
    }
    let option = |k: &str| object.at("/spec/options").and_then(|o| o.get(k)).and_then(Value::as_str).unwrap_or_default();
    unit.destination.namespace = if option("namespace").is_empty() { option("defaultNamespace") } else { option("namespace") }.to_string();
    unit.tenancy.boundary = label(BUNDLE_NAMESPACE).to_string();
    // What the agent applies comes from the Bundle, which fleet-controller makes from
    // the GitRepo: both on the manager, in the bundle's namespace.
    push_input(unit, "fleet.cattle.io", "Bundle", label(BUNDLE_NAMESPACE), label(BUNDLE_NAME));
    push_input(unit, "fleet.cattle.io", "GitRepo", label(BUNDLE_NAMESPACE), label(REPO));
    unit.tenancy.service_account = option("serviceAccount").to_string();
}

/// `status.modifiedStatus[]` as drifted objects, each with the patch Fleet would apply
/// (cut at [`MAX_PATCH_CHARS`]); `incompleteState` says Fleet cut the list at 10.
fn read_drift(object: &Value, unit: &mut Unit) {
    let modified = object.at("/status/modifiedStatus").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for m in modified {
        let Some(r) = object_ref(m) else { continue };
        let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
        let change = match (flag("missing"), flag("exist"), flag("delete")) {
            (true, true, _) => Change::NotOwned,
            (true, false, _) => Change::Missing,
            (false, _, true) => Change::Extra,
            _ => Change::Modified,
        };
        let patch = m.get("patch").and_then(Value::as_str).unwrap_or_default();
        push_modified(unit, Modified { object: r, change, patch: crate::text::clip(patch, MAX_PATCH_CHARS), summary: String::new() });
    }
    unit.drift.incomplete |= object.at("/status/incompleteState").and_then(Value::as_bool).unwrap_or(false);
    let non_modified = object.at("/status/nonModified").and_then(Value::as_bool);
    unit.drift.drifted = !unit.drift.modified.is_empty() || non_modified == Some(false);
    if unit.drift.drifted {
        unit.drift.reason = "Modified".into();
        let n = unit.drift.modified.len();
        let more = if unit.drift.incomplete { " (Fleet lists at most 10: more are modified)" } else { "" };
        unit.drift.message = format!("{n} resource(s) modified{more}");
    }
}

/// `{apiVersion, kind, namespace, name}` as an object reference.
fn object_ref(v: &Value) -> Option<ResourceRef> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
    if s("kind").is_empty() || s("name").is_empty() {
        return None;
    }
    Some(ResourceRef {
        group: ResourceRef::group_of(s("apiVersion")).to_string(),
        kind: s("kind").to_string(),
        namespace: s("namespace").to_string(),
        name: s("name").to_string(),
    })
}
