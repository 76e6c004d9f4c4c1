//! Fair share on the enqueue side: when an Application's next entry for a service is
//! first due, so one Application's flood does not delay another's page.

use std::collections::HashMap;

/// A service's queue shared fairly between Applications: past the service's burst,
/// each Application's entries for a service are first due one rate-limit interval
/// apart, so the due index interleaves Applications. One Application whose annotation
/// fans a change out to thousands of notifications queues them over time, and another
/// Application's page, decided a moment later, is due before all but the first few of
/// them: the flood costs the others a slot, not its whole length. A service's
/// throughput is unchanged (its rate limit spaces deliveries anyway). In memory: after
/// a restart the entries already queued keep their times.
#[derive(Default)]
pub(super) struct FairShare {
    /// (service, Application) -> when its next entry may be first due (ms).
    next: HashMap<(String, String), u64>,
    /// Size after the last prune: the map is pruned when it doubles (amortised O(1)).
    pruned_len: usize,
}

impl FairShare {
    /// When the next entry of `app` for `service` is first due: a token bucket of
    /// `burst` entries refilled one per `gap_ms`.
    pub(super) fn due(&mut self, service: &str, app: &str, gap_ms: u64, burst: u32, now_ms: u64) -> u64 {
        if gap_ms == 0 {
            return now_ms;
        }
        let credit = gap_ms.saturating_mul(u64::from(burst.max(1)) - 1);
        if self.next.len() > (2 * self.pruned_len).max(1024) {
            self.next.retain(|_, at| at.saturating_add(credit) > now_ms);
            self.pruned_len = self.next.len();
        }
        let slot = self.next.entry((service.to_string(), app.to_string())).or_insert(0);
        *slot = (*slot).max(now_ms.saturating_sub(credit));
        let due = (*slot).max(now_ms);
        *slot = slot.saturating_add(gap_ms);
        due
    }
}
