//! The records of the reference pipeline ([`Event`], [`SumRecord`]) and
//! what each of its steps does to them: the sources' chained map, the
//! routing hash (the engine's own) and `keyed_sum`'s running sum per key
//! ([`KeyedSum`]), as the specification defines them, so that lockgate
//! and the baselines compute the same answer.

use std::collections::HashMap;

use lockgate::RecordSize;
use serde::{Deserialize, Serialize};

/// A record of the reference workloads (24 bytes).
///
/// `value` is the record's sequence number `n` when generated and
/// `2n + 1` after the source's chained map ([`chained_map`]); `ts_ns` is
/// the record's *intended* emission time on the engine's monotonic clock
/// (`lockgate::tuning::now_ns`): the schedule time for W2/W3, the actual
/// emission time for W1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The key, in `0..keys`.
    pub key: u64,
    /// The value: `n`, then `2n + 1` after the chained map.
    pub value: u64,
    /// Intended emission time, ns.
    pub ts_ns: u64,
}

impl RecordSize for Event {}

impl Event {
    /// The generated record number `n` with key `key`: `value = n`.
    #[inline]
    pub fn generated(n: u64, key: u64, ts_ns: u64) -> Self {
        Event {
            key,
            value: n,
            ts_ns,
        }
    }

    /// This record after the source's chained map ([`chained_map`] on the
    /// value).
    #[inline]
    pub fn mapped(self) -> Self {
        Event {
            value: chained_map(self.value),
            ..self
        }
    }
}

/// The source's chained map of every workload: `value * 2 + 1` (wrapping).
#[inline]
pub fn chained_map(value: u64) -> u64 {
    value.wrapping_mul(2).wrapping_add(1)
}

/// The sequence number `n` of a record whose value went through
/// [`chained_map`] (`value = 2n + 1`): `value >> 1`. Exact for every
/// `n < 2^63`.
#[inline]
pub fn seq_of_mapped_value(value: u64) -> u64 {
    value >> 1
}

/// What `keyed_sum` emits for every input record (32 bytes): the key, its
/// running sum after this record, the record's sequence number `n` and its
/// intended emission time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SumRecord {
    /// The key.
    pub key: u64,
    /// The running (wrapping) sum of the mapped values of this key, this
    /// record included.
    pub sum: u64,
    /// The record's sequence number `n`.
    pub n: u64,
    /// The record's intended emission time, ns (copied from the [`Event`]).
    pub ts_ns: u64,
}

impl RecordSize for SumRecord {}

/// The state and logic of one `keyed_sum` subtask: a running wrapping sum
/// of the (mapped) values per key. The map is the subtask's checkpointed
/// state (serde-serializable). It hashes with foldhash, as lockgate's
/// `KeyedState` does, so the baselines that use it (raw, timely) keep
/// doing the same work per record as lockgate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedSum {
    sums: HashMap<u64, u64, foldhash::fast::RandomState>,
}

impl KeyedSum {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a mapped record to its key's sum and returns what `keyed_sum`
    /// emits for it (`n` recovered with [`seq_of_mapped_value`]).
    #[inline]
    pub fn apply(&mut self, event: &Event) -> SumRecord {
        let sum = self.sums.entry(event.key).or_insert(0);
        *sum = sum.wrapping_add(event.value);
        SumRecord {
            key: event.key,
            sum: *sum,
            n: seq_of_mapped_value(event.value),
            ts_ns: event.ts_ns,
        }
    }

    /// The running sum of `key`, `None` before its first record.
    pub fn get(&self, key: u64) -> Option<u64> {
        self.sums.get(&key).copied()
    }

    /// The number of keys seen.
    pub fn len(&self) -> usize {
        self.sums.len()
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.sums.is_empty()
    }

    /// All running sums, key → sum.
    pub fn sums(&self) -> &HashMap<u64, u64, foldhash::fast::RandomState> {
        &self.sums
    }
}

// Routing: the engine's own hash and key-group assignment.
pub use lockgate::{keys::key_hash, keys::key_to_subtask};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_spreads_keys() {
        for p in [2usize, 3, 8] {
            let mut per = vec![0u64; p];
            for key in 0..10_000u64 {
                let r = key_to_subtask(key, p);
                // workloads.md: key group g = hash % 128, subtask g * p / 128.
                let g = ((key.wrapping_mul(0x9E3779B97F4A7C15)) >> 32) % 128;
                assert_eq!(r as u64, g * p as u64 / 128);
                per[r] += 1;
            }
            let even = 10_000 / p as u64;
            for c in per {
                assert!(c > even * 8 / 10 && c < even * 12 / 10, "p={p} {c}");
            }
        }
    }
}
