//! The workloads ([`Workload`]: W1 closed loop, W2 and W3 paced, W4
//! against a slow sink) and the open-loop schedule of the paced ones:
//! when record `n` is due ([`scheduled_offset_ns`]), how many are due at
//! a time ([`due_until`]), W3's bursts ([`burst_offset_ns`]), and a
//! source's share of the records ([`source_share`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::error::WorkloadError;
use super::generator::{split_owner, SPLITS};
use super::params::{BURST_PERIOD_NS, BURST_SQUEEZE, W4_SINK_NS};

const NS_PER_S: u128 = 1_000_000_000;

/// The reference workloads. Their names ("W1", "W2", "W3") are kept in
/// benchmark output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Workload {
    /// Throughput: closed loop, [`W1_TOTAL_RECORDS`](super::W1_TOTAL_RECORDS) records.
    W1,
    /// Latency at a fixed rate (open loop).
    W2,
    /// Like W2, with the odd-numbered sources bursting ([`burst_offset_ns`]).
    W3,
    /// Sustained backpressure: closed-loop sources for a fixed time, a
    /// sink slower than they are ([`W4_SINK_NS`] a record).
    W4,
}

impl Workload {
    /// "W1", "W2", "W3" or "W4".
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
        }
    }

    /// True for the open-loop (paced) workloads W2 and W3.
    pub fn is_paced(self) -> bool {
        matches!(self, Workload::W2 | Workload::W3)
    }

    /// True for the workloads that run for a duration after a warm-up (W2,
    /// W3, W4), not for a number of records (W1).
    pub fn is_timed(self) -> bool {
        !matches!(self, Workload::W1)
    }

    /// The sink's work per record, ns of spinning ([`W4_SINK_NS`] for W4,
    /// else 0).
    pub fn sink_work_ns(self) -> u64 {
        match self {
            Workload::W4 => W4_SINK_NS,
            _ => 0,
        }
    }

    /// Whether source `source_index` emits in bursts: in W3 the
    /// odd-numbered sources do (workloads.md names `source[1]` of 2). W3's
    /// bursts belong to the records with odd `n`; at an even parallelism
    /// those are exactly the odd-numbered sources' (the baselines use
    /// this; lockgate's reference source merges both schedules when a
    /// source owns records of both parities).
    pub fn source_bursts(self, source_index: usize) -> bool {
        self == Workload::W3 && source_index % 2 == 1
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = WorkloadError;

    /// Parses "W1", "W2", "W3" or "W4" (case-insensitive).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_uppercase().as_str() {
            "W1" => Ok(Workload::W1),
            "W2" => Ok(Workload::W2),
            "W3" => Ok(Workload::W3),
            "W4" => Ok(Workload::W4),
            _ => Err(WorkloadError::BadWorkload(text.to_string())),
        }
    }
}

/// W3's burst transform of a schedule offset `u` (ns):
/// `floor(u / 10ms) * 10ms + (u mod 10ms) / 10` (integer division), so each
/// 10 ms of the schedule is emitted in its first 1 ms. Never later than `u`
/// and non-decreasing in `u`.
#[inline]
pub fn burst_offset_ns(u: u64) -> u64 {
    let period_start = u - u % BURST_PERIOD_NS;
    period_start + (u % BURST_PERIOD_NS) / BURST_SQUEEZE
}

/// The schedule offset of record `n` from the job's start `t0`, in ns:
/// `floor(n * 1e9 / rate)` (exact integer math in u128), then
/// [`burst_offset_ns`] when `burst`. `rate` is the job's total rate in
/// records/s (all sources together). Saturates at `u64::MAX`, which is
/// also the answer for `rate == 0` (never due).
#[inline]
pub fn scheduled_offset_ns(n: u64, rate: u64, burst: bool) -> u64 {
    if rate == 0 {
        return u64::MAX;
    }
    let u = u64::try_from(n as u128 * NS_PER_S / rate as u128).unwrap_or(u64::MAX);
    if burst {
        burst_offset_ns(u)
    } else {
        u
    }
}

