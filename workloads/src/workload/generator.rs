//! The records each source emits: the xorshift64* stream
//! ([`XorShift64Star`]), the key space that turns its outputs into keys
//! ([`KeySpace`], [`KeyDist`]), the 128 splits the records are made of
//! (for rescaling) and the [`Generator`] of a source's records, from any
//! position. Bit for bit the specification's, so that every system draws
//! the same records.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::WorkloadError;
use super::params::{MAX_KEYS, OUTPUT_MULTIPLIER, SEED};
use super::pipeline::Event;

/// The xorshift64* stream of workloads.md, seeded with [`SEED`]. One step
/// is `x ^= x >> 12; x ^= x << 25; x ^= x >> 27;`, its output
/// `x * 0x2545F4914F6CDD1D` (wrapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XorShift64Star {
    state: u64,
}

impl Default for XorShift64Star {
    fn default() -> Self {
        Self::new()
    }
}

impl XorShift64Star {
    /// A stream at its start (no step made yet).
    pub const fn new() -> Self {
        XorShift64Star { state: SEED }
    }

    #[inline]
    fn step(&mut self) {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
    }

    /// Makes one step and returns its output. The `(n + 1)`-th call on a
    /// fresh stream returns the output of record `n`.
    #[inline]
    pub fn next_output(&mut self) -> u64 {
        self.step();
        self.state.wrapping_mul(OUTPUT_MULTIPLIER)
    }

    /// Makes `steps` steps, discarding their outputs. Cost: O(steps), about
    /// 1 ns a step (20 M steps ≈ 20–40 ms).
    pub fn skip(&mut self, steps: u64) {
        for _ in 0..steps {
            self.step();
        }
    }

    /// The output of record `n` (O(n), see [`XorShift64Star::skip`]).
    pub fn output_of_record(n: u64) -> u64 {
        let mut rng = Self::new();
        rng.skip(n);
        rng.next_output()
    }
}

/// A key distribution: `uniform` or `zipf:s` (its text form, parsed by
/// [`FromStr`] and printed by [`fmt::Display`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum KeyDist {
    /// `key = output % keys`.
    Uniform,
    /// Zipf with exponent `s`: rank `r` has probability proportional to
    /// `1 / (r + 1)^s`.
    Zipf(f64),
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Uniform => f.write_str("uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
        }
    }
}

impl FromStr for KeyDist {
    type Err = WorkloadError;

    /// Parses `uniform` or `zipf:S` (S a finite number >= 0).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("uniform") {
            return Ok(KeyDist::Uniform);
        }
        let bad = || WorkloadError::BadKeyDist(text.to_string());
        let s = t
            .strip_prefix("zipf:")
            .ok_or_else(bad)?
            .trim()
            .parse::<f64>()
            .map_err(|_| bad())?;
        if !s.is_finite() || s < 0.0 {
            return Err(WorkloadError::BadZipfExponent(s));
        }
        Ok(KeyDist::Zipf(s))
    }
}

/// The keys of a workload: how many, and how an output of the generator
/// becomes a key. Cheap to clone (the Zipf table is shared).
#[derive(Clone, Debug)]
pub struct KeySpace {
    keys: u64,
    dist: KeyDist,
    /// Zipf only: `cdf[r]` = P(rank <= r), `keys` entries, the last 1.0.
    cdf: Option<Arc<[f64]>>,
}

