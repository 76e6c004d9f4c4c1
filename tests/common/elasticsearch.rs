//! A loopback Elasticsearch that implements what driftwatch uses of `_bulk` as the
//! real one does: NDJSON action/document pairs, `create` into a data stream by `_id`
//! (`201` the first time, `409 version_conflict_engine_exception` after), a `200`
//! answer with `errors` and an item per action, each with its own status. A test
//! makes some documents fail: refused for good (`400 mapper_parsing_exception`) or
//! throttled once (`429 es_rejected_execution_exception`), and can make it index a
//! request and then never answer (a sender killed meanwhile has delivered without
//! knowing it).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Condvar, Mutex};

#[derive(Default)]
struct Store {
    /// Data stream -> `_id` -> document.
    streams: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    /// Every `create` received, in order: (`_id`, status answered).
    creates: Vec<(String, u16)>,
    /// Documents whose JSON contains one of these is refused with a mapping error.
    refuse: Vec<String>,
    /// Documents whose JSON contains one of these are throttled once each.
    throttle: BTreeSet<String>,
    /// Index the next request, then hold the connection without answering.
    hold: bool,
    /// `Authorization` headers seen.
    auth: Vec<String>,
}

#[derive(Clone)]
pub struct FakeElasticsearch {
    pub port: u16,
    store: Arc<Mutex<Store>>,
    /// Notified after each request is applied.
    changed: Arc<Condvar>,
}

impl FakeElasticsearch {
    pub fn start() -> FakeElasticsearch {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let store = Arc::new(Mutex::new(Store::default()));
        let changed = Arc::new(Condvar::new());
        let (s, c) = (store.clone(), changed.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (s, c) = (s.clone(), c.clone());
                std::thread::spawn(move || serve(stream, &s, &c));
            }
        });
        FakeElasticsearch { port, store, changed }
    }

    /// Waits until at least `n` creates were received (bounded only so that a
    /// regression fails instead of hanging).
    pub fn wait_creates(&self, n: usize) {
        let s = self.store.lock().unwrap();
        let (s, timeout) = self.changed.wait_timeout_while(s, std::time::Duration::from_secs(60), |s| s.creates.len() < n).unwrap();
        assert!(!timeout.timed_out(), "only {} creates arrived: {:?}", s.creates.len(), s.creates);
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn refuse(&self, marker: &str) {
        self.store.lock().unwrap().refuse.push(marker.to_string());
    }

    pub fn throttle_once(&self, marker: &str) {
        self.store.lock().unwrap().throttle.insert(marker.to_string());
    }

    pub fn hold_next(&self) {
        self.store.lock().unwrap().hold = true;
    }

    /// The documents of a data stream, by `_id`.
    pub fn docs(&self, stream: &str) -> BTreeMap<String, serde_json::Value> {
        self.store.lock().unwrap().streams.get(stream).cloned().unwrap_or_default()
    }

    /// Every `create` received: (`_id`, status).
    pub fn creates(&self) -> Vec<(String, u16)> {
        self.store.lock().unwrap().creates.clone()
    }

    pub fn auth(&self) -> Vec<String> {
        self.store.lock().unwrap().auth.clone()
    }
}

fn serve(mut stream: std::net::TcpStream, store: &Mutex<Store>, changed: &Condvar) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    // Keep-alive: requests one after another on the connection.
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let path = first.split_whitespace().nth(1).unwrap_or_default().to_string();
        let (mut len, mut auth) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            let (k, v) = line.split_once(':').unwrap_or((&line, ""));
            match k.to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap_or(0),
                "authorization" => auth = v.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let stream_name = path.trim_start_matches('/').split('/').next().unwrap_or_default().to_string();
        let (answer, hold) = bulk(store, &stream_name, &String::from_utf8_lossy(&body), auth, path.contains("/_bulk"));
        changed.notify_all();
        if hold {
            // Indexed, never answered: the connection stays open until the sender goes.
            let _ = reader.read_line(&mut String::new());
            return;
        }
        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", answer.len());
        if stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(answer.as_bytes())).is_err() {
            return;
        }
    }
}

/// One `_bulk` request: each `create` applied in order, as Elasticsearch does.
fn bulk(store: &Mutex<Store>, stream: &str, body: &str, auth: String, is_bulk: bool) -> (String, bool) {
    let mut s = store.lock().unwrap();
    s.auth.push(auth);
    if !is_bulk {
        return (r#"{"error":"not found"}"#.into(), false);
    }
    let mut lines = body.lines().filter(|l| !l.trim().is_empty());
    let mut items = Vec::new();
    let mut errors = false;
    while let (Some(action), Some(doc)) = (lines.next(), lines.next()) {
        let action: serde_json::Value = serde_json::from_str(action).expect("action line");
        let id = action["create"]["_id"].as_str().expect("a create with an _id").to_string();
        let doc_json: serde_json::Value = serde_json::from_str(doc).expect("document line");
        let refused = s.refuse.iter().any(|m| doc.contains(m.as_str()));
        let throttled = s.throttle.iter().find(|m| doc.contains(m.as_str())).cloned();
        let exists = s.streams.get(stream).is_some_and(|d| d.contains_key(&id));
        let (status, error) = if doc_json.get("@timestamp").is_none() {
            (400, Some(("illegal_argument_exception", "data stream timestamp field [@timestamp] is missing")))
        } else if refused {
            (400, Some(("mapper_parsing_exception", "failed to parse field [event.severity] of type [long]")))
        } else if let Some(m) = throttled {
            s.throttle.remove(&m);
            (429, Some(("es_rejected_execution_exception", "rejected execution of coordinating operation")))
        } else if exists {
            (409, Some(("version_conflict_engine_exception", "[id]: version conflict, document already exists")))
        } else {
            s.streams.entry(stream.to_string()).or_default().insert(id.clone(), doc_json);
            (201, None)
        };
        s.creates.push((id.clone(), status));
        errors |= error.is_some();
        let mut item = serde_json::json!({"_index": format!(".ds-{stream}-000001"), "_id": id, "status": status});
        if let Some((t, r)) = error {
            item["error"] = serde_json::json!({"type": t, "reason": r});
        }
        items.push(serde_json::json!({"create": item}));
    }
    let hold = std::mem::take(&mut s.hold);
    (serde_json::json!({"took": 3, "errors": errors, "items": items}).to_string(), hold)
}
