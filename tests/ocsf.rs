//! The production policy replayed through the binary with its SIEM in OCSF, once per
//! SIEM kind (signed webhook, Splunk HEC, Elasticsearch, Loki, OTLP, each to a
//! loopback receiver): every record received says OCSF 1.8.0 and validates against
//! that version's JSON Schema of its class (`tests/data/ocsf/1.8.0`), and the `kubectl edit` that made a
//! container privileged is one Detection Finding — created, updated when it escalated,
//! closed when self-heal restored Git — with the masked change and who wrote it as
//! evidence.

mod common;

use std::net::TcpListener;
use std::process::Command;

use common::elasticsearch::FakeElasticsearch;
use common::ocsf::check;
use common::receiver::raw_receiver;
use serde_json::Value;

/// Replays `examples/production` with its SIEM service replaced by `siem` (YAML of the
/// service's settings, indented for `services.siem`); chat and paging print to stdout,
/// and there is no audit listener (a replay has no API server to post to it).
fn replay_production(siem: &str) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let production = std::fs::read_to_string(root.join("examples/production/driftwatch.yaml")).unwrap();
    let (head, rest) = production.split_once("services:\n").unwrap();
    let (_, rest) = rest.split_once("\ntriggers:\n").unwrap();
    let rest = rest.split("\n# Kubernetes audit events").next().unwrap();
    let config = format!(
        "{head}services:\n  chat: {{type: console}}\n  oncall: {{type: console}}\n  siem:\n{siem}    format: ocsf\n\ntriggers:\n{rest}\n"
    );
    let config_path = dir.path().join("driftwatch.yaml");
    std::fs::write(&config_path, config).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["run", "--replay", root.join("examples/production").to_str().unwrap(), "--config", config_path.to_str().unwrap()])
        .args(["--state", dir.path().join("state.redb").to_str().unwrap(), "--deliver=30"])
        .env_remove("DRIFTWATCH_LOG")
        .env("DRIFTWATCH_SECRET_SIEM_KEY", "key-for-the-test")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{siem}\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
}

/// The records an OTLP request carries: each log record's body, decoded with the
/// official definitions (Python's `opentelemetry-proto`) and turned back into JSON.
fn otlp_records(gzipped: &[u8]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("request.bin");
    std::fs::write(&path, gzipped).unwrap();
    let script = r#"import gzip, json, sys
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
def plain(v):
    kind = v.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in v.kvlist_value.values}
    if kind == "array_value":
        return [plain(x) for x in v.array_value.values]
    return None if kind is None else getattr(v, kind)
req = ExportLogsServiceRequest()
req.ParseFromString(gzip.decompress(open(sys.argv[1], "rb").read()))
out = []
for rl in req.resource_logs:
    attrs = {kv.key for kv in rl.resource.attributes}
    assert {"service.name", "k8s.cluster.name", "k8s.namespace.name"} <= attrs, attrs
    for sl in rl.scope_logs:
        out += [plain(lr.body) for lr in sl.log_records]
print(json.dumps(out))
"#;
    let out = Command::new("python3").args(["-c", script, path.to_str().unwrap()]).output().expect("python3");
    assert!(out.status.success(), "decoding with opentelemetry-proto: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_production_replay_in_ocsf_is_valid_for_every_siem_kind_and_the_privileged_edit_is_one_finding() {
    // HTTP kinds on a loopback receiver that takes everything.
    for kind in ["signed-webhook", "splunk", "loki", "otlp"] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let got = raw_receiver(listener);
        let settings = match kind {
            "signed-webhook" => format!("    type: signed-webhook\n    url: {url}/ocsf\n    secret: $siem-key\n"),
            "splunk" => format!("    type: splunk\n    url: {url}\n    token: $siem-key\n"),
            "loki" => format!("    type: loki\n    url: {url}\n"),
            _ => format!("    type: otlp\n    url: {url}\n"),
        };
        replay_production(&settings);
        let requests = got.lock().unwrap().clone();
        let records: Vec<Value> = requests
            .iter()
            .flat_map(|(_, body)| -> Vec<Value> {
                let text = || String::from_utf8_lossy(body).into_owned();
                match kind {
                    "signed-webhook" => serde_json::from_str(&text()).unwrap(),
                    "splunk" => text().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone()).collect(),
                    "loki" => {
                        let push: Value = serde_json::from_str(&text()).unwrap();
                        push["streams"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .flat_map(|s| {
                                s["values"].as_array().unwrap().iter().map(|v| serde_json::from_str(v[1].as_str().unwrap()).unwrap())
                            })
                            .collect()
                    }
                    _ => otlp_records(body),
                }
            })
            .collect();
        check(kind, &records);
    }
    // Elasticsearch: what the data stream holds, each document once, less the
    // `@timestamp` a data stream requires.
    let es = FakeElasticsearch::start();
    replay_production(&format!("    type: elasticsearch\n    url: {}\n", es.url()));
    let records: Vec<Value> = es
        .docs("logs-driftwatch-default")
        .into_values()
        .map(|mut d| {
            d.as_object_mut().unwrap().remove("@timestamp");
            d
        })
        .collect();
    check("elasticsearch", &records);
}
