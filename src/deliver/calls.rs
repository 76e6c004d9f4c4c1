//! A batch of notifications as calls of bounded size, for an API that takes many
//! records in one call and answers the call as a whole (Sentinel's Logs Ingestion
//! API, the Chronicle API's `logs:import`): each notification's records, already
//! encoded, in; each notification's outcome out ([`CallSize::deliver_each`]).
//!
//! The notifications are cut into groups between them, each group's records fitting
//! one call ([`CallSize::groups`]); a notification whose own records need more is a
//! group of its own, sent in as many calls as it needs ([`CallSize::calls`]). A group
//! refused for good is sent again one notification at a time
//! ([`alone_after_refusal`]), so only the one the receiver refuses is dead-lettered;
//! once a call is to be retried (`429`, `5xx`, a token), the calls after it are not
//! made and their notifications wait with it. Each notification's outcome is its own:
//! what was delivered is not sent again. A client that implements [`Api`] (its
//! batch size, call size, records and one call) is a [`Deliverer`] that does this.

use std::future::Future;
use std::ops::Range;

use super::deliverer::{Answer, BoxFuture, Deliverer, alone_after_refusal, batch_outcome};
use super::outcome::Outcome;
use crate::model::Notification;

/// An API that takes records in calls of bounded size and answers a call as a whole:
/// what a client says of it to be the [`Deliverer`] the module describes.
pub trait Api: Send + Sync {
    /// Notifications per batch (a service's `batchSize`).
    fn batch_size(&self) -> usize;
    /// How large a call may be.
    fn size(&self) -> CallSize;
    /// A notification's records at `now`, encoded, each within the size's
    /// [`CallSize::room`].
    fn records(&self, n: &Notification, now: chrono::DateTime<chrono::Utc>) -> Vec<String>;
    /// One call carrying `records` (within the size): the receiver's answer.
    fn call(&self, records: Vec<String>) -> BoxFuture<'_, Answer>;
}

impl<A: Api> Deliverer for A {
    fn max_batch(&self) -> usize {
        self.batch_size()
    }

    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { batch_outcome(&self.deliver_each(batch).await) })
    }

    /// Each notification's records made once, at one `now` (a re-send carries the
    /// same records), sent as the module says.
    fn deliver_each<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Vec<Outcome>> {
        Box::pin(async move {
            let now = chrono::Utc::now();
            let each: Vec<Vec<String>> = batch.iter().map(|n| self.records(n, now)).collect();
            self.size().deliver_each(&each, |records| self.call(records)).await
        })
    }
}

/// How large a call may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSize {
    /// The most bytes a call's body holds.
    pub max: usize,
    /// The body's bytes besides its records and a comma after each (`[]`: 2, for a
    /// JSON array of records).
    pub envelope: usize,
}

impl CallSize {
    /// The most bytes one record may hold to go in a call alone.
    pub fn room(self) -> usize {
        self.max.saturating_sub(self.envelope + 1)
    }

