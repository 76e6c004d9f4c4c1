//! The contract every destination kind implements: a [`Deliverer`] takes a batch of
//! notifications and says what happened ([`Outcome`]); a [`ServiceRuntime`] is one
//! configured service ready to run. A kind depends on this, not on the queue that
//! schedules it (`deliver::queue`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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

/// A destination client: delivers a batch (one notification unless `max_batch` says
/// more) and says what happened.
pub trait Deliverer: Send + Sync {
    /// How many notifications one request may carry (Splunk HEC takes many).
    fn max_batch(&self) -> usize {
        1
    }
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome>;

    /// Delivers a batch and says what happened to each notification, in order: for a
    /// destination that answers per item (Elasticsearch's `_bulk`, where one request
    /// can index some documents and refuse others). By default the batch's one
    /// outcome is each one's.
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
