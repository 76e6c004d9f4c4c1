//! Security Lake against a real S3 protocol server on loopback (moto's server mode,
//! `tests/support/s3_server.py`), the objects read back with pyarrow
//! (`tests/support/lake_read.py`): the production example replayed with its SIEM a
//! Security Lake custom source writes Parquet files of one OCSF class each, under
//! `ext/<source>/<version>/region=…/accountId=…/eventDay=YYYYMMDD/`, every row valid
//! for OCSF 1.8.0; and the binary killed with SIGKILL three times while a file is
//! being written still leaves every record in the bucket exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

const BUCKET: &str = "aws-security-data-lake-eu-west-1-test";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// moto's S3 on a port it picked; stopped when dropped (its standard input closes).
struct Moto {
    child: Child,
    url: String,
}

impl Moto {
    fn start() -> Moto {
        let mut child = Command::new("python3")
            .arg(root().join("tests/support/s3_server.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 with moto (scripts/test.sh installs it)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("moto's port: {line:?}"));
        let url = format!("http://127.0.0.1:{port}");
        // The bucket, as Security Lake would have made it (moto asks for no signature).
        let answer =
            raw(port, &format!("PUT /{BUCKET} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
        assert!(answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"), "{answer}");
        Moto { child, url }
    }

    /// Every object of the bucket: key -> rows (pyarrow's reading, nulls left out).
    fn objects(&self) -> BTreeMap<String, Vec<Value>> {
        let o = Command::new("python3").arg(root().join("tests/support/lake_read.py")).args([&self.url, BUCKET]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect();
        let (end, objects) = lines.split_last().expect("lake_read.py's output");
        assert_eq!(end["end"].as_u64(), Some(objects.len() as u64), "every object read");
        objects.iter().map(|v| (v["key"].as_str().unwrap().to_string(), v["rows"].as_array().unwrap().clone())).collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn raw(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The production example's configuration with its SIEM a Security Lake custom source
/// at `endpoint` (chat and paging to the console), with `extra` settings (YAML lines
/// of the service), written into `dir`.
fn config(dir: &Path, endpoint: &str, extra: &str) -> PathBuf {
    let production = std::fs::read_to_string(root().join("examples/production/driftwatch.yaml")).unwrap();
    let (head, rest) = production.split_once("services:\n").unwrap();
    let (_, rest) = rest.split_once("\ntriggers:\n").unwrap();
    let rest = rest.split("\n# Kubernetes audit events").next().unwrap();
    let lake = format!(
        "  siem:\n    type: securitylake\n    bucket: {BUCKET}\n    region: eu-west-1\n    accountId: \"123456789012\"\n    \
         sourceName: driftwatch\n    endpoint: {endpoint}\n    pathStyle: true\n    accessKeyId: $lake-key-id\n    \
         secretAccessKey: $lake-secret\n    format: ocsf\n    retry: {{maxAttempts: 1000, deadline: 1h}}\n{extra}"
    );
    let config = format!("{head}services:\n  chat: {{type: console}}\n  oncall: {{type: console}}\n{lake}\ntriggers:\n{rest}\n");
    let path = dir.join("driftwatch.yaml");
    std::fs::write(&path, config).unwrap();
    path
}

/// `driftwatch run --replay <what> --deliver` on the state in `dir`.
fn replay(dir: &Path, what: &Path, config: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_driftwatch"));
    c.args(["run", "--replay", what.to_str().unwrap(), "--config", config.to_str().unwrap()])
        .args(["--state", dir.join("state.redb").to_str().unwrap(), "--deliver=120"])
        .env_remove("DRIFTWATCH_LOG")
        .env("DRIFTWATCH_SECRET_LAKE_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
        .env("DRIFTWATCH_SECRET_LAKE_SECRET", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    c
}

/// Checks what Security Lake asks of each object: under the source's partition, one
/// OCSF class (the one its name says), the day its rows happened, every row valid for
/// OCSF 1.8.0. Returns every row's `metadata.uid`.
fn check_objects(objects: &BTreeMap<String, Vec<Value>>) -> Vec<String> {
    let schema = |class: &str| {
        let text = std::fs::read_to_string(root().join(format!("tests/data/ocsf/1.8.0/{class}.json"))).unwrap();
        jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
    };
    let validators: BTreeMap<i64, jsonschema::Validator> = [(2004, schema("detection_finding")), (6003, schema("api_activity"))].into();
    let layout =
        regex::Regex::new(r"^ext/driftwatch/1\.0/region=eu-west-1/accountId=123456789012/eventDay=(\d{8})/(\d+)-[0-9a-f]{32}\.parquet$")
            .unwrap();
    let mut uids = Vec::new();
    for (key, rows) in objects {
        let m = layout.captures(key).unwrap_or_else(|| panic!("not the custom source's layout: {key}"));
        let class: i64 = m[2].parse().unwrap();
        assert!(!rows.is_empty(), "{key}");
        for row in rows {
            assert_eq!(row["class_uid"].as_i64(), Some(class), "one OCSF class per object: {key}");
            assert_eq!(row["metadata"]["version"], "1.8.0");
            let day = chrono::DateTime::from_timestamp_millis(row["time"].as_i64().unwrap()).unwrap().format("%Y%m%d").to_string();
            assert_eq!(day, m[1], "{key}: the row's own day");
            let v = validators.get(&class).unwrap_or_else(|| panic!("an unexpected class {class}"));
            let errors: Vec<String> = v.iter_errors(row).map(|e| format!("{} at {}", e, e.instance_path())).collect();
            assert!(errors.is_empty(), "{key}: {errors:?}\n{row}");
            uids.push(row["metadata"]["uid"].as_str().unwrap().to_string());
        }
    }
    uids
}

/// The production example through moto, read back with pyarrow: Parquet files of one
/// OCSF class each, partitioned as Security Lake requires, every row schema-valid;
/// written with the credentials of a role assumed through moto's STS (the custom
/// source's provider role, with its external id).
#[test]
fn the_production_example_lands_in_security_lake_as_parquet() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let role = format!(
        "    roleArn: arn:aws:iam::123456789012:role/AmazonSecurityLake-Provider-driftwatch-eu-west-1\n    \
         externalId: lake-external-id\n    stsEndpoint: {}/\n",
        moto.url
    );
    let config = config(dir.path(), &moto.url, &role);
    let o = replay(dir.path(), &root().join("examples/production"), &config).output().unwrap();
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let objects = moto.objects();
    let uids = check_objects(&objects);
    let classes: BTreeSet<&str> = objects.keys().filter_map(|k| k.rsplit('/').next()?.split('-').next()).collect();
    assert!(classes.contains("2004"), "the drift episode's Detection Findings: {objects:?}");
    assert!(uids.len() >= 3, "{uids:?}");
    assert_eq!(uids.iter().collect::<BTreeSet<_>>().len(), uids.len(), "each record once");
}

/// What the stand-in in front of moto does with the next `PUT`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hold {
    /// Passes everything on.
    Nothing,
    /// Lets `skip` PUTs through, then holds the next one unanswered, not sent on.
    Before { skip: usize },
    /// Sends the next PUT on (moto stores the object) and holds moto's answer.
    After,
}

/// A TCP stand-in in front of moto that holds a PUT as told ([`Hold`]) and says so on
/// its channel (the held request's path): the daemon is then killed with the request
/// in flight. One request per connection.
struct Gate {
    url: String,
    hold: Arc<Mutex<Hold>>,
    held: mpsc::Receiver<String>,
}

impl Gate {
    fn start(upstream: &str) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_string();
        let hold = Arc::new(Mutex::new(Hold::Nothing));
        let (tx, held) = mpsc::channel();
        let h = hold.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (h, tx, upstream) = (h.clone(), tx.clone(), upstream.clone());
                std::thread::spawn(move || serve(client, &upstream, &h, &tx));
            }
        });
        Gate { url, hold, held }
    }

    fn set(&self, hold: Hold) {
        *self.hold.lock().unwrap() = hold;
    }
}

/// One request of `client`: read whole, then passed on or held as the gate says.
fn serve(mut client: TcpStream, upstream: &str, hold: &Mutex<Hold>, held: &mpsc::Sender<String>) {
    let Some(request) = read_message(&mut client) else { return };
    let head = String::from_utf8_lossy(&request[..request.len().min(512)]).to_string();
    let path = head.split_whitespace().nth(1).unwrap_or_default().to_string();
    let action = {
        let mut h = hold.lock().unwrap();
        match (*h, head.starts_with("PUT ")) {
            (Hold::Before { skip: 0 }, true) => {
                *h = Hold::Nothing;
                Hold::Before { skip: 0 }
            }
            (Hold::Before { skip }, true) => {
                *h = Hold::Before { skip: skip - 1 };
                Hold::Nothing
            }
            (Hold::After, true) => {
                *h = Hold::Nothing;
                Hold::After
            }
            _ => Hold::Nothing,
        }
    };
    if action == (Hold::Before { skip: 0 }) {
        let _ = held.send(path);
        // Until the daemon dies: its end of the connection closes.
        let _ = client.read_to_end(&mut Vec::new());
        return;
    }
    let mut up = TcpStream::connect(upstream).unwrap();
    up.write_all(&with_close(&request)).unwrap();
    let Some(answer) = read_message(&mut up) else { return };
    if action == Hold::After {
        let _ = held.send(path);
        let _ = client.read_to_end(&mut Vec::new());
        return;
    }
    let _ = client.write_all(&with_close(&answer));
}

/// A message with `Connection: close` (one request per connection each way).
fn with_close(message: &[u8]) -> Vec<u8> {
    let end = message.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
    [&message[..end + 2], b"Connection: close\r\n", &message[end + 2..]].concat()
}

/// An HTTP/1.1 message read whole: its head, and a body of its `Content-Length` (or
/// to the end of the stream without one).
fn read_message(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length = head.lines().find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)));
    match length {
        Some(len) => {
            while buf.len() < head_end + len {
                let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        None if head.starts_with("http/") => {
            let _ = s.read_to_end(&mut buf);
        }
        None => {}
    }
    Some(buf)
}

/// Starts `cmd`, waits for the gate to hold a PUT, kills the process with SIGKILL
/// while it waits for the answer, and returns the held request's path.
fn kill_when_held(mut cmd: Command, gate: &Gate) -> String {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let path = gate.held.recv_timeout(Duration::from_secs(120)).expect("a PUT reached the gate");
    child.kill().unwrap();
    child.wait().unwrap();
    path
}

/// Pending notifications in the state file of `dir` (the daemon is not running).
fn pending(dir: &Path) -> usize {
    let o = Command::new(env!("CARGO_BIN_EXE_driftwatch"))
        .args(["deliveries", "--state", dir.join("state.redb").to_str().unwrap(), "--output", "json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
    v["pending"].as_array().unwrap().len()
}

/// SIGKILL three times while a file is being written — with its first object's PUT
/// held unanswered, after moto stored an object but before the answer, and with the
/// file's first object written again and its second held — then run to the end on
/// the same state: every record is in the bucket exactly once, the object written
/// before the second kill under the same key as when it was written again.
#[test]
fn three_sigkills_while_files_are_written_leave_every_record_once() {
    let moto = Moto::start();
    let gate = Gate::start(&moto.url);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &gate.url, "");
    let last = root().join("examples/production/11-healthy.yaml");

    gate.set(Hold::Before { skip: 0 });
    kill_when_held(replay(dir.path(), &root().join("examples/production"), &config), &gate);
    let queued = pending(dir.path());
    assert!(queued >= 3, "the replay's records wait in the outbox: {queued}");
    assert!(moto.objects().is_empty(), "nothing written yet");

    gate.set(Hold::After);
    let stored = kill_when_held(replay(dir.path(), &last, &config), &gate);
    let before = moto.objects();
    assert_eq!(before.len(), 1, "moto stored the held PUT's object: {:?}", before.keys());
    assert!(pending(dir.path()) >= queued, "nothing settled: the answer never came");

    gate.set(Hold::Before { skip: 1 });
    let second = kill_when_held(replay(dir.path(), &last, &config), &gate);
    assert_ne!(second, stored, "the file's first object went through again, its second was held");
    assert_eq!(moto.objects().keys().collect::<Vec<_>>(), before.keys().collect::<Vec<_>>(), "written again under the same key");

    gate.set(Hold::Nothing);
    let o = replay(dir.path(), &last, &config).output().unwrap();
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(pending(dir.path()), 0);
    let objects = moto.objects();
    let uids = check_objects(&objects);
    let unique: BTreeSet<&String> = uids.iter().collect();
    assert_eq!(unique.len(), uids.len(), "a record in the bucket twice: {uids:?}");
    assert!(uids.len() >= queued, "every record queued before the first kill is in the bucket: {} of {queued}", uids.len());
    let first_key = before.keys().next().unwrap();
    assert_eq!(objects[first_key], before[first_key], "the object written before the second kill, unchanged");
}
