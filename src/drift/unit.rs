//! What drifted in a Flux or Fleet unit: what its engine itself reported
//! (`unit::EngineDrift`: a HelmRelease's `Drifted` condition, a Fleet
//! BundleDeployment's `modifiedStatus`), classified as an Argo CD Application's
//! OutOfSync resources are. A Kustomization reports none: kustomize-controller puts a
//! changed object back silently, and only the audit input sees who changed it
//! ([`Drift::with_attempts`]).
//!
//! A Fleet patch is the change Fleet would make to put the object back: the fields it
//! sets are the drifted fields, their values what Git wants (masked as any value shown).

use serde_json::Value;

use super::audit::set_fields;
use super::classes::{ClassMap, SECURITY_CLASSES};
use super::diff::FieldChange;
use super::mask::Masker;
use super::{Direction, Drift, DriftResource, is_security_field, severity};
use crate::unit::{Change, Health, Modified, Sync, Unit};

/// Where the desired values of a Fleet-reported resource come from.
pub const FLEET_PATCH: &str = "fleet-patch";

impl Drift {
    /// What drifted in a Flux or Fleet `unit` by its engine's own report, on `cluster`
    /// (the key of the unit's destination); credentials in recorded patches masked by
    /// `mask`.
    pub fn of_unit(unit: &Unit, classes: &ClassMap, cluster: &str, mask: &Masker) -> Drift {
        let mut resources: Vec<DriftResource> = unit.drift.modified.iter().map(|m| resource(m, classes, cluster, mask)).collect();
        if unit.drift.incomplete
            && let Some(last) = resources.last_mut()
        {
            last.diff_note = join_note(&last.diff_note, "the engine's list was cut: more resources are modified than listed");
        }
        let mut classes_seen: Vec<String> = resources.iter().map(|r| r.class.clone()).collect();
        classes_seen.sort();
        classes_seen.dedup();
        let out_of_sync = unit.sync == Some(Sync::OutOfSync);
        let (revision, deployed) = (unit.revision.desired.clone(), unit.revision.applied.clone());
        let direction = match (out_of_sync, unit.drift.drifted) {
            (false, _) => Direction::None,
            (true, true) if deployed.is_empty() || revision.is_empty() || revision == deployed => Direction::Live,
            (true, true) => Direction::Git,
            (true, false) if revision.is_empty() => Direction::Unknown,
            (true, false) => Direction::Git,
        };
        let changed_security = resources.iter().any(|r| r.changes.iter().any(|c| c.security));
        let security =
            changed_security || (direction != Direction::Git && classes_seen.iter().any(|c| SECURITY_CLASSES.contains(&c.as_str())));
        let degraded = unit.health == Some(Health::Degraded);
        Drift {
            classes: classes_seen,
            count: resources.len(),
            resources,
            direction,
            revision,
            deployed_revision: deployed,
            attribution: Vec::new(),
            security,
            severity: severity(security, direction, degraded),
            degraded,
            attempts: Vec::new(),
            operation: None,
            break_glass: None,
            awaiting_live: false,
        }
    }
}

/// One engine-reported object as a drifted resource: its class, and what the recorded
/// patch sets (a security field makes it `security-context`, as a live read would).
fn resource(m: &Modified, classes: &ClassMap, cluster: &str, mask: &Masker) -> DriftResource {
    let o = &m.object;
    let kind_class = classes.class_of(&o.group, &o.kind).to_string();
    let (changes, more, patch_note) = patch_changes(&m.patch, &kind_class, mask);
    let mut class = kind_class.clone();
    if changes.iter().any(|c| c.security) && !matches!(kind_class.as_str(), "rbac" | "network-policy" | "admission") {
        class = "security-context".into();
    }
    let what = match m.change {
        Change::Modified => "",
        Change::Missing => "missing from the cluster",
        Change::NotOwned => "there, but not owned by this unit",
        Change::Extra => "no longer wanted, still in the cluster",
    };
    let summary = if m.summary.is_empty() { String::new() } else { format!("changed: {}", m.summary) };
    DriftResource {
        object: o.clone(),
        version: String::new(),
        class,
        kind_class,
        attribution: None,
        desired_source: if changes.is_empty() { String::new() } else { FLEET_PATCH.to_string() },
        changes,
        changes_more: more,
        diff_note: [what, summary.as_str(), patch_note.as_str()].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join("; "),
        cluster: if cluster.starts_with('?') { String::new() } else { cluster.to_string() },
        ui_path: String::new(),
    }
}

