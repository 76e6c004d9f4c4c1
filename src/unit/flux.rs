//! Flux's units: a `Kustomization` (`kustomize.toolkit.fluxcd.io/v1`) and a
//! `HelmRelease` (`helm.toolkit.fluxcd.io/v2`). Both follow kstatus: `Ready`,
//! `Reconciling` and `Stalled` conditions, `status.observedGeneration`, and an
//! inventory of what they applied (`status.inventory.entries[].id`, written
//! `<namespace>_<name>_<group>_<kind>`). kustomize-controller corrects drift silently
//! (only the audit input sees it); helm-controller reports it in a `Drifted` condition.

use serde_json::Value;

use super::ResourceRef;
use super::{Change, Chart, Conditions, Health, Modified, Sync, Unit, bounded, push_input, push_managed, push_modified};
use crate::json::Pointer;

/// A Kustomization's revisions, state, inventory, destination and tenancy.
pub(super) fn read_kustomization(object: &Value, unit: &mut Unit) {
    read_common(object, unit);
    let text = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
    unit.revision.desired = text("/status/lastAttemptedRevision").to_string();
    unit.revision.applied = text("/status/lastAppliedRevision").to_string();
    unit.revision.commit = commit(&unit.revision.applied).or_else(|| commit(&unit.revision.desired)).unwrap_or_default().to_string();
    let c = Conditions::of(object);
    unit.sync = Some(match (c.get("Ready").and_then(|r| r.status), unit.revision.applied == unit.revision.desired) {
        (Some(true), true) => Sync::Synced,
        // Applied, but not the revision last attempted: Git's content waits.
        (Some(true), false) => Sync::OutOfSync,
        // A failed reconcile says nothing of whether the objects match (it is `reconcile`).
        (Some(false), _) | (None, _) => Sync::Unknown,
    });
}

/// A HelmRelease's chart and release, state, reported drift, inventory, destination
/// and tenancy.
pub(super) fn read_helm_release(object: &Value, unit: &mut Unit) {
    read_common(object, unit);
    let text = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
    unit.revision.desired = text("/status/lastAttemptedRevision").to_string();
    // The history is newest first.
    if let Some(newest) = object.at("/status/history/0") {
        let s = |k: &str| newest.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let chart = Chart {
            name: s("chartName"),
            version: s("chartVersion"),
            app_version: s("appVersion"),
            release: newest.get("version").and_then(Value::as_i64).unwrap_or_default(),
            status: s("status"),
        };
        unit.revision.applied = chart.version.clone();
        unit.revision.chart = Some(chart);
    }
    let c = Conditions::of(object);
    if let Some(d) = c.get("Drifted").filter(|d| d.status == Some(true)) {
        unit.drift.drifted = true;
        unit.drift.reason = bounded(d.reason);
        unit.drift.message = bounded(d.message);
        for m in drifted_objects(d.message) {
            let m = in_inventory(unit, m);
            push_modified(unit, m);
        }
    }
    unit.sync = Some(match (unit.drift.drifted, c.get("Ready").and_then(|r| r.status)) {
        (true, _) => Sync::OutOfSync,
        (false, Some(true)) => Sync::Synced,
        (false, Some(false) | None) => Sync::Unknown,
    });
}

/// What both kinds share: suspension, the reconcile's outcome, health, inventory,
/// destination and tenancy, and their source.
fn read_common(object: &Value, unit: &mut Unit) {
    let text = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
    unit.suspended = object.at("/spec/suspend").and_then(Value::as_bool).unwrap_or(false);
    let c = Conditions::of(object);
    let ready = c.get("Ready");
    let stalled = c.get("Stalled").filter(|s| s.status == Some(true));
    if let Some(s) = stalled {
        unit.reconcile.failed = true;
        unit.reconcile.stalled = true;
        (unit.reconcile.reason, unit.reconcile.message, unit.reconcile.since) = (bounded(s.reason), bounded(s.message), s.since);
    } else if let Some(r) = ready.filter(|r| r.status == Some(false)) {
        unit.reconcile.failed = true;
        (unit.reconcile.reason, unit.reconcile.message, unit.reconcile.since) = (bounded(r.reason), bounded(r.message), r.since);
    } else if let Some(r) = ready {
        unit.reconcile.since = r.since;
    }
    // A status older than the spec says nothing about the spec yet.
    let generation = object.at("/metadata/generation").and_then(Value::as_i64);
    let observed = object.at("/status/observedGeneration").and_then(Value::as_i64);
    let stale = matches!((generation, observed), (Some(g), Some(o)) if o < g);
    unit.health = Some(if unit.suspended {
        Health::Suspended
    } else if unit.reconcile.failed {
        Health::Degraded
    } else if stale || c.is_true("Reconciling") {
        Health::Progressing
    } else if ready.is_some_and(|r| r.status == Some(true)) {
        Health::Healthy
    } else {
        Health::Unknown
    });
    for entry in object.at("/status/inventory/entries").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
        if let Some(r) = entry.get("id").and_then(Value::as_str).and_then(inventory_id) {
            // `__` is a `:` Flux wrote, or two `_` of the name itself: both spellings.
            if r.name.contains(':') {
                push_managed(unit, ResourceRef { name: r.name.replace(':', "__"), ..r.clone() });
            }
            push_managed(unit, r);
        }
    }
    if let Some(secret) = object.at("/spec/kubeConfig/secretRef/name").and_then(Value::as_str) {
        unit.destination.cluster = format!("kubeconfig:{}/{secret}", unit.namespace);
    } else if let Some(map) = object.at("/spec/kubeConfig/configMapRef/name").and_then(Value::as_str) {
        unit.destination.cluster = format!("kubeconfig-configmap:{}/{map}", unit.namespace);
    }
    unit.destination.namespace = text("/spec/targetNamespace").to_string();
    unit.tenancy.boundary = unit.namespace.clone();
    unit.tenancy.service_account = text("/spec/serviceAccountName").to_string();
    let source = object.at("/spec/sourceRef").or_else(|| object.at("/spec/chart/spec/sourceRef")).or_else(|| object.at("/spec/chartRef"));
    if let Some(s) = source {
        let f = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or_default();
        let ns = if f("namespace").is_empty() { unit.namespace.clone() } else { f("namespace").to_string() };
        unit.revision.source = format!("{}/{ns}/{}", f("kind"), f("name"));
    }
    read_inputs(object, unit);
}

