//! Follows an audit log file as the API server writes it (`--audit-log-path`, one JSON
//! `Event` per line), on a thread of its own (blocking file reads stay off the async
//! workers). It starts at the end of the file (what was written before is history the
//! SIEM has), survives rotation (the path names a new file: the old one is read to its
//! end, then the new one from its start) and truncation, skips lines over
//! [`MAX_LINE`] and lines that are not events (counted), and waits for room in the
//! queue rather than drop (the file keeps what waits).

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Shared, Sink, event};
use crate::metrics::METRICS;

/// Longest line read; longer ones are skipped to their end.
pub const MAX_LINE: usize = 4 << 20;
/// At most this many lines are decoded before their events are queued.
const LINES_PER_BATCH: usize = 512;
/// How often the end of the file is looked at for more, or for a rotation.
const POLL: Duration = Duration::from_millis(200);

/// Starts following `path`; runs for as long as the process does.
/// The file is opened (at its end) before this returns when it exists, so whatever is
/// written after is read.
pub fn follow(path: PathBuf, shared: Arc<Shared>, sink: Sink) -> std::io::Result<()> {
    let first = open(&path, true);
    std::thread::Builder::new().name("driftwatch-audit-file".into()).spawn(move || run(&path, first, &shared, &sink))?;
    Ok(())
}

fn open(path: &Path, at_end: bool) -> Option<(BufReader<std::fs::File>, u64)> {
    let mut f = std::fs::File::open(path).ok()?;
    let ino = f.metadata().ok()?.ino();
    if at_end {
        f.seek(SeekFrom::End(0)).ok()?;
    }
    Some((BufReader::with_capacity(1 << 16, f), ino))
}

fn run(path: &Path, first: Option<(BufReader<std::fs::File>, u64)>, shared: &Shared, sink: &Sink) {
    let mut logged_missing = false;
    let mut first = first;
    let mut current = loop {
        match first.take().or_else(|| open(path, true)) {
            Some(c) => break c,
            None => {
                if !logged_missing {
                    tracing::warn!(file = %path.display(), "the audit log file cannot be opened yet; waiting for it");
                    logged_missing = true;
                }
                std::thread::sleep(POLL);
            }
        }
    };
    tracing::info!(file = %path.display(), "following the audit log file");
    let mut line = Vec::new();
    loop {
        let at_eof = read_batch(path, &mut current.0, &mut line, shared, sink);
        let Some(at_eof) = at_eof else { return };
        if at_eof {
            std::thread::sleep(POLL);
            if let Some(next) = rotated(path, &mut current) {
                // What was written to the old file before the rotation is read first.
                while let Some(false) = read_batch(path, &mut current.0, &mut line, shared, sink) {}
                tracing::info!(file = %path.display(), "the audit log file was rotated; following the new one");
                current = next;
            }
        }
    }
}

/// Reads up to [`LINES_PER_BATCH`] lines and queues their relevant events. Returns
/// whether the end of the file was reached, or `None` when the queue is gone.
fn read_batch(path: &Path, r: &mut BufReader<std::fs::File>, line: &mut Vec<u8>, shared: &Shared, sink: &Sink) -> Option<bool> {
    let mut batch = event::Batch::default();
    let mut lines = 0;
    let mut at_eof = false;
    let (ids, mask, times) = (shared.identities(), shared.mask(), shared.times());
    while lines < LINES_PER_BATCH {
        line.clear();
        match read_line(r, line) {
            Ok(Line::Eof) => {
                at_eof = true;
                break;
            }
            Ok(Line::TooLong) => METRICS.audit_events.inc("line-too-long"),
            Ok(Line::Partial) => {
                // The writer has not finished the line: read it again from its start.
                let back = i64::try_from(line.len()).unwrap_or(0);
                let _ = r.seek_relative(-back);
                at_eof = true;
                break;
            }
            Ok(Line::Whole) => {
                lines += 1;
                let index = shared.index.read().unwrap_or_else(|p| p.into_inner());
                let f = event::Filter {
                    argocd_identities: &ids,
                    index: &index,
                    now: chrono::Utc::now(),
                    mask: &mask,
                    times: Some(times),
                    cluster: "",
                };
                if event::parse_line(line, &f, &mut batch).is_err() {
                    METRICS.audit_events.inc("malformed");
                }
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "reading the audit log file failed");
                at_eof = true;
                break;
            }
        }
    }
    super::count(&batch);
    sink.send_blocking(batch.into()).then_some(at_eof)
}

