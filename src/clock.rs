//! The evaluation clock: one instant per pass, fixed by [`with_now`], that rhai's
//! `now()` and the templates' `now` helper both read (so a replay runs on its
//! snapshots' clock and every condition of one pass sees the same instant).

use std::cell::Cell;

use chrono::{DateTime, Utc};

thread_local! {
    /// The instant `now()` returns during one evaluation pass (see [`with_now`]).
    static NOW: Cell<Option<DateTime<Utc>>> = const { Cell::new(None) };
}

/// Runs `f` with `now()` fixed to `now`, so that every condition of one pass sees the
/// same instant and tests and replays are deterministic.
pub fn with_now<R>(now: DateTime<Utc>, f: impl FnOnce() -> R) -> R {
    let previous = NOW.with(|c| c.replace(Some(now)));
    let out = f();
    NOW.with(|c| c.set(previous));
    out
}

/// The instant conditions and templates see as `now()`: fixed during a pass (see [`with_now`]), else the clock.
pub fn now() -> DateTime<Utc> {
    NOW.with(Cell::get).unwrap_or_else(Utc::now)
}

/// The wall clock in milliseconds since the epoch (what the latency of a notification
/// is measured against, from the event's arrival to its delivery).
pub fn wall_ms() -> u64 {
    u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0)
}
