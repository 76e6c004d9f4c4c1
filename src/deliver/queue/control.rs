//! What steers the workers from outside: the clock they read ([`OutboxClock`]: the
//! system's, or a replay's) and the leader halt ([`Halt`]) that stops them when the
//! Lease is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// Where the workers read the time: the system clock, or a clock the caller sets (a
/// replay's previews run on the snapshots' clock, so what they record is stamped as
/// the evaluation that decided it is).
#[derive(Clone, Debug, Default)]
pub struct OutboxClock(Option<Arc<AtomicU64>>);

impl OutboxClock {
    pub fn system() -> OutboxClock {
        OutboxClock(None)
    }

    /// A clock that reads `ms` (unix milliseconds) until [`OutboxClock::set`].
    pub fn manual(ms: u64) -> OutboxClock {
        OutboxClock(Some(Arc::new(AtomicU64::new(ms))))
    }

    /// Moves a manual clock; the system clock cannot be set.
    pub fn set(&self, ms: u64) {
        if let Some(c) = &self.0 {
            c.store(ms, Ordering::Relaxed);
        }
    }

    pub fn now_ms(&self) -> u64 {
        match &self.0 {
            Some(c) => c.load(Ordering::Relaxed),
            None => crate::state::to_millis(chrono::Utc::now()),
        }
    }
}

/// Stops the workers without their owner, as soon as `leading` turns false: a leader
/// whose Lease is lost must stop sending before a standby may take over, whatever the
/// evaluation thread (which owns the [`super::Delivery`]) is busy with. Attempts in flight
/// get `grace` to finish and be recorded; past it they are abandoned (their entries
/// stay in the outbox, and their idempotency keys go with them to the next leader).
#[derive(Clone)]
pub struct Halt {
    pub leading: watch::Receiver<bool>,
    pub grace: Duration,
}

impl Halt {
    pub(super) fn halted(&self) -> bool {
        !*self.leading.borrow()
    }
}

/// Resolves when `halt` says stop (never without one).
pub(super) async fn halt_signal(halt: &mut Option<Halt>) {
    match halt {
        Some(h) => {
            while !h.halted() {
                if h.leading.changed().await.is_err() {
                    // Leader election is gone: the owner stops the workers.
                    std::future::pending::<()>().await;
                }
            }
        }
        None => std::future::pending().await,
    }
}
