//! The worker of a service that writes files ([`FileCut`]): takes the service's
//! oldest notifications as one file when the cut says it is closed, marks the file's
//! last notification durably, hands the whole file to the client as one batch, and
//! settles every notification of it with one outcome.
//!
//! Why this gives each record once in the store across a crash: outbox ids only grow,
//! so "the service's entries up to the marked id" is the same set after a restart,
//! whatever was queued since; its notifications settle together (delivered, retried
//! or dead-lettered alike), so none leaves the set while the others stay. The client
//! names each object from the records it holds (`kinds::securitylake`), so the file
//! sent again after a crash between the write and the settle replaces the object it
//! wrote rather than adding a second one.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use super::control::halt_signal;
use super::worker::Worker;
use crate::deliver::deliverer::{FileCut, batch_outcome};
use crate::deliver::outcome::{Outcome, Verdict, verdict};
use crate::metrics::METRICS;
use crate::model::Notification;
use crate::state::{OutboxEntry, Settle};

/// What the head of a service's queue is, as [`cut`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cut {
    /// Nothing queued.
    Empty,
    /// The first `n` entries are the file marked before a restart or a retry: send
    /// them again, exactly these.
    Retake(usize),
    /// The first `n` entries make a file now closed: mark it, then send it.
    Close(usize),
    /// The file is still open until `closes_at_ms` (unless it fills first).
    Open { closes_at_ms: u64 },
}

/// The next file of `head` (a service's entries, oldest first, at most
/// `cut.max_count + 1`), given the marked last id and what each entry weighs. A file
/// holds at least one entry, however heavy; it is closed when something queued after
/// it does not fit, when its oldest entry has waited `cut.age`, or when `closing`.
pub(super) fn cut(head: &[(OutboxEntry, u64)], marked: Option<u64>, c: FileCut, now_ms: u64, closing: bool) -> Cut {
    let Some((first, _)) = head.first() else { return Cut::Empty };
    if let Some(last) = marked
        && first.id <= last
    {
        return Cut::Retake(head.iter().take_while(|(e, _)| e.id <= last).count());
    }
    let (mut n, mut weight) = (0usize, 0u64);
    for (_, w) in head {
        if n > 0 && (weight.saturating_add(*w) > c.max_weight || n >= c.max_count) {
            break;
        }
        n += 1;
        weight = weight.saturating_add(*w);
    }
    let closes_at_ms = first.enqueued_ms.saturating_add(u64::try_from(c.age.as_millis()).unwrap_or(u64::MAX));
    if n < head.len() || closing || now_ms >= closes_at_ms { Cut::Close(n) } else { Cut::Open { closes_at_ms } }
}

impl Worker {
    /// The loop of a service that writes files: each turn reads the head of its queue,
    /// and sends the next file once it is closed and all of it is due; waits otherwise
    /// (for new work, the file's closing time, its retry, a drain, a stop or a lost
    /// Lease). A stop closes the open file and sends it once, within the stop's grace.
    pub(super) async fn run_files(self, mut shutdown: watch::Receiver<bool>, c: FileCut) {
        let this = Arc::new(self);
        let mut halt = this.halt.clone();
        loop {
            let stopping = *shutdown.borrow();
            if halt.as_ref().is_some_and(|h| h.halted()) {
                tracing::info!(service = %this.service.name, "no longer leading: stopping");
                return;
            }
            let closing = stopping || this.closing.load(Ordering::Relaxed);
            let now = this.clock.now_ms();
            let wait_ms = match this.next_file(c, now, closing).await {
                Ok(Some(file)) => {
                    let due_at = file.iter().map(|e| e.next_attempt_ms).max().unwrap_or(now);
                    if due_at <= now {
                        this.send_file(file).await;
                        if stopping {
                            return;
                        }
                        continue;
                    }
                    due_at - now
                }
                Ok(None) if stopping => return,
                Ok(None) => 1_000,
                Err(closes_at) => closes_at.saturating_sub(now).max(1),
            };
            if stopping {
                return;
            }
            // At most a second: a retry falling due, or a clock a replay sets, is seen.
            let wait = Duration::from_millis(wait_ms).min(Duration::from_secs(1));
            tokio::select! {
                _ = this.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
                _ = halt_signal(&mut halt) => {}
            }
        }
    }