/// At most this many fields of one recorded patch are shown (the rest counted).
const MAX_PATCH_FIELDS: usize = 32;

/// The fields a recorded patch sets, as changes (the desired value the patch writes,
/// masked; the live value not known), security fields first; with how many were left
/// out and a note when the patch could not be read whole.
fn patch_changes(patch: &str, kind_class: &str, mask: &Masker) -> (Vec<FieldChange>, usize, String) {
    if patch.trim().is_empty() || patch.trim() == "{}" {
        return (Vec::new(), 0, String::new());
    }
    let Ok(body) = serde_json::from_str::<Value>(patch) else {
        // Cut at `unit::MAX_PATCH_CHARS`, or not JSON: what it sets is not known, so it
        // is taken as a security change (fail closed).
        return (
            vec![FieldChange {
                path: "(recorded patch: not all read)".into(),
                desired: "(not known)".into(),
                live: "(changed)".into(),
                security: true,
                ..FieldChange::default()
            }],
            0,
            "the recorded patch could not be read whole".into(),
        );
    };
    let (mut fields, truncated) = set_fields(&body, mask);
    if kind_class == "secret" {
        // A Secret's values are never shown, whatever their name or shape.
        fields.iter_mut().for_each(|f| f.value = super::mask::MASKED.to_string());
    }
    let mut changes: Vec<FieldChange> = fields
        .into_iter()
        .map(|f| FieldChange {
            security: is_security_field(kind_class, &f.path) || f.path == super::audit::NOT_ALL_READ,
            path: f.path,
            desired: f.value,
            live: "(changed)".into(),
            ..FieldChange::default()
        })
        .collect();
    changes.sort_by_key(|c| !c.security);
    let more = changes.len().saturating_sub(MAX_PATCH_FIELDS);
    changes.truncate(MAX_PATCH_FIELDS);
    (changes, more, if truncated { "more fields than shown".into() } else { String::new() })
}

