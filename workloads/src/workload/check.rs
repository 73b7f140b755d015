//! The closed-form side of the correctness check every run ends with:
//! the answer a run must give ([`ExpectedResult`], independent of
//! parallelism and interleaving), its [`fingerprint`], and the outcome of
//! comparing the sink's view with it ([`CheckReport`]). The sink's side
//! is `sink_check`.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::WorkloadError;
use super::generator::{split_of, split_owner, KeySpace, XorShift64Star};
use super::pipeline::chained_map;

/// The fingerprint of workloads.md: the wrapping sum over keys `k` of
/// `(k + 1) * final_sum(k)` (keys without records contribute 0).
pub fn fingerprint<I: IntoIterator<Item = (u64, u64)>>(final_sums: I) -> u64 {
    final_sums.into_iter().fold(0u64, |acc, (k, sum)| {
        acc.wrapping_add(k.wrapping_add(1).wrapping_mul(sum))
    })
}

/// The closed-form answer of a run of `total_records` records: the count,
/// the final sum per key (`sum over the records n of that key of 2n + 1`,
/// wrapping) and the fingerprint. Independent of parallelism, routing and
/// interleaving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedResult {
    total_records: u64,
    /// The sequence numbers the run could emit, `0..capacity` (what a
    /// [`SinkCheck`](super::SinkCheck) is sized for): `total_records` unless the sources
    /// stopped at their own positions ([`ExpectedResult::of_positions`]).
    capacity: u64,
    /// With [`ExpectedResult::of_positions`]: source `i` of `P` emitted
    /// the records `n < positions[i]` with `n % P == i`.
    positions: Option<Vec<u64>>,
    sums: Vec<u64>,
    counts: Vec<u64>,
    fingerprint: u64,
}

impl ExpectedResult {
    /// Generates the `total_records` records of the key space (the whole
    /// stream, O(total_records), ≈ 1–2 ns a record uniform, more for Zipf)
    /// and folds them.
    pub fn compute(total_records: u64, keys: &KeySpace) -> Self {
        let k = keys.keys() as usize;
        let mut sums = vec![0u64; k];
        let mut counts = vec![0u64; k];
        let mut rng = XorShift64Star::new();
        for n in 0..total_records {
            let key = keys.key_of(rng.next_output()) as usize;
            sums[key] = sums[key].wrapping_add(chained_map(n));
            counts[key] += 1;
        }
        let fingerprint = fingerprint(sums.iter().enumerate().map(|(k, &s)| (k as u64, s)));
        ExpectedResult {
            total_records,
            capacity: total_records,
            positions: None,
            sums,
            counts,
            fingerprint,
        }
    }

    /// Whether record `n` was generated: every record below the capacity,
    /// or, for sources that stopped at their own positions
    /// ([`ExpectedResult::of_positions`]), the records below its source's.
    pub fn was_generated(&self, n: u64) -> bool {
        match &self.positions {
            None => n < self.capacity,
            Some(p) => {
                n < self.capacity
                    && n < p
                        .get(split_owner(split_of(n), p.len().max(1)))
                        .copied()
                        .unwrap_or(0)
            }
        }
    }

    /// The records of a run whose sources stopped where they were (W4,
    /// closed loop for a time): source `i` of `positions.len()` emitted the
    /// records `n < positions[i]` of its splits ([`split_owner`]), out of
    /// `0..capacity` (O(largest position)).
    pub fn of_positions(positions: &[u64], capacity: u64, keys: &KeySpace) -> Self {
        let p = positions.len().max(1) as u64;
        let end = positions.iter().copied().max().unwrap_or(0).min(capacity);
        let k = keys.keys() as usize;
        let mut sums = vec![0u64; k];
        let mut counts = vec![0u64; k];
        let mut total_records = 0;
        let mut rng = XorShift64Star::new();
        for n in 0..end {
            let key = keys.key_of(rng.next_output()) as usize;
            if n < positions
                .get(split_owner(split_of(n), p as usize))
                .copied()
                .unwrap_or(0)
            {
                sums[key] = sums[key].wrapping_add(chained_map(n));
                counts[key] += 1;
                total_records += 1;
            }
        }
        let fingerprint = fingerprint(sums.iter().enumerate().map(|(k, &s)| (k as u64, s)));
        ExpectedResult {
            total_records,
            capacity,
            positions: Some(positions.to_vec()),
            sums,
            counts,
            fingerprint,
        }
    }