    /// The next file to send (marked durably first when it is new), `Ok(None)` when
    /// nothing is queued, or `Err` the time the open file closes. A store that fails
    /// is logged and reads as nothing queued (the next turn tries again).
    async fn next_file(&self, c: FileCut, now: u64, closing: bool) -> Result<Option<Vec<OutboxEntry>>, u64> {
        let (outbox, name, deliverer) = (self.outbox.clone(), self.service.name.clone(), self.service.deliverer.clone());
        // Read and weighed on the blocking pool: a store read, and each entry's
        // records made to weigh them.
        let read = tokio::task::spawn_blocking(move || {
            let (entries, marked) = outbox.file_head(&name, now, c.max_count.saturating_add(1))?;
            let head: Vec<(OutboxEntry, u64)> =
                entries.into_iter().map(|e| (deliverer.weight(&e.notification), e)).map(|(w, e)| (e, w)).collect();
            let decided = cut(&head, marked, c, now, closing);
            if let Cut::Close(n) = decided
                && let Some((last, _)) = n.checked_sub(1).and_then(|i| head.get(i))
            {
                outbox.mark_file(&name, last.id)?;
            }
            Ok::<_, crate::state::StateError>((head, decided))
        })
        .await;
        let (head, decided) = match read {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::error!(service = %self.service.name, error = %e, "reading the outbox failed");
                return Ok(None);
            }
            Err(_) => return Ok(None),
        };
        match decided {
            Cut::Empty => Ok(None),
            Cut::Open { closes_at_ms } => Err(closes_at_ms),
            Cut::Retake(n) | Cut::Close(n) => Ok(Some(head.into_iter().take(n).map(|(e, _)| e).collect())),
        }
    }

    /// Sends one file and settles all of its notifications with the file's one outcome
    /// (its oldest notification's deadline and the most attempts any has decide a
    /// give-up, for all of them alike).
    async fn send_file(&self, file: Vec<OutboxEntry>) {
        let outcome = self.attempt_file(&file).await;
        let now = self.clock.now_ms();
        let s = &self.service.settings;
        let kind = self.service.kind.as_str();
        let attempts = file.iter().map(|e| e.attempts).max().unwrap_or(0);
        let enqueued = file.iter().map(|e| e.enqueued_ms).min().unwrap_or(now);
        let n = file.len() as u64;
        let how = match verdict(&outcome, attempts, enqueued, s, now) {
            Verdict::Delivered => {
                self.stats.delivered.fetch_add(n, Ordering::Relaxed);
                METRICS.sent.add(kind, n);
                tracing::info!(service = %self.service.name, notifications = n, "file delivered");
                Settle::Delivered
            }
            Verdict::Retry { attempt, wait, next_ms } => {
                self.stats.retried.fetch_add(n, Ordering::Relaxed);
                METRICS.failed.add(&format!("{kind}:retry"), n);
                let reason = self.service.redactor.redact(outcome.reason());
                tracing::info!(service = %self.service.name, notifications = n, attempt, ?wait, %reason, "file will retry");
                Settle::Retry { next_ms, error: reason }
            }
            Verdict::GaveUp { attempts } => {
                self.stats.dead.fetch_add(n, Ordering::Relaxed);
                METRICS.failed.add(&format!("{kind}:exhausted"), n);
                let error = format!("gave up after {attempts} attempt(s): {}", self.service.redactor.redact(outcome.reason()));
                tracing::warn!(service = %self.service.name, notifications = n, %error, "file dead-lettered");
                Settle::Dead { error, permanent: false }
            }
            Verdict::Refused => {
                self.stats.dead.fetch_add(n, Ordering::Relaxed);
                METRICS.failed.add(&format!("{kind}:permanent"), n);
                let error = self.service.redactor.redact(outcome.reason());
                tracing::warn!(service = %self.service.name, notifications = n, %error, "file refused; dead-lettered");
                Settle::Dead { error, permanent: true }
            }
        };
        let outcomes: Vec<(OutboxEntry, Settle)> = file.into_iter().map(|e| (e, how.clone())).collect();
        self.write_settle(Arc::new(outcomes), now, Arc::new(Vec::new())).await;
        self.settled.notify_waiters();
    }
}

