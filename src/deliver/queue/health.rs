//! A destination's health from the outcomes of its attempts: up, or down with one
//! probe at a time, and the entries to release when it comes back.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::deliver::outcome::DeliverySettings;

/// Whether the service's destination answers, from the outcomes of its attempts. A
/// retried failure (refused, reset, timed out, 5xx, 429, a refusal a rotation
/// explains) takes the destination down: from then on one probe at a time goes out,
/// with its own backoff ([`DeliverySettings::probe_wait`]), instead of every entry
/// waiting out a backoff of its own; the first delivery brings it back up, and the
/// entries that failed meanwhile are released (`Outbox::settle_releasing`, with the settle that brought it back) so the whole
/// queue drains at the rate limit at once. (Each entry waiting out its own backoff
/// took 64 s to drain 1,000 after an outage.)
#[derive(Default)]
pub(super) struct Health {
    /// Down since, with the failed probes so far and when the next may go.
    pub(super) down: Option<Down>,
    /// Entries that failed since the destination went down, with the next attempt
    /// their settle gave them: released when it is back. Bounded by [`MAX_RELEASED`].
    failed: BTreeMap<u64, u64>,
    /// Entries released at the last recovery: a failure of one of them right after is
    /// its own (its payload, its recipient), not the destination's, so it keeps its
    /// own backoff and does not take the destination down again.
    released: HashSet<u64>,
    /// Whether "not answering" was logged for the current outage.
    pub(super) logged: bool,
}

pub(super) struct Down {
    pub(super) probes_failed: u32,
    pub(super) probe_at: tokio::time::Instant,
}

/// Most failed entries remembered for release at a recovery (the rest wait out their
/// own backoff).
const MAX_RELEASED: usize = 4096;

/// How one entry of a settled attempt ended, for [`Health`].
pub(super) enum Ended {
    Delivered,
    /// Refused for good (a 400, an unknown channel): the destination answers.
    Refused,
    Retry {
        id: u64,
        next_ms: u64,
    },
    Other,
}

impl Health {
    pub(super) fn is_down(&self) -> bool {
        self.down.is_some()
    }

    /// Whether a probe may start now.
    pub(super) fn may_probe(&self, now: tokio::time::Instant) -> bool {
        self.down.as_ref().is_some_and(|d| d.probe_at <= now)
    }

    /// Takes the outcomes of one settled attempt into account; returns the entries to
    /// release (the destination came back).
    pub(super) fn observe(
        &mut self,
        probe: bool,
        ended: &[Ended],
        after: Option<Duration>,
        settings: &DeliverySettings,
    ) -> Vec<(u64, u64)> {
        // A delivery, or a refusal that re-sending cannot change: the destination answers.
        let delivered = ended.iter().any(|e| matches!(e, Ended::Delivered | Ended::Refused));
        if delivered {
            if self.down.take().is_some() || !self.failed.is_empty() {
                let release: Vec<(u64, u64)> = std::mem::take(&mut self.failed).into_iter().collect();
                self.released = release.iter().map(|(id, _)| *id).collect();
                return release;
            }
            return Vec::new();
        }
        let retried: Vec<(u64, u64)> =
            ended.iter().filter_map(|e| if let Ended::Retry { id, next_ms } = e { Some((*id, *next_ms)) } else { None }).collect();
        if retried.is_empty() {
            return Vec::new();
        }
        if !self.is_down() && retried.iter().all(|(id, _)| self.released.contains(id)) {
            // Released at the last recovery and failing again while others go
            // through: this entry's own problem.
            return Vec::new();
        }
        for (id, next) in retried {
            if self.failed.len() < MAX_RELEASED || self.failed.contains_key(&id) {
                self.failed.insert(id, next);
            }
        }
        let now = tokio::time::Instant::now();
        match &mut self.down {
            None => {
                self.released.clear();
                self.down = Some(Down { probes_failed: 0, probe_at: now + settings.probe_wait(1, after) });
            }
            // Attempts already in flight when it went down say nothing new; a failed
            // probe widens the wait.
            Some(d) if probe => {
                d.probes_failed = d.probes_failed.saturating_add(1);
                d.probe_at = now + settings.probe_wait(d.probes_failed.saturating_add(1), after);
            }
            Some(d) => {
                if let Some(a) = after {
                    d.probe_at = d.probe_at.max(now + a);
                }
            }
        }
        Vec::new()
    }
}
