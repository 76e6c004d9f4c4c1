//! What every record of the production example's replay in OCSF must show, whichever
//! SIEM kind carried it (`tests/ocsf.rs`, `tests/siem_replay.rs`): OCSF 1.8.0, valid
//! against the JSON Schema of its class (`tests/data/ocsf/1.8.0`), the syncs API
//! Activities, and the `kubectl edit` that made a container privileged one Detection
//! Finding.
#![allow(dead_code)]

use serde_json::Value;

/// The JSON Schema of an OCSF 1.8.0 class (`detection_finding`, `api_activity`).
pub fn validator(class: &str) -> jsonschema::Validator {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/ocsf/1.8.0/{class}.json"));
    jsonschema::validator_for(&serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()).unwrap()
}

/// What every kind's records must show.
pub fn check(kind: &str, records: &[Value]) {
    assert!(!records.is_empty(), "{kind}: nothing received");
    let (finding, activity) = (validator("detection_finding"), validator("api_activity"));
    for r in records {
        let v = match r["class_uid"].as_u64() {
            Some(2004) => &finding,
            Some(6003) => &activity,
            other => panic!("{kind}: class {other:?}: {r:#}"),
        };
        assert_eq!(r["metadata"]["version"], "1.8.0", "{kind}: OCSF 1.8.0 by default");
        let errors: Vec<String> = v.iter_errors(r).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{kind}: {errors:#?}\n{r:#}");
    }
    let syncs = records.iter().filter(|r| r["class_uid"] == 6003 && r["api"]["operation"] == "sync").count();
    assert!(syncs >= 2, "{kind}: the syncs are API Activities: {syncs}");
    // The kubectl-edit episode: the finding that came to include security-context
    // (attribution found the privileged field after it opened), all its records.
    let uid = records
        .iter()
        .find(|r| {
            r["class_uid"] == 2004 && r["finding_info"]["types"].as_array().is_some_and(|t| t.iter().any(|c| c == "security-context"))
        })
        .map(|r| r["finding_info"]["uid"].clone())
        .unwrap_or_else(|| panic!("{kind}: no security-context finding"));
    let mut edit: Vec<&Value> = records.iter().filter(|r| r["class_uid"] == 2004 && r["finding_info"]["uid"] == uid).collect();
    // In the order they happened (a receiver may index them in another).
    edit.sort_by_key(|r| (r["time"].as_i64(), r["activity_id"].as_i64()));
    let steps: Vec<&str> = edit.iter().map(|r| r["activity_name"].as_str().unwrap()).collect();
    assert_eq!(steps.first(), Some(&"Create"), "{kind}: {steps:?}");
    assert!(steps.contains(&"Update"), "{kind}: escalated when attribution found the privileged field: {steps:?}");
    assert_eq!(steps.last(), Some(&"Close"), "{kind}: {steps:?}");
    let closed = edit.last().unwrap();
    assert_eq!((closed["status"].as_str(), closed["severity"].as_str()), (Some("Resolved"), Some("Critical")), "{kind}");
    let privileged = closed["evidences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["data"]["changes"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["path"].as_str().unwrap_or_default().ends_with("securityContext.privileged")))
        })
        .unwrap_or_else(|| panic!("{kind}: no privileged change in the evidence: {closed:#}"));
    assert_eq!(privileged["actor"]["app_name"], "kubectl-edit", "{kind}");
    let change =
        privileged["data"]["changes"].as_array().unwrap().iter().find(|c| c["path"].as_str().unwrap().ends_with("privileged")).unwrap();
    assert_eq!((change["desired"].as_str(), change["live"].as_str()), (Some("(not set)"), Some("true")), "{kind}");
}