impl KeySpace {
    /// A key space of `keys` keys (1..=[`MAX_KEYS`]) drawn from `dist`.
    ///
    /// For Zipf(s) it precomputes the CDF table (O(keys)): weights
    /// `w_r = (r + 1)^-s` (`f64::powf`), summed in increasing rank order,
    /// `cdf[r] = (w_0 + … + w_r) / (w_0 + … + w_{keys-1})`, so the last
    /// entry is exactly 1.0.
    ///
    /// Errors: [`WorkloadError::NoKeys`], [`WorkloadError::TooManyKeys`],
    /// [`WorkloadError::BadZipfExponent`].
    pub fn new(keys: u64, dist: KeyDist) -> Result<Self, WorkloadError> {
        if keys == 0 {
            return Err(WorkloadError::NoKeys);
        }
        if keys > MAX_KEYS {
            return Err(WorkloadError::TooManyKeys(keys));
        }
        let cdf = match dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(s) => {
                if !s.is_finite() || s < 0.0 {
                    return Err(WorkloadError::BadZipfExponent(s));
                }
                let mut table = Vec::with_capacity(keys as usize);
                let mut acc = 0.0_f64;
                for r in 0..keys {
                    acc += ((r + 1) as f64).powf(-s);
                    table.push(acc);
                }
                let total = acc;
                for c in &mut table {
                    *c /= total;
                }
                Some(Arc::from(table))
            }
        };
        Ok(KeySpace { keys, dist, cdf })
    }

    /// `keys` uniformly distributed keys.
    pub fn uniform(keys: u64) -> Result<Self, WorkloadError> {
        Self::new(keys, KeyDist::Uniform)
    }

    /// The number of keys.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// The distribution.
    pub fn dist(&self) -> KeyDist {
        self.dist
    }

    /// The Zipf CDF table (`None` for uniform).
    pub fn cdf(&self) -> Option<&[f64]> {
        self.cdf.as_deref()
    }

    /// The key of a generator output. Uniform: `output % keys`. Zipf: the
    /// smallest rank `r` with `cdf[r] >= u`, `u = output / 2^64` computed
    /// as `output as f64 / 2^64` (the conversion rounds to the nearest
    /// f64), by binary search (O(log keys)).
    #[inline]
    pub fn key_of(&self, output: u64) -> u64 {
        match &self.cdf {
            None => output % self.keys,
            Some(cdf) => {
                // 2^64 as an f64 (exact).
                const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
                let u = output as f64 / TWO_POW_64;
                let r = cdf.partition_point(|&c| c < u) as u64;
                // `u <= 1.0 == cdf[keys-1]`, so `r < keys`; the `min`
                // only guards against a table that breaks that invariant.
                r.min(self.keys - 1)
            }
        }
    }
}

/// The number of splits a reference workload's records are made of
/// (`workloads.md`, for rescaling): split `s` holds the records with
/// `n % SPLITS == s`; source `i` of `P` owns the splits with `s % P == i`.
/// For `P` dividing 128 that is the plain rule `n % P == i`.
pub const SPLITS: u16 = 128;

/// The source that owns split `split` at `parallelism`: `split % parallelism`.
#[inline]
pub fn split_owner(split: u16, parallelism: usize) -> usize {
    usize::from(split) % parallelism.max(1)
}

/// The split of record `n`: `n % SPLITS`.
#[inline]
pub fn split_of(n: u64) -> u16 {
    (n % u64::from(SPLITS)) as u16
}

/// The records of a set of splits, in increasing `n`, as `(n, key)`: for
/// source `i` of `P` ([`Generator::new`]) the records of its splits
/// (`(n % 128) % P == i`) from `first` to `total_records`; after a rescale
/// ([`Generator::of_splits`]) each split from its own position (splits
/// that were at different positions under their old sources: the ones
/// behind go first, as the stream walks `n` upward).
///
/// Each record costs as many steps of the stream as the gap to the next
/// owned record (about `P`): the source skips the other sources' outputs.
/// Starting at sequence number `n` steps the stream `n` times: O(n), about
/// 1 ns a step.
#[derive(Clone, Debug)]
pub struct Generator {
    rng: XorShift64Star,
    keys: KeySpace,
    /// The `n` of the next record; the stream has made exactly `next_n`
    /// steps.
    next_n: u64,
    end: u64,
    /// The owned splits, ascending (offsets within one period of 128).
    pattern: Vec<u16>,
    /// The index in `pattern` of `next_n`'s split.
    at: usize,
    /// Per owned split (as `pattern`), its first record still to emit;
    /// only read while `behind` is set.
    starts: Vec<u64>,
    /// Some split's start is beyond `next_n` (after a rescale): records
    /// below a split's start are skipped.
    behind: bool,
}

impl Generator {
    /// Source `source_index` of `parallelism`, from the job's first record.
    ///
    /// Errors: [`WorkloadError::ZeroParallelism`], [`WorkloadError::BadSource`].
    pub fn new(
        keys: &KeySpace,
        source_index: usize,
        parallelism: usize,
        total_records: u64,
    ) -> Result<Self, WorkloadError> {
        Self::starting_at(keys, source_index, parallelism, total_records, 0)
    }