    /// The sequence numbers the run could emit, `0..capacity`.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Whether record `n` is one of the run's.
    pub fn is_emitted(&self, n: u64) -> bool {
        match &self.positions {
            None => n < self.total_records,
            Some(pos) => {
                let p = pos.len().max(1) as u64;
                n < self.capacity
                    && n < pos
                        .get(split_owner(split_of(n), p as usize))
                        .copied()
                        .unwrap_or(0)
            }
        }
    }

    /// The records of the run.
    pub fn total_records(&self) -> u64 {
        self.total_records
    }

    /// The number of keys.
    pub fn keys(&self) -> u64 {
        self.sums.len() as u64
    }

    /// The final sum of `key`, `None` when no record has that key (or the
    /// key is out of range).
    pub fn final_sum(&self, key: u64) -> Option<u64> {
        let k = usize::try_from(key).ok()?;
        (*self.counts.get(k)? > 0).then(|| self.sums[k])
    }

    /// How many records have `key`.
    pub fn records_of_key(&self, key: u64) -> u64 {
        usize::try_from(key)
            .ok()
            .and_then(|k| self.counts.get(k).copied())
            .unwrap_or(0)
    }

    /// The fingerprint of the final sums ([`fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// A key whose last sum at the sink differs from the closed form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyMismatch {
    /// The key.
    pub key: u64,
    /// Its final sum by the closed form (`None`: no record has this key).
    pub expected: Option<u64>,
    /// The last sum the sink received (`None`: none received).
    pub actual: Option<u64>,
}

/// The outcome of [`SinkCheck::verify`](super::SinkCheck::verify). Its [`fmt::Display`] is one
/// human-readable line (`ok: …` or `MISMATCH: …` naming the first wrong
/// key and the first lost record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// Records the run emitted (the closed form's total).
    pub expected_records: u64,
    /// Records the sink received, duplicates included.
    pub received: u64,
    /// Distinct in-range sequence numbers received.
    pub distinct: u64,
    /// Sequence numbers never received.
    pub lost: u64,
    /// The first of them.
    pub first_lost: Option<u64>,
    /// Records received more than once (each repeat counts 1).
    pub duplicates: u64,
    /// Records with a sequence number or key out of range.
    pub out_of_range: u64,
    /// Keys whose last sum differs from the closed form.
    pub wrong_keys: u64,
    /// The smallest such key.
    pub first_wrong_key: Option<KeyMismatch>,
    /// The closed form's fingerprint.
    pub expected_fingerprint: u64,
    /// The fingerprint of the sink's last sums.
    pub fingerprint: u64,
    /// The sink and the expectation were set up for different runs.
    pub setup_mismatch: Option<String>,
}

impl CheckReport {
    /// True when everything matches: every record exactly once, every
    /// key's last sum and the fingerprint equal to the closed form.
    pub fn is_exact(&self) -> bool {
        self.setup_mismatch.is_none()
            && self.received == self.expected_records
            && self.lost == 0
            && self.duplicates == 0
            && self.out_of_range == 0
            && self.wrong_keys == 0
            && self.fingerprint == self.expected_fingerprint
    }

    /// `Ok(self)` when [`CheckReport::is_exact`], else
    /// [`WorkloadError::CheckFailed`] with the description.
    pub fn into_result(self) -> Result<Self, WorkloadError> {
        if self.is_exact() {
            Ok(self)
        } else {
            Err(WorkloadError::CheckFailed(self.to_string()))
        }
    }
}

