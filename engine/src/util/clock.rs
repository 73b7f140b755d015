//! The engine's monotonic clock, in ns.
//!
//! Every timestamp the engine produces (barrier timestamps, record send
//! times in the reference workloads, metrics) is read from this clock, so
//! differences between them are meaningful across threads of one process.

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call of this function in the process
/// (a monotonic clock; `Instant` underneath, ~20–30 ns a call on Linux).
#[inline]
pub fn now_ns() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    epoch.elapsed().as_nanos() as u64
}

/// The [`Instant`] of a time `ns` read from [`now_ns`] (for deadlines of
/// blocking calls).
pub(crate) fn instant_of(ns: u64) -> Instant {
    let epoch = *EPOCH.get_or_init(Instant::now);
    epoch + std::time::Duration::from_nanos(ns)
}

#[cfg(test)]
mod tests {
    #[test]
    fn clock_is_monotonic() {
        let a = super::now_ns();
        let b = super::now_ns();
        assert!(b >= a);
    }
}
