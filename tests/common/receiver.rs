//! A minimal real HTTP/1.1 receiver on loopback: records each request body, answers 200.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

pub fn receiver(listener: TcpListener) -> Arc<Mutex<Vec<String>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Some(body) = read_body(&stream) {
                g.lock().unwrap().push(body);
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    got
}

/// [`receiver`] keeping each body's bytes as sent (protobuf, gzip), with its path,
/// answering 200 with an empty body.
/// Each request's path and body bytes, in order.
pub type RawRequests = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

pub fn raw_receiver(listener: TcpListener) -> RawRequests {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Some(r) = read_full(&stream) {
                g.lock().unwrap().push((r.path, r.raw));
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    got
}

/// A plain GET on loopback: (status, body).
pub fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    get_as(addr, path, None)
}

/// [`get`] with a bearer token (the operations token of `/history` and `/ui`).
pub fn get_as(addr: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).ok()?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n").ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

/// How a [`Scripted`] receiver answers right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 200 at once.
    Up,
    /// Not listening at all: connections are refused.
    Refuse,
    /// This status at once (500, 503, ...).
    Status(u16),
    /// 429 with `Retry-After: <seconds>`.
    TooMany(u64),
    /// 200 after this many milliseconds (a slow receiver; the body is recorded on
    /// arrival, so a sender killed meanwhile has delivered without knowing it).
    Slow(u64),
}

/// A loopback HTTP receiver whose behaviour a test switches while it runs; records
/// every request body with the mode that answered it.
pub struct Scripted {
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    got: Arc<Mutex<Vec<(Mode, String)>>>,
    /// Each request's `Idempotency-Key` header, in the order of `got`.
    keys: Arc<Mutex<Vec<Option<String>>>>,
}

impl Scripted {
    pub fn start(mode: Mode) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let s = Scripted { port, mode: Arc::new(Mutex::new(mode)), got: Arc::default(), keys: Arc::default() };
        let (mode, got, keys) = (s.mode.clone(), s.got.clone(), s.keys.clone());
        std::thread::spawn(move || {
            let mut listener = Some(listener);
            loop {
                let now = *mode.lock().unwrap();
                if now == Mode::Refuse {
                    listener = None;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                }
                let l = match &listener {
                    Some(l) => l,
                    None => match TcpListener::bind(("127.0.0.1", port)) {
                        Ok(l) => listener.insert(l),
                        Err(_) => {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                            continue;
                        }
                    },
                };
                l.set_nonblocking(true).expect("nonblocking");
                match l.accept() {
                    Ok((stream, _)) => {
                        let (mode, got, keys) = (mode.clone(), got.clone(), keys.clone());
                        std::thread::spawn(move || serve(stream, &mode, &got, &keys));
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(2)),
                }
            }
        });
        s
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Every request so far, with the mode that answered it.
    pub fn requests(&self) -> Vec<(Mode, String)> {
        self.got.lock().unwrap().clone()
    }

    /// The bodies that were answered with success.
    pub fn delivered(&self) -> Vec<String> {
        self.requests().into_iter().filter(|(m, _)| matches!(m, Mode::Up | Mode::Slow(_))).map(|(_, b)| b).collect()
    }

    /// Every request's `Idempotency-Key` (if it had one) with its body.
    pub fn keyed(&self) -> Vec<(Option<String>, String)> {
        let (got, keys) = (self.got.lock().unwrap(), self.keys.lock().unwrap());
        keys.iter().cloned().zip(got.iter().map(|(_, b)| b.clone())).collect()
    }

    /// How many requests were answered in `mode`.
    pub fn count(&self, mode: Mode) -> usize {
        self.got.lock().unwrap().iter().filter(|(m, _)| *m == mode).count()
    }
}

/// The body of one HTTP/1.1 request (by its `content-length`), or `None` if it broke off
/// (a sender killed mid-request must not count as an empty request).
fn read_body(stream: &std::net::TcpStream) -> Option<String> {
    read_request(stream).map(|(body, _)| body)
}

/// The body of one request and its `Idempotency-Key` header.
fn read_request(stream: &std::net::TcpStream) -> Option<(String, Option<String>)> {
    read_full(stream).map(|r| (r.body, r.key))
}

/// One HTTP/1.1 request as a receiver sees it.
struct Request {
    path: String,
    body: String,
    raw: Vec<u8>,
    key: Option<String>,
}

/// One request (its body by `content-length`), or `None` if it broke off.
fn read_full(stream: &std::net::TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return None;
    }
    let path = first.split_whitespace().nth(1).unwrap_or_default().to_string();
    let mut len = 0usize;
    let mut key = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        if let Some(v) = lower.strip_prefix("idempotency-key:") {
            key = Some(v.trim().to_string());
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request { path, body: String::from_utf8_lossy(&body).to_string(), raw: body, key })
}

fn serve(mut stream: std::net::TcpStream, mode: &Mutex<Mode>, got: &Mutex<Vec<(Mode, String)>>, keys: &Mutex<Vec<Option<String>>>) {
    let _ = stream.set_nonblocking(false);
    let Some((body, key)) = read_request(&stream) else { return };
    let m = *mode.lock().unwrap();
    // One lock order (got, then keys) keeps the two lists aligned.
    let mut got = got.lock().unwrap();
    got.push((m, body));
    keys.lock().unwrap().push(key);
    drop(got);
    let head = match m {
        Mode::Up | Mode::Refuse => "HTTP/1.1 202 Accepted\r\n".to_string(),
        Mode::Slow(ms) => {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            "HTTP/1.1 202 Accepted\r\n".to_string()
        }
        Mode::Status(code) => format!("HTTP/1.1 {code} Failing\r\n"),
        Mode::TooMany(secs) => format!("HTTP/1.1 429 Too Many Requests\r\nretry-after: {secs}\r\n"),
    };
    let _ = stream.write_all(format!("{head}content-length: 2\r\nconnection: close\r\n\r\nok").as_bytes());
}

/// A loopback stand-in for Slack's Web API: answers every method with `ok` (one
/// channel, and a message id per post) and records each call's method and JSON body.
pub struct SlackApi {
    pub port: u16,
    calls: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
}

impl SlackApi {
    pub fn start() -> SlackApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let calls: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
        let c = calls.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some((path, body)) = read_call(&stream) else { continue };
                let method = path.trim_start_matches('/').to_string();
                let mut calls = c.lock().unwrap();
                let posts = calls.iter().filter(|(m, _)| m == "chat.postMessage").count();
                let ts = match method.as_str() {
                    "chat.postMessage" => format!("1700000000.{:06}", posts + 1),
                    _ => body.get("ts").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
                };
                calls.push((method, body));
                drop(calls);
                let answer = serde_json::json!({"ok": true, "channel": "C1", "ts": ts}).to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        SlackApi { port, calls }
    }

    /// Every call so far: (method, body).
    pub fn calls(&self) -> Vec<(String, serde_json::Value)> {
        self.calls.lock().unwrap().clone()
    }

    /// The text of every message sent (posted or edited), in order.
    pub fn texts(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|(m, _)| m.starts_with("chat."))
            .map(|(_, b)| b["text"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The bodies of the calls of `method`.
    pub fn of(&self, method: &str) -> Vec<serde_json::Value> {
        self.calls().into_iter().filter(|(m, _)| m == method).map(|(_, b)| b).collect()
    }
}

/// One request's path and JSON body.
fn read_call(stream: &std::net::TcpStream) -> Option<(String, serde_json::Value)> {
    let r = read_full(stream)?;
    Some((r.path, serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null)))
}
