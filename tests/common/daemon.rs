//! The `driftwatch` binary as a test runs it: started against a kubeconfig in a
//! directory, its operations endpoints, metrics and log; waiting on events.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::receiver::get;

/// `driftwatch run` with the kubeconfig, configuration and state file of a test
/// directory (`kubeconfig`, `driftwatch.yaml`, `state.redb`).
/// A configuration that keeps the state in PostgreSQL (`state:` / `postgres:`) gets
/// no state file.
pub fn run_args(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["run".into()];
    let on_postgres = std::fs::read_to_string(dir.join("driftwatch.yaml")).is_ok_and(|t| t.contains("state:\n  postgres:"));
    let files = [("--kubeconfig", "kubeconfig"), ("--config", "driftwatch.yaml"), ("--state", "state.redb")];
    for (flag, file) in files.into_iter().filter(|(flag, _)| !(on_postgres && *flag == "--state")) {
        args.push(flag.into());
        args.push(dir.join(file).into());
    }
    args
}

pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub struct Daemon {
    pub child: Child,
    pub admin: String,
    /// Its standard error (the log), unless DRIFTWATCH_TEST_LOGS sends it to the test's.
    pub log: std::path::PathBuf,
}

impl Daemon {
    pub fn start(dir: &Path) -> Daemon {
        Daemon::start_with(dir, &[])
    }

    pub fn start_with(dir: &Path, extra: &[&str]) -> Daemon {
        let d = Daemon::spawn(dir, extra);
        wait_for("/readyz", Duration::from_secs(30), || get(&d.admin, "/readyz").is_some_and(|(s, _)| s == 200));
        d
    }

    /// Starts the daemon without waiting for it to be ready.
    pub fn spawn(dir: &Path, extra: &[&str]) -> Daemon {
        Daemon::spawn_limited(dir, extra, None)
    }

    /// Starts the daemon, with at most `fd_limit` open file descriptors when given.
    pub fn spawn_limited(dir: &Path, extra: &[&str], fd_limit: Option<u32>) -> Daemon {
        // The tests read /history without a token: they open it explicitly, as an
        // operator would on a trusted network (a configuration that says anything about
        // `operations:` is left as it is).
        let cfg = dir.join("driftwatch.yaml");
        if let Ok(text) = std::fs::read_to_string(&cfg)
            && !text.contains("operations:")
        {
            let sep = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
            std::fs::write(&cfg, format!("{text}{sep}operations:\n  open: true\n")).unwrap();
        }
        let admin_port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let admin = format!("127.0.0.1:{admin_port}");
        let log = dir.join(format!("driftwatch-{admin_port}.log"));
        let mut cmd = match fd_limit {
            None => Command::new(env!("CARGO_BIN_EXE_driftwatch")),
            Some(n) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), env!("CARGO_BIN_EXE_driftwatch")]);
                c
            }
        };
        let child = cmd
            .args(run_args(dir))
            .args(["--listen", &admin, "--shutdown-grace", "3"])
            .args(extra)
            .env("DRIFTWATCH_LOG", std::env::var("DRIFTWATCH_TEST_LOGS").unwrap_or_else(|_| "info".into()))
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("DRIFTWATCH_TEST_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::from(std::fs::File::create(&log).unwrap())
            })
            .spawn()
            .unwrap();
        let d = Daemon { child, admin, log };
        wait_for("the operations endpoints", Duration::from_secs(30), || get(&d.admin, "/healthz").is_some());
        d
    }

    /// The log lines so far that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().filter(|l| l.contains(needle)).map(String::from).collect()
    }

    pub fn metrics(&self) -> String {
        get(&self.admin, "/metrics").map(|(_, b)| b).unwrap_or_default()
    }

    pub fn metric(&self, line_prefix: &str) -> Option<f64> {
        self.metrics().lines().find(|l| l.starts_with(line_prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill -{sig}");
    }

    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "driftwatch did not stop within 20 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn bodies(got: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    got.lock().unwrap().clone()
}

/// The bodies that are JSON (SIEM records, webhook payloads).
pub fn records(got: &Arc<Mutex<Vec<String>>>) -> Vec<serde_json::Value> {
    bodies(got).iter().filter_map(|b| serde_json::from_str(b).ok()).collect()
}

pub fn has(got: &Arc<Mutex<Vec<String>>>, needle: &str) -> bool {
    bodies(got).iter().any(|b| b.contains(needle))
}

/// Replays `examples/production` with the binary `bin` into the state file `state`: the
/// history the real pipeline records for it (a Git change; a `kubectl edit` setting
/// `privileged: true`, attributed, paged and resolved; a Degraded blip), to seed a
/// state file with.
pub fn replay_production(bin: &str, state: &Path) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/production");
    let out = Command::new(bin)
        .args(["run", "--replay"])
        .arg(&examples)
        .arg("--config")
        .arg(examples.join("driftwatch.yaml"))
        .arg("--state")
        .arg(state)
        .output()
        .unwrap();
    assert!(out.status.success(), "the replay of examples/production: {}", String::from_utf8_lossy(&out.stderr));
}