/// How many records are due at offset `now_offset_ns` (ns since `t0`): the
/// number of sequence numbers `n` with
/// `scheduled_offset_ns(n, rate, burst) <= now_offset_ns`. As the schedule
/// is non-decreasing in `n`, these are exactly `0..due_until(..)`, so a
/// paced source that wakes on a short tick emits its records with
/// `n < due_until(now - t0, rate, burst)`. O(1); 0 for `rate == 0`;
/// saturates at `u64::MAX`.
pub fn due_until(now_offset_ns: u64, rate: u64, burst: bool) -> u64 {
    if rate == 0 {
        return 0;
    }
    // The largest unburst offset U whose (possibly burst) schedule time is
    // <= now: the due records are those with floor(n * 1e9 / rate) <= U.
    let last_offset = if burst {
        let period_start = now_offset_ns - now_offset_ns % BURST_PERIOD_NS;
        let within = now_offset_ns % BURST_PERIOD_NS;
        // The burst offsets of one period end at (10ms - 1) / 10 past its
        // start; past that, the whole period is due.
        let last_burst = (BURST_PERIOD_NS - 1) / BURST_SQUEEZE;
        if within >= last_burst {
            period_start as u128 + BURST_PERIOD_NS as u128 - 1
        } else {
            // (u - start) / 10 <= within  <=>  u - start <= 10 * within + 9
            period_start as u128 + BURST_SQUEEZE as u128 * within as u128 + BURST_SQUEEZE as u128
                - 1
        }
    } else {
        now_offset_ns as u128
    };
    // floor(n * 1e9 / rate) <= U  <=>  n * 1e9 < (U + 1) * rate, so the
    // count is ceil((U + 1) * rate / 1e9).
    let count = ((last_offset + 1) * rate as u128).div_ceil(NS_PER_S);
    u64::try_from(count).unwrap_or(u64::MAX)
}

/// How many of the sequence numbers `0..bound` belong to source
/// `source_index` of `parallelism` (those of its splits, `(n % 128) %
/// parallelism == source_index`). 0 for a parallelism of 0 or an index
/// out of range.
pub fn source_share(bound: u64, source_index: usize, parallelism: usize) -> u64 {
    if source_index >= parallelism {
        return 0;
    }
    let period = u64::from(SPLITS);
    (0..SPLITS)
        .filter(|s| split_owner(*s, parallelism) == source_index)
        .map(|s| {
            let s = u64::from(s);
            if bound <= s {
                0
            } else {
                (bound - 1 - s) / period + 1
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_schedule_samples() {
        const MS: u64 = 1_000_000;
        // u -> floor(u / 10ms) * 10ms + (u mod 10ms) / 10
        assert_eq!(burst_offset_ns(0), 0);
        assert_eq!(burst_offset_ns(5 * MS), MS / 2);
        assert_eq!(burst_offset_ns(10 * MS - 1), MS - 1);
        assert_eq!(burst_offset_ns(10 * MS), 10 * MS);
        assert_eq!(burst_offset_ns(27 * MS + 35), 20 * MS + 7 * MS / 10 + 3);
        // At 200_000 records/s, record n is at n * 5 µs.
        assert_eq!(scheduled_offset_ns(3, 200_000, false), 15_000);
        assert_eq!(scheduled_offset_ns(2001, 200_000, false), 10_005_000);
        assert_eq!(scheduled_offset_ns(2001, 200_000, true), 10 * MS + 500);
        assert_eq!(scheduled_offset_ns(1999, 200_000, true), 999_500);
        // Exact integer math: 1e9 / 3 rounds down.
        assert_eq!(scheduled_offset_ns(1, 3, false), 333_333_333);
        assert_eq!(scheduled_offset_ns(3, 3, false), 1_000_000_000);
        assert_eq!(scheduled_offset_ns(u64::MAX, 1, false), u64::MAX);
        assert_eq!(scheduled_offset_ns(1, 0, false), u64::MAX);
    }

    #[test]
    fn burst_schedule_is_monotone_and_never_later() {
        for rate in [1u64, 3, 1000, 200_000, 1_000_000, 3_000_000_000] {
            let mut prev = 0;
            for n in (0..50_000u64).map(|i| i * 7) {
                let plain = scheduled_offset_ns(n, rate, false);
                let burst = scheduled_offset_ns(n, rate, true);
                assert!(burst <= plain);
                assert!(burst >= prev, "rate {rate} n {n}");
                prev = burst;
            }
        }
    }

    #[test]
    fn due_until_agrees_with_the_schedule() {
        for rate in [1u64, 7, 999, 200_000, 1_000_000_000, 3_000_000_000] {
            for burst in [false, true] {
                for now in (0..400u64).map(|i| i * 123_457).chain([
                    9_999_999,
                    10_000_000,
                    10_999_990,
                    1_000_000_000,
                ]) {
                    let due = due_until(now, rate, burst);
                    // Every n below `due` is due, `due` itself is not.
                    if due > 0 {
                        assert!(scheduled_offset_ns(due - 1, rate, burst) <= now);
                    }
                    assert!(
                        scheduled_offset_ns(due, rate, burst) > now,
                        "rate {rate} burst {burst} now {now} due {due}"
                    );
                }
            }
        }
        assert_eq!(due_until(1_000_000, 0, false), 0);
        assert_eq!(source_share(10, 1, 2), 5);
        assert_eq!(source_share(11, 0, 2), 6);
        assert_eq!(source_share(1, 1, 2), 0);
        assert_eq!(source_share(5, 2, 2), 0);
        assert!(Workload::W3.source_bursts(1) && !Workload::W3.source_bursts(2));
        assert!(!Workload::W2.source_bursts(1));
    }
}
