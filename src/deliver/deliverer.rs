//! The contract every destination kind implements: a [`Deliverer`] takes a batch of
//! notifications and says what happened ([`Outcome`]); a [`ServiceRuntime`] is one
//! configured service ready to run. A kind depends on this, not on the queue that
//! schedules it (`deliver::queue`).

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;

use super::outcome::{DeliverySettings, Outcome};
use crate::model::Notification;
use crate::secret::Redactor;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Delivers a batch one notification at a time, stopping at the first that is not
/// delivered (its outcome is the batch's): what every one-request-per-notification
/// client does.
pub async fn one_by_one<'a, F, Fut>(batch: &'a [Notification], mut deliver: F) -> Outcome
where
    F: FnMut(&'a Notification) -> Fut,
    Fut: Future<Output = Outcome>,
{
    for n in batch {
        let outcome = deliver(n).await;
        if outcome != Outcome::Delivered {
            return outcome;
        }
    }
    Outcome::Delivered
}

/// The batch's one outcome from each notification's: the first retried (something
/// is still to send), else the first not delivered, else delivered.
pub fn batch_outcome(each: &[Outcome]) -> Outcome {
    each.iter()
        .find(|o| matches!(o, Outcome::Retry { .. }))
        .or_else(|| each.iter().find(|o| **o != Outcome::Delivered))
        .cloned()
        .unwrap_or(Outcome::Delivered)
}

/// What one request carrying notifications got, as [`alone_after_refusal`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The receiver refused the request for good for what it carried (an answer
    /// [`Outcome::is_permanent`] says cannot change: a 400, a 413): any one of its
    /// notifications may be the cause.
    Refused(Outcome),
    /// Anything else, every notification's outcome: delivered, retried (408, 429,
    /// 5xx, a token or route being rotated), or refused for a reason that is the
    /// service's and that a request of one would get again (a Splunk token without
    /// indexer acknowledgement).
    Final(Outcome),
}

impl Answer {
    /// A receiver's answer to a request: refused when its outcome is permanent.
    pub fn of(outcome: Outcome) -> Answer {
        if outcome.is_permanent() { Answer::Refused(outcome) } else { Answer::Final(outcome) }
    }

    /// The outcome, whichever the answer.
    pub fn outcome(self) -> Outcome {
        match self {
            Answer::Refused(o) | Answer::Final(o) => o,
        }
    }
}

/// How many of a refused batch's notifications [`alone_after_refusal`] has in flight
/// at once: the re-sends stay within the attempt's `timeout` on a slow receiver
/// without a burst of a whole batch.
pub const ALONE_AT_ONCE: usize = 4;

/// Delivers `count` notifications as one request, `send(0..count)`, and says what
/// happened to each, in order. When the receiver refuses that request for good
/// ([`Answer::Refused`]) and it held more than one notification, one of them may be
/// the cause (a value a tenant wrote): each is then sent again in a request of its
/// own (`send(i..i + 1)`, [`ALONE_AT_ONCE`] at a time) and gets that answer as its
/// outcome, so one notification's refusal never dead-letters the others. At most
/// `count` extra requests, and only after a permanent refusal; any other answer (a
/// retry, a refused token) stays the whole batch's.
pub async fn alone_after_refusal<F, Fut>(count: usize, send: F) -> Vec<Outcome>
where
    F: Fn(Range<usize>) -> Fut,
    Fut: Future<Output = Answer>,
{
    if count == 0 {
        return Vec::new();
    }
    match send(0..count).await {
        Answer::Refused(_) if count > 1 => {
            // The refusal's reason is not logged here: the worker logs each outcome's,
            // redacted.
            tracing::debug!(count, "a batch was refused for good: each notification is sent alone");
            futures::stream::iter((0..count).map(|i| send(i..i + 1))).buffered(ALONE_AT_ONCE).map(Answer::outcome).collect().await
        }
        answer => vec![answer.outcome(); count],
    }
}

/// How a destination that writes files cuts its queue into them
/// ([`Deliverer::files`]): a file is the service's oldest notifications, in queueing
/// order, closed once the oldest has waited `age`, once one more would pass
/// `max_weight` (of [`Deliverer::weight`]) or `max_count`, or when the queue is asked
/// to close its files (a drain, a stop). The queue (`deliver::queue::files`) marks a
/// file's last notification durably before the file is sent, and settles all of a
/// file's notifications together, so a file retaken after a crash holds the same
/// notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileCut {
    pub age: std::time::Duration,
    pub max_weight: u64,
    pub max_count: usize,
}

