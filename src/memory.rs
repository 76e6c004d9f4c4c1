//! The process's allocator: mimalloc (set as the global allocator in `main.rs`), told
//! to hand freed pages back at once.
//!
//! Why not glibc's: the daemon's memory is a few small objects per Application that
//! live long (its compressed JSON, its map entries) among large short-lived ones (a
//! list page's JSON trees, 1,024 queued Applications during the first list). glibc
//! serves both from the same heaps, so each page of the start-up's peak ends up
//! holding a long-lived object or two and cannot be handed back: measured with
//! 10,000 Applications, 60 MB of heap resident for 12–17 MB live (`malloc_trim` once
//! ready did not help). mimalloc keeps objects of one size class on pages of their
//! own, so the pages of the start-up's garbage empty out whole and go back (10,000
//! Applications: 84 MB -> 46 MB resident, and less CPU; BENCHMARKS.md).

/// `mi_option_purge_delay`'s position in mimalloc's `mi_option_e`
/// (`include/mimalloc.h`, the same in v2 and v3; `libmimalloc-sys` names no constant).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Called first thing in `main`: freed pages go back to the operating system as soon as
/// they are empty. mimalloc's default waits a second and then only when the thread
/// allocates again, so an idle daemon kept its start-up's peak resident (10,000
/// Applications: 101 MB -> 61 MB). The other setting that matters is built in:
/// `libmimalloc-sys`'s `no_thp` (Cargo.toml), since mimalloc commits its arenas
/// eagerly on Linux and transparent huge pages then made what it touched resident in
/// 2 MB pieces (1,000 Applications: 55 MB -> 34 MB; it cannot be set from `main`, the
/// first arena is reserved before).
///
/// Until ready, though, freed pages wait [`LISTING_PURGE_DELAY_MS`]: the first list
/// frees and allocates a page's worth of JSON trees over and over, and handing each
/// page back at once made the next allocation fault it in again (an eighth of the
/// decoding thread's CPU at 10,000 Applications). [`ready`] hands everything back and
/// purges at once from then on.
pub fn configure() {
    set_purge_delay(LISTING_PURGE_DELAY_MS);
}

/// How long freed pages wait to be handed back while the first list is decoded.
const LISTING_PURGE_DELAY_MS: std::ffi::c_long = 500;

fn set_purge_delay(ms: std::ffi::c_long) {
    // SAFETY: sets one of mimalloc's option values; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms) }
}

/// Once the Applications are listed: freed pages go back at once from now on, and
/// what this thread used and freed goes back now. (A page freed with the delay is
/// handed back only once it expires, forced collection or not: 10,000 Applications
/// stayed at 67 MB when the delay ended with the evaluation's ready, 56 MB when it
/// ends with the decoding.)
pub fn ready() {
    set_purge_delay(0);
    release_free();
    // Pages freed within the delay before now are handed back only once it has run
    // out, and only when some thread allocates or collects again: an idle daemon kept
    // them (10,000 Applications: 57, 77 and 79 MB once ready, as the timing fell).
    // One collection after the delay hands them back whatever the timing (arenas are
    // shared: any thread's forced collection purges what has expired).
    if READY_ONCE.set(()).is_ok() {
        let _ = std::thread::Builder::new().name("driftwatch-purge".into()).spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(LISTING_PURGE_DELAY_MS.unsigned_abs() + 100));
            release_free();
        });
    }
}

/// Whether [`ready`]'s later collection was started (once per process: `ready` is
/// called at the end of each list).
static READY_ONCE: std::sync::OnceLock<()> = std::sync::OnceLock::new();

/// Hands back what this thread used and freed (mimalloc's free pages, whatever their
/// delay, and, for whatever C code allocated through it, glibc's).
pub fn release_free() {
    // SAFETY: mi_collect only walks mimalloc's own free lists.
    unsafe { libmimalloc_sys::mi_collect(true) }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own free lists; it takes the allocator's
    // locks like any malloc call and touches no memory Rust owns.
    unsafe {
        libc::malloc_trim(0);
    }
}
