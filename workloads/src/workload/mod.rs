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
//!
//! # Files
//! - `params`: the specification's numbers (seed, multipliers, default
//!   sizes, rates and durations, the limits a run may ask for);
//!   `error`: [`WorkloadError`].
//! - `pipeline`: the records ([`Event`], [`SumRecord`]) and what each step
//!   of the pipeline does to them (chained map, routing, [`KeyedSum`]).
//! - `generator`: the random stream, the key space, the splits and the
//!   [`Generator`] of a source's records.
//! - `schedule`: the workloads ([`Workload`]) and the open-loop pacing
//!   (W2's schedule, W3's bursts).
//! - `check`: the closed form ([`ExpectedResult`]) and the outcome of a
//!   check ([`CheckReport`]).
//! - `sink_check`: the sink's side of the check ([`SinkCheck`]), its
//!   changes ([`SinkChanges`]) and its compact encodings, which the
//!   reference sink checkpoints.
//! - `testing` (unit tests only): what several files' tests share.

mod check;
mod error;
mod generator;
mod params;
mod pipeline;
mod schedule;
mod sink_check;
#[cfg(test)]
mod testing;

pub use check::{fingerprint, CheckReport, ExpectedResult, KeyMismatch};
pub use error::WorkloadError;
pub use generator::{split_of, split_owner, Generator, KeyDist, KeySpace, XorShift64Star, SPLITS};
pub use params::{
    BURST_PERIOD_NS, BURST_SQUEEZE, CHECKPOINT_INTERVAL_NS, DEFAULT_KEYS, DEFAULT_RATE,
    HASH_MULTIPLIER, MAX_CHECKED_RECORDS, MAX_KEYS, MEASURE_NS, OUTPUT_MULTIPLIER,
    REFERENCE_PARALLELISM, SEED, W1_TOTAL_RECORDS, W4_SINK_NS, WARMUP_NS,
};
pub use pipeline::{
    chained_map, key_hash, key_to_subtask, seq_of_mapped_value, Event, KeyedSum, SumRecord,
};
pub use schedule::{burst_offset_ns, due_until, scheduled_offset_ns, source_share, Workload};
pub use sink_check::{CompactCheck, SinkChanges, SinkChangesV1, SinkCheck, SUMS_TAKEN_WHOLE_BYTES};
