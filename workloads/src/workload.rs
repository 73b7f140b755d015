//! The engine-independent parts of the reference workloads W1, W2 and W3
//! (defined in `docs/workloads.md`): the records, the deterministic
//! generator, the chained map, the routing hash, the keyed running sum, the
//! pacing schedule and the closed-form correctness check.
//!
//! Every function here follows the workload specification to the bit, so
//! that every system running the workloads computes the same answer:
//!
//! - [`XorShift64Star`]: the generator's random stream. Record `n` (0-based,
//!   over the whole job) takes output number `n`, the output of the
//!   `(n + 1)`-th step.
//! - [`KeySpace`]: turns an output into a key (`uniform`: `output % keys`;
//!   `zipf:s`: inverse CDF over a precomputed table).
//! - [`Generator`]: the records `(n, key)` of source `i` of `P` (those with
//!   `n % P == i`, in increasing `n`), from any starting sequence number.
//! - [`chained_map`], [`key_to_subtask`] (the engine's own routing), [`KeyedSum`]: the rest of the pipeline.
//! - [`scheduled_offset_ns`], [`due_until`]: the open-loop schedule of W2/W3
//!   (with W3's bursts).
//! - [`ExpectedResult`], [`SinkCheck`], [`CheckReport`]: the correctness
//!   check every run ends with.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use lockgate::RecordSize;
use serde::{Deserialize, Serialize};

/// The seed of the generator's xorshift64* state (workloads.md).
pub const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
/// The multiplier that turns an xorshift64* state into an output
/// (workloads.md; the standard xorshift64* constant).
pub const OUTPUT_MULTIPLIER: u64 = 0x2545_F491_4F6C_DD1D;
/// The multiplier of the routing hash `(key * M) >> 32` (workloads.md): the
/// engine's own constant.
pub use lockgate::KEY_HASH_MULTIPLIER as HASH_MULTIPLIER;
/// The default number of distinct keys (workloads.md).
pub const DEFAULT_KEYS: u64 = 10_000;
/// The most keys a [`KeySpace`] accepts: 2^24. The Zipf table, the closed
/// form and the sink check each hold one 8-byte entry per key, so this caps
/// them at 128 MiB each.
pub const MAX_KEYS: u64 = 1 << 24;
/// The records of W1 in total (workloads.md).
pub const W1_TOTAL_RECORDS: u64 = 20_000_000;
/// The default total rate of W2 and W3, in records/s (workloads.md).
pub const DEFAULT_RATE: u64 = 200_000;
/// The unrecorded warm-up of W2 and W3, in ns (2 s, workloads.md).
pub const WARMUP_NS: u64 = 2_000_000_000;
/// The recorded duration of W2 and W3, in ns (10 s, workloads.md).
pub const MEASURE_NS: u64 = 10_000_000_000;
/// The checkpoint interval of the checkpointed runs, in ns (100 ms,
/// workloads.md).
pub const CHECKPOINT_INTERVAL_NS: u64 = 100_000_000;
/// The parallelism of the sources and of `keyed_sum` in the reference
/// topology (workloads.md).
pub const REFERENCE_PARALLELISM: usize = 2;
/// W3's burst period in ns: each 10 ms of a bursting source's schedule...
pub const BURST_PERIOD_NS: u64 = 10_000_000;
/// ...is squeezed into its first tenth (1 ms): offsets within a period are
/// divided by this factor (workloads.md, W3).
pub const BURST_SQUEEZE: u64 = 10;
/// W4's sink work per record: it spins on the monotonic clock until 5 µs
/// have passed since it started the record, so the job drains at most
/// 200,000 records/s (workloads.md, W4).
pub const W4_SINK_NS: u64 = 5_000;
/// The most records a [`SinkCheck`] tracks: 2^33, i.e. a 1 GiB bitset.
pub const MAX_CHECKED_RECORDS: u64 = 1 << 33;

const NS_PER_S: u128 = 1_000_000_000;

/// Errors of this module: bad configuration, or a failed correctness check.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// A key space needs at least one key.
    #[error("the number of keys must be at least 1")]
    NoKeys,
    /// More keys than [`MAX_KEYS`].
    #[error("too many keys: {0} (at most {MAX_KEYS})")]
    TooManyKeys(u64),
    /// A Zipf exponent must be finite and non-negative.
    #[error("invalid Zipf exponent {0}: it must be a finite number >= 0")]
    BadZipfExponent(f64),
    /// A key distribution string that is neither `uniform` nor `zipf:S`.
    #[error("unknown key distribution `{0}`: expected `uniform` or `zipf:S` with S a number >= 0 (e.g. `zipf:1.1`)")]
    BadKeyDist(String),
    /// A workload name that is not W1, W2, W3 or W4.
    #[error("unknown workload `{0}`: expected W1, W2, W3 or W4")]
    BadWorkload(String),
    /// Parallelism 0.
    #[error("the parallelism must be at least 1")]
    ZeroParallelism,
    /// A source index not below the parallelism.
    #[error("source index {source_index} is out of range for parallelism {parallelism}")]
    BadSource {
        /// The index given.
        source_index: usize,
        /// The parallelism given.
        parallelism: usize,
    },
    /// Checkpointed state that does not fit this check (another job's).
    #[error("bad checkpointed state: {0}")]
    BadState(String),
    /// More records than [`MAX_CHECKED_RECORDS`] for a [`SinkCheck`].
    #[error("too many records to check: {0} (at most {MAX_CHECKED_RECORDS})")]
    TooManyRecords(u64),
    /// A correctness check failed; the text says how (see [`CheckReport`]).
    #[error("workload check failed: {0}")]
    CheckFailed(String),
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

/// A record of the reference workloads (24 bytes).
///
/// `value` is the record's sequence number `n` when generated and
/// `2n + 1` after the source's chained map ([`chained_map`]); `ts_ns` is
/// the record's *intended* emission time on the engine's monotonic clock
/// (`lockgate::now_ns`): the schedule time for W2/W3, the actual
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

// ---------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------

pub use lockgate::{key_hash, key_to_subtask};

// ---------------------------------------------------------------------------
// Generator
// ---------------------------------------------------------------------------

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
    /// BENCHMARKS.md).
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

// ---------------------------------------------------------------------------
// Workloads and pacing
// ---------------------------------------------------------------------------

/// The reference workloads. Their names ("W1", "W2", "W3") are kept in
/// benchmark output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Workload {
    /// Throughput: closed loop, [`W1_TOTAL_RECORDS`] records.
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

// ---------------------------------------------------------------------------
// Correctness check
// ---------------------------------------------------------------------------

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
    /// [`SinkCheck`] is sized for): `total_records` unless the sources
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

