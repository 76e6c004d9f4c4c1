//! The audit input with replicas and shards: whichever replica the API server's batch
//! reaches (the leader of a shard, of another shard, or a standby) keeps the events
//! that could concern a unit — every mutating, completed, in-time, non-dry-run request
//! naming an object: which unit an event is about is only known to the shard that holds
//! the unit ([`event::admitted`]) — writes them to the audit inbox in PostgreSQL and
//! answers 200 only once they are there ([`Relay`]). Each shard's leader reads the inbox
//! after its place, judges each event against its own index as a single replica does
//! ([`read`]), and records its place once the passes are durable; a batch that arrived
//! while a shard had no leader waits for the next one.

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

use super::{Relevant, Shared, event};
use crate::state::{AuditInbox, InboxBatch, StateError};

/// What one inbox row holds at most (a batch over it is written in several rows; an
/// event over it, up to `audit.maxBodyBytes`, alone in one): what a replica holds of
/// a batch, and what a shard's leader reads at once.
pub const MAX_ROW_BYTES: usize = 4 << 20;

/// The events a receiving replica keeps of one batch, as a JSON array.
#[derive(Debug, Default)]
pub struct Kept {
    json: Vec<u8>,
    pub events: usize,
}

impl Kept {
    /// Keeps one event's JSON (as the listener cut it out of the list).
    pub fn add(&mut self, event: &[u8]) {
        self.json.push(if self.events == 0 { b'[' } else { b',' });
        self.json.extend_from_slice(event);
        self.events += 1;
    }

    /// The bytes kept so far.
    pub fn bytes(&self) -> usize {
        self.json.len()
    }

    fn into_json(mut self) -> Result<String, StateError> {
        self.json.push(b']');
        String::from_utf8(self.json).map_err(|_| StateError::Refused("an audit event is not UTF-8".into()))
    }
}

/// What the receiving replica writes to: the inbox, and the local shards' wake-up.
#[derive(Clone)]
pub struct Relay {
    pub inbox: AuditInbox,
    /// Tells this replica's shards that a batch arrived (full: they are told already).
    pub arrived: tokio::sync::mpsc::Sender<()>,
}

