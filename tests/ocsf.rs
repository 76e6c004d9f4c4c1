//! The production policy replayed through the binary with its SIEM in OCSF: every
//! record a loopback SIEM receives validates against the OCSF 1.7.0 JSON Schema of its
//! class (`tests/data/ocsf`), and the `kubectl edit` that made a container privileged
//! is one Detection Finding — created, updated when it escalated, closed when
//! self-heal restored Git — with the masked change and who wrote it as evidence.

mod common;

use std::net::TcpListener;
use std::process::Command;

use common::receiver::receiver;

fn validator(class: &str) -> jsonschema::Validator {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/ocsf/{class}.json"));
    jsonschema::validator_for(&serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()).unwrap()
}

#[test]
fn the_production_replay_in_ocsf_is_valid_and_the_privileged_edit_is_one_finding() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = receiver(listener);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let production = std::fs::read_to_string(root.join("examples/production/driftwatch.yaml")).unwrap();
    // The same policy; chat and paging print to stdout, the SIEM is the loopback
    // receiver in OCSF, and no audit listener (a replay has no API server to post to it).
    let (head, rest) = production.split_once("services:\n").unwrap();
    let (_, rest) = rest.split_once("\ntriggers:\n").unwrap();
    let rest = rest.split("\n# Kubernetes audit events").next().unwrap();
    let config = format!(
        "{head}services:\n  chat: {{type: console}}\n  oncall: {{type: console}}\n  siem:\n    type: signed-webhook\n    url: http://127.0.0.1:{port}/ocsf\n    secret: $siem-key\n    format: ocsf\n\ntriggers:\n{rest}\n"
    );
    let config_path = dir.path().join("driftwatch.yaml");
    std::fs::write(&config_path, config).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["run", "--replay", root.join("examples/production").to_str().unwrap(), "--config", config_path.to_str().unwrap()])
        .args(["--state", dir.path().join("state.redb").to_str().unwrap(), "--deliver=30"])
        .env_remove("DRIFTWATCH_LOG")
        .env("DRIFTWATCH_SECRET_SIEM_KEY", "hmac-key-for-the-test")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));

    let records: Vec<serde_json::Value> = got
        .lock()
        .unwrap()
        .iter()
        .flat_map(|body| serde_json::from_str::<Vec<serde_json::Value>>(body).unwrap_or_else(|e| panic!("{e}: {body}")))
        .collect();
    let (finding, activity) = (validator("detection_finding"), validator("api_activity"));
    for r in &records {
        let v = match r["class_uid"].as_u64() {
            Some(2004) => &finding,
            Some(6003) => &activity,
            other => panic!("class {other:?}: {r:#}"),
        };
        let errors: Vec<String> = v.iter_errors(r).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:#?}\n{r:#}");
    }
    let syncs = records.iter().filter(|r| r["class_uid"] == 6003 && r["api"]["operation"] == "sync").count();
    assert!(syncs >= 2, "the syncs are API Activities: {syncs}");

    // The kubectl-edit episode: the finding that came to include security-context
    // (attribution found the privileged field after it opened), all its records.
    let uid = records
        .iter()
        .find(|r| {
            r["class_uid"] == 2004 && r["finding_info"]["types"].as_array().is_some_and(|t| t.iter().any(|c| c == "security-context"))
        })
        .map(|r| r["finding_info"]["uid"].clone())
        .expect("a security-context finding");
    let edit: Vec<&serde_json::Value> = records.iter().filter(|r| r["class_uid"] == 2004 && r["finding_info"]["uid"] == uid).collect();
    let steps: Vec<&str> = edit.iter().map(|r| r["activity_name"].as_str().unwrap()).collect();
    assert_eq!(steps.first(), Some(&"Create"), "{steps:?}");
    assert!(steps.contains(&"Update"), "escalated when attribution found the privileged field: {steps:?}");
    assert_eq!(steps.last(), Some(&"Close"), "{steps:?}");
    let closed = edit.last().unwrap();
    assert_eq!((closed["status"].as_str(), closed["severity"].as_str()), (Some("Resolved"), Some("Critical")));
    let privileged = closed["evidences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["data"]["changes"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["path"].as_str().unwrap_or_default().ends_with("securityContext.privileged")))
        })
        .unwrap_or_else(|| panic!("no privileged change in the evidence: {closed:#}"));
    assert_eq!(privileged["actor"]["app_name"], "kubectl-edit");
    let change =
        privileged["data"]["changes"].as_array().unwrap().iter().find(|c| c["path"].as_str().unwrap().ends_with("privileged")).unwrap();
    assert_eq!((change["desired"].as_str(), change["live"].as_str()), (Some("(not set)"), Some("true")));
}