/// The sink's side of the correctness check: counts records, keeps the last
/// `sum` per key, and counts lost and duplicated records by sequence number
/// (a bitset over `n` in `0..total_records`, 1 bit a record).
///
/// Keeping the *last* sum per key is sound although the sink merges two
/// inputs: all records of a key go to the same `keyed_sum` subtask (routing
/// is by key), which emits them in its processing order on one channel, and
/// a channel keeps order; so the last record of a key the sink sees carries
/// that key's final running sum. (The *order* of the keys' records is not
/// `n` order — two sources interleave — but the final sum is the same.)
///
/// Serde-serializable so that an exactly-once sink can checkpoint it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkCheck {
    total_records: u64,
    keys: u64,
    #[serde(with = "words_as_bytes")]
    seen: Vec<u64>,
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    #[serde(with = "words_as_bytes")]
    last_sum: Vec<u64>,
    #[serde(with = "words_as_bytes")]
    key_seen: Vec<u64>,
    /// What changed since the changes were last taken, once
    /// [`SinkCheck::track_changes`] was called (not serialized, not
    /// compared).
    #[serde(skip)]
    marks: Marks,
    /// The all-ones prefix and zero suffix of `seen`, kept by
    /// [`SinkCheck::apply_changes`] once [`SinkCheck::track_shape`] was
    /// called (not serialized, not compared).
    #[serde(skip)]
    shape: ShapeCache,
}

/// Where the sequence bitset's words stop being all ones and where they
/// start being all zeros: `seen[..ones]` are all ones, `seen[end..]` all
/// zeros, `ones <= end`. A compact full part ([`SinkCheck::compact`])
/// writes only `seen[ones..end]`: records arrive at the sink in about
/// their sequence order, so that is the stretch between the slowest and
/// the fastest source plus what is in flight (W1 mid-run: a few KB of a
/// 5 MB bitset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Shape {
    ones: u64,
    end: u64,
}

/// A kept [`Shape`] (a replica's), or none (it is then found by a scan).
#[derive(Clone, Debug, Default)]
struct ShapeCache(Option<Shape>);

impl PartialEq for ShapeCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ShapeCache {}

/// The words of `seen` and the keys of `last_sum` changed since the last
/// [`SinkCheck::take_changes`]: a mark bit per word (a mark word per block
/// of 64 words, each block listed once) and per key.
#[derive(Clone, Debug, Default)]
struct Marks(Option<Box<ChangeMarks>>);

#[derive(Clone, Debug)]
struct ChangeMarks {
    /// The blocks whose mark word is not zero, in the order they were
    /// first marked.
    blocks: Vec<u64>,
    /// Mark word `b` holds a bit per word of block `b` (words `64 b ..
    /// 64 b + 64`).
    word_marks: Vec<u64>,
    /// The word marked last (`u64::MAX`: none since the last take): the
    /// records of a batch run through a few words in order (a 1,000-record
    /// batch of W1 covers about 31), so one compare skips most bit tests.
    last_word: u64,
    /// Whether changed keys are marked (the last sums are larger than
    /// [`SUMS_TAKEN_WHOLE_BYTES`]); if not, every key seen counts as
    /// changed and `key_marks` is empty.
    keys_marked: bool,
    /// The changed keys when `keys_marked`; otherwise a list kept for its
    /// capacity, filled with every seen key at each take.
    keys: Vec<u64>,
    key_marks: Vec<u64>,
}

/// 128 KiB of last sums (16,384 keys): up to this size a snapshot's
/// changes take every seen key's sum instead of marking the keys that
/// changed. Marking costs the sink a bit test, a store and a branch for
/// every record, most of the 10.6 instructions a record that tracking
/// changes added to W1's sink (callgrind: `RefSink::write` 50.0 → 71.3 M
/// instructions for 2 M records, BENCHMARKS.md), several ms of the sink
/// thread's CPU per 100 ms checkpoint interval at W1's rate; listing
/// 16,384 sums from the seen-key bitset costs the synchronous part tens of
/// µs once per checkpoint. With W1's and W2's 10,000 keys nearly every
/// key changes within a 100 ms interval anyway (86 % at W2's 200,000
/// records/s, all of them at W1's rate), so the delta is hardly larger;
/// past this size (W2 with 1,000,000 keys: 8 MB of sums) keys are marked
/// and the synchronous part stays O(changes).
pub const SUMS_TAKEN_WHOLE_BYTES: usize = 128 << 10;

impl PartialEq for Marks {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Marks {}

/// What changed in a [`SinkCheck`] over some time: the new values of the
/// changed words of the sequence bitset and the new last sums of the
/// changed keys, with the counters (O(changes) to take and to encode).
///
/// The changed words come in blocks of 64 words (4,096 sequence numbers,
/// one word of the change marks): a block whose words are now all ones is
/// a run (`ones`, merged with its neighbours), the words of any other
/// block are listed one by one (`words`). The sequence numbers of a run
/// all arrive sooner or later, so most changed blocks end full: a 100 ms
/// interval of W1 changes about 85,000 words, which took 1.1 MB as
/// `(index, word)` varint pairs, and takes a few runs and the few hundred
/// words at the sources' frontiers this way (BENCHMARKS.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkChanges {
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    /// `(first word, words)` of the sequence bitset, each word now all
    /// ones; ascending, not adjacent to each other.
    ones: Vec<(u64, u64)>,
    /// (word index, word) of the sequence bitset, ascending, outside the
    /// runs.
    words: Vec<(u64, u64)>,
    /// (key, last sum); the key has been seen.
    sums: Vec<(u64, u64)>,
}

/// [`SinkChanges`] as checkpoints wrote them before runs of full blocks
/// (`words` only): read to restore such a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkChangesV1 {
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    words: Vec<(u64, u64)>,
    sums: Vec<(u64, u64)>,
}

impl SinkChangesV1 {
    /// The changed words, to craft a part in this layout.
    #[cfg(test)]
    pub(crate) fn words_mut(&mut self) -> &mut Vec<(u64, u64)> {
        &mut self.words
    }
}

impl From<SinkChangesV1> for SinkChanges {
    fn from(v1: SinkChangesV1) -> Self {
        SinkChanges {
            received: v1.received,
            distinct: v1.distinct,
            duplicates: v1.duplicates,
            out_of_range: v1.out_of_range,
            ones: Vec::new(),
            words: v1.words,
            sums: v1.sums,
        }
    }
}

impl From<&SinkChanges> for SinkChangesV1 {
    /// The older layout of the same changes (the runs listed word by
    /// word), for tests of restores across versions.
    fn from(c: &SinkChanges) -> Self {
        let mut words: Vec<(u64, u64)> = c
            .ones
            .iter()
            .flat_map(|&(first, n)| (first..first + n).map(|w| (w, u64::MAX)))
            .chain(c.words.iter().copied())
            .collect();
        words.sort_unstable();
        SinkChangesV1 {
            received: c.received,
            distinct: c.distinct,
            duplicates: c.duplicates,
            out_of_range: c.out_of_range,
            words,
            sums: c.sums.clone(),
        }
    }
}

impl SinkChanges {
    /// Changed words of the sequence bitset (those of the runs included).
    pub fn word_count(&self) -> usize {
        self.ones.iter().map(|&(_, n)| n as usize).sum::<usize>() + self.words.len()
    }

