//! Argo CD's unit: an `Application` (`argoproj.io/v1alpha1`). Its sync and health are
//! Argo CD's own words; the drift of its resources is read from `status.resources` by
//! `drift`, so [`read`] leaves the engine-reported drift empty.

use serde_json::Value;

use super::ResourceRef;
use super::{Health, Sync, Unit, bounded, push_managed};
use crate::json::Pointer;

/// Argo CD stops reconciling an Application with this annotation `"true"`.
const SKIP_RECONCILE: &str = "argocd.argoproj.io/skip-reconcile";

/// An Application's revisions, operation outcome, sync and health, resources,
/// destination and project.
pub(super) fn read(object: &Value, unit: &mut Unit) {
    let text = |p: &str| object.at(p).and_then(Value::as_str).unwrap_or_default();
    unit.revision.desired = text("/status/sync/revision").to_string();
    let history = object.at("/status/history").and_then(Value::as_array);
    unit.revision.applied =
        history.and_then(|h| h.last()).and_then(|e| e.get("revision")).and_then(Value::as_str).unwrap_or_default().to_string();
    unit.revision.commit = unit.revision.desired.clone();
    unit.revision.source = object
        .at("/spec/source/repoURL")
        .or_else(|| object.at("/spec/sources/0/repoURL"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if matches!(text("/status/operationState/phase"), "Failed" | "Error") {
        unit.reconcile.failed = true;
        unit.reconcile.reason = bounded(text("/status/operationState/phase"));
        unit.reconcile.message = bounded(text("/status/operationState/message"));
    }
    unit.suspended = object.at("/metadata/annotations").and_then(|a| a.get(SKIP_RECONCILE)).and_then(Value::as_str) == Some("true");
    unit.sync = Some(match text("/status/sync/status") {
        "Synced" => Sync::Synced,
        "OutOfSync" => Sync::OutOfSync,
        _ => Sync::Unknown,
    });
    unit.health = Some(match text("/status/health/status") {
        "Healthy" => Health::Healthy,
        "Progressing" => Health::Progressing,
        "Degraded" | "Missing" => Health::Degraded,
        "Suspended" => Health::Suspended,
        _ => Health::Unknown,
    });
    for r in object.at("/status/resources").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        if !s("kind").is_empty() && !s("name").is_empty() {
            push_managed(unit, ResourceRef { group: s("group"), kind: s("kind"), namespace: s("namespace"), name: s("name") });
        }
    }
    // The cluster Argo CD runs in, by its server or its name, is the local one.
    unit.destination.cluster = match (text("/spec/destination/server"), text("/spec/destination/name")) {
        ("https://kubernetes.default.svc", _) | ("", "in-cluster") => String::new(),
        ("", name) => name.to_string(),
        (server, _) => server.to_string(),
    };
    unit.destination.namespace = text("/spec/destination/namespace").to_string();
    unit.tenancy.boundary = match text("/spec/project") {
        "" => "default".to_string(),
        p => p.to_string(),
    };
}