enum Line {
    Whole,
    /// No newline yet at the end of the file.
    Partial,
    TooLong,
    Eof,
}

/// Reads one line into `out` (without its newline), bounded by [`MAX_LINE`].
fn read_line(r: &mut BufReader<std::fs::File>, out: &mut Vec<u8>) -> std::io::Result<Line> {
    let n = r.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', out)?;
    if n == 0 {
        return Ok(Line::Eof);
    }
    if out.last() == Some(&b'\n') {
        out.pop();
        return Ok(Line::Whole);
    }
    if out.len() > MAX_LINE {
        // Skip to the end of this line.
        let mut rest = Vec::new();
        loop {
            rest.clear();
            let n = r.by_ref().take(1 << 20).read_until(b'\n', &mut rest)?;
            if n == 0 || rest.last() == Some(&b'\n') {
                return Ok(Line::TooLong);
            }
        }
    }
    Ok(Line::Partial)
}

/// At the end of the file: the file the path now names if it is another one
/// (rotated); a file that got shorter than what was read (truncated) is read again
/// from its start.
fn rotated(path: &Path, current: &mut (BufReader<std::fs::File>, u64)) -> Option<(BufReader<std::fs::File>, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.ino() != current.1 {
        return open(path, false);
    }
    if let Ok(pos) = current.0.stream_position()
        && meta.len() < pos
    {
        tracing::info!(file = %path.display(), "the audit log file was truncated; reading it from its start");
        let _ = current.0.seek(SeekFrom::Start(0));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(user: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s-audit/eventlist-changes-1.json");
        let list: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let mut e = list["items"][6].clone();
        e["user"]["username"] = user.into();
        e["auditID"] = format!("id-{user}").into();
        // Received now: an event older than `audit.maxEventAge` is refused.
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        (e["requestReceivedTimestamp"], e["stageTimestamp"]) = (now.clone().into(), now.into());
        format!("{}\n", serde_json::to_string(&e).unwrap())
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().append(true).create(true).open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// Lines written after the start are read, a line written in two parts is one
    /// event, an oversized line is skipped, and a rotation loses neither what the old
    /// file got last nor what the new one gets first.
    #[test]
    fn follows_the_file_across_writes_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        append(&path, &line("before-start"));
        let settings = crate::config::AuditSettings::default();
        let shared = Shared::new(&settings);
        shared.index.write().unwrap().update(
            &crate::model::App::from_value(serde_json::json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": "payments-api", "namespace": "argocd", "uid": "u1"},
                "spec": {"destination": {"namespace": "payments"}},
                "status": {"resources": [{"group": "apps", "kind": "Deployment", "namespace": "payments", "name": "api"}]}}))
            .unwrap(),
            &crate::project::Scope::unrestricted(),
        );
        let (sink, mut queue) = super::super::queue(&shared);
        follow(path.clone(), shared, sink).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let mut next = || {
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), queue.recv()).await })
                .expect("an event within 10 s")
                .expect("the queue is open")
                .1
                .attempts
                .into_iter()
                .map(|a| a.actor.username)
                .collect::<Vec<_>>()
        };
        // An oversized line, then a line written in two parts: one event, bob's.
        append(&path, &format!("{{\"junk\": \"{}\"}}\n", "x".repeat(MAX_LINE + 10)));
        let bob = line("bob");
        let (a, b) = bob.split_at(100);
        append(&path, a);
        append(&path, b);
        assert_eq!(next(), ["bob"], "what was written before the start is not read; the oversized line is skipped");
        let old = dir.path().join("audit.log.1");
        std::fs::rename(&path, &old).unwrap();
        append(&old, &line("mallory"));
        append(&path, &line("carol"));
        let mut got = next();
        while got.len() < 2 {
            got.extend(next());
        }
        assert_eq!(got, ["mallory", "carol"], "the old file's last line, then the new file's first");
    }
}
