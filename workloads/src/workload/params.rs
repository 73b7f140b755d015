//! The numbers of `docs/workloads.md` in one place: the generator's seed
//! and multipliers, the default keys, rate, durations and parallelism,
//! W3's burst and W4's sink work, and the limits of what a run may ask
//! for (keys, checked records). Every system that runs the workloads
//! (lockgate, the raw baseline, timely) takes them from here.

/// The seed of the generator's xorshift64* state (workloads.md).
pub const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
/// The multiplier that turns an xorshift64* state into an output
/// (workloads.md; the standard xorshift64* constant).
pub const OUTPUT_MULTIPLIER: u64 = 0x2545_F491_4F6C_DD1D;
/// The multiplier of the routing hash `(key * M) >> 32` (workloads.md): the
/// engine's own constant.
pub use lockgate::keys::KEY_HASH_MULTIPLIER as HASH_MULTIPLIER;
/// The default number of distinct keys (workloads.md).
pub const DEFAULT_KEYS: u64 = 10_000;
/// The most keys a [`KeySpace`](super::KeySpace) accepts: 2^24. The Zipf table, the closed
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
/// The most records a [`SinkCheck`](super::SinkCheck) tracks: 2^33, i.e. a 1 GiB bitset.
pub const MAX_CHECKED_RECORDS: u64 = 1 << 33;