    /// Changed keys.
    pub fn key_count(&self) -> usize {
        self.sums.len()
    }

    /// The changed words' indices: the runs' words, then the others.
    pub fn word_indices(&self) -> impl Iterator<Item = u64> + '_ {
        self.ones
            .iter()
            .flat_map(|&(first, n)| first..first + n)
            .chain(self.words.iter().map(|(w, _)| *w))
    }

    /// The changed keys, in the order they were taken.
    pub fn keys_iter(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.sums.iter().map(|(k, _)| *k)
    }
}

/// The bytes of `v` as a postcard varint (7 bits a byte).
fn varint_len(v: u64) -> u64 {
    u64::from(64 - v.max(1).leading_zeros()).div_ceil(7)
}

/// The bytes of `n` words serialized by `words_as_bytes`: the byte
/// string's length as a varint, then 8 bytes a word.
fn words_len(n: u64) -> u64 {
    varint_len(8 * n) + 8 * n
}

/// A [`SinkCheck`] in the compact layout of full parts: the sequence
/// bitset as the count of its leading all-ones words and the words after
/// them up to its zero suffix. Borrowed from a check to serialize
/// ([`SinkCheck::compact`]), owned when deserialized, then made a check
/// by [`SinkCheck::from_compact`].
#[derive(Debug, Serialize, Deserialize)]
pub struct CompactCheck<'a> {
    total_records: u64,
    keys: u64,
    ones: u64,
    #[serde(with = "words_as_bytes::cow")]
    middle: Cow<'a, [u64]>,
    received: u64,
    distinct: u64,
    duplicates: u64,
    out_of_range: u64,
    #[serde(with = "words_as_bytes::cow")]
    last_sum: Cow<'a, [u64]>,
    #[serde(with = "words_as_bytes::cow")]
    key_seen: Cow<'a, [u64]>,
}

/// Serializes a word vector as one byte string (little-endian words):
/// a memory copy, where the default encoding (one varint per word, ~10
/// bytes for a random bitset word) costs several ms per MB on the sink's
/// thread at every checkpoint.
mod words_as_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Little-endian words as one byte string. On a little-endian
    /// machine that is the words' own memory, passed without a copy (the
    /// full part of W1's sink state is a 2.5 MB bitset: the copy cost the
    /// snapshot thread a fresh 2.5 MB buffer and its page faults at every
    /// full checkpoint, `perf record`, BENCHMARKS.md).
    pub(super) fn serialize<S: Serializer>(words: &[u64], s: S) -> Result<S::Ok, S::Error> {
        if cfg!(target_endian = "little") {
            return s.serialize_bytes(bytemuck::cast_slice(words));
        }
        let mut bytes = Vec::with_capacity(words.len() * 8);
        for w in words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        s.serialize_bytes(&bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        let bytes: Vec<u8> = serde::de::Deserialize::deserialize(d).map(|b: ByteBuf| b.0)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(format!(
                "a word vector needs a multiple of 8 bytes, got {}",
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// The same for a word slice that is borrowed to serialize and owned
    /// once deserialized.
    pub(super) mod cow {
        use std::borrow::Cow;

        use serde::Deserializer;

        pub(in super::super) use super::serialize;

        pub(in super::super) fn deserialize<'de, 'a, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Cow<'a, [u64]>, D::Error> {
            super::deserialize(d).map(Cow::Owned)
        }
    }

    /// A byte string read as serde bytes (what `serialize_bytes` wrote).
    struct ByteBuf(Vec<u8>);

    impl<'de> Deserialize<'de> for ByteBuf {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = ByteBuf;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a byte string")
                }
                fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v.to_vec()))
                }
                fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<ByteBuf, A::Error> {
                    let mut out = Vec::new();
                    while let Some(b) = seq.next_element::<u8>()? {
                        out.push(b);
                    }
                    Ok(ByteBuf(out))
                }
            }
            d.deserialize_bytes(V)
        }
    }
}

#[inline]
fn bit_test_and_set(bits: &mut [u64], i: u64) -> bool {
    let (word, mask) = ((i / 64) as usize, 1u64 << (i % 64));
    let was = bits[word] & mask != 0;
    bits[word] |= mask;
    was
}

#[inline]
fn bit_test(bits: &[u64], i: u64) -> bool {
    bits[(i / 64) as usize] & (1u64 << (i % 64)) != 0
}

impl SinkCheck {
    /// A check for a run of `total_records` records over `keys` keys.
    ///
    /// Errors: [`WorkloadError::TooManyRecords`] above
    /// [`MAX_CHECKED_RECORDS`], [`WorkloadError::NoKeys`],
    /// [`WorkloadError::TooManyKeys`].
    pub fn new(total_records: u64, keys: u64) -> Result<Self, WorkloadError> {
        if total_records > MAX_CHECKED_RECORDS {
            return Err(WorkloadError::TooManyRecords(total_records));
        }
        if keys == 0 {
            return Err(WorkloadError::NoKeys);
        }
        if keys > MAX_KEYS {
            return Err(WorkloadError::TooManyKeys(keys));
        }
        Ok(SinkCheck {
            total_records,
            keys,
            seen: vec![0; total_records.div_ceil(64) as usize],
            received: 0,
            distinct: 0,
            duplicates: 0,
            out_of_range: 0,
            last_sum: vec![0; keys as usize],
            key_seen: vec![0; keys.div_ceil(64) as usize],
            marks: Marks::default(),
            shape: ShapeCache::default(),
        })
    }