fn opt_u64(v: Option<u64>) -> String {
    v.map_or_else(|| "none".to_string(), |v| v.to_string())
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_exact() {
            return write!(
                f,
                "ok: {} records exactly once, fingerprint {:#018x}",
                self.expected_records, self.fingerprint
            );
        }
        write!(
            f,
            "MISMATCH: received {} records for {} emitted ({} lost, {} duplicated, {} out of range)",
            self.received, self.expected_records, self.lost, self.duplicates, self.out_of_range
        )?;
        if let Some(n) = self.first_lost {
            write!(f, "; first lost record n={n}")?;
        }
        if let Some(m) = &self.first_wrong_key {
            write!(
                f,
                "; {} keys with a wrong last sum, first key {}: expected {}, got {}",
                self.wrong_keys,
                m.key,
                opt_u64(m.expected),
                opt_u64(m.actual)
            )?;
        }
        write!(
            f,
            "; fingerprint {:#018x}, expected {:#018x}",
            self.fingerprint, self.expected_fingerprint
        )?;
        if let Some(s) = &self.setup_mismatch {
            write!(f, "; {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::workload::testing::{simulate, spec_outputs};
    use crate::workload::{KeyDist, SinkCheck, SumRecord};

    #[test]
    fn closed_form_equals_simulation() {
        for (total, dist) in [
            (0u64, KeyDist::Uniform),
            (1, KeyDist::Uniform),
            (777, KeyDist::Uniform),
            (5000, KeyDist::Zipf(1.1)),
        ] {
            let keys = KeySpace::new(37, dist).unwrap();
            let expected = ExpectedResult::compute(total, &keys);
            let (sink, all) = simulate(total, &keys, 2, 2);
            let report = sink.verify(&expected);
            assert!(report.is_exact(), "{report}");
            assert_eq!(all.len() as u64, total);
            // The brute-force final sums, computed directly per key.
            let mut brute: HashMap<u64, u64> = HashMap::new();
            let outputs = spec_outputs(total as usize);
            for (n, out) in outputs.iter().enumerate() {
                let key = keys.key_of(*out);
                let s = brute.entry(key).or_insert(0);
                *s = s.wrapping_add(2 * n as u64 + 1);
            }
            for key in 0..37 {
                assert_eq!(expected.final_sum(key), brute.get(&key).copied());
                assert_eq!(sink.last_sum(key), brute.get(&key).copied());
            }
            assert_eq!(expected.fingerprint(), fingerprint(brute.into_iter()));
            // Other parallelisms give the same answer.
            let (sink3, _) = simulate(total, &keys, 3, 5);
            assert!(sink3.verify(&expected).is_exact());
        }
    }

    #[test]
    fn sources_stopped_at_their_positions_have_their_own_closed_form() {
        let keys = KeySpace::new(37, KeyDist::Uniform).unwrap();
        // Evens below 10 and odds below 11: the records 0..10.
        let e = ExpectedResult::of_positions(&[10, 11], 100, &keys);
        let prefix = ExpectedResult::compute(10, &keys);
        assert_eq!((e.total_records(), e.capacity()), (10, 100));
        assert_eq!(e.fingerprint(), prefix.fingerprint());
        assert!(e.is_emitted(9) && !e.is_emitted(10) && !e.is_emitted(11));
        // Uneven stops: source 1 ran further.
        let e = ExpectedResult::of_positions(&[4, 9], 100, &keys);
        let emitted: Vec<u64> = (0..100).filter(|n| e.is_emitted(*n)).collect();
        assert_eq!(emitted, [0, 1, 2, 3, 5, 7]);
        assert_eq!(e.total_records(), 6);
        let mut check = SinkCheck::new(100, 37).unwrap();
        let outputs = spec_outputs(100);
        let mut sums: HashMap<u64, u64> = HashMap::new();
        for &n in &emitted {
            let key = keys.key_of(outputs[n as usize]);
            let s = sums.entry(key).or_insert(0);
            *s = s.wrapping_add(chained_map(n));
            check.observe(&SumRecord {
                key,
                sum: *s,
                n,
                ts_ns: 0,
            });
        }
        let report = check.verify(&e);
        assert!(report.is_exact(), "{report}");
        // A record of the run's that did not arrive is the first lost,
        // not a number no source emitted.
        let mut short = SinkCheck::new(100, 37).unwrap();
        for &n in &emitted[..5] {
            let key = keys.key_of(outputs[n as usize]);
            short.observe(&SumRecord {
                key,
                sum: 0,
                n,
                ts_ns: 0,
            });
        }
        let report = short.verify(&e);
        assert_eq!((report.lost, report.first_lost), (1, Some(7)));
    }
}