impl Worker {
    /// One attempt at a file under the per-attempt timeout: the file's one outcome.
    /// Each notification carries a time of its own (when it was queued, unless it
    /// says when its event reached the daemon), so a record with no time of its own
    /// is stamped, and filed under a day, alike at every attempt.
    async fn attempt_file(&self, file: &[OutboxEntry]) -> Outcome {
        let notifications: Vec<Notification> = file
            .iter()
            .map(|e| {
                let mut n = e.notification.clone();
                n.received_ms.get_or_insert(e.enqueued_ms);
                n
            })
            .collect();
        self.stats.attempts.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let timeout = self.service.settings.timeout;
        let outcome = match tokio::time::timeout(timeout, self.service.deliverer.deliver_each(&notifications)).await {
            Ok(each) if each.len() == file.len() => batch_outcome(&each),
            Ok(_) => Outcome::retry("the destination client gave no outcome for some notifications"),
            Err(_) => Outcome::retry(format!("timed out after {timeout:?}")),
        };
        METRICS.delivery_latency.observe(started.elapsed());
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deliver::ecs::tests::sample;
    use crate::model::DestinationKind;

    fn entry(id: u64, enqueued_ms: u64, weight: u64) -> (OutboxEntry, u64) {
        let n = sample(DestinationKind::Console, "lake");
        (OutboxEntry { id, notification: n, attempts: 0, enqueued_ms, next_attempt_ms: enqueued_ms, last_error: None }, weight)
    }

    const C: FileCut = FileCut { age: Duration::from_secs(300), max_weight: 100, max_count: 3 };

    /// A file stays open until its oldest entry is `age` old, closes early when the
    /// next entry does not fit (by weight or count) or when asked; a marked file is
    /// retaken as it was, whatever was queued after it.
    #[test]
    fn files_close_by_age_size_count_or_when_asked_and_a_marked_file_is_retaken() {
        let head = [entry(5, 1_000, 40), entry(7, 2_000, 40)];
        assert_eq!(cut(&head, None, C, 2_500, false), Cut::Open { closes_at_ms: 301_000 });
        assert_eq!(cut(&head, None, C, 301_000, false), Cut::Close(2), "age");
        assert_eq!(cut(&head, None, C, 2_500, true), Cut::Close(2), "a drain or a stop");
        let heavy = [entry(5, 1_000, 40), entry(7, 2_000, 40), entry(9, 3_000, 40)];
        assert_eq!(cut(&heavy, None, C, 3_000, false), Cut::Close(2), "the third would pass the weight");
        let many = [entry(1, 0, 1), entry(2, 0, 1), entry(3, 0, 1), entry(4, 0, 1)];
        assert_eq!(cut(&many, None, C, 0, false), Cut::Close(3), "count");
        let huge = [entry(1, 0, 1_000), entry(2, 0, 1)];
        assert_eq!(cut(&huge, None, C, 0, false), Cut::Close(1), "one entry heavier than a file is a file of its own");
        // Marked up to 7: entries 5 and 7 go again, the 9 queued since waits.
        assert_eq!(cut(&heavy, Some(7), C, 3_000, false), Cut::Retake(2));
        // A mark older than the head is a file that settled: a new cut.
        assert_eq!(cut(&heavy, Some(3), C, 3_000, false), Cut::Close(2));
        assert_eq!(cut(&[], Some(3), C, 0, true), Cut::Empty);
    }
}