fn join_note(a: &str, b: &str) -> String {
    if a.is_empty() { b.to_string() } else { format!("{a}; {b}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fleet(modified: Value) -> Unit {
        Unit::read(&json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "apps-web", "namespace": "cluster-fleet-local-local-1a3d67d0a899"},
            "spec": {"deploymentID": "s-1:abc"},
            "status": {"appliedDeploymentID": "s-1:abc", "ready": true, "nonModified": false,
                "display": {"state": "Modified"}, "modifiedStatus": modified}
        }))
        .unwrap()
    }

    #[test]
    fn a_fleet_patch_shows_what_git_wants_and_a_security_field_makes_it_critical() {
        let unit = fleet(json!([{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "web", "name": "web",
            "patch": "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"web\",\"securityContext\":{\"privileged\":false}}]}}}}"}]));
        let d = Drift::of_unit(&unit, &ClassMap::default(), "", &Masker::default());
        assert_eq!((d.direction, d.count, d.security), (Direction::Live, 1, true));
        assert_eq!(d.severity, Some(crate::model::Severity::Critical));
        let r = &d.resources[0];
        assert_eq!((r.class.as_str(), r.desired_source.as_str()), ("security-context", FLEET_PATCH));
        let c = &r.changes[0];
        assert_eq!(
            (c.path.as_str(), c.desired.as_str(), c.security),
            ("spec.template.spec.containers[web].securityContext.privileged", "false", true)
        );
    }

    #[test]
    fn a_credential_in_a_patch_is_masked_and_a_cut_patch_fails_closed() {
        let unit = fleet(json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "web", "name": "cfg",
             "patch": "{\"data\":{\"password\":\"hunter2-very-secret\",\"mode\":\"fast\"}}"},
            {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "web", "name": "cut", "patch": "{\"data\":{\"a\":"},
            {"apiVersion": "v1", "kind": "Service", "namespace": "web", "name": "gone", "missing": true}
        ]));
        let d = Drift::of_unit(&unit, &ClassMap::default(), "", &Masker::default());
        let text = serde_json::to_string(&d.view()).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(d.resources[0].changes.iter().any(|c| c.path == "data.mode" && c.desired == "fast"));
        assert!(d.resources[1].changes[0].security, "a patch not read whole is taken as a security change");
        assert!(d.security);
        assert_eq!(d.resources[2].diff_note, "missing from the cluster");
    }

    #[test]
    fn fleets_ten_entry_cut_is_said() {
        let ten: Vec<Value> =
            (0..10).map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "web", "name": format!("c{i}")})).collect();
        let mut object = json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "b", "namespace": "n"},
            "spec": {"deploymentID": "x"},
            "status": {"appliedDeploymentID": "x", "ready": true, "display": {"state": "Modified"},
                "modifiedStatus": ten, "incompleteState": true}
        });
        let d = Drift::of_unit(&Unit::read(&object).unwrap(), &ClassMap::default(), "", &Masker::default());
        assert_eq!(d.count, 10);
        assert!(d.resources[9].diff_note.contains("more resources are modified than listed"), "{:?}", d.resources[9]);
        object["status"]["incompleteState"] = json!(false);
        let d = Drift::of_unit(&Unit::read(&object).unwrap(), &ClassMap::default(), "", &Masker::default());
        assert!(d.resources[9].diff_note.is_empty());
        assert_eq!((d.security, d.severity), (false, Some(crate::model::Severity::Warning)));
    }

    #[test]
    fn a_ready_unit_has_no_drift_and_a_failed_one_is_degraded_not_drifted() {
        let k = |ready: &str| {
            Unit::read(&json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": "apps", "namespace": "flux-system", "generation": 1},
                "status": {"observedGeneration": 1, "lastAppliedRevision": "main@sha1:a", "lastAttemptedRevision": "main@sha1:a",
                    "conditions": [{"type": "Ready", "status": ready, "reason": "BuildFailed", "message": "kustomize build failed",
                        "lastTransitionTime": "2026-12-07T10:00:00Z"}]}
            }))
            .unwrap()
        };
        let ok = Drift::of_unit(&k("True"), &ClassMap::default(), "", &Masker::default());
        assert_eq!((ok.direction, ok.count, ok.severity), (Direction::None, 0, None));
        let failed = Drift::of_unit(&k("False"), &ClassMap::default(), "", &Masker::default());
        assert_eq!((failed.direction, failed.degraded, failed.severity), (Direction::None, true, Some(crate::model::Severity::Warning)));
    }

    /// Review M1: a Secret's values in a recorded patch are never shown, whatever their
    /// name or shape (base64 of `admin:hunter2`).
    #[test]
    fn a_secrets_patch_shows_no_value() {
        let unit = fleet(json!([{"apiVersion": "v1", "kind": "Secret", "namespace": "web", "name": "creds",
            "patch": "{\"data\":{\"config\":\"YWRtaW46aHVudGVyMg==\"},\"stringData\":{\"settings\":\"admin hunter2\"}}"}]));
        let d = Drift::of_unit(&unit, &ClassMap::default(), "", &Masker::default());
        let text = serde_json::to_string(&d.view()).unwrap();
        assert!(!text.contains("YWRtaW46aHVudGVyMg") && !text.contains("hunter2"), "{text}");
        assert_eq!(d.resources[0].changes.len(), 2);
    }
}