/// A destination client: delivers a batch (one notification unless `max_batch` says
/// more) and says what happened.
pub trait Deliverer: Send + Sync {
    /// How many notifications one request may carry (Splunk HEC takes many).
    fn max_batch(&self) -> usize {
        1
    }
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome>;

    /// Whether this destination writes files of many notifications, and how they are
    /// cut ([`FileCut`]): its queue then hands it each whole file as one batch, and
    /// its outcome is the whole file's. `None` (the default): batches of
    /// [`Deliverer::max_batch`].
    fn files(&self) -> Option<FileCut> {
        None
    }

    /// What `n` adds to a file ([`FileCut::max_weight`]): bytes of its records.
    fn weight(&self, _n: &Notification) -> u64 {
        0
    }

    /// Delivers a batch and says what happened to each notification, in order: for a
    /// destination that answers per item (Elasticsearch's `_bulk`, where one request
    /// can index some documents and refuse others), or that re-sends each
    /// notification alone after the batch is refused for good (Loki, Splunk HEC:
    /// [`alone_after_refusal`]). By default the batch's one outcome is each one's.
    fn deliver_each<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            let outcome = self.deliver(batch).await;
            vec![outcome; batch.len()]
        })
    }
}

/// A service ready to run: its name, client and settings.
pub struct ServiceRuntime {
    pub name: String,
    pub kind: crate::model::DestinationKind,
    pub deliverer: Arc<dyn Deliverer>,
    pub settings: DeliverySettings,
    /// Scrubs this configuration's secret values from error texts.
    pub redactor: Redactor,
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Sends through `alone_after_refusal` against a receiver that answers a request
    /// holding notification 1 (of several or alone) with `poisoned`, and others with
    /// `ok`; returns the outcomes and the requests' ranges.
    async fn run(count: usize, poisoned: Outcome, ok: Outcome) -> (Vec<Outcome>, Vec<Range<usize>>) {
        let seen = Mutex::new(Vec::new());
        let outcomes = alone_after_refusal(count, |r: Range<usize>| {
            seen.lock().unwrap().push(r.clone());
            let o = if r.contains(&1) { poisoned.clone() } else { ok.clone() };
            async move { Answer::of(o) }
        })
        .await;
        (outcomes, seen.into_inner().unwrap())
    }

    /// Only a permanent refusal of several is split, each sent once more alone; a
    /// retry, a refusal of one, or a delivered batch is one request and the batch's.
    #[tokio::test]
    async fn only_a_permanent_refusal_of_several_sends_each_alone() {
        let refused = Outcome::Permanent("HTTP 400: label value too long".into());
        let (each, sent) = run(3, refused.clone(), Outcome::Delivered).await;
        assert_eq!(each, [Outcome::Delivered, refused.clone(), Outcome::Delivered]);
        assert_eq!(sent, [0..3, 0..1, 1..2, 2..3], "the batch, then each alone: at most the batch's size more");

        let throttled = Outcome::retry("HTTP 429: slow down");
        let (each, sent) = run(3, throttled.clone(), Outcome::Delivered).await;
        assert_eq!(each, vec![throttled; 3], "a retry stays the batch's");
        assert_eq!((sent.len(), &sent[0]), (1, &(0..3)), "one request");

        let (each, sent) = run(2, refused.clone(), Outcome::Delivered).await;
        assert_eq!(sent.len(), 3);
        assert_eq!(each, [Outcome::Delivered, refused.clone()]);
        let (each, sent) = run(1, refused.clone(), refused.clone()).await;
        assert_eq!(each, vec![refused.clone()], "a refusal of one is its own");
        assert_eq!((sent.len(), &sent[0]), (1, &(0..1)), "one request");
        let (each, sent) = run(0, refused.clone(), Outcome::Delivered).await;
        assert_eq!((each.len(), sent.len()), (0, 0), "nothing to send, no request");

        // A refusal that is the service's, not a notification's, is not split.
        let outcomes = alone_after_refusal(3, |_| async { Answer::Final(Outcome::Permanent("ack off".into())) }).await;
        assert_eq!(outcomes, vec![Outcome::Permanent("ack off".into()); 3]);
    }

    /// The batch's one outcome: a retry first, then a refusal, else delivered.
    #[test]
    fn the_batch_outcome_prefers_a_retry_then_a_refusal() {
        let (r, p) = (Outcome::retry("503"), Outcome::Permanent("400".into()));
        assert_eq!(batch_outcome(&[Outcome::Delivered, p.clone(), r.clone()]), r);
        assert_eq!(batch_outcome(&[Outcome::Delivered, p.clone()]), p);
        assert_eq!(batch_outcome(&[Outcome::Delivered]), Outcome::Delivered);
        assert_eq!(batch_outcome(&[]), Outcome::Delivered);
    }
}