/// The objects a Flux unit reads besides itself: its sources (in source-controller's
/// group), the ConfigMaps and Secrets of its substitutions and values, its kubeconfig
/// and decryption Secrets.
fn read_inputs(object: &Value, unit: &mut Unit) {
    const SOURCES: &str = "source.toolkit.fluxcd.io";
    let own = unit.namespace.clone();
    // The kubeconfig and decryption Secrets and the sources first: a long list of
    // values cannot push them past the bound.
    for (pointer, kind) in [
        ("/spec/kubeConfig/secretRef/name", "Secret"),
        ("/spec/kubeConfig/configMapRef/name", "ConfigMap"),
        ("/spec/decryption/secretRef/name", "Secret"),
    ] {
        if let Some(name) = object.at(pointer).and_then(Value::as_str) {
            push_input(unit, "", kind, &own, name);
        }
    }
    // The HelmChart helm-controller makes for a HelmRelease's `spec.chart`, named in its status.
    if let Some(chart) = object.at("/status/helmChart").and_then(Value::as_str).and_then(|c| c.split_once('/')) {
        push_input(unit, SOURCES, "HelmChart", chart.0, chart.1);
    }
    let refs = ["/spec/sourceRef", "/spec/chart/spec/sourceRef", "/spec/chartRef"];
    for r in refs.iter().filter_map(|p| object.at(p)) {
        let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let ns = if f("namespace").is_empty() { own.clone() } else { f("namespace") };
        push_input(unit, SOURCES, &f("kind"), &ns, &f("name"));
    }
    for list in ["/spec/postBuild/substituteFrom", "/spec/valuesFrom"] {
        for r in object.at(list).and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
            let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
            if matches!(f("kind").as_str(), "ConfigMap" | "Secret") {
                push_input(unit, "", &f("kind"), &own, &f("name"));
            }
        }
    }
}

/// An inventory entry's object: `<namespace>_<name>_<group>_<kind>`, a name's `:`
/// written `__` (RBAC names), the namespace and group empty when there is none. The
/// namespace (a DNS label), the group (a DNS subdomain) and the kind hold no `_`, so
/// they are taken from the ends and the name is what is between (an RBAC name may hold
/// `_`). `None` for an entry not of that form.
pub fn inventory_id(id: &str) -> Option<ResourceRef> {
    let (namespace, rest) = id.split_once('_')?;
    let (rest, kind) = rest.rsplit_once('_')?;
    let (name, group) = rest.rsplit_once('_')?;
    let name = name.replace("__", ":");
    if name.is_empty() || kind.is_empty() {
        return None;
    }
    Some(ResourceRef { group: group.to_string(), kind: kind.to_string(), namespace: namespace.to_string(), name })
}

/// The commit of a Flux revision: `main@sha1:<commit>`, `sha1:<commit>`, or the older
/// `main/<commit>`.
fn commit(revision: &str) -> Option<&str> {
    if let Some((_, c)) = revision.split_once("sha1:") {
        return Some(c);
    }
    revision.rsplit_once('/').map(|(_, c)| c).filter(|c| c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The objects a `Drifted` condition's message names, one a line after its first:
/// `Deployment/default/web changed (0 additions, 1 changes, 0 removals)`,
/// `Deployment/default/web removed` (helm-controller's summary; `excluded` and
/// `unchanged` lines are not drift).
fn drifted_objects(message: &str) -> impl Iterator<Item = Modified> + '_ {
    // Past the bound the unit's list is cut (and says so): no more lines are read.
    message
        .lines()
        .skip(1)
        .take(super::MAX_MESSAGE_CHARS)
        .filter_map(|line| {
            let (name, what) = line.trim().split_once(' ')?;
            let mut parts = name.splitn(3, '/');
            let kind = parts.next()?;
            let (namespace, name) = match (parts.next(), parts.next()) {
                (Some(ns), Some(n)) => (ns, n),
                (Some(n), None) => ("", n),
                _ => return None,
            };
            let change = match what {
                "removed" => Change::Missing,
                w if w.starts_with("changed") => Change::Modified,
                _ => return None,
            };
            let summary = what.strip_prefix("changed").map(|s| s.trim().trim_start_matches('(').trim_end_matches(')').to_string());
            Some(Modified {
                object: ResourceRef { group: String::new(), kind: kind.into(), namespace: namespace.into(), name: name.into() },
                change,
                patch: String::new(),
                summary: summary.unwrap_or_default(),
            })
        })
        .take(super::MAX_MODIFIED + 1)
}

/// The drifted object with its API group, from the inventory entry of the same kind,
/// namespace and name (helm-controller's summary names the kind only).
fn in_inventory(unit: &Unit, mut m: Modified) -> Modified {
    let o = &m.object;
    if let Some(found) = unit.managed.iter().find(|r| r.kind == o.kind && r.namespace == o.namespace && r.name == o.name) {
        m.object.group = found.group.clone();
    }
    m
}