    /// Checks that a check read from a checkpoint is whole: its bitsets
    /// and sums have the lengths its record and key counts give, within
    /// [`MAX_CHECKED_RECORDS`] and [`MAX_KEYS`]. A decoded check is
    /// otherwise taken as it is, and a short bitset made the sink panic on
    /// its first record out of it (a crafted part whose CRC was fixed up).
    ///
    /// # Errors
    /// [`WorkloadError::BadState`] naming the first length that is wrong.
    ///
    /// ```
    /// use lockgate_workloads::workload::SinkCheck;
    /// let check = SinkCheck::new(1_000, 10).unwrap();
    /// assert!(check.validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |what: &str, len: usize, want: u64| {
            Err(WorkloadError::BadState(format!(
                "sink check of {} records over {} keys: {what} holds {len} words, not {want}",
                self.total_records, self.keys
            )))
        };
        if self.total_records > MAX_CHECKED_RECORDS || self.keys == 0 || self.keys > MAX_KEYS {
            return Err(WorkloadError::BadState(format!(
                "sink check of {} records over {} keys: out of range",
                self.total_records, self.keys
            )));
        }
        if self.seen.len() as u64 != self.total_records.div_ceil(64) {
            return bad(
                "the sequence bitset",
                self.seen.len(),
                self.total_records.div_ceil(64),
            );
        }
        if self.last_sum.len() as u64 != self.keys {
            return bad("the last sums", self.last_sum.len(), self.keys);
        }
        if self.key_seen.len() as u64 != self.keys.div_ceil(64) {
            return bad(
                "the seen-key bitset",
                self.key_seen.len(),
                self.keys.div_ceil(64),
            );
        }
        Ok(())
    }

    /// The number of records and of keys this check is sized for.
    pub fn sizes(&self) -> (u64, u64) {
        (self.total_records, self.keys)
    }

    /// From now on, record which words and keys change, for
    /// [`SinkCheck::take_changes`] (costs a compare per record, a bit test
    /// when a record's word is not the last one's, and 1 bit per word of
    /// memory; with more than [`SUMS_TAKEN_WHOLE_BYTES`] of last sums, a
    /// bit test per record and 1 bit per key as well, and with fewer every
    /// seen key counts as changed).
    pub fn track_changes(&mut self) {
        let keys_marked = self.last_sum.len() * 8 > SUMS_TAKEN_WHOLE_BYTES;
        self.marks = Marks(Some(Box::new(ChangeMarks {
            blocks: Vec::new(),
            word_marks: vec![0; self.seen.len().div_ceil(64)],
            last_word: u64::MAX,
            keys_marked,
            keys: Vec::new(),
            key_marks: if keys_marked {
                vec![0; self.last_sum.len().div_ceil(64)]
            } else {
                Vec::new()
            },
        })));
    }

    /// What changed since changes were tracked or last taken (O(changes),
    /// and with at most [`SUMS_TAKEN_WHOLE_BYTES`] of last sums, every
    /// seen key's). Without [`SinkCheck::track_changes`]: everything.
    pub fn take_changes(&mut self) -> SinkChanges {
        let mut out = SinkChanges::default();
        self.take_changes_into(&mut out);
        out
    }

    /// [`SinkCheck::take_changes`] into `out`, whose lists are emptied and
    /// refilled: a `SinkChanges` handed back after an earlier snapshot
    /// lends its capacity, so the sink's synchronous snapshot part
    /// allocates nothing (a fresh list of W1's ~60,000 changed words a
    /// checkpoint, about 1 MB, came from fresh pages that the kernel
    /// zeroed on the sink's thread: `perf record`, BENCHMARKS.md).
    ///
    /// ```
    /// use lockgate_workloads::workload::{SinkChanges, SinkCheck, SumRecord};
    /// let mut check = SinkCheck::new(1_000, 10).unwrap();
    /// check.track_changes();
    /// check.observe(&SumRecord { key: 3, sum: 7, n: 130, ts_ns: 0 });
    /// let mut changes = SinkChanges::default();
    /// check.take_changes_into(&mut changes);
    /// assert_eq!((changes.word_count(), changes.key_count()), (1, 1));
    /// // No word changed since; with few keys every seen key is taken.
    /// check.take_changes_into(&mut changes);
    /// assert_eq!((changes.word_count(), changes.key_count()), (0, 1));
    /// ```
    pub fn take_changes_into(&mut self, out: &mut SinkChanges) {
        let Some(mut m) = self.marks.0.take() else {
            let mut keys = Vec::new();
            self.seen_keys_into(&mut keys);
            let blocks = self.seen.len().div_ceil(64) as u64;
            self.changes_into((0..blocks).map(|b| (b, self.block_mask(b))), &keys, out);
            return;
        };
        if !m.keys_marked {
            self.seen_keys_into(&mut m.keys);
        }
        // Ascending, so that full blocks next to each other make one run
        // (a few thousand blocks at most a W1 interval: the sort is tens
        // of µs).
        m.blocks.sort_unstable();
        let marks = &mut m.word_marks;
        self.changes_into(
            m.blocks
                .iter()
                .map(|&b| (b, std::mem::take(&mut marks[b as usize]))),
            &m.keys,
            out,
        );
        m.last_word = u64::MAX;
        if m.keys_marked {
            for &k in &m.keys {
                m.key_marks[(k / 64) as usize] &= !(1u64 << (k % 64));
            }
        }
        // Emptied, not replaced: the lists keep their capacity for the
        // next interval, which changes about as many words and keys (a
        // fresh list grew by doubling into fresh pages at every
        // checkpoint, on the sink's thread: 2 % of W1's samples).
        m.blocks.clear();
        m.keys.clear();
        self.marks.0 = Some(m);
    }

    /// The mark word of every word of block `b` (64 words, fewer in the
    /// last block).
    fn block_mask(&self, b: u64) -> u64 {
        let words = (self.seen.len() as u64 - b * 64).min(64);
        if words == 64 {
            u64::MAX
        } else {
            (1u64 << words) - 1
        }
    }

    /// The current values of words `words` and keys `keys`, with the
    /// counters (`words` in any order, repeats allowed).
    pub fn changes_of(&self, words: &[u64], keys: &[u64]) -> SinkChanges {
        let mut sorted = words.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut blocks: Vec<(u64, u64)> = Vec::new();
        for w in sorted {
            match blocks.last_mut() {
                Some((b, marks)) if *b == w / 64 => *marks |= 1u64 << (w % 64),
                _ => blocks.push((w / 64, 1u64 << (w % 64))),
            }
        }
        let mut out = SinkChanges::default();
        self.changes_into(blocks.into_iter(), keys, &mut out);
        out
    }

    /// Every key seen, in order, into `keys` (emptied first): O(keys / 64)
    /// words scanned, a push per seen key.
    fn seen_keys_into(&self, keys: &mut Vec<u64>) {
        keys.clear();
        for (i, &bits) in self.key_seen.iter().enumerate() {
            let mut rest = bits;
            while rest != 0 {
                keys.push(i as u64 * 64 + u64::from(rest.trailing_zeros()));
                rest &= rest - 1;
            }
        }
    }

    /// The changes of `blocks` (ascending `(block, mark word)`: the marked
    /// words of each block) and of keys `keys` into `out` (its lists
    /// emptied first, their capacity kept): a block now all ones joins a
    /// run, whatever its marks; another gives its marked words.
    fn changes_into(
        &self,
        blocks: impl Iterator<Item = (u64, u64)>,
        keys: &[u64],
        out: &mut SinkChanges,
    ) {
        out.received = self.received;
        out.distinct = self.distinct;
        out.duplicates = self.duplicates;
        out.out_of_range = self.out_of_range;
        out.ones.clear();
        out.words.clear();
        let len = self.seen.len() as u64;
        for (b, marks) in blocks {
            if marks == 0 {
                continue;
            }
            let (lo, hi) = (b * 64, (b * 64 + 64).min(len));
            if self.seen[lo as usize..hi as usize]
                .iter()
                .all(|&w| w == u64::MAX)
            {
                match out.ones.last_mut() {
                    Some((first, n)) if *first + *n == lo => *n += hi - lo,
                    _ => out.ones.push((lo, hi - lo)),
                }
                continue;
            }
            let mut rest = marks;
            while rest != 0 {
                let w = lo + u64::from(rest.trailing_zeros());
                out.words.push((w, self.seen[w as usize]));
                rest &= rest - 1;
            }
        }
        out.sums.clear();
        out.sums
            .extend(keys.iter().map(|&k| (k, self.last_sum[k as usize])));
    }

    /// Applies `changes` taken from a check of the same size.
    ///
    /// # Errors
    /// A word or key out of range (changes of another check).
    pub fn apply_changes(&mut self, changes: &SinkChanges) -> Result<(), WorkloadError> {
        let bad = || WorkloadError::BadState("sink check changes out of range".into());
        let len = self.seen.len() as u64;
        for &(first, n) in &changes.ones {
            let end = first.checked_add(n).filter(|e| *e <= len).ok_or_else(bad)?;
            self.seen[first as usize..end as usize].fill(u64::MAX);
        }
        for &(w, bits) in &changes.words {
            *self.seen.get_mut(w as usize).ok_or_else(bad)? = bits;
        }
        for &(k, sum) in &changes.sums {
            *self.last_sum.get_mut(k as usize).ok_or_else(bad)? = sum;
            bit_test_and_set(&mut self.key_seen, k);
        }
        self.received = changes.received;
        self.distinct = changes.distinct;
        self.duplicates = changes.duplicates;
        self.out_of_range = changes.out_of_range;
        if let Some(shape) = self.shape.0 {
            self.shape.0 = Some(self.shape_after(shape, changes));
        }
        Ok(())
    }

    /// The shape after `changes` were applied to a check of shape `old`:
    /// O(changes), and the distance the all-ones prefix moves (amortized
    /// O(changes) too: words only gain bits in a run).
    fn shape_after(&self, old: Shape, changes: &SinkChanges) -> Shape {
        let len = self.seen.len() as u64;
        let (mut ones, mut end) = (old.ones, old.end);
        let mut end_cleared = false;
        for &(first, n) in &changes.ones {
            end = end.max(first + n);
        }
        for &(w, _) in &changes.words {
            let v = self.seen[w as usize];
            if v != u64::MAX {
                ones = ones.min(w);
            }
            if v != 0 {
                end = end.max(w + 1);
            } else if w + 1 == end {
                end_cleared = true;
            }
        }
        while ones < len && self.seen[ones as usize] == u64::MAX {
            ones += 1;
        }
        if end_cleared {
            while end > 0 && self.seen[end as usize - 1] == 0 {
                end -= 1;
            }
        }
        Shape {
            ones,
            end: end.max(ones),
        }
    }

    /// The shape found by a scan of the whole bitset (O(records / 64)).
    fn scan_shape(&self) -> Shape {
        let len = self.seen.len();
        let ones = self.seen.iter().position(|&w| w != u64::MAX).unwrap_or(len);
        let end = self.seen.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        Shape {
            ones: ones as u64,
            end: end.max(ones) as u64,
        }
    }

    /// From now on, keep the bitset's all-ones prefix and zero suffix as
    /// [`SinkCheck::apply_changes`] changes them, so that
    /// [`SinkCheck::compact_encoded_size`] is O(1) (one scan now). For a
    /// replica that changes only through `apply_changes`: records taken
    /// with [`SinkCheck::observe`] are not followed (a debug build
    /// panics).
    pub fn track_shape(&mut self) {
        self.shape.0 = Some(self.scan_shape());
    }

    /// A copy of this check whose shape is kept, for a replica: its
    /// bitset's zero suffix is left as the allocator's zeroed memory, not
    /// copied (a restored check early in a run of 2^33 records is 1 GiB
    /// of bitset, nearly all of it that suffix). Changes are not tracked
    /// in the copy.
    pub fn replica(&self) -> Self {
        let shape = self.scan_shape();
        let mut seen = vec![0u64; self.seen.len()];
        let end = shape.end as usize;
        seen[..end].copy_from_slice(&self.seen[..end]);
        SinkCheck {
            seen,
            last_sum: self.last_sum.clone(),
            key_seen: self.key_seen.clone(),
            marks: Marks::default(),
            shape: ShapeCache(Some(shape)),
            ..*self
        }
    }

    /// An empty check of `self`'s sizes whose shape is kept (as
    /// [`SinkCheck::track_shape`] would, without the scan): the replica of
    /// a check that nothing has changed yet, made without a copy. Its
    /// zeroed memory is touched only as changes fill it.
    pub fn empty_replica(&self) -> Self {
        let mut check =
            SinkCheck::new(self.total_records, self.keys).expect("the sizes of a check are valid");
        check.shape.0 = Some(Shape::default());
        check
    }

    fn shape(&self) -> Shape {
        self.shape.0.unwrap_or_else(|| self.scan_shape())
    }

    /// This check in the compact layout of full parts (the bitset's
    /// all-ones prefix as a count, its zero suffix left out), to
    /// serialize; [`SinkCheck::from_compact`] reads it back.
    pub fn compact(&self) -> CompactCheck<'_> {
        let shape = self.shape();
        CompactCheck {
            total_records: self.total_records,
            keys: self.keys,
            ones: shape.ones,
            middle: Cow::Borrowed(&self.seen[shape.ones as usize..shape.end as usize]),
            received: self.received,
            distinct: self.distinct,
            duplicates: self.duplicates,
            out_of_range: self.out_of_range,
            last_sum: Cow::Borrowed(&self.last_sum),
            key_seen: Cow::Borrowed(&self.key_seen),
        }
    }

    /// The exact size in bytes of [`SinkCheck::compact`]'s postcard
    /// encoding: O(1) after [`SinkCheck::track_shape`], else a scan.
    pub fn compact_encoded_size(&self) -> u64 {
        let shape = self.shape();
        varint_len(self.total_records)
            + varint_len(self.keys)
            + varint_len(shape.ones)
            + words_len(shape.end - shape.ones)
            + varint_len(self.received)
            + varint_len(self.distinct)
            + varint_len(self.duplicates)
            + varint_len(self.out_of_range)
            + words_len(self.last_sum.len() as u64)
            + words_len(self.key_seen.len() as u64)
    }

    /// The check that `compact` describes, if its sizes are `sizes`
    /// (records, keys): those are compared before the bitset is rebuilt,
    /// so a corrupt record count cannot make it allocate gigabytes.
    ///
    /// # Errors
    /// [`WorkloadError::BadState`] for other sizes or a bitset longer than
    /// its record count gives, and [`SinkCheck::validate`]'s errors.
    pub fn from_compact(
        compact: CompactCheck<'_>,
        sizes: (u64, u64),
    ) -> Result<Self, WorkloadError> {
        let (records, keys) = sizes;
        if (compact.total_records, compact.keys) != sizes {
            return Err(WorkloadError::BadState(format!(
                "the checkpointed sink check is for {} records over {} keys, this job's for {records} over {keys}",
                compact.total_records, compact.keys
            )));
        }
        let len = records.div_ceil(64);
        let stored = compact.ones.saturating_add(compact.middle.len() as u64);
        if stored > len {
            return Err(WorkloadError::BadState(format!(
                "sink check of {records} records: its bitset holds {stored} words, more than {len}"
            )));
        }
        // Zeroed by the allocator (fresh memory is not written), then the
        // prefix and the middle: the zero suffix, most of a large check
        // early in its run, costs no writes.
        let mut seen = vec![0u64; len as usize];
        let ones = compact.ones as usize;
        seen[..ones].fill(u64::MAX);
        seen[ones..ones + compact.middle.len()].copy_from_slice(&compact.middle);
        let check = SinkCheck {
            total_records: records,
            keys,
            seen,
            received: compact.received,
            distinct: compact.distinct,
            duplicates: compact.duplicates,
            out_of_range: compact.out_of_range,
            last_sum: compact.last_sum.into_owned(),
            key_seen: compact.key_seen.into_owned(),
            marks: Marks::default(),
            shape: ShapeCache::default(),
        };
        check.validate()?;
        Ok(check)
    }

    /// The exact size of this check's postcard encoding, bytes, computed
    /// in O(1) (the encoding itself copies every word).
    pub fn encoded_size(&self) -> u64 {
        varint_len(self.total_records)
            + varint_len(self.keys)
            + words_len(self.seen.len() as u64)
            + varint_len(self.received)
            + varint_len(self.distinct)
            + varint_len(self.duplicates)
            + varint_len(self.out_of_range)
            + words_len(self.last_sum.len() as u64)
            + words_len(self.key_seen.len() as u64)
    }

    /// Takes one record the sink received. A record whose `n` or key is out
    /// of range counts in [`SinkCheck::received`] and
    /// [`SinkCheck::out_of_range`] only.
    ///
    /// Always inlined: the reference sink calls it for every record, and
    /// as a call (register saves, the record copied into an argument) it
    /// cost lockgate's W1 sink 10 instructions a record more than the raw
    /// pipeline, where it was inlined (callgrind, BENCHMARKS.md).
    #[inline(always)]
    pub fn observe(&mut self, record: &SumRecord) {
        debug_assert!(
            self.shape.0.is_none(),
            "a replica's shape does not follow observe"
        );
        self.received += 1;
        if record.n >= self.total_records || record.key >= self.keys {
            self.out_of_range += 1;
            return;
        }
        if bit_test_and_set(&mut self.seen, record.n) {
            self.duplicates += 1;
        } else {
            self.distinct += 1;
        }
        bit_test_and_set(&mut self.key_seen, record.key);
        self.last_sum[record.key as usize] = record.sum;
        if let Some(m) = self.marks.0.as_deref_mut() {
            let w = record.n / 64;
            if w != m.last_word {
                m.last_word = w;
                let marks = &mut m.word_marks[(w / 64) as usize];
                if *marks == 0 {
                    m.blocks.push(w / 64);
                }
                *marks |= 1u64 << (w % 64);
            }
            if m.keys_marked && !bit_test_and_set(&mut m.key_marks, record.key) {
                m.keys.push(record.key);
            }
        }
    }

    /// Records received (all of them).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Distinct in-range sequence numbers received.
    pub fn distinct(&self) -> u64 {
        self.distinct
    }

    /// Records whose sequence number had already been received.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Sequence numbers in `0..total_records` never received.
    pub fn lost(&self) -> u64 {
        self.total_records - self.distinct
    }

    /// Records with `n >= total_records` or `key >= keys`.
    pub fn out_of_range(&self) -> u64 {
        self.out_of_range
    }

    /// The first sequence number never received, if any (O(total / 64)).
    pub fn first_lost(&self) -> Option<u64> {
        self.seen.iter().enumerate().find_map(|(w, &bits)| {
            let n = w as u64 * 64 + u64::from((!bits).trailing_zeros());
            ((!bits) != 0 && n < self.total_records).then_some(n)
        })
    }

    /// The last sum received for `key`, `None` before any.
    pub fn last_sum(&self, key: u64) -> Option<u64> {
        (key < self.keys && bit_test(&self.key_seen, key)).then(|| self.last_sum[key as usize])
    }

    /// The fingerprint of the last sums received ([`fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        fingerprint((0..self.keys).filter_map(|k| self.last_sum(k).map(|s| (k, s))))
    }

    /// Compares what was received with the closed form (O(keys + total /
    /// 64)).
    pub fn verify(&self, expected: &ExpectedResult) -> CheckReport {
        let mut setup_mismatch = None;
        if expected.capacity() != self.total_records || expected.keys() != self.keys {
            setup_mismatch = Some(format!(
                "the sink checked {} records over {} keys but the expectation is for {} records over {} keys",
                self.total_records,
                self.keys,
                expected.capacity(),
                expected.keys()
            ));
        }
        // The first record of the run's that never arrived.
        let first_lost = self.seen.iter().enumerate().find_map(|(w, &bits)| {
            let missing = !bits;
            (missing != 0).then(|| {
                (0..64)
                    .filter(|b| missing & (1 << b) != 0)
                    .map(|b| w as u64 * 64 + b)
                    .find(|n| *n < self.total_records && expected.is_emitted(*n))
            })?
        });
        let mut wrong_keys = 0;
        let mut first_wrong_key = None;
        for key in 0..self.keys.max(expected.keys()) {
            let (want, got) = (expected.final_sum(key), self.last_sum(key));
            if want != got {
                wrong_keys += 1;
                first_wrong_key.get_or_insert(KeyMismatch {
                    key,
                    expected: want,
                    actual: got,
                });
            }
        }
        CheckReport {
            expected_records: expected.total_records(),
            received: self.received,
            distinct: self.distinct,
            lost: expected.total_records().saturating_sub(self.distinct),
            first_lost,
            duplicates: self.duplicates,
            out_of_range: self.out_of_range,
            wrong_keys,
            first_wrong_key,
            expected_fingerprint: expected.fingerprint(),
            fingerprint: self.fingerprint(),
            setup_mismatch,
        }
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

/// The outcome of [`SinkCheck::verify`]. Its [`fmt::Display`] is one
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

    /// The spec's generator written out independently: the outputs of the
    /// first `count` steps.
    fn spec_outputs(count: usize) -> Vec<u64> {
        let mut x: u64 = 0x9E3779B97F4A7C15;
        let mut out = Vec::new();
        for _ in 0..count {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            out.push(x.wrapping_mul(0x2545F4914F6CDD1D));
        }
        out
    }

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

    /// The whole pipeline in plain Rust: P sources (generate + map), route
    /// to Q keyed sums, a sink merging the keyed sums' outputs in an
    /// arbitrary interleaving.
    fn simulate(total: u64, keys: &KeySpace, p: usize, q: usize) -> (SinkCheck, Vec<SumRecord>) {
        let mut queues: Vec<Vec<Event>> = vec![Vec::new(); q];
        let mut gens: Vec<Generator> = (0..p)
            .map(|i| Generator::new(keys, i, p, total).unwrap())
            .collect();
        // Interleave sources unevenly: source i emits i + 1 records a turn.
        loop {
            let mut any = false;
            for (i, g) in gens.iter_mut().enumerate() {
                for _ in 0..=i {
                    if let Some(e) = g.next_event(0) {
                        let e = e.mapped();
                        queues[key_to_subtask(e.key, q)].push(e);
                        any = true;
                    }
                }
            }
            if !any {
                break;
            }
        }
        let mut outs: Vec<std::collections::VecDeque<SumRecord>> = queues
            .iter()
            .map(|events| {
                let mut state = KeyedSum::new();
                events.iter().map(|e| state.apply(e)).collect()
            })
            .collect();
        let mut sink = SinkCheck::new(total, keys.keys()).unwrap();
        let mut all = Vec::new();
        let mut turn = 0usize;
        while outs.iter().any(|o| !o.is_empty()) {
            // Take 1, 2, 3, ... records from each queue in turn.
            let j = turn % q;
            for _ in 0..(turn % 3 + 1) {
                if let Some(r) = outs[j].pop_front() {
                    sink.observe(&r);
                    all.push(r);
                }
            }
            turn += 1;
        }
        (sink, all)
    }

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

    #[test]
    fn sink_check_detects_loss_duplicates_and_wrong_sums() {
        let keys = KeySpace::uniform(11).unwrap();
        let total = 300;
        let expected = ExpectedResult::compute(total, &keys);
        let (_, all) = simulate(total, &keys, 2, 2);

        // Lost: drop record n = 17.
        let mut lost = SinkCheck::new(total, 11).unwrap();
        all.iter()
            .filter(|r| r.n != 17)
            .for_each(|r| lost.observe(r));
        let report = lost.verify(&expected);
        assert!(!report.is_exact());
        assert_eq!((report.lost, report.duplicates), (1, 0));
        assert_eq!(report.first_lost, Some(17));
        assert!(
            report.to_string().contains("first lost record n=17"),
            "{report}"
        );
        assert!(report.clone().into_result().is_err());

        // Duplicated: record 5 twice (before the last records, so sums are
        // still right at the end).
        let mut dup = SinkCheck::new(total, 11).unwrap();
        let five = *all.iter().find(|r| r.n == 5).unwrap();
        dup.observe(&five);
        all.iter().for_each(|r| dup.observe(r));
        let report = dup.verify(&expected);
        assert_eq!(
            (report.lost, report.duplicates, report.wrong_keys),
            (0, 1, 0)
        );
        assert_eq!(report.received, total + 1);
        assert!(!report.is_exact());

        // A wrong sum: the last record of some key carries sum + 1.
        let mut wrong = SinkCheck::new(total, 11).unwrap();
        let last = *all.last().unwrap();
        for r in &all[..all.len() - 1] {
            wrong.observe(r);
        }
        wrong.observe(&SumRecord {
            sum: last.sum + 1,
            ..last
        });
        let report = wrong.verify(&expected);
        assert_eq!(
            (report.lost, report.duplicates, report.wrong_keys),
            (0, 0, 1)
        );
        let m = report.first_wrong_key.unwrap();
        assert_eq!(m.key, last.key);
        assert_eq!(m.actual, Some(last.sum + 1));
        assert_eq!(m.expected, expected.final_sum(last.key));
        assert_ne!(report.fingerprint, report.expected_fingerprint);
        let text = report.to_string();
        assert!(text.contains(&format!("first key {}", last.key)), "{text}");

        // Out of range and mismatched setup.
        let mut odd = SinkCheck::new(total, 11).unwrap();
        odd.observe(&SumRecord {
            key: 11,
            sum: 0,
            n: 0,
            ts_ns: 0,
        });
        odd.observe(&SumRecord {
            key: 0,
            sum: 0,
            n: total,
            ts_ns: 0,
        });
        assert_eq!(odd.out_of_range(), 2);
        let other = SinkCheck::new(total + 1, 11).unwrap();
        assert!(other.verify(&expected).setup_mismatch.is_some());
        assert!(SinkCheck::new(MAX_CHECKED_RECORDS + 1, 11).is_err());
    }

    #[test]
    fn a_decoded_check_of_the_wrong_shape_is_refused_not_used() {
        let good = SinkCheck::new(1_000, 100).unwrap();
        let decoded = |c: &SinkCheck| -> SinkCheck {
            postcard::from_bytes(&postcard::to_allocvec(c).unwrap()).unwrap()
        };
        assert!(decoded(&good).validate().is_ok());
        let mut short = good.clone();
        short.seen.truncate(8);
        let err = decoded(&short).validate().unwrap_err().to_string();
        assert!(
            err.contains("sequence bitset holds 8 words, not 16"),
            "{err}"
        );
        let mut sums = good.clone();
        sums.last_sum.push(0);
        assert!(decoded(&sums).validate().is_err());
        let mut keys = good.clone();
        keys.key_seen.clear();
        assert!(decoded(&keys).validate().is_err());
        let mut none = good.clone();
        none.keys = 0;
        assert!(decoded(&none).validate().is_err());
    }

    #[test]
    fn with_few_keys_every_seen_key_is_taken_and_the_replica_still_matches() {
        let rec = |n: u64, key: u64| SumRecord {
            key,
            sum: n * 3,
            n,
            ts_ns: 0,
        };
        let mut check = SinkCheck::new(10_000, 1_000).unwrap();
        const { assert!(1_000 * 8 <= SUMS_TAKEN_WHOLE_BYTES) };
        check.track_changes();
        let mut replica = check.clone();
        for n in 0..300 {
            check.observe(&rec(n, n % 7 + 200));
        }
        let mut changes = SinkChanges::default();
        check.take_changes_into(&mut changes);
        assert_eq!((changes.word_count(), changes.key_count()), (5, 7));
        replica.apply_changes(&changes).unwrap();
        assert_eq!(replica, check);
        // One record changes one word and one key; every seen key (in
        // order) is taken with its sum, changed or not.
        check.observe(&rec(9_000, 999));
        check.take_changes_into(&mut changes);
        assert_eq!(changes.word_count(), 1);
        let keys: Vec<u64> = changes.keys_iter().collect();
        assert_eq!(keys, [200, 201, 202, 203, 204, 205, 206, 999]);
        replica.apply_changes(&changes).unwrap();
        assert_eq!(replica, check);
        assert_eq!(replica.last_sum(999), Some(27_000));
        // Nothing observed: no word, the same keys.
        check.take_changes_into(&mut changes);
        assert_eq!((changes.word_count(), changes.key_count()), (0, 8));
    }

    #[test]
    fn sink_check_changes_rebuild_the_check_and_its_size_is_exact() {
        let rec = |n: u64, key: u64, sum: u64| SumRecord {
            key,
            sum,
            n,
            ts_ns: 0,
        };
        // More sums than `SUMS_TAKEN_WHOLE_BYTES`: changed keys are marked.
        let mut check = SinkCheck::new(10_000, 20_000).unwrap();
        const { assert!(20_000 * 8 > SUMS_TAKEN_WHOLE_BYTES) };
        assert_eq!(
            check.encoded_size(),
            postcard::to_allocvec(&check).unwrap().len() as u64
        );
        check.track_changes();
        let mut replica = check.clone();
        for n in 0..300 {
            check.observe(&rec(n, n % 7, n));
        }
        let c1 = check.take_changes();
        assert_eq!(c1.sums.len(), 7, "each key once");
        assert_eq!(c1.words.len(), 5, "300 records span 5 words");
        replica.apply_changes(&c1).unwrap();
        assert_eq!(replica, check);
        check.observe(&rec(5, 5, 99)); // a duplicate
        check.observe(&rec(9_999, 999, 1));
        let c2 = check.take_changes();
        assert_eq!((c2.words.len(), c2.sums.len()), (2, 2));
        replica.apply_changes(&c2).unwrap();
        assert_eq!(replica, check);
        assert_eq!(replica.duplicates(), 1);
        // The word of the last record before a take is marked again after
        // it; words that alternate are listed once each.
        check.observe(&rec(9_998, 998, 2));
        let c3 = check.take_changes();
        assert_eq!(c3.words, [(9_998 / 64, check.seen[9_998 / 64])]);
        for n in [1_000, 1_064, 1_001, 1_065, 1_002] {
            check.observe(&rec(n, 3, n));
        }
        let c4 = check.take_changes();
        let words: Vec<u64> = c4.words.iter().map(|&(w, _)| w).collect();
        assert_eq!(words, [1_000 / 64, 1_064 / 64]);
        for c in [&c3, &c4] {
            replica.apply_changes(c).unwrap();
        }
        assert_eq!(replica, check);
        assert_eq!(
            check.encoded_size(),
            postcard::to_allocvec(&check).unwrap().len() as u64
        );
        // Changes of a bigger check do not fit.
        let mut big = SinkCheck::new(1 << 20, 1 << 20).unwrap();
        big.track_changes();
        big.observe(&rec(1 << 19, 1 << 19, 1));
        assert!(replica.apply_changes(&big.take_changes()).is_err());
    }

    #[test]
    fn full_blocks_are_taken_as_runs_and_the_rest_word_by_word() {
        let rec = |n: u64| SumRecord {
            key: n % 5,
            sum: n,
            n,
            ts_ns: 0,
        };
        // 3 blocks of 64 words (4,096 records each) and a last, short one.
        let mut check = SinkCheck::new(3 * 4_096 + 100, 5).unwrap();
        check.track_changes();
        let mut replica = check.clone();
        replica.track_shape();
        // Blocks 0 and 1 whole, block 2 but one record, block 3 whole.
        for n in (0..3 * 4_096 + 100).filter(|n| *n != 2 * 4_096 + 7) {
            check.observe(&rec(n));
        }
        let c = check.take_changes();
        assert_eq!(c.ones, [(0, 128)], "blocks 0 and 1: one run");
        assert_eq!(c.words.len(), 64 + 2, "block 2's words, then block 3's");
        assert_eq!(c.word_count(), 128 + 66);
        replica.apply_changes(&c).unwrap();
        assert_eq!(replica, check);
        assert_eq!(replica.shape(), replica.scan_shape());
        assert_eq!(
            replica.shape(),
            Shape {
                ones: 128,
                end: 194
            }
        );
        let copy = check.replica();
        assert_eq!((copy == check, copy.shape()), (true, replica.shape()));
        // The missing record fills block 2: a run of its 64 words.
        check.observe(&rec(2 * 4_096 + 7));
        let c = check.take_changes();
        assert_eq!(
            (c.ones.as_slice(), c.words.len()),
            ([(128, 64)].as_slice(), 0)
        );
        replica.apply_changes(&c).unwrap();
        assert_eq!(replica, check);
        assert_eq!(
            replica.shape(),
            Shape {
                ones: 193,
                end: 194
            },
            "word 193 is short"
        );
        assert_eq!(
            replica.compact_encoded_size(),
            postcard::to_allocvec(&replica.compact()).unwrap().len() as u64
        );
    }

    proptest::proptest! {
        /// A replica's kept shape is the one a scan finds, and the compact
        /// encoding's size is exact, after any changes, applied as taken
        /// or merged ([`SinkCheck::changes_of`]), with bits cleared too.
        #[test]
        fn a_kept_shape_and_the_compact_size_stay_exact(
            steps in proptest::collection::vec(
                (proptest::collection::vec(0u64..3_000, 0..300), proptest::bool::ANY),
                1..8,
            ),
            cleared in proptest::collection::vec(0u64..47, 0..4),
        ) {
            let mut check = SinkCheck::new(3_000, 7).unwrap();
            check.track_changes();
            let mut replica = check.clone();
            replica.track_shape();
            for (ns, merged) in steps {
                for n in ns {
                    check.observe(&SumRecord { key: n % 7, sum: n, n, ts_ns: 0 });
                }
                let mut c = check.take_changes();
                if merged {
                    let words: Vec<u64> = c.word_indices().collect();
                    let keys: Vec<u64> = c.keys_iter().collect();
                    c = check.changes_of(&words, &keys);
                }
                replica.apply_changes(&c).unwrap();
                proptest::prop_assert_eq!(&replica, &check);
                proptest::prop_assert_eq!(replica.shape(), replica.scan_shape());
            }
            // Changes that clear words (from a crafted delta): the shape
            // moves back.
            let words: Vec<(u64, u64)> = cleared.iter().map(|&w| (w, 0)).collect();
            let c = SinkChanges { words, ..check.changes_of(&[], &[]) };
            replica.apply_changes(&c).unwrap();
            proptest::prop_assert_eq!(replica.shape(), replica.scan_shape());
            let size = postcard::to_allocvec(&replica.compact()).unwrap().len() as u64;
            proptest::prop_assert_eq!(replica.compact_encoded_size(), size);
            let back: CompactCheck<'_> =
                postcard::from_bytes(&postcard::to_allocvec(&replica.compact()).unwrap()).unwrap();
            proptest::prop_assert_eq!(SinkCheck::from_compact(back, replica.sizes()).unwrap(), replica);
        }
    }

    #[test]
    fn sink_check_survives_serde() {
        let keys = KeySpace::uniform(7).unwrap();
        let (sink, _) = simulate(100, &keys, 2, 2);
        let bytes = serde_json::to_vec(&sink).unwrap();
        let back: SinkCheck = serde_json::from_slice(&bytes).unwrap();
        let compact = postcard::to_allocvec(&sink).unwrap();
        let back2: SinkCheck = postcard::from_bytes(&compact).unwrap();
        assert_eq!(back2, sink);
        // the bitset travels as bytes, not one varint per word
        assert!(
            compact.len() < 8 * (sink.seen.len() + sink.last_sum.len() + sink.key_seen.len()) + 64
        );
        assert_eq!(back, sink);
    }

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