    /// Source `source_index` of `parallelism`, from its first record whose
    /// sequence number is at least `from_n` (e.g. the checkpointed offset
    /// of a restored source). O(from_n): see the type's doc.
    ///
    /// Errors: [`WorkloadError::ZeroParallelism`], [`WorkloadError::BadSource`].
    pub fn starting_at(
        keys: &KeySpace,
        source_index: usize,
        parallelism: usize,
        total_records: u64,
        from_n: u64,
    ) -> Result<Self, WorkloadError> {
        if parallelism == 0 {
            return Err(WorkloadError::ZeroParallelism);
        }
        if source_index >= parallelism {
            return Err(WorkloadError::BadSource {
                source_index,
                parallelism,
            });
        }
        let splits: Vec<(u16, u64)> = (0..SPLITS)
            .filter(|s| split_owner(*s, parallelism) == source_index)
            .map(|s| (s, first_of_split_from(s, from_n)))
            .collect();
        Ok(Self::of_splits(keys, &splits, total_records))
    }

    /// The records of `splits`, each `(split, first n still to emit)` (a
    /// restored source's split positions, e.g. after a rescale), up to
    /// `total_records`. A position that is not of its split is rounded up
    /// to the split's next record. No splits: a generator with nothing to
    /// emit (a source of a parallelism above 128 owns none).
    pub fn of_splits(keys: &KeySpace, splits: &[(u16, u64)], total_records: u64) -> Self {
        let mut splits: Vec<(u16, u64)> = splits
            .iter()
            .map(|&(s, n)| (s % SPLITS, first_of_split_from(s % SPLITS, n)))
            .collect();
        splits.sort_unstable();
        splits.dedup_by_key(|(s, _)| *s);
        let pattern: Vec<u16> = splits.iter().map(|(s, _)| *s).collect();
        let starts: Vec<u64> = splits.iter().map(|(_, n)| *n).collect();
        let lowest = starts.iter().copied().min().unwrap_or(u64::MAX);
        let first = lowest.min(total_records);
        let at = pattern
            .iter()
            .position(|s| u64::from(*s) == first % u64::from(SPLITS))
            .unwrap_or(0);
        let mut rng = XorShift64Star::new();
        rng.skip(first);
        let behind = starts.iter().any(|n| *n > first);
        let mut g = Generator {
            rng,
            keys: keys.clone(),
            next_n: if pattern.is_empty() {
                total_records
            } else {
                first
            },
            end: total_records,
            pattern,
            at,
            starts,
            behind,
        };
        g.skip_to_due_split();
        g
    }

    /// Each owned split with the first record it has still to emit, for a
    /// checkpoint (what [`Generator::of_splits`] takes back).
    pub fn split_positions(&self) -> Vec<(u16, u64)> {
        self.pattern
            .iter()
            .enumerate()
            .map(|(j, &s)| {
                let walked = first_of_split_from(s, self.next_n);
                let pos = if self.behind {
                    walked.max(self.starts[j])
                } else {
                    walked
                };
                (s, pos.min(first_of_split_from(s, self.end)))
            })
            .collect()
    }

    /// The sequence number of the record [`Iterator::next`] returns next,
    /// `None` when the source is exhausted.
    pub fn next_n(&self) -> Option<u64> {
        (self.next_n < self.end).then_some(self.next_n)
    }

    /// The next record as an [`Event`] with `value = n` and the given
    /// intended emission time (before the chained map), `None` when done.
    #[inline]
    pub fn next_event(&mut self, ts_ns: u64) -> Option<Event> {
        self.next().map(|(n, key)| Event::generated(n, key, ts_ns))
    }

    /// The key space this source draws from.
    pub fn key_space(&self) -> &KeySpace {
        &self.keys
    }

    /// Moves `next_n` to the next owned record, stepping the stream.
    #[inline]
    fn advance(&mut self) {
        let len = self.pattern.len();
        let here = self.pattern[self.at];
        let next_at = if self.at + 1 == len { 0 } else { self.at + 1 };
        let gap = if next_at == 0 {
            SPLITS - here + self.pattern[0]
        } else {
            self.pattern[next_at] - here
        };
        self.at = next_at;
        self.next_n = self.next_n.saturating_add(u64::from(gap));
        if self.next_n < self.end {
            // The stream made one step for this record; skip the others'.
            self.rng.skip(u64::from(gap) - 1);
        }
    }

    /// While some split is behind: skips the records of splits whose
    /// position is beyond them.
    fn skip_to_due_split(&mut self) {
        while self.behind && self.next_n < self.end {
            if self.next_n >= self.starts[self.at] {
                if self.starts.iter().all(|s| *s <= self.next_n) {
                    self.behind = false;
                }
                return;
            }
            self.rng.skip(1);
            self.advance();
        }
    }
}

