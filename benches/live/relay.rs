//! A TCP relay on loopback standing for a Service in front of the daemons' audit
//! listeners: each connection goes to the first of its backends that accepts one (the
//! bench orders them), bytes are copied both ways untouched (the API server's TLS goes
//! through to the daemon), and the relay notes when each burst of bytes from the API
//! server began: a batch's POST, the moment it reached a daemon. Batches come at least
//! `--audit-webhook-batch-max-wait` apart on a feed, so a pause of [`GAP`] or more
//! between reads starts a new burst.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A pause between two reads from the API server longer than this starts a new burst.
pub const GAP: Duration = Duration::from_millis(100);

/// A burst of bytes from the API server: when it began, its size, which backend.
#[derive(Clone, Debug)]
pub struct Burst {
    pub at: Instant,
    pub bytes: usize,
    pub backend: String,
}

/// The relay: its address, the backends it connects to (first that accepts), the
/// bursts seen so far.
pub struct Relay {
    pub addr: String,
    backends: Arc<Mutex<Vec<String>>>,
    bursts: Arc<Mutex<Vec<Burst>>>,
}

impl Relay {
    pub fn start() -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let backends: Arc<Mutex<Vec<String>>> = Arc::default();
        let bursts: Arc<Mutex<Vec<Burst>>> = Arc::default();
        let (b, seen) = (backends.clone(), bursts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let order = b.lock().unwrap().clone();
                let Some((name, backend)) = order.iter().find_map(|a| TcpStream::connect(a).ok().map(|s| (a.clone(), s))) else {
                    // No backend: the API server's batch fails and is sent again.
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = backend.set_nodelay(true);
                if let (Ok(c2), Ok(b2)) = (client.try_clone(), backend.try_clone()) {
                    let seen = seen.clone();
                    std::thread::spawn(move || pipe(client, backend, Some((seen, name))));
                    std::thread::spawn(move || pipe(b2, c2, None));
                }
            }
        });
        Relay { addr, backends, bursts }
    }

    /// Where new connections go: the first of `addrs` that accepts.
    pub fn route(&self, addrs: &[String]) {
        *self.backends.lock().unwrap() = addrs.to_vec();
    }

    /// The bursts seen since `since`.
    pub fn bursts_since(&self, since: Instant) -> Vec<Burst> {
        self.bursts.lock().unwrap().iter().filter(|b| b.at >= since).cloned().collect()
    }
}

/// Copies `from` to `to` until either closes; from the API server (`seen` given), notes
/// each burst.
fn pipe(mut from: TcpStream, mut to: TcpStream, seen: Option<(Arc<Mutex<Vec<Burst>>>, String)>) {
    let mut buf = vec![0u8; 64 * 1024];
    // The last read, and this connection's burst (its index in the list).
    let mut last: Option<(Instant, usize)> = None;
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        let now = Instant::now();
        if let Some((bursts, backend)) = &seen {
            let mut bursts = bursts.lock().unwrap();
            let mine = match last {
                Some((l, i)) if now.duration_since(l) < GAP => {
                    bursts[i].bytes += n;
                    i
                }
                _ => {
                    bursts.push(Burst { at: now, bytes: n, backend: backend.clone() });
                    bursts.len() - 1
                }
            };
            last = Some((now, mine));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}