impl Relay {
    /// Writes what was kept of a batch (blocking: call it off the async workers).
    /// `Ok(false)`: the inbox is full and nothing was written.
    /// `cluster`: whose API server sent it (`""`: this one's).
    pub fn write(&self, kept: Kept, at: DateTime<Utc>, cluster: &str) -> Result<bool, StateError> {
        if kept.events == 0 {
            return Ok(true);
        }
        let batch = InboxBatch { at_ms: crate::state::to_millis(at), cluster: cluster.to_string(), events: kept.into_json()? };
        let written = self.inbox.push(&batch)?.is_some();
        if written {
            let _ = self.arrived.try_send(());
        }
        if let Ok(n) = self.inbox.len() {
            crate::metrics::METRICS.audit_inbox.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        Ok(written)
    }
}

/// What a shard's leader takes of one inbox batch: its events judged against this
/// shard's index as if they had just arrived (their age from when the batch did), those
/// already taken dropped.
pub fn read(shared: &Shared, batch: &InboxBatch) -> Relevant {
    // The first inbox build wrote the hub's batches as `in-cluster` (no spoke may be
    // called so).
    let cluster = if batch.cluster == "in-cluster" { "" } else { batch.cluster.as_str() };
    let (ids, mask, times) = (shared.identities_in(cluster), shared.mask(), shared.times());
    let index = shared.index.read().unwrap_or_else(|p| p.into_inner());
    let now = crate::state::from_millis(batch.at_ms);
    let f = event::Filter { argocd_identities: &ids, index: &index, now, mask: &mask, times: Some(times), cluster };
    let mut out = event::Batch::default();
    match serde_json::from_str::<Vec<&RawValue>>(&batch.events) {
        Ok(events) => {
            for e in events {
                if event::parse_line(e.get().as_bytes(), &f, &mut out).is_err() {
                    out.dropped[event::Dropped::Malformed as usize] += 1;
                }
            }
        }
        Err(_) => out.dropped[event::Dropped::Malformed as usize] += 1,
    }
    drop(index);
    // Every shard reads every batch: an event about another shard's unit is not counted
    // as unmanaged here.
    out.dropped[event::Dropped::Unmanaged as usize] = 0;
    super::count(&out);
    let mut relevant = Relevant::from(out);
    shared.fresh(&mut relevant);
    relevant
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AuditSettings;

    /// A batch of twelve 1 MiB events is written in rows of bounded size as it is read
    /// (a replica never holds the whole batch), every event in one of them.
    #[test]
    fn a_large_batch_is_kept_in_rows_of_bounded_size() {
        let store = crate::state::Store::in_memory().unwrap();
        let (arrived, _told) = tokio::sync::mpsc::channel(1);
        let relay = Relay { inbox: store.audit_inbox(), arrived };
        let shared = Shared::new(&AuditSettings::default());
        let big = "x".repeat(1 << 20);
        let now = Utc::now().to_rfc3339();
        let items: Vec<serde_json::Value> = (0..12)
            .map(|i| {
                serde_json::json!({"auditID": format!("a{i}"), "stage": "ResponseComplete", "verb": "patch", "user": {"username": "alice"},
                    "objectRef": {"resource": "configmaps", "namespace": "payments", "name": format!("c{i}"), "apiVersion": "v1"},
                    "responseStatus": {"code": 200}, "requestObject": {"data": {"k": big}}, "requestReceivedTimestamp": now})
            })
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items})).unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let feeder = std::thread::spawn(move || {
            for c in body.chunks(64 * 1024) {
                tx.blocking_send(axum::body::Bytes::copy_from_slice(c)).unwrap();
            }
        });
        assert!(shared.keep_for_test(rx, &relay).unwrap().unwrap());
        feeder.join().unwrap();
        let (mut at, mut rows, mut events) = (0, 0, 0);
        while let Some((seq, batch)) = store.audit_inbox().next_after(at).unwrap() {
            assert!(batch.events.len() <= MAX_ROW_BYTES + (1 << 20) + 1024, "row {seq}: {} bytes", batch.events.len());
            events += serde_json::from_str::<Vec<&RawValue>>(&batch.events).unwrap().len();
            (at, rows) = (seq, rows + 1);
        }
        assert_eq!(events, 12);
        assert!(rows >= 3, "{rows} rows");
    }

    /// A batch kept by a receiving replica reads back, at a shard, as the attempts the
    /// single-replica path finds in the same events, judged at the batch's arrival; the
    /// same batch taken twice gives nothing the second time.
    #[test]
    fn a_relayed_batch_reads_as_the_direct_one_once() {
        use crate::audit::event::tests::{data, ids, index};
        let body = data("eventlist-changes-1.json");
        let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let items = list["items"].as_array().unwrap();
        let settings = AuditSettings { argocd_identities: ids(), ..AuditSettings::default() };
        let shared = Shared::new(&settings);
        *shared.index.write().unwrap() = index();
        // The events' own time: the batch arrived when they were made.
        let at = chrono::DateTime::parse_from_rfc3339(items[0]["requestReceivedTimestamp"].as_str().unwrap()).unwrap().with_timezone(&Utc);
        let mut kept = Kept::default();
        for e in items {
            let bytes = serde_json::to_vec(e).unwrap();
            if let Ok(event) = event::admit_line(&bytes, Some(shared.times()), at).unwrap() {
                kept.add(&event);
            }
        }
        assert!(kept.events > 0 && kept.events < items.len(), "reads and watches are not kept: {} of {}", kept.events, items.len());
        let batch = InboxBatch { at_ms: crate::state::to_millis(at), cluster: String::new(), events: kept.into_json().unwrap() };
        let direct = {
            let index = shared.index.read().unwrap();
            let (ids, mask) = (shared.identities(), shared.mask());
            let f =
                event::Filter { argocd_identities: &ids, index: &index, now: at, mask: &mask, times: Some(shared.times()), cluster: "" };
            event::parse_list(&body, &f).unwrap()
        };
        let relayed = read(&shared, &batch);
        let people = |a: &[crate::drift::audit::Attempt]| a.iter().map(|a| (a.id.clone(), a.actor.username.clone())).collect::<Vec<_>>();
        assert_eq!(people(&direct.attempts).len(), 2, "alice and mallory");
        assert_eq!(people(&relayed.attempts), people(&direct.attempts));
        assert!(read(&shared, &batch).is_empty(), "taken once");
        // The first inbox build wrote the hub's batches as `in-cluster`: read as the hub's.
        let fresh = Shared::new(&settings);
        *fresh.index.write().unwrap() = index();
        let old_row = InboxBatch { cluster: "in-cluster".into(), ..batch };
        assert_eq!(people(&read(&fresh, &old_row).attempts), people(&direct.attempts));
    }
}