/// The first record of split `split` at or after `n`.
fn first_of_split_from(split: u16, n: u64) -> u64 {
    let period = u64::from(SPLITS);
    let base = n - n % period + u64::from(split);
    if base >= n {
        base
    } else {
        base.saturating_add(period)
    }
}

impl Iterator for Generator {
    /// `(n, key)`.
    type Item = (u64, u64);

    /// Always inlined: a reference source calls it for every record, and
    /// as a call it cost lockgate's W1 sources 7 instructions a record
    /// more than the raw pipeline, where it was inlined (callgrind,
    /// docs/benchmarks-history.md).
    #[inline(always)]
    fn next(&mut self) -> Option<(u64, u64)> {
        if self.next_n >= self.end {
            return None;
        }
        let n = self.next_n;
        let key = self.keys.key_of(self.rng.next_output());
        self.advance();
        if self.behind {
            self.skip_to_due_split();
        }
        Some((n, key))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left: u64 = self
            .split_positions()
            .iter()
            .map(|&(_, pos)| {
                if pos >= self.end {
                    0
                } else {
                    (self.end - 1 - pos) / u64::from(SPLITS) + 1
                }
            })
            .sum();
        let left = usize::try_from(left).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testing::spec_outputs;
    use crate::workload::{source_share, Workload};

    #[test]
    fn xorshift_matches_the_spec_formula() {
        let want = spec_outputs(1000);
        let mut rng = XorShift64Star::new();
        let got: Vec<u64> = (0..1000).map(|_| rng.next_output()).collect();
        assert_eq!(got, want);
        // The first output by hand: one step of the seed.
        let mut x = SEED;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        assert_eq!(got[0], x.wrapping_mul(OUTPUT_MULTIPLIER));
        assert_eq!(XorShift64Star::output_of_record(0), want[0]);
        assert_eq!(XorShift64Star::output_of_record(537), want[537]);
        // Not a constant stream.
        assert_ne!(got[0], got[1]);
    }

    #[test]
    fn partitions_cover_every_record_exactly_once() {
        let keys = KeySpace::uniform(97).unwrap();
        let outputs = spec_outputs(1001);
        let total = 1001;
        let single: Vec<(u64, u64)> = Generator::new(&keys, 0, 1, total).unwrap().collect();
        assert_eq!(single.len(), 1001);
        for (n, key) in &single {
            assert_eq!(*key, outputs[*n as usize] % 97);
        }
        for p in [2usize, 3, 7] {
            let mut all: Vec<(u64, u64)> = Vec::new();
            for i in 0..p {
                let part: Vec<(u64, u64)> = Generator::new(&keys, i, p, total).unwrap().collect();
                assert!(part.windows(2).all(|w| w[0].0 < w[1].0));
                assert!(part.iter().all(|(n, _)| (*n % 128) as usize % p == i));
                assert_eq!(part.len() as u64, source_share(total, i, p));
                all.extend(part);
            }
            all.sort();
            assert_eq!(all, single, "parallelism {p}");
        }
    }

    #[test]
    fn split_generators_rescaled_from_uneven_positions_emit_the_rest_once() {
        let keys = KeySpace::uniform(97).unwrap();
        let total = 5_000;
        let single: Vec<(u64, u64)> = Generator::new(&keys, 0, 1, total).unwrap().collect();
        // Two sources, stopped at different places.
        let mut old: Vec<Generator> = (0..2)
            .map(|i| Generator::new(&keys, i, 2, total).unwrap())
            .collect();
        let mut emitted: Vec<(u64, u64)> = old[0].by_ref().take(1_500).collect();
        emitted.extend(old[1].by_ref().take(300));
        let positions: Vec<(u16, u64)> = old.iter().flat_map(Generator::split_positions).collect();
        assert_eq!(positions.len(), 128);
        // Rescaled to 3: each takes its splits with their positions.
        for i in 0..3 {
            let mine: Vec<(u16, u64)> = positions
                .iter()
                .copied()
                .filter(|(s, _)| split_owner(*s, 3) == i)
                .collect();
            let g = Generator::of_splits(&keys, &mine, total);
            let n_left = g.size_hint().0;
            let part: Vec<(u64, u64)> = g.collect();
            assert_eq!(part.len(), n_left);
            assert!(part.windows(2).all(|w| w[0].0 < w[1].0));
            emitted.extend(part);
        }
        emitted.sort();
        assert_eq!(emitted, single);
    }

    #[test]
    fn generator_restarts_at_any_sequence_number() {
        let keys = KeySpace::new(50, KeyDist::Zipf(1.2)).unwrap();
        let full: Vec<(u64, u64)> = Generator::new(&keys, 1, 3, 500).unwrap().collect();
        for from in [0u64, 1, 2, 3, 4, 100, 101, 102, 499, 500, 10_000] {
            let tail: Vec<(u64, u64)> = Generator::starting_at(&keys, 1, 3, 500, from)
                .unwrap()
                .collect();
            let want: Vec<(u64, u64)> = full.iter().copied().filter(|(n, _)| *n >= from).collect();
            assert_eq!(tail, want, "from {from}");
        }
        let mut g = Generator::starting_at(&keys, 1, 3, 500, 5).unwrap();
        assert_eq!(g.next_n(), Some(7));
        assert_eq!(g.size_hint(), (full.len() - 2, Some(full.len() - 2)));
        let e = g.next_event(42).unwrap();
        assert_eq!((e.value, e.ts_ns), (7, 42));
    }

    #[test]
    fn generator_rejects_bad_sources() {
        let keys = KeySpace::uniform(10).unwrap();
        assert_eq!(
            Generator::new(&keys, 0, 0, 10).unwrap_err(),
            WorkloadError::ZeroParallelism
        );
        assert!(matches!(
            Generator::new(&keys, 2, 2, 10),
            Err(WorkloadError::BadSource { .. })
        ));
        assert_eq!(KeySpace::uniform(0).unwrap_err(), WorkloadError::NoKeys);
        assert!(KeySpace::new(10, KeyDist::Zipf(-1.0)).is_err());
        assert!(KeySpace::new(10, KeyDist::Zipf(f64::NAN)).is_err());
    }

    #[test]
    fn key_dist_parses() {
        assert_eq!("uniform".parse::<KeyDist>().unwrap(), KeyDist::Uniform);
        assert_eq!("zipf:1.1".parse::<KeyDist>().unwrap(), KeyDist::Zipf(1.1));
        let back: KeyDist = KeyDist::Zipf(0.99).to_string().parse().unwrap();
        assert_eq!(back, KeyDist::Zipf(0.99));
        assert!(matches!(
            "zipf".parse::<KeyDist>(),
            Err(WorkloadError::BadKeyDist(_))
        ));
        assert!(matches!(
            "zipf:-2".parse::<KeyDist>(),
            Err(WorkloadError::BadZipfExponent(_))
        ));
        assert_eq!("w3".parse::<Workload>().unwrap(), Workload::W3);
        assert_eq!("w4".parse::<Workload>().unwrap(), Workload::W4);
        assert!("W5".parse::<Workload>().is_err());
    }

    #[test]
    fn zipf_cdf_is_monotone_and_skewed() {
        let keys = KeySpace::new(1000, KeyDist::Zipf(1.1)).unwrap();
        let cdf = keys.cdf().unwrap();
        assert_eq!(cdf.len(), 1000);
        assert!(cdf.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(cdf[999], 1.0);
        // Extreme outputs map into range.
        assert_eq!(keys.key_of(0), 0);
        assert_eq!(keys.key_of(u64::MAX), 999);
        let mut counts = vec![0u64; 1000];
        let mut rng = XorShift64Star::new();
        for _ in 0..200_000 {
            counts[keys.key_of(rng.next_output()) as usize] += 1;
        }
        let top = counts
            .iter()
            .enumerate()
            .max_by_key(|(_, c)| **c)
            .unwrap()
            .0;
        assert_eq!(top, 0);
        assert!(counts[0] > counts[1] && counts[1] > counts[9] && counts[9] > counts[99]);
        // Rank 0 has probability cdf[0]; the sample is close to it.
        let p0 = counts[0] as f64 / 200_000.0;
        assert!((p0 - cdf[0]).abs() < 0.01, "{p0} vs {}", cdf[0]);
        // Inverse CDF: the key is the smallest rank with cdf >= u.
        for out in [1u64 << 60, 1 << 62, 3 << 62, u64::MAX / 3] {
            let u = out as f64 / 18_446_744_073_709_551_616.0;
            let k = keys.key_of(out) as usize;
            assert!(cdf[k] >= u);
            assert!(k == 0 || cdf[k - 1] < u);
        }
    }
}