    /// What `records` add to a call.
    fn cost<'a>(records: impl IntoIterator<Item = &'a String>) -> usize {
        records.into_iter().map(|r| r.len() + 1).sum()
    }

    /// Records grouped into calls of at most [`CallSize::max`] bytes, in order.
    pub fn calls<'a>(self, records: impl Iterator<Item = &'a String>) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = Vec::new();
        let mut size = self.envelope;
        for r in records {
            let cost = Self::cost([r]);
            if out.is_empty() || size + cost > self.max {
                out.push(Vec::new());
                size = self.envelope;
            }
            size += cost;
            if let Some(c) = out.last_mut() {
                c.push(r.clone());
            }
        }
        out
    }

    /// Notifications grouped, in order, so that each group's records fit one call; a
    /// notification whose records alone do not is a group of its own.
    pub fn groups(self, each: &[Vec<String>]) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        let mut size = self.envelope;
        for (i, records) in each.iter().enumerate() {
            let own = Self::cost(records);
            match out.last_mut() {
                Some(g) if size + own <= self.max => {
                    g.end = i + 1;
                    size += own;
                }
                _ => {
                    out.push(i..i + 1);
                    size = self.envelope + own;
                }
            }
        }
        out
    }

    /// Sends the records of each notification (`each`, in the batch's order) through
    /// `call`, one call's records at a time, as the module says; each notification's
    /// outcome, in order.
    pub async fn deliver_each<F, Fut>(self, each: &[Vec<String>], call: F) -> Vec<Outcome>
    where
        F: Fn(Vec<String>) -> Fut,
        Fut: Future<Output = Answer>,
    {
        let call = &call;
        let mut out = vec![Outcome::Delivered; each.len()];
        let mut waiting: Option<Outcome> = None;
        for g in self.groups(each) {
            if let Some(o) = &waiting {
                out[g].fill(o.clone());
                continue;
            }
            let mine = &each[g.clone()];
            // The records of `mine[r]`, in as many calls as they need; the first call
            // not delivered is the answer.
            let send = |r: Range<usize>| async move {
                for records in self.calls(mine[r].iter().flatten()) {
                    match call(records).await {
                        Answer::Final(Outcome::Delivered) => {}
                        other => return other,
                    }
                }
                Answer::Final(Outcome::Delivered)
            };
            let outcomes = alone_after_refusal(mine.len(), send).await;
            for (slot, o) in out[g].iter_mut().zip(outcomes) {
                if waiting.is_none() && matches!(o, Outcome::Retry { .. }) {
                    waiting = Some(o.clone());
                }
                *slot = o;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: CallSize = CallSize { max: 1_000_000, envelope: 2 };

    /// A batch larger than a call goes in several calls, each within 1 MB, every record
    /// once and in order.
    #[test]
    fn records_are_cut_into_calls_within_the_size() {
        let records: Vec<String> = (0..300).map(|i| format!(r#"{{"i":{i},"pad":"{}"}}"#, "x".repeat(9_000))).collect();
        let calls = MB.calls(records.iter());
        assert!(calls.len() >= 3, "{} calls", calls.len());
        let mut seen = Vec::new();
        for c in &calls {
            let body = format!("[{}]", c.join(","));
            assert!(body.len() <= MB.max);
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            seen.extend(v.as_array().unwrap().iter().map(|r| r["i"].as_u64().unwrap()));
        }
        assert_eq!(seen, (0..300).collect::<Vec<u64>>());
        // A larger envelope leaves less room: more calls, each still within the size.
        let wide = CallSize { max: 1_000_000, envelope: 200_000 };
        let more = wide.calls(records.iter());
        assert!(more.len() > calls.len());
        assert!(more.iter().all(|c| wide.envelope + CallSize::cost(c) <= wide.max));
        assert_eq!(wide.room(), 799_999);
    }

    /// Notifications are grouped into calls without cutting one apart: small ones share
    /// a call, one that fills a call alone is a group of its own.
    #[test]
    fn calls_are_cut_between_notifications() {
        let small = vec![r#"{"s":1}"#.to_string()];
        let big = vec!["x".repeat(600_000), "y".repeat(600_000)];
        let each = vec![small.clone(), small.clone(), big, small.clone()];
        assert_eq!(MB.groups(&each), vec![0..2, 2..3, 3..4]);
        let many: Vec<Vec<String>> = (0..40).map(|_| vec!["z".repeat(60_000)]).collect();
        let groups = MB.groups(&many);
        assert!(groups.len() >= 3);
        assert_eq!(groups.iter().map(|g| g.len()).sum::<usize>(), 40, "every notification in one group, in order");
        assert!(groups.windows(2).all(|w| w[0].end == w[1].start));
    }

    /// A refused group is sent again one notification at a time (only the refused one
    /// keeps the refusal); a call to be retried makes the later groups wait without a
    /// call.
    #[tokio::test]
    async fn a_refusal_is_one_notifications_and_a_retry_holds_the_rest() {
        let calls = std::sync::Mutex::new(Vec::<Vec<String>>::new());
        let each: Vec<Vec<String>> = ["a", "bad", "c", "d"].iter().map(|s| vec![format!("{s}{}", "-".repeat(400_000))]).collect();
        let outcomes = MB
            .deliver_each(&each, |records| {
                let names: Vec<String> = records.iter().map(|r| r.split('-').next().unwrap().to_string()).collect();
                let o = if names.iter().any(|n| n == "bad") {
                    Outcome::Permanent("HTTP 400: bad".into())
                } else if names[0] == "c" {
                    Outcome::Retry { reason: "HTTP 503".into(), after: None }
                } else {
                    Outcome::Delivered
                };
                calls.lock().unwrap().push(names);
                async move { Answer::of(o) }
            })
            .await;
        assert_eq!(outcomes[0], Outcome::Delivered);
        assert_eq!(outcomes[1], Outcome::Permanent("HTTP 400: bad".into()));
        assert!(matches!(&outcomes[2], Outcome::Retry { .. }) && outcomes[3] == outcomes[2], "{outcomes:?}");
        let calls = calls.into_inner().unwrap();
        assert_eq!(calls, [vec!["a", "bad"], vec!["a"], vec!["bad"], vec!["c", "d"]], "no call after the one to be retried");
    }
}
