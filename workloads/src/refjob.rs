//! The reference job of `docs/workloads.md` (W1, W2, W3) on the engine's
//! public API: what the load generator, the integration tests and the
//! benches run.
//!
//! ```text
//! source[i] ─ map(value*2+1) ─┐ key_by(key)  ┌─ keyed_sum[j] ─┐ rebalance
//!   (P subtasks, chained)     ├──────────────┤  (P subtasks)  ├──────────── sink[0]
//!                             ┘              └─               ┘  (1 subtask, P inputs)
//! ```
//!
//! Operator names are exactly `source`, `keyed_sum` and `sink`, so task
//! names are `source[0]`, `keyed_sum[1]`, `sink[0]`.
//!
//! # Records
//! The records flowing through the job are [`RefEvent`] and [`RefSum`],
//! not `workload::Event` / `workload::SumRecord`: they carry one more
//! field, `sent_ns`, the *actual* send time, so that the sink can keep the
//! uncorrected latency histogram next to the corrected one (as wrk2 does).
//! That makes an event 32 bytes instead of the specification's 24. The
//! keyed sum itself is `workload::KeyedSum` (the specification's logic),
//! applied to the spec's `Event` built from the first three fields. With
//! `payload_bytes > 0` the records also carry a heap payload of that many
//! bytes ([`Bytes`]), and report it in their [`RecordSize`].
//!
//! # Sources
//! The records are made of 128 splits (split `s`: the records with
//! `n % 128 == s`); source `i` of `P` owns the splits with `s % P == i`
//! and emits their records with a [`Generator`] in increasing `n`. Its
//! checkpointed state is each owned split's next record (union list
//! state: restored at another parallelism, every new source takes the
//! splits it owns now, with their positions; W4 is not rescaled).
//! - W1 (closed loop): as fast as possible; `ts_ns` is the actual emission
//!   time, read from the clock once per batch.
//! - W2/W3 (open loop): record `n` is due at `t0 + scheduled_offset_ns(n,
//!   rate, burst)` (burst for the records with odd `n` in W3: at an even
//!   parallelism the odd-numbered sources; a source owning both parities
//!   merges two schedules) and carries
//!   that *intended* time in `ts_ns`, never the actual send time. The
//!   source emits everything due in one poll, then sleeps until the next
//!   record is due, but never shorter than the tick ([`RefJobConfig::tick`],
//!   default [`DEFAULT_TICK`], 10 µs), and records due within a tick go out
//!   in one batch. A record waits for the next wake-up half a tick on
//!   average, so the tick is added latency; it exists because waking a
//!   parked thread costs ~20 µs of CPU on the reference machine, and a
//!   sleep much shorter than that buys nothing. `t0` is
//!   shared by all sources of a fresh job (the first poll of any source).
//!   The schedule belongs to the run, not to the attempt (wrk2's rule):
//!   after an in-process restart a replayed record keeps its original
//!   intended time, so the recovery shows in the latency of every record it
//!   delayed. Only a restore in a new process (`--restore`) starts the
//!   schedule again at the restored position (`t0` shifts so that its next
//!   record is due now): the downtime between processes is not part of
//!   either run.
//!
//! # Sink
//! The sink checks every record with a [`SinkCheck`] (checkpointed, so an
//! exactly-once restart counts no duplicate and an at-least-once one shows
//! them) and records latency into histograms in [`RefJobResults`]. They
//! are rolled back with the sink's state: each latency is recorded once,
//! into the interval since the sink's last snapshot; a completed
//! checkpoint settles the intervals up to it, and a restart from
//! checkpoint `c` drops the intervals after the sink's snapshot of `c`, so
//! a record delivered before a failure and again after it counts once, at
//! its last delivery. (Were the newest completed checkpoint unusable and
//! an older one restored, the intervals between them would count twice:
//! they were settled.) Only records whose
//! *unburst* schedule offset is at or after the warm-up are recorded (the
//! first `ceil(warmup × rate)` sequence numbers are the warm-up). The clock
//! is read once per batch at the sink.

use crate::latency::{merge, new_interval_histogram, LatencyError, LatencyRecorder, Percentiles};
use crate::workload::{
    scheduled_offset_ns, seq_of_mapped_value, split_owner, CheckReport, CompactCheck,
    ExpectedResult, Generator, KeyDist, KeySpace, SinkChanges, SinkChangesV1, SinkCheck, SumRecord,
    Workload, WorkloadError, MAX_CHECKED_RECORDS, SPLITS,
};
use hdrhistogram::Histogram;
use lockgate::now_ns;
use lockgate::Checkpointed;
use lockgate::Context;
use lockgate::{
    BoxError, CheckpointId, CheckpointMode, EncodedState, FailurePlan, JobBuilder, JobConfig,
    JobError, JobFailure, JobHandle, JobMetrics, KeyedState, Managed, RecordSize, Sink,
    SnapshotRequest, Source, SourcePoll, StateSnapshot, StatefulOperator,
};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// The name of the reference job (in checkpoint metadata: a restore from
/// another job's checkpoint is refused).
pub const JOB_NAME: &str = "lockgate-reference";
/// W4's sink drains at most this many records/s (one every
/// [`crate::workload::W4_SINK_NS`]): the bound of what its sources can
/// emit, with [`W4_IN_FLIGHT`].
pub const W4_MAX_RATE: u64 = 1_000_000_000 / crate::workload::W4_SINK_NS;
/// What W4's channels and tasks can hold beyond what the sink drained: 2^22
/// records, 4× the reference topology's 6 channels of 64 batches of 1024
/// records (a larger `--channel-capacity` or `--batch-size` makes the
/// sources stop at [`RefJobConfig::total_records`], still exact).
pub const W4_IN_FLIGHT: u64 = 1 << 22;

/// The length of the sink's latency intervals (the timeline's points and
/// the `.hlog`'s lines), 100 ms: ten a second show what one checkpoint
/// every 100 ms does, at about 27 KiB an interval.
pub const INTERVAL_NS: u64 = 100_000_000;
/// The default source tick of W2/W3 in µs (see the module doc): 10.
///
/// Chosen from a measurement (BENCHMARKS.md, "Source pacing"): W2 at
/// 200,000 records/s without checkpoints, 5 alternated rounds on the 2-core
/// VM, p50 52.3 µs with a 50 µs tick, 39.1 µs with 10 µs and 36.6 µs with
/// 5 µs, at the same CPU time (the job keeps both cores busy at that rate
/// whatever the tick; at 20,000 records/s a source's records are 100 µs
/// apart, so a tick below that changes nothing).
pub const DEFAULT_TICK_US: u64 = 10;
/// [`DEFAULT_TICK_US`] as a duration.
pub const DEFAULT_TICK: Duration = Duration::from_micros(DEFAULT_TICK_US);
/// The source tick in µs when the tasks run on cooperative workers
/// (`lockgate loadgen --workers N` without `--tick-us`): 2.
///
/// [`DEFAULT_TICK_US`] is there to spare a task thread the wake-ups of
/// sleeps shorter than a wake-up; a worker that waits a few µs for the
/// next record spins instead, so the tick only delays records: a record
/// waited half a tick on average before it left. Measured on the 2-core
/// VM (BENCHMARKS.md, "A shorter source tick on workers"), W2 on 2
/// workers without checkpoints, p50 7.1-8.0 µs with a 10 µs tick and
/// 1.3-1.5 µs with 1, 2 or 5 µs, at the same CPU time (the workers keep
/// both cores busy at 200,000 records/s either way; at 20,000 records/s
/// the tick does not bind). The timely peer (`benches/timely`) sends
/// every record when it is due, with no tick at all.
pub const WORKERS_TICK_US: u64 = 2;
/// The most payload bytes per record: 1 MiB (a bound against typos that
/// would exhaust memory).
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
const NS_PER_S: u128 = 1_000_000_000;

/// Errors of the reference job.
#[derive(Debug, thiserror::Error)]
pub enum RefJobError {
    /// The configuration is invalid; the message names the problem.
    #[error("{0}")]
    Config(String),
    /// A workload error (keys, distribution, records).
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The engine refused to start the job (configuration, storage,
    /// restore).
    #[error(transparent)]
    Job(#[from] JobError),
    /// Merging histograms failed.
    #[error(transparent)]
    Latency(#[from] LatencyError),
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/// What the reference job runs: the workload and its parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RefJobConfig {
    /// W1, W2, W3 or W4.
    pub workload: Workload,
    /// W1 only: the records in total.
    pub records: u64,
    /// W2/W3 only: the total rate of all sources, records/s.
    pub rate: u64,
    /// W2/W3/W4: the recorded duration after the warm-up.
    pub duration: Duration,
    /// W2/W3/W4: the warm-up, not recorded (may be 0).
    pub warmup: Duration,
    /// Distinct keys.
    pub keys: u64,
    /// Key distribution.
    pub key_dist: KeyDist,
    /// Parallelism of `source` and `keyed_sum` (default 2).
    pub parallelism: usize,
    /// W2/W3: the shortest sleep of a source between two polls (default
    /// [`DEFAULT_TICK`]).
    pub tick: Duration,
    /// Extra bytes carried per record (default 0).
    pub payload_bytes: usize,
}

impl Default for RefJobConfig {
    /// W2 as workloads.md defines it.
    fn default() -> Self {
        RefJobConfig {
            workload: Workload::W2,
            records: crate::workload::W1_TOTAL_RECORDS,
            rate: crate::workload::DEFAULT_RATE,
            duration: Duration::from_nanos(crate::workload::MEASURE_NS),
            warmup: Duration::from_nanos(crate::workload::WARMUP_NS),
            keys: crate::workload::DEFAULT_KEYS,
            key_dist: KeyDist::Uniform,
            parallelism: crate::workload::REFERENCE_PARALLELISM,
            tick: DEFAULT_TICK,
            payload_bytes: 0,
        }
    }
}

impl RefJobConfig {
    /// W1 with `records` records, other fields default.
    pub fn w1(records: u64) -> Self {
        RefJobConfig {
            workload: Workload::W1,
            records,
            ..Default::default()
        }
    }

    /// W2 (or W3 with [`Workload::W3`]) at `rate` records/s for `duration`
    /// after `warmup`.
    pub fn paced(workload: Workload, rate: u64, duration: Duration, warmup: Duration) -> Self {
        RefJobConfig {
            workload,
            rate,
            duration,
            warmup,
            ..Default::default()
        }
    }

    /// The records the job emits in total: `records` for W1,
    /// `floor(rate × (warmup + duration))` for W2/W3; for W4 the most it
    /// can emit, [`W4_MAX_RATE`] × (warmup + duration) plus
    /// [`W4_IN_FLIGHT`] (its sources stop at their time or there, and the
    /// check counts the records they emitted).
    pub fn total_records(&self) -> u64 {
        let ns = (self.warmup + self.duration).as_nanos();
        match self.workload {
            Workload::W1 => self.records,
            Workload::W2 | Workload::W3 => {
                u64::try_from(self.rate as u128 * ns / NS_PER_S).unwrap_or(u64::MAX)
            }
            Workload::W4 => u64::try_from(W4_MAX_RATE as u128 * ns / NS_PER_S)
                .unwrap_or(u64::MAX)
                .saturating_add(W4_IN_FLIGHT),
        }
    }

    /// The first sequence number recorded: 0 for W1, else the first `n`
    /// whose unburst schedule offset `n × 1e9 / rate` is at or after the
    /// warm-up, `ceil(warmup_ns × rate / 1e9)`.
    pub fn first_recorded_n(&self) -> u64 {
        if !self.workload.is_paced() {
            return 0;
        }
        let v = (self.warmup.as_nanos() * self.rate as u128).div_ceil(NS_PER_S);
        u64::try_from(v).unwrap_or(u64::MAX)
    }

    /// Checks the values.
    ///
    /// # Errors
    /// [`RefJobError::Config`] naming the bad value: no records, a rate or
    /// duration of 0 for W2/W3, a parallelism of 0, no keys or too many,
    /// more records than the sink can check, a payload above
    /// [`MAX_PAYLOAD_BYTES`], a tick of 0.
    pub fn validate(&self) -> Result<(), RefJobError> {
        let bad = |m: String| Err(RefJobError::Config(m));
        if self.workload.is_timed() && self.duration.is_zero() {
            return bad("the duration must be positive".into());
        }
        if self.workload.is_paced() {
            if self.rate == 0 {
                return bad("the rate must be at least 1 record/s".into());
            }
            if self.tick.is_zero() {
                return bad("the source tick must be positive".into());
            }
        }
        let total = self.total_records();
        if total == 0 {
            return bad(format!(
                "the {} run would emit no record (records = {total})",
                self.workload
            ));
        }
        if total > MAX_CHECKED_RECORDS {
            return bad(format!(
                "the run would emit {total} records, more than the sink can check ({MAX_CHECKED_RECORDS})"
            ));
        }
        if self.parallelism == 0 {
            return bad("the parallelism must be at least 1".into());
        }
        if self.payload_bytes > MAX_PAYLOAD_BYTES {
            return bad(format!(
                "payload of {} bytes per record is above the limit of {MAX_PAYLOAD_BYTES}",
                self.payload_bytes
            ));
        }
        KeySpace::new(self.keys, self.key_dist)?;
        Ok(())
    }

    /// What a checkpoint of this job is taken with (the engine refuses to
    /// restore a checkpoint taken with another value): workload, records,
    /// rate, duration, warm-up, keys, distribution and payload. The
    /// parallelism is checked by the engine itself; the tick is not part
    /// of it (it does not change the records).
    pub fn app_config_json(&self) -> serde_json::Value {
        serde_json::json!({
            "workload": self.workload.name(),
            "total_records": self.total_records(),
            "rate": if self.workload.is_paced() { self.rate } else { 0 },
            "warmup_ns": if self.workload.is_timed() { self.warmup.as_nanos() as u64 } else { 0 },
            "keys": self.keys,
            "key_dist": self.key_dist.to_string(),
            "payload_bytes": self.payload_bytes,
        })
    }
}

// ---------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------

/// The extra bytes a record carries: nothing (`()`) or a heap buffer
/// ([`Bytes`]), chosen at run time by [`RefJobConfig::payload_bytes`].
pub trait Payload: Clone + Send + serde::Serialize + serde::de::DeserializeOwned + 'static {
    /// True when the payload adds no heap bytes.
    const FIXED_SIZE: bool;
    /// A payload of `len` bytes for record `n`.
    fn make(len: usize, n: u64) -> Self;
    /// Heap bytes the payload holds.
    fn heap_bytes(&self) -> usize;
}

impl Payload for () {
    const FIXED_SIZE: bool = true;
    #[inline]
    fn make(_len: usize, _n: u64) -> Self {}
    #[inline]
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// A heap payload (filled with the low byte of `n`, so that it is really
/// written and not left to lazily zeroed pages).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bytes(pub Box<[u8]>);

impl Payload for Bytes {
    const FIXED_SIZE: bool = false;
    fn make(len: usize, n: u64) -> Self {
        Bytes(vec![n as u8; len].into_boxed_slice())
    }
    fn heap_bytes(&self) -> usize {
        self.0.len()
    }
}

/// The event between the sources and `keyed_sum`: workloads.md's `Event`
/// (key, value, ts_ns) plus the actual send time (32 bytes without
/// payload).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(bound = "P: Payload")]
pub struct RefEvent<P = ()> {
    /// The key.
    pub key: u64,
    /// `n`, then `2n + 1` after the chained map.
    pub value: u64,
    /// Intended emission time, ns (schedule time for W2/W3, actual for W1).
    pub ts_ns: u64,
    /// Actual emission time, ns.
    pub sent_ns: u64,
    /// Extra bytes.
    pub payload: P,
}

impl<P: Payload> RecordSize for RefEvent<P> {
    const FIXED_SIZE: bool = P::FIXED_SIZE;
    #[inline]
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.payload.heap_bytes()
    }
}

/// What `keyed_sum` emits: workloads.md's `(key, sum, n, ts_ns)` plus the
/// actual send time (40 bytes without payload).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(bound = "P: Payload")]
pub struct RefSum<P = ()> {
    /// The key.
    pub key: u64,
    /// The key's running sum after this record.
    pub sum: u64,
    /// The record's sequence number.
    pub n: u64,
    /// Intended emission time, ns.
    pub ts_ns: u64,
    /// Actual emission time, ns.
    pub sent_ns: u64,
    /// Extra bytes.
    pub payload: P,
}

impl<P: Payload> RecordSize for RefSum<P> {
    const FIXED_SIZE: bool = P::FIXED_SIZE;
    #[inline]
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.payload.heap_bytes()
    }
}

// ---------------------------------------------------------------------------
// Shared results
// ---------------------------------------------------------------------------

/// One source subtask's counters (over all attempts).
#[derive(Debug, Default)]
struct SourceStats {
    /// Records emitted, replays included.
    emitted: AtomicU64,
    /// First emission, ns (0: none yet).
    first_emit_ns: AtomicU64,
    /// Last emission, ns.
    last_emit_ns: AtomicU64,
    /// Most a batch's first record was late on its schedule, ns.
    max_behind_ns: AtomicU64,
    /// This source's schedule start in this process (see `RefSource::t0`):
    /// an in-process restart keeps it.
    t0: OnceLock<i128>,
    /// True once a first attempt of this source started (a later instance
    /// is a restart and shifts its schedule).
    started: AtomicBool,
    /// The next record's `n` after the last poll (W4's expected records
    /// are those below each source's final position).
    position: AtomicU64,
}

/// Latencies recorded over a span of deliveries: the run's, or one
/// checkpoint interval's (kept apart until it is settled, dropped if a
/// restart rolls the sink back before it). Two full histograms (about 210 KiB each) and
/// one [`new_interval_histogram`] (about 27 KiB) per interval touched,
/// zeroed lazily by the allocator.
#[derive(Debug)]
struct Recorded {
    /// From the intended send time.
    latency: LatencyRecorder,
    /// From the actual send time (W2/W3).
    uncorrected: LatencyRecorder,
    /// From the intended send time, per [`INTERVAL_NS`] since the job's
    /// start (W2/W3).
    intervals: std::collections::BTreeMap<usize, Histogram<u64>>,
}

impl Recorded {
    fn new() -> Self {
        Recorded {
            latency: LatencyRecorder::new(),
            uncorrected: LatencyRecorder::new(),
            intervals: Default::default(),
        }
    }

    /// Empties it for reuse, keeping the memory of its two main
    /// histograms (no allocation, no page fault on the fresh memory).
    fn reset(&mut self) {
        self.latency.reset();
        self.uncorrected.reset();
        self.intervals.clear();
    }

    /// Adds `other` in (O(histogram size): ~26 K slots each, tens of µs).
    fn add(&mut self, other: &Recorded) -> Result<(), BoxError> {
        let e = |e: hdrhistogram::AdditionError| format!("the sink's latency intervals: {e:?}");
        self.latency
            .merge_from(&other.latency)
            .map_err(|x| x.to_string())?;
        self.uncorrected
            .merge_from(&other.uncorrected)
            .map_err(|x| x.to_string())?;
        for (interval, h) in &other.intervals {
            self.intervals
                .entry(*interval)
                .or_insert_with(new_interval_histogram)
                .add(h)
                .map_err(e)?;
        }
        Ok(())
    }
}

/// What the sink keeps outside its operator (one per sink subtask, i.e.
/// per recording thread), across the run's attempts.
///
/// Each latency is recorded once: without checkpoints into `recorded`;
/// with them into `open_interval`, the interval since the sink's last
/// snapshot. A snapshot of `id` closes that interval into `unsettled`; when
/// `id` completes, the intervals up to it move to `settled`, and the sink's
/// snapshot thread adds them into `merged` (off the sink's thread); a
/// restart from `c` settles the intervals up to `c` and drops the later
/// ones. The report's latencies are `recorded`, `merged` and every
/// interval not merged yet ([`SinkSlot::total`]).
#[derive(Debug)]
struct SinkSlot {
    check: SinkCheck,
    /// Without checkpoints: every latency (no restart takes any out).
    recorded: Recorded,
    /// With checkpoints: the intervals of completed checkpoints, merged.
    /// The sink's snapshot thread merges [`SinkSlot::settled`] into it
    /// (locking this slot only to take them), so the sink's thread never
    /// spends a completed checkpoint's merge on the record path: 100-300
    /// µs a checkpoint at W2 (measured with a temporary timer around
    /// `settle`), when it merged there. A restart from nothing replaces it
    /// (a merge under way goes to the replaced one).
    merged: Arc<Mutex<Recorded>>,
    /// With checkpoints: the intervals of completed checkpoints not yet
    /// in `merged` (moved here by the completion, in no time).
    settled: Vec<Recorded>,
    /// With checkpoints: what was recorded before the sink's snapshot of
    /// each checkpoint not yet known complete (and after the one before).
    unsettled: std::collections::BTreeMap<CheckpointId, Recorded>,
    /// With checkpoints: what was recorded since the last snapshot.
    open_interval: Option<Recorded>,
    /// An empty [`Recorded`] made by the snapshot thread for the next
    /// interval, so that the sink's synchronous snapshot part allocates
    /// and zeroes nothing (two full histograms: ~420 KiB).
    spare: Option<Recorded>,
    /// A [`SinkChanges`] the snapshot thread is done with, for
    /// the sink's next synchronous snapshot part to fill
    /// ([`SinkCheck::take_changes_into`]): its lists keep their capacity,
    /// so that part allocates nothing.
    spare_changes: Option<SinkChanges>,
    deliveries: u64,
    first_recorded_ns: u64,
    last_delivery_ns: u64,
    /// Sink instances made so far (one per attempt of the job).
    attempts: u32,
    /// The first delivery of every attempt after the first, ns.
    attempt_starts: Vec<u64>,
}

impl SinkSlot {
    /// Rolls the recordings back to the sink's snapshot of `to` (`None`:
    /// to nothing, a restart from the beginning).
    fn roll_back(&mut self, to: Option<CheckpointId>) -> Result<(), BoxError> {
        let Some(to) = to else {
            self.recorded = Recorded::new();
            self.merged = Arc::new(Mutex::new(Recorded::new()));
            self.settled.clear();
            self.unsettled.clear();
            self.open_interval = self.open_interval.take().map(|_| Recorded::new());
            return Ok(());
        };
        // Up to `to`: part of the restored state; after it: replayed.
        self.settle(to);
        self.unsettled.clear();
        self.open_interval = self.open_interval.take().map(|_| Recorded::new());
        Ok(())
    }

    /// Settles the intervals up to `id` (checkpoint `id` completed: no
    /// restart goes back before it): they move to `settled`, for the
    /// snapshot thread to merge ([`SinkSlot::merge_settled`]).
    fn settle(&mut self, id: CheckpointId) {
        let later = self.unsettled.split_off(&id.next());
        let settled = std::mem::replace(&mut self.unsettled, later);
        self.settled.extend(settled.into_values());
    }

    /// Merges the settled intervals into `merged`, holding this slot's
    /// lock (`slot`) only to take them: the merge itself runs under
    /// `merged`'s lock, which the sink's thread does not take. Lock order
    /// slot → merged, as every reader's ([`SinkSlot::total`] runs with
    /// the slot held and takes `merged`).
    ///
    /// Returns one of the merged intervals, emptied, for reuse as the next
    /// spare (`None` when nothing was settled).
    fn merge_settled(slot: &Mutex<SinkSlot>) -> Result<Option<Recorded>, BoxError> {
        let mut s = lock(slot);
        if s.settled.is_empty() {
            return Ok(None);
        }
        let settled = std::mem::take(&mut s.settled);
        let merged = s.merged.clone();
        let mut m = lock(&merged);
        drop(s);
        for r in &settled {
            // Each add is some 100 µs on a snapshot thread.
            lockgate::yield_point();
            m.add(r)?;
        }
        drop(m);
        Ok(settled.into_iter().next().map(|mut r| {
            r.reset();
            r
        }))
    }

    /// Every latency recorded and not rolled back: the report's (a copy).
    fn total(&self) -> Result<Recorded, BoxError> {
        let mut t = Recorded::new();
        t.add(&self.recorded)?;
        t.add(&lock(&self.merged))?;
        for r in self
            .settled
            .iter()
            .chain(self.unsettled.values())
            .chain(self.open_interval.iter())
        {
            t.add(r)?;
        }
        Ok(t)
    }

    /// The sink's snapshot of `id`: what was recorded since the last one
    /// is kept for a rollback until `id` completes.
    fn close_interval(&mut self, id: CheckpointId) {
        if self.open_interval.is_some() {
            let fresh = self.spare.take().unwrap_or_else(Recorded::new);
            if let Some(open) = self.open_interval.replace(fresh) {
                self.unsettled.insert(id, open);
            }
        }
    }
}

#[derive(Debug)]
struct Shared {
    cfg: RefJobConfig,
    mode: CheckpointMode,
    /// Set when a source restored a position from a checkpoint (after an
    /// in-process restart, or in a new process restoring a folder).
    restored: std::sync::atomic::AtomicBool,
    total: u64,
    first_recorded_n: u64,
    /// The schedule's `t0` of a fresh job (first poll of any source).
    t0: OnceLock<u64>,
    /// What the first attempt's sink restored (a `--restore` in a new
    /// process): the checkpoint and the distinct records it had received.
    process_restore: OnceLock<(CheckpointId, u64)>,
    /// The sources' parallelism in the checkpoint that the first rescaled
    /// restore read (set by the sources' `restore_rescaled`).
    rescaled_from: OnceLock<usize>,
    /// Where the sink's interval 0 starts (its first delivery's view of
    /// the schedule's start).
    intervals_start: OnceLock<u64>,
    /// W4: the first send time recorded (after the warm-up), ns.
    record_from: OnceLock<u64>,
    sources: Vec<SourceStats>,
    slots: Vec<Mutex<SinkSlot>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned slot means the sink panicked mid-batch; its data is still
    // the best we have for the report.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A live view of a running reference job, for progress lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RefProgress {
    /// Records the sources emitted so far (replays included).
    pub emitted: u64,
    /// Records the sink received so far (replays included).
    pub delivered: u64,
    /// Latencies recorded so far (after the warm-up).
    pub recorded: u64,
    /// The 99th percentile of the latencies so far, ns.
    pub p99_ns: u64,
    /// When the job's first record was emitted, ns on the engine clock (0:
    /// not yet).
    pub started_ns: u64,
}

/// The results a running reference job fills in (histograms, counters, the
/// sink's check), shared with the job's tasks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RefJobResults {
    shared: Arc<Shared>,
    expected: Arc<OnceLock<ExpectedResult>>,
}

/// How the sources did against their schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SourceSummary {
    /// Records emitted, replays included.
    pub emitted: u64,
    /// First emission to last emission, ns.
    pub span_ns: u64,
    /// `emitted / span` in records/s (0 for an instant run).
    pub achieved_rate: f64,
    /// The most a record was sent after its schedule time, ns (W2/W3; 0
    /// for W1, whose schedule is its send time).
    pub max_behind_ns: u64,
}

/// Everything a finished (or stopped) reference job measured.
#[derive(Clone, Debug)]
pub struct RefJobReport {
    /// What ran.
    pub config: RefJobConfig,
    /// The checkpointing mode.
    pub mode: CheckpointMode,
    /// Records the job emits when complete.
    pub total_records: u64,
    /// The sink's check against the closed form.
    pub check: CheckReport,
    /// Records the sink received, replays included.
    pub delivered: u64,
    /// Sequence numbers the sink never received.
    pub lost: u64,
    /// Records the sink received more than once.
    pub duplicated: u64,
    /// Latency `now - intended send time` (after the warm-up), merged over
    /// recording threads.
    pub latency: Histogram<u64>,
    /// Latency `now - actual send time`, the uncorrected figure.
    pub latency_uncorrected: Histogram<u64>,
    /// Latency per [`INTERVAL_NS`] since [`RefJobReport::intervals_start_ns`]
    /// (index = interval), merged; W2/W3 only ([`new_interval_histogram`]s:
    /// 2 significant digits).
    pub intervals: Vec<Histogram<u64>>,
    /// Where interval 0 starts, ns on the clock of [`lockgate::now_ns`] (0:
    /// nothing recorded).
    pub intervals_start_ns: u64,
    /// Records in the recorded window (post-warm-up deliveries; W1: all).
    pub recorded_records: u64,
    /// The recorded window, s: W1, first emission to last delivery; W2/W3,
    /// first recorded delivery to last delivery.
    pub recorded_seconds: f64,
    /// The sources against their schedule.
    pub sources: SourceSummary,
    /// The engine's metrics (tasks, checkpoints, restarts).
    pub metrics: JobMetrics,
    /// The job ended with this error (no restart left, ...).
    pub job_error: Option<String>,
    /// The job was stopped before the end (Ctrl-C).
    pub interrupted: bool,
    /// Failures planned by the failure plan.
    pub failures_planned: usize,
    /// Planned failures that struck.
    pub failures_struck: usize,
    /// The sources restored a checkpoint (after a failure in this process,
    /// or a `--restore` of a folder left by another one).
    pub restored: bool,
    /// Every task failure, oldest first, with its recovery time.
    pub recoveries: Vec<Recovery>,
    /// The run's first emission, ns on the clock of [`lockgate::now_ns`]
    /// (0: nothing was emitted).
    pub started_ns: u64,
    /// With a restore in a new process: the checkpoint restored and the
    /// records the sink had received before it (distinct).
    pub restored_from: Option<(CheckpointId, u64)>,
    /// With a restore at another parallelism: the sources' parallelism in
    /// the checkpoint restored.
    pub rescaled_from: Option<usize>,
}

/// A task failure of the run and how long the job took to recover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// The failure as the engine reports it.
    pub failure: JobFailure,
    /// From the failure to the first record the sink received after it, ns
    /// (the restart, the restore and the replay's first hop); `None` when
    /// none was received after it (the job ended with it).
    pub recovery_ns: Option<u64>,
}

impl RefJobReport {
    /// `records / seconds` of the recorded window (0 when empty).
    pub fn records_per_s(&self) -> f64 {
        if self.recorded_seconds > 0.0 {
            self.recorded_records as f64 / self.recorded_seconds
        } else {
            0.0
        }
    }

    /// The latency percentiles.
    pub fn percentiles(&self) -> Percentiles {
        Percentiles::from_histogram(&self.latency)
    }

    /// `None` when the correctness check passed, else why not: runs without
    /// failures and exactly-once runs must match the closed form exactly
    /// (count, per-key sums, fingerprint, 0 lost, 0 duplicated);
    /// at-least-once runs that restored a checkpoint (after a failure in
    /// this process or a restore of another process's folder) must lose
    /// nothing, and may apply records twice: that is what at-least-once
    /// allows.
    pub fn failure(&self) -> Option<String> {
        if self.interrupted {
            return Some("interrupted".into());
        }
        if let Some(e) = &self.job_error {
            return Some(format!("the job failed: {e}"));
        }
        let relaxed = self.mode == CheckpointMode::AtLeastOnce
            && (self.metrics.restarts > 0 || self.restored);
        if relaxed {
            if self.check.lost > 0 || self.check.out_of_range > 0 {
                return Some(format!(
                    "{} records lost in an at-least-once run ({})",
                    self.check.lost, self.check
                ));
            }
            None
        } else if !self.check.is_exact() {
            Some(self.check.to_string())
        } else {
            None
        }
    }

    /// True when [`RefJobReport::failure`] is `None`.
    pub fn ok(&self) -> bool {
        self.failure().is_none()
    }
}

impl RefJobResults {
    fn new(cfg: &RefJobConfig, mode: CheckpointMode) -> Result<Self, RefJobError> {
        cfg.validate()?;
        let total = cfg.total_records();
        let slots = vec![Mutex::new(SinkSlot {
            check: SinkCheck::new(total, cfg.keys)?,
            recorded: Recorded::new(),
            merged: Arc::new(Mutex::new(Recorded::new())),
            settled: Vec::new(),
            unsettled: Default::default(),
            open_interval: (mode != CheckpointMode::None).then(Recorded::new),
            deliveries: 0,
            first_recorded_ns: 0,
            last_delivery_ns: 0,
            attempts: 0,
            attempt_starts: Vec::new(),
            // The first checkpoint's fresh interval: made here, not by the
            // sink's synchronous part (two histograms allocated and
            // faulted in there took 0.8-13 ms at W1's first checkpoint;
            // later ones come from the snapshot thread).
            spare: (mode != CheckpointMode::None).then(Recorded::new),
            spare_changes: None,
        })];
        Ok(RefJobResults {
            shared: Arc::new(Shared {
                cfg: cfg.clone(),
                mode,
                restored: std::sync::atomic::AtomicBool::new(false),
                total,
                first_recorded_n: cfg.first_recorded_n(),
                t0: OnceLock::new(),
                process_restore: OnceLock::new(),
                rescaled_from: OnceLock::new(),
                intervals_start: OnceLock::new(),
                record_from: OnceLock::new(),
                sources: (0..cfg.parallelism)
                    .map(|_| SourceStats::default())
                    .collect(),
                slots,
            }),
            expected: Arc::new(OnceLock::new()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RefJobConfig {
        &self.shared.cfg
    }

    /// Counters and the p99 so far (locks the sink's slot briefly).
    pub fn progress(&self) -> RefProgress {
        let emitted = self
            .shared
            .sources
            .iter()
            .map(|s| s.emitted.load(Relaxed))
            .sum();
        let started_ns = self
            .shared
            .sources
            .iter()
            .map(|s| s.first_emit_ns.load(Relaxed))
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
        let (mut delivered, mut recorded) = (0, 0);
        let mut hists = Vec::new();
        for slot in &self.shared.slots {
            let s = lock(slot);
            delivered += s.deliveries;
            let mut h = s.recorded.latency.histogram().clone();
            let _ = h.add(lock(&s.merged).latency.histogram());
            for r in s
                .settled
                .iter()
                .chain(s.unsettled.values())
                .chain(s.open_interval.iter())
            {
                let _ = h.add(r.latency.histogram());
            }
            recorded += h.len();
            hists.push(h);
        }
        let p99_ns = merge(hists.iter())
            .map(|h| Percentiles::from_histogram(&h).p99)
            .unwrap_or(0);
        RefProgress {
            emitted,
            delivered,
            recorded,
            p99_ns,
            started_ns,
        }
    }

    /// The closed-form answer of this run (computed once, O(records)).
    ///
    /// For W4 (sources that stop at their time) it is the records below the
    /// sources' positions now: final once the job ended, and not cached.
    pub fn expected(&self) -> std::borrow::Cow<'_, ExpectedResult> {
        let keys = || {
            KeySpace::new(self.shared.cfg.keys, self.shared.cfg.key_dist)
                .expect("validated in RefJobResults::new")
        };
        if self.shared.cfg.workload == Workload::W4 {
            let positions: Vec<u64> = self
                .shared
                .sources
                .iter()
                .map(|s| s.position.load(Relaxed))
                .collect();
            return std::borrow::Cow::Owned(ExpectedResult::of_positions(
                &positions,
                self.shared.total,
                &keys(),
            ));
        }
        std::borrow::Cow::Borrowed(
            self.expected
                .get_or_init(|| ExpectedResult::compute(self.shared.total, &keys())),
        )
    }

    /// Planned failures that struck (the engine reports each as an
    /// injected failure).
    fn failures_struck(&self, failures: &[JobFailure]) -> usize {
        failures
            .iter()
            .filter(|f| f.cause.contains("injected failure: planned"))
            .count()
    }

    /// Each failure with its recovery time: from the failure to the first
    /// record delivered after it (`None`: nothing was delivered after it).
    fn recoveries(&self, failures: &[JobFailure]) -> Vec<Recovery> {
        let mut starts: Vec<u64> = self
            .shared
            .slots
            .iter()
            .flat_map(|s| lock(s).attempt_starts.clone())
            .collect();
        starts.sort_unstable();
        failures
            .iter()
            .map(|f| Recovery {
                failure: f.clone(),
                recovery_ns: starts.iter().find(|t| **t >= f.at_ns).map(|t| t - f.at_ns),
            })
            .collect()
    }

    fn source_summary(&self) -> SourceSummary {
        let s = &self.shared.sources;
        let emitted: u64 = s.iter().map(|s| s.emitted.load(Relaxed)).sum();
        let first = s
            .iter()
            .map(|s| s.first_emit_ns.load(Relaxed))
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
        let last = s
            .iter()
            .map(|s| s.last_emit_ns.load(Relaxed))
            .max()
            .unwrap_or(0);
        let span_ns = last.saturating_sub(first);
        SourceSummary {
            emitted,
            span_ns,
            achieved_rate: if span_ns > 0 {
                // n records emitted over a span hold n - 1 gaps.
                emitted.saturating_sub(1) as f64 * 1e9 / span_ns as f64
            } else {
                0.0
            },
            max_behind_ns: s
                .iter()
                .map(|s| s.max_behind_ns.load(Relaxed))
                .max()
                .unwrap_or(0),
        }
    }

    /// Collects the report once the job ended (or was stopped):
    /// `outcome` is what [`JobHandle::wait`] returned, `last_metrics` the
    /// metrics read just before (used when the job failed).
    ///
    /// # Errors
    /// [`RefJobError::Latency`] when histograms cannot be merged.
    pub fn finish(
        &self,
        outcome: Result<JobMetrics, JobError>,
        last_metrics: JobMetrics,
        interrupted: bool,
        failures_planned: usize,
    ) -> Result<RefJobReport, RefJobError> {
        let (metrics, job_error) = match outcome {
            Ok(m) => (m, None),
            Err(e) => (last_metrics, Some(e.to_string())),
        };
        let metrics_failures = metrics.failures.clone();
        let expected = self.expected();
        let sources = self.source_summary();
        let mut lat = Vec::new();
        let mut unc = Vec::new();
        let mut intervals: Vec<Histogram<u64>> = Vec::new();
        let (mut delivered, mut recorded) = (0, 0);
        let (mut first_rec, mut last_del) = (u64::MAX, 0);
        let mut check: Option<CheckReport> = None;
        for slot in &self.shared.slots {
            let s = lock(slot);
            let total = s.total().map_err(|e| LatencyError::Merge(e.to_string()))?;
            let r = &total;
            lat.push(r.latency.histogram().clone());
            // W1's records carry their actual send time as intended time:
            // both figures are the same histogram, recorded once.
            unc.push(if self.shared.cfg.workload.is_paced() {
                r.uncorrected.histogram().clone()
            } else {
                r.latency.histogram().clone()
            });
            for (&i, h) in &r.intervals {
                if intervals.len() <= i {
                    intervals.resize_with(i + 1, new_interval_histogram);
                }
                intervals[i]
                    .add(h)
                    .map_err(|e| LatencyError::Merge(format!("{e:?}")))?;
            }
            delivered += s.deliveries;
            recorded += r.latency.count();
            if s.first_recorded_ns > 0 {
                first_rec = first_rec.min(s.first_recorded_ns);
            }
            last_del = last_del.max(s.last_delivery_ns);
            check = Some(s.check.verify(&expected));
        }
        let check = check.expect("one sink slot");
        let first_emit = self
            .shared
            .sources
            .iter()
            .map(|s| s.first_emit_ns.load(Relaxed))
            .filter(|t| *t > 0)
            .min()
            .unwrap_or(0);
        let window_start = if self.shared.cfg.workload.is_timed() {
            first_rec
        } else {
            first_emit
        };
        let recorded_seconds = if window_start == u64::MAX || window_start == 0 {
            0.0
        } else {
            last_del.saturating_sub(window_start) as f64 / 1e9
        };
        Ok(RefJobReport {
            restored: self
                .shared
                .restored
                .load(std::sync::atomic::Ordering::Relaxed),
            config: self.shared.cfg.clone(),
            mode: self.shared.mode,
            total_records: expected.total_records(),
            lost: check.lost,
            duplicated: check.duplicates,
            check,
            delivered,
            latency: merge(lat.iter())?,
            latency_uncorrected: merge(unc.iter())?,
            intervals,
            recorded_records: recorded,
            recorded_seconds,
            sources,
            metrics,
            job_error,
            interrupted,
            failures_planned,
            failures_struck: self.failures_struck(&metrics_failures),
            recoveries: self.recoveries(&metrics_failures),
            started_ns: first_emit,
            intervals_start_ns: self.shared.intervals_start.get().copied().unwrap_or(0),
            restored_from: self.shared.process_restore.get().copied(),
            rescaled_from: self.shared.rescaled_from.get().copied(),
        })
    }
}

// ---------------------------------------------------------------------------
// Operators
// ---------------------------------------------------------------------------

/// The records of some of a source's splits with one schedule: W3's
/// bursts belong to the records with odd `n` (`workloads.md`), so a W3
/// source that owns splits of both parities (at an odd parallelism) has
/// two lanes, merged by schedule time; every other source has one.
struct Lane {
    gen: Generator,
    burst: bool,
}

/// The lanes of a source owning `splits` (`(split, first n to emit)`).
fn lanes_of(workload: Workload, keys: &KeySpace, splits: &[(u16, u64)], total: u64) -> Vec<Lane> {
    if workload != Workload::W3 {
        return vec![Lane {
            gen: Generator::of_splits(keys, splits, total),
            burst: false,
        }];
    }
    [false, true]
        .into_iter()
        .filter_map(|odd| {
            let mine: Vec<(u16, u64)> = splits
                .iter()
                .copied()
                .filter(|(s, _)| (s % 2 == 1) == odd)
                .collect();
            (!mine.is_empty()).then(|| Lane {
                gen: Generator::of_splits(keys, &mine, total),
                burst: odd,
            })
        })
        .collect()
}

/// The generator source of one subtask.
struct RefSource<P> {
    index: usize,
    lanes: Vec<Lane>,
    keys: KeySpace,
    shared: Arc<Shared>,
    /// The schedule's start (W2/W3), signed: a restored schedule may start
    /// before the clock's epoch.
    t0: Option<i128>,
    /// Restored: unless this process already ran the source (then the
    /// run's schedule goes on), its schedule starts at the position.
    shift: bool,
    /// W4, restored: the run time the checkpoint had used, ns (the run
    /// goes on for what was left).
    restored_elapsed: Option<u64>,
    _p: std::marker::PhantomData<fn() -> P>,
}

/// A source's checkpointed state: each owned split with the first record
/// it has still to emit (union list state: on a rescale every new source
/// sees every split and keeps its own), and for W4 the run time used, ns.
type SourceState = (Vec<(u16, u64)>, Option<u64>);

/// A source state from its bytes, or an error naming it.
fn decode_source_state(bytes: &[u8]) -> Result<SourceState, BoxError> {
    Ok(postcard::from_bytes(bytes)
        .map_err(|e| format!("source state does not decode ({e}; a checkpoint of another job?)"))?)
}

impl<P: Payload> RefSource<P> {
    fn new(index: usize, shared: Arc<Shared>, keys: KeySpace) -> Result<Self, WorkloadError> {
        let cfg = &shared.cfg;
        let gen = Generator::new(&keys, index, cfg.parallelism, shared.total)?;
        let lanes = lanes_of(cfg.workload, &keys, &gen.split_positions(), shared.total);
        shared.sources[index].started.store(true, Relaxed);
        Ok(RefSource {
            index,
            lanes,
            keys,
            t0: None,
            shift: false,
            restored_elapsed: None,
            shared,
            _p: std::marker::PhantomData,
        })
    }

    #[inline]
    fn event(n: u64, key: u64, ts_ns: u64, sent_ns: u64, payload_bytes: usize) -> RefEvent<P> {
        RefEvent {
            key,
            value: n,
            ts_ns,
            sent_ns,
            payload: P::make(payload_bytes, n),
        }
    }

    fn account(&self, count: usize, now: u64, behind: u64) {
        let st = &self.shared.sources[self.index];
        st.emitted.fetch_add(count as u64, Relaxed);
        let _ = st
            .first_emit_ns
            .compare_exchange(0, now.max(1), Relaxed, Relaxed);
        st.last_emit_ns.store(now, Relaxed);
        st.max_behind_ns.fetch_max(behind, Relaxed);
    }

    /// The next record of the lanes as `(lane, n, schedule offset)`: the
    /// earliest scheduled (ties: the lower lane).
    fn earliest(&self, rate: u64) -> Option<(usize, u64, u64)> {
        self.lanes
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                l.gen
                    .next_n()
                    .map(|n| (i, n, scheduled_offset_ns(n, rate, l.burst)))
            })
            .min_by_key(|&(i, _, at)| (at, i))
    }

    /// Whether every lane is exhausted.
    fn exhausted(&self) -> bool {
        self.lanes.iter().all(|l| l.gen.next_n().is_none())
    }

    /// The next record's `n` of a one-lane source (W1, W4), the total when
    /// none is left.
    fn position(&self) -> u64 {
        self.lanes
            .iter()
            .filter_map(|l| l.gen.next_n())
            .min()
            .unwrap_or(self.shared.total)
    }

    /// Rebuilds the lanes from restored split positions, keeping the
    /// splits this source owns; `true` when the state restored is W4's
    /// run time too.
    fn restore_splits(&mut self, state: SourceState) -> Result<(), BoxError> {
        let (splits, elapsed) = state;
        let w4 = self.shared.cfg.workload == Workload::W4;
        if elapsed.is_some() != w4 {
            return Err(format!(
                "the source state is not {}'s (a checkpoint of another workload?)",
                self.shared.cfg.workload
            )
            .into());
        }
        if w4 {
            self.restored_elapsed = elapsed;
        }
        let p = self.shared.cfg.parallelism;
        let mine: Vec<(u16, u64)> = splits
            .into_iter()
            .filter(|(s, _)| split_owner(*s, p) == self.index)
            .collect();
        self.shared
            .restored
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.lanes = lanes_of(
            self.shared.cfg.workload,
            &self.keys,
            &mine,
            self.shared.total,
        );
        self.shift = true;
        self.t0 = None;
        Ok(())
    }
}

impl<P: Payload> Source<RefEvent<P>> for RefSource<P> {
    fn poll(&mut self, out: &mut Vec<RefEvent<P>>, max: usize) -> Result<SourcePoll, BoxError> {
        if self.exhausted() {
            return Ok(SourcePoll::Finished);
        }
        let now = now_ns();
        let pb = self.shared.cfg.payload_bytes;
        if self.shared.cfg.workload == Workload::W4 && now >= self.w4_deadline(now) {
            // Its time is up: the records it emitted are the run's.
            self.shared.sources[self.index]
                .position
                .store(self.position(), Relaxed);
            return Ok(SourcePoll::Finished);
        }
        let cfg = &self.shared.cfg;
        if !cfg.workload.is_paced() {
            // One lane (only W3 has two).
            for (n, key) in self.lanes[0].gen.by_ref().take(max) {
                out.push(Self::event(n, key, now, now, pb));
            }
            self.account(out.len(), now, 0);
            let done = self.exhausted();
            self.shared.sources[self.index]
                .position
                .store(self.position(), Relaxed);
            return Ok(if done {
                SourcePoll::Finished
            } else {
                SourcePoll::Ready
            });
        }
        let rate = cfg.rate;
        let Some((_, _, first_at)) = self.earliest(rate) else {
            return Ok(SourcePoll::Finished);
        };
        let (shift, shared) = (self.shift, &self.shared);
        let t0 = *self.t0.get_or_insert_with(|| {
            *shared.sources[self.index].t0.get_or_init(|| {
                if shift {
                    now as i128 - first_at as i128
                } else {
                    *shared.t0.get_or_init(|| now) as i128
                }
            })
        });
        let offset_now = u64::try_from((now as i128 - t0).max(0)).unwrap_or(u64::MAX);
        let mut behind = 0;
        while out.len() < max {
            // The earliest scheduled record, if it is due.
            let Some((lane, _, at)) = self.earliest(rate) else {
                break;
            };
            if at > offset_now {
                break;
            }
            let Some((n, key)) = self.lanes[lane].gen.next() else {
                break;
            };
            let ts = (t0 + at as i128).max(0) as u64;
            if out.is_empty() {
                behind = now.saturating_sub(ts);
            }
            out.push(Self::event(n, key, ts, now, pb));
        }
        if !out.is_empty() {
            self.account(out.len(), now, behind);
        }
        let Some((_, _, next_at)) = self.earliest(rate) else {
            return Ok(SourcePoll::Finished);
        };
        if out.len() >= max {
            return Ok(SourcePoll::Ready);
        }
        let next_due = t0 + next_at as i128;
        let earliest = now as i128 + self.shared.cfg.tick.as_nanos() as i128;
        let wake = next_due.max(earliest).clamp(0, u64::MAX as i128) as u64;
        Ok(SourcePoll::Idle {
            wake_at_ns: Some(wake),
        })
    }
}

impl<P: Payload> RefSource<P> {
    /// W4: when this source's time is up, ns. The run's start is kept by
    /// an in-process restart; a restore in a new process starts it so that
    /// what the checkpoint had used is behind (`now - elapsed`).
    fn w4_deadline(&mut self, now: u64) -> u64 {
        let (restored, shared) = (self.restored_elapsed, &self.shared);
        let t0 = *self.t0.get_or_insert_with(|| {
            *shared.sources[self.index]
                .t0
                .get_or_init(|| match restored {
                    Some(e) => now as i128 - e as i128,
                    None => *shared.t0.get_or_init(|| now) as i128,
                })
        });
        let run = (shared.cfg.warmup + shared.cfg.duration).as_nanos() as i128;
        (t0 + run).clamp(0, u64::MAX as i128) as u64
    }
}

impl<P: Payload> Checkpointed for RefSource<P> {
    /// Each owned split's next record ([`SourceState`], postcard); W4
    /// adds the run time used so far, ns.
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let splits: Vec<(u16, u64)> = self
            .lanes
            .iter()
            .flat_map(|l| l.gen.split_positions())
            .collect();
        let elapsed = (self.shared.cfg.workload == Workload::W4).then(|| match self.t0 {
            Some(t0) => u64::try_from((now_ns() as i128 - t0).max(0)).unwrap_or(u64::MAX),
            None => self.restored_elapsed.unwrap_or(0),
        });
        let state: SourceState = (splits, elapsed);
        Ok(Some(postcard::to_allocvec(&state)?))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.restore_splits(decode_source_state(state)?)
    }

    /// Union list state: every split of every old source, each kept by
    /// the source that owns it now. W4 is refused: its expected records
    /// are each source's prefix of its splits, which a rescale breaks.
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &lockgate::Rescale,
    ) -> Result<(), BoxError> {
        if self.shared.cfg.workload == Workload::W4 {
            return Err(Box::new(lockgate::FatalError(format!(
                "W4 cannot be restored at another parallelism ({} to {}): its run is timed per source",
                rescale.old_parallelism, rescale.parallelism
            ))));
        }
        let mut splits = Vec::new();
        for last in chains.iter().filter_map(|c| c.last()) {
            let (s, elapsed) = decode_source_state(last)?;
            if elapsed.is_some() {
                return Err("the source state is W4's, not this workload's".into());
            }
            splits.extend(s);
        }
        let mut seen: Vec<u16> = splits.iter().map(|(s, _)| *s).collect();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != splits.len() || seen.len() != usize::from(SPLITS) {
            return Err(format!(
                "the old sources' states hold {} splits ({} distinct), not each of the {SPLITS} once",
                splits.len(),
                seen.len()
            )
            .into());
        }
        let _ = self.shared.rescaled_from.set(rescale.old_parallelism);
        self.restore_splits((splits, None))
    }
}

/// `keyed_sum`: workloads.md's running sum per key, in managed keyed state
/// ([`Managed`] snapshots it incrementally and restores it: a snapshot
/// copies only the keys changed since the last one).
struct RefKeyedSum;

impl<P: Payload> StatefulOperator<RefEvent<P>, RefSum<P>> for RefKeyedSum {
    type State = KeyedState<u64, u64>;

    #[inline]
    fn process(
        &mut self,
        sums: &mut Self::State,
        input: &mut Vec<RefEvent<P>>,
        ctx: &mut Context<'_, RefSum<P>>,
    ) -> Result<(), BoxError> {
        for e in input.drain(..) {
            // As workload::KeyedSum::apply: a wrapping sum per key.
            let sum = sums.get_or_default(e.key);
            *sum = sum.wrapping_add(e.value);
            ctx.emit(RefSum {
                key: e.key,
                sum: *sum,
                n: seq_of_mapped_value(e.value),
                ts_ns: e.ts_ns,
                sent_ns: e.sent_ns,
                payload: e.payload,
            });
        }
        Ok(())
    }
}

/// The checking, latency-recording sink.
struct RefSink {
    slot: usize,
    shared: Arc<Shared>,
    /// The snapshot thread's copy of the check, from the first snapshot of
    /// the run attempt on.
    replica: Option<Arc<Mutex<SinkReplica>>>,
    /// A later attempt's sink before its restore or first record: the
    /// slot's recordings are rolled back to the restored checkpoint (or,
    /// with none restored, to nothing) before it records.
    roll_back: bool,
    /// No record received yet in this attempt.
    first_write: bool,
}

/// Sink `slot`'s slot, rolled back first when `roll_back` (this attempt
/// restored nothing).
fn open_slot<'a>(
    shared: &'a Shared,
    slot: usize,
    roll_back: &mut bool,
) -> Result<MutexGuard<'a, SinkSlot>, BoxError> {
    let mut s = lock(&shared.slots[slot]);
    if std::mem::take(roll_back) {
        s.roll_back(None)?;
    }
    Ok(s)
}

impl<P: Payload> Sink<RefSum<P>> for RefSink {
    fn write(&mut self, input: &mut Vec<RefSum<P>>) -> Result<(), BoxError> {
        let now = now_ns();
        let first_rec = self.shared.first_recorded_n;
        let start = *self.shared.intervals_start.get_or_init(|| {
            self.shared.t0.get().copied().unwrap_or_else(|| {
                self.shared
                    .sources
                    .iter()
                    .map(|s| s.first_emit_ns.load(Relaxed))
                    .filter(|t| *t > 0)
                    .min()
                    .unwrap_or(now)
            })
        });
        let interval = (now.saturating_sub(start) / INTERVAL_NS) as usize;
        let paced = self.shared.cfg.workload.is_paced();
        let first_write = std::mem::take(&mut self.first_write);
        let work_ns = self.shared.cfg.workload.sink_work_ns();
        if work_ns > 0 {
            // W4: the sink is slower than the sources (workloads.md), by
            // `work_ns` a record, spent before the slot's lock is taken:
            // the snapshot thread takes that lock too (`merge_settled`),
            // and std's mutex is not fair, so a lock held through the
            // batch's work and taken again at once starved it for seconds
            // (measured: the sink's asynchronous part 0.1-2.2 s under W4).
            let began = now_ns();
            let batch_ns = work_ns.saturating_mul(input.len() as u64);
            while now_ns().saturating_sub(began) < batch_ns {
                std::hint::spin_loop();
            }
        }
        let mut s = open_slot(&self.shared, self.slot, &mut self.roll_back)?;
        if first_write && s.attempts > 1 {
            s.attempt_starts.push(now);
        }
        let s = &mut *s;
        let mut recorded = false;
        // W4's warm-up is a time: records sent before it are not recorded
        // (none after a restore in a new process: its warm-up was spent; an
        // in-process restart keeps the run's).
        let record_from = if work_ns > 0 {
            *self.shared.record_from.get_or_init(|| {
                if self.shared.process_restore.get().is_some() {
                    0
                } else {
                    start.saturating_add(self.shared.cfg.warmup.as_nanos() as u64)
                }
            })
        } else {
            0
        };
        s.deliveries += input.len() as u64;
        // One target a batch: the open interval with checkpoints, else the
        // run's histograms (a branch a record costs W1 a few percent).
        let (check, target) = match &mut s.open_interval {
            Some(open) => (&mut s.check, open),
            None => (&mut s.check, &mut s.recorded),
        };
        let observe = |check: &mut SinkCheck, r: &RefSum<P>| {
            check.observe(&SumRecord {
                key: r.key,
                sum: r.sum,
                n: r.n,
                ts_ns: r.ts_ns,
            })
        };
        if work_ns == 0 {
            // The batch's interval histogram, looked up once (W2/W3).
            let Recorded {
                latency,
                uncorrected,
                intervals,
            } = target;
            let mut in_interval = paced.then(|| {
                intervals
                    .entry(interval)
                    .or_insert_with(new_interval_histogram)
            });
            // By reference, then one clear: no 40-byte move a record.
            for r in input.iter() {
                observe(check, r);
                if r.n >= first_rec {
                    let lat = now.saturating_sub(r.ts_ns);
                    latency.record_latency(lat);
                    // W1 is not a latency test: one histogram, as the raw
                    // baseline keeps; no intervals.
                    if let Some(h) = &mut in_interval {
                        h.saturating_record(lat);
                        uncorrected.record(now, r.sent_ns);
                    }
                    recorded = true;
                }
            }
            input.clear();
        } else {
            for r in input.drain(..) {
                observe(check, &r);
                if r.ts_ns >= record_from {
                    target.latency.record_latency(now.saturating_sub(r.ts_ns));
                    recorded = true;
                }
            }
        }
        if recorded && s.first_recorded_ns == 0 {
            s.first_recorded_ns = now;
        }
        s.last_delivery_ns = now;
        Ok(())
    }
}

impl Checkpointed for RefSink {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let mut s = open_slot(&self.shared, self.slot, &mut self.roll_back)?;
        s.close_interval(id);
        Ok(Some(encode_full_part(id, &s.check)?))
    }

    /// The check is state like any other, checkpointed incrementally: the
    /// synchronous part takes the words and keys changed since the last
    /// snapshot (O(changes), the first one too: the snapshot thread's
    /// replica is seeded when the attempt starts or restores).
    fn snapshot_state_async(
        &mut self,
        id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        let shared = self.shared.clone();
        let mut slot = open_slot(&shared, self.slot, &mut self.roll_back)?;
        slot.close_interval(id);
        let (replica, changes) = match &self.replica {
            Some(r) => {
                let mut changes = slot.spare_changes.take().unwrap_or_default();
                slot.check.take_changes_into(&mut changes);
                (r.clone(), Some(changes))
            }
            // Not seeded at the start (checkpoints were off then): seed now.
            None => {
                let r = seeded_replica(&mut slot.check);
                self.replica = Some(r.clone());
                (r, None)
            }
        };
        drop(slot);
        let index = self.slot;
        Ok(Some(StateSnapshot::incremental(move |req| {
            // The completed checkpoints' intervals are merged here, off
            // the sink's thread; one of them, emptied, becomes the next
            // interval's recordings, else a new one is allocated here (a
            // fresh one each checkpoint cost this thread 0.5 MB of page
            // faults, `perf record`, BENCHMARKS.md). Neither holds the
            // slot's lock.
            let recycled = SinkSlot::merge_settled(&shared.slots[index])?;
            lockgate::yield_point();
            if lock(&shared.slots[index]).spare.is_none() {
                let spare = recycled.unwrap_or_else(Recorded::new);
                lock(&shared.slots[index]).spare.get_or_insert(spare);
            }
            // One snapshot at a time takes the lock (the task's snapshot
            // thread runs them in order); a panic in one leaves the
            // replica as good as the changes it had applied.
            let (encoded, done) = replica
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .snapshot(req, changes)?;
            // Refilled (emptied first) by the next `take_changes_into`.
            if let Some(done) = done {
                lock(&shared.slots[index]).spare_changes.get_or_insert(done);
            }
            Ok(encoded)
        })))
    }

    fn restore_state_chain(&mut self, chain: &[&[u8]]) -> Result<(), BoxError> {
        let mut parts = Vec::with_capacity(chain.len());
        for (i, bytes) in chain.iter().enumerate() {
            parts.push(decode_sink_state(bytes, i, chain.len())?);
        }
        let restored = parts.last().map(|p| p.id);
        let sizes = lock(&self.shared.slots[self.slot]).check.sizes();
        let check = check_of_chain(parts, sizes)?;
        let mut slot = lock(&self.shared.slots[self.slot]);
        if check.sizes() != slot.check.sizes() {
            let ((r, k), (jr, jk)) = (check.sizes(), slot.check.sizes());
            return Err(format!(
                "the checkpointed sink check is for {r} records over {k} keys, this job's for {jr} over {jk}"
            )
            .into());
        }
        if let (1, Some(id)) = (slot.attempts, restored) {
            let _ = self.shared.process_restore.set((id, check.distinct()));
        }
        slot.check = check;
        if std::mem::take(&mut self.roll_back) {
            slot.roll_back(restored)?;
        }
        // A new replica from the restored check, before any record (the
        // first snapshot after a restore is full: the replica's log starts
        // here).
        self.replica = Some(seeded_replica(&mut slot.check));
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        // A restart restores `id` or a later checkpoint: what was recorded
        // before its snapshot stays.
        lock(&self.shared.slots[self.slot]).settle(id);
        Ok(())
    }
}

/// The check that a chain of parts restores (oldest first; it starts at
/// its last full part), for a job whose check has `sizes` (records,
/// keys).
fn check_of_chain(parts: Vec<SinkState>, sizes: (u64, u64)) -> Result<SinkCheck, BoxError> {
    let start = parts
        .iter()
        .rposition(|p| matches!(p.part, SinkPart::Full(_) | SinkPart::CompactFull(_)))
        .ok_or("the sink's checkpointed chain has no full snapshot")?;
    let mut parts = parts.into_iter().skip(start);
    let in_part =
        |id: CheckpointId| move |e: WorkloadError| format!("the sink's part of chk-{id}: {e}");
    let mut check = match parts.next() {
        Some(SinkState {
            id,
            part: SinkPart::Full(check),
        }) => {
            check.validate().map_err(in_part(id))?;
            check
        }
        Some(SinkState {
            id,
            part: SinkPart::CompactFull(compact),
        }) => SinkCheck::from_compact(compact, sizes).map_err(in_part(id))?,
        _ => unreachable!("the chain starts at a full part"),
    };
    for SinkState { id, part } in parts {
        match part {
            SinkPart::Delta(v1) => check.apply_changes(&v1.into()),
            SinkPart::CompactDelta(changes) => check.apply_changes(&changes),
            SinkPart::Full(_) | SinkPart::CompactFull(_) => {
                unreachable!("no full part after the chain's last")
            }
        }
        .map_err(in_part(id))?;
    }
    Ok(check)
}

/// The sink's state in `bytes`, the `index`-th part of a chain of `len`:
/// an error names the part, and bytes after the state are refused (a
/// postcard decoding reads what it needs and ignores the rest).
fn decode_sink_state(bytes: &[u8], index: usize, len: usize) -> Result<SinkState, BoxError> {
    let (state, rest) = postcard::take_from_bytes::<SinkState>(bytes).map_err(|e| {
        format!(
            "the sink's part {} of {len} in the restored chain: {e}",
            index + 1
        )
    })?;
    if !rest.is_empty() {
        return Err(format!(
            "the sink's part of chk-{}: {} bytes after its state",
            state.id,
            rest.len()
        )
        .into());
    }
    Ok(state)
}

/// The sink's checkpointed state: the checkpoint it belongs to (a restart
/// rolls the latency recordings back to it) and one part of the check.
#[derive(Serialize, serde::Deserialize)]
struct SinkState {
    id: CheckpointId,
    part: SinkPart,
}

/// One checkpointed part of the sink's check: all of it, or what changed
/// since the base checkpoint. Parts are written compact (the last two
/// variants); the first two are the layouts written before, still read
/// so that older checkpoints restore. New layouts go at the end: postcard
/// writes a variant as its index.
#[derive(Serialize, serde::Deserialize)]
enum SinkPart {
    /// The whole bitset, word by word.
    Full(SinkCheck),
    /// Changed words listed one by one.
    Delta(SinkChangesV1),
    /// [`SinkCheck::compact`]: the bitset's all-ones prefix as a count,
    /// its zero suffix left out (W1's full part at 40 M records: 5.1 MB
    /// before, 110-220 KB now, the last sums and the words between the
    /// sources' frontiers).
    CompactFull(CompactCheck<'static>),
    /// [`SinkChanges`]: runs of full blocks, the other words one by one.
    CompactDelta(SinkChanges),
}

/// The variant indices of [`SinkPart`]'s written layouts.
const COMPACT_FULL: u32 = 2;
const COMPACT_DELTA: u32 = 3;

/// [`SinkState`] with a borrowed part, for encoding a part without a copy
/// of the check or of a snapshot's changes: the bytes are [`SinkState`]'s
/// (postcard encodes neither names nor references; tested).
#[derive(Serialize)]
struct SinkStateRef<'a> {
    id: CheckpointId,
    part: SinkPartRef<'a>,
}

/// A written [`SinkPart`], borrowed.
enum SinkPartRef<'a> {
    CompactFull(CompactCheck<'a>),
    CompactDelta(&'a SinkChanges),
}

impl Serialize for SinkPartRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SinkPartRef::CompactFull(c) => {
                s.serialize_newtype_variant("SinkPart", COMPACT_FULL, "CompactFull", c)
            }
            SinkPartRef::CompactDelta(c) => {
                s.serialize_newtype_variant("SinkPart", COMPACT_DELTA, "CompactDelta", c)
            }
        }
    }
}

/// The encoding of a full part of `check` for checkpoint `id`, into a
/// buffer of the exact size (`compact_encoded_size` is exact, so the
/// buffer never grows), kept from an earlier part when the snapshot
/// thread has one ([`lockgate::snapshot_buffer`]).
fn encode_full_part(id: CheckpointId, check: &SinkCheck) -> Result<Vec<u8>, BoxError> {
    let state = SinkStateRef {
        id,
        part: SinkPartRef::CompactFull(check.compact()),
    };
    let size = full_part_bytes(id, check)?;
    Ok(postcard::to_extend(
        &state,
        lockgate::snapshot_buffer(size),
    )?)
}

/// The exact size in bytes of a full part's encoding: the id, the
/// variant's tag (one byte), then the compact check (O(1) for a replica,
/// whose shape is kept: no encoding).
fn full_part_bytes(id: CheckpointId, check: &SinkCheck) -> Result<usize, BoxError> {
    Ok(postcard::to_allocvec(&id)?.len() + 1 + check.compact_encoded_size() as usize)
}

/// A replica of `check` for the sink's snapshot thread, with `check`
/// tracking its changes from now on. Made when an attempt starts or
/// restores, before any record: the copy is O(state) (the seen bitset,
/// 2.5 MB for W1's 20 M records), so the first checkpoint's synchronous
/// part, which made it before, stays O(changes) like every other (it took
/// 4.4 ms at W2's first checkpoint, measured with a temporary timer).
fn seeded_replica(check: &mut SinkCheck) -> Arc<Mutex<SinkReplica>> {
    check.track_changes();
    Arc::new(Mutex::new(SinkReplica::new(check.replica())))
}

/// [`seeded_replica`] for an attempt's new check, which nothing has
/// changed yet: the replica starts empty instead of as a copy, so the
/// job's start does not copy the bitset into fresh memory (the job thread
/// builds the sink; copying W1's 5 MB there zeroed fresh huge pages
/// beside the first records, `perf record`, BENCHMARKS.md).
fn fresh_replica(check: &mut SinkCheck) -> Arc<Mutex<SinkReplica>> {
    check.track_changes();
    Arc::new(Mutex::new(SinkReplica::new(check.empty_replica())))
}

/// The snapshot thread's copy of the sink's check, and the changes each
/// snapshot since the last completed checkpoint took.
struct SinkReplica {
    check: SinkCheck,
    /// The changes of each snapshot after `first` and after the base of
    /// the last delta, by checkpoint.
    log: std::collections::BTreeMap<CheckpointId, SinkChanges>,
    /// The last full part's checkpoint: a delta's base must be at or
    /// after it (the log holds every snapshot's changes since).
    first: Option<CheckpointId>,
}

impl SinkReplica {
    fn new(check: SinkCheck) -> Self {
        SinkReplica {
            check,
            log: Default::default(),
            first: None,
        }
    }

    /// The part of checkpoint `req.id`, after applying `changes` (taken by
    /// the sink's synchronous part; `None` for the attempt's first
    /// snapshot). A delta when `req.base` is a checkpoint of this attempt
    /// and the delta is smaller than a full part; when `req.base` is the
    /// snapshot just before this one (checkpoints complete within their
    /// interval), the delta is `changes` itself, encoded in place (no
    /// merge, sort or copy of the changed words).
    ///
    /// Returns the encoding and a `SinkChanges` this replica no longer
    /// needs (an earlier snapshot's, before the base), to be reused.
    fn snapshot(
        &mut self,
        req: &SnapshotRequest,
        changes: Option<SinkChanges>,
    ) -> Result<(EncodedState, Option<SinkChanges>), BoxError> {
        if let Some(c) = &changes {
            self.check.apply_changes(c)?;
        }
        // Between the pieces of this work, a snapshot thread gives its
        // core back to a task that waits for it (`lockgate::yield_point`).
        lockgate::yield_point();
        self.log.insert(req.id, changes.unwrap_or_default());
        let full_bytes = full_part_bytes(req.id, &self.check)? as u64;
        let mut done = None;
        if let Some(base) = req.base.filter(|b| self.first.is_some_and(|f| f <= *b)) {
            let kept = self.log.split_off(&base.next());
            let before = std::mem::replace(&mut self.log, kept);
            done = before.into_values().max_by_key(|c| c.word_count());
            let only = (self.log.len() == 1)
                .then(|| self.log.get(&req.id))
                .flatten();
            let delta = if let Some(only) = only {
                // This snapshot's changes: the replica's values of them.
                encode_delta(req.id, only, full_bytes)?
            } else {
                let mut words: Vec<u64> =
                    self.log.values().flat_map(|c| c.word_indices()).collect();
                let mut keys: Vec<u64> = self.log.values().flat_map(|c| c.keys_iter()).collect();
                lockgate::yield_point();
                words.sort_unstable();
                words.dedup();
                lockgate::yield_point();
                keys.sort_unstable();
                keys.dedup();
                lockgate::yield_point();
                let merged = self.check.changes_of(&words, &keys);
                lockgate::yield_point();
                encode_delta(req.id, &merged, full_bytes)?
            };
            if let Some(bytes) = delta {
                let encoded = EncodedState {
                    bytes,
                    delta: true,
                    full_bytes,
                };
                return Ok((encoded, done));
            }
        }
        // A full part: the log restarts here. A later delta needs a base
        // at or after this snapshot (`first`), else that part is full
        // too; without this, every part full (`--incremental false`) let
        // the log grow by a snapshot's changes at every checkpoint.
        let logged = std::mem::take(&mut self.log).into_values();
        done = done
            .into_iter()
            .chain(logged)
            .max_by_key(|c| c.word_count());
        self.first = Some(req.id);
        lockgate::yield_point();
        let full = EncodedState::full(encode_full_part(req.id, &self.check)?);
        Ok((full, done))
    }
}

/// The encoding of a delta part of checkpoint `id`, `None` when it would
/// not be smaller than a full part of `full_bytes` bytes (then a full
/// part is written instead).
fn encode_delta(
    id: CheckpointId,
    changes: &SinkChanges,
    full_bytes: u64,
) -> Result<Option<Vec<u8>>, BoxError> {
    let state = SinkStateRef {
        id,
        part: SinkPartRef::CompactDelta(changes),
    };
    let size = postcard::experimental::serialized_size(&state)?;
    if size as u64 >= full_bytes {
        return Ok(None);
    }
    Ok(Some(postcard::to_extend(
        &state,
        lockgate::snapshot_buffer(size),
    )?))
}

// ---------------------------------------------------------------------------
// Building and running
// ---------------------------------------------------------------------------

/// Adds the reference topology to `job` (operators `source`, `keyed_sum`,
/// `sink`) and returns the handle to its shared results. The job's
/// application config should be [`RefJobConfig::app_config_json`] (see
/// [`start_reference_job`]).
///
/// # Errors
/// [`RefJobError::Config`] / [`RefJobError::Workload`] for an invalid
/// configuration.
pub fn build_reference_job(
    cfg: &RefJobConfig,
    job: &JobBuilder,
) -> Result<RefJobResults, RefJobError> {
    let results = RefJobResults::new(cfg, job.config().checkpoint.mode)?;
    if cfg.payload_bytes > 0 {
        build_typed::<Bytes>(&results, job)?;
    } else {
        build_typed::<()>(&results, job)?;
    }
    Ok(results)
}

fn build_typed<P: Payload>(results: &RefJobResults, job: &JobBuilder) -> Result<(), RefJobError> {
    let shared = results.shared.clone();
    let cfg = &shared.cfg;
    let keys = KeySpace::new(cfg.keys, cfg.key_dist)?;
    let p = cfg.parallelism;
    let (total, nkeys) = (shared.total, cfg.keys);
    let s_src = shared.clone();
    let s_sink = shared.clone();
    job.source("source", p, move |i| {
        RefSource::<P>::new(i.index, s_src.clone(), keys.clone())
            .expect("source index and parallelism were validated")
    })
    .map_in_place(|e: &mut RefEvent<P>| e.value = crate::workload::chained_map(e.value))
    .key_by(|e: &RefEvent<P>| e.key)
    .task("keyed_sum", p)
    .process("keyed_sum", move |_| Managed::new(RefKeyedSum))
    .rebalance()
    .task("sink", 1)
    .sink("sink", move |i| {
        // A new attempt starts from a fresh check unless restore_state
        // gives it the checkpointed one.
        let mut slot = lock(&s_sink.slots[i.index]);
        slot.check = SinkCheck::new(total, nkeys).expect("sizes were validated");
        slot.attempts += 1;
        let later = slot.attempts > 1;
        // With checkpoints, the snapshot thread's replica starts here, at
        // the attempt's start, not at its first checkpoint.
        let replica = slot
            .open_interval
            .is_some()
            .then(|| fresh_replica(&mut slot.check));
        drop(slot);
        RefSink {
            slot: i.index,
            shared: s_sink.clone(),
            replica,
            roll_back: later,
            first_write: true,
        }
    });
    Ok(())
}

/// Builds the job named [`JOB_NAME`] with `job_config` and `failures`,
/// starts it, and returns its handle and results. `run` (when not null)
/// is recorded in every checkpoint beside [`RefJobConfig::app_config_json`]
/// as its `run` key (the load generator's flags), so a restore must match
/// it too.
///
/// # Errors
/// An invalid configuration; the engine's refusal to start (bad config,
/// storage, restore: [`RefJobError::Job`]).
pub fn start_reference_job(
    cfg: &RefJobConfig,
    job_config: JobConfig,
    failures: FailurePlan,
    run: serde_json::Value,
) -> Result<(JobHandle, RefJobResults), RefJobError> {
    let mut app = cfg.app_config_json();
    if !run.is_null() {
        app["run"] = run;
    }
    let job = JobBuilder::new(JOB_NAME, job_config)
        .with_app_config(app)
        .with_failures(failures);
    let results = build_reference_job(cfg, &job)?;
    // Compute the closed form before the clock starts mattering.
    results.expected();
    let handle = job.start()?;
    Ok((handle, results))
}

/// The task names of the reference job with parallelism `p`, in start
/// order (what [`FailurePlan`] indexes): `source[0..p]`, `keyed_sum[0..p]`,
/// `sink[0]`.
pub fn task_names(p: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..p).map(|i| format!("source[{i}]")).collect();
    v.extend((0..p).map(|i| format!("keyed_sum[{i}]")));
    v.push("sink[0]".into());
    v
}

/// A seeded plan of `count` failures (after-records points) spread so
/// that each strikes during the run: points are drawn in `1..=M` with
/// `M = total / (parallelism × (count + 1) × 2)`, so even `count`
/// failures of one source in a row fit in its share of the records.
pub fn seeded_failures(cfg: &RefJobConfig, seed: u64, count: usize) -> FailurePlan {
    if count == 0 {
        return FailurePlan::none();
    }
    let p = cfg.parallelism.max(1);
    // W4's total is a bound; what it emits is about half of the drain
    // rate over its time (the sink spins a core of two).
    let expected = match cfg.workload {
        Workload::W4 => cfg.total_records().saturating_sub(W4_IN_FLIGHT) / 2,
        _ => cfg.total_records(),
    };
    let max = (expected / (p as u64 * (count as u64 + 1) * 2)).max(1);
    FailurePlan::seeded(seed, count, 2 * p + 1, max)
}

/// Waits until `handle`'s job ended, then collects the report.
///
/// # Errors
/// As [`RefJobResults::finish`].
pub fn wait_reference_job(
    handle: JobHandle,
    results: &RefJobResults,
    interrupted: bool,
    failures_planned: usize,
) -> Result<RefJobReport, RefJobError> {
    while !handle.is_finished() {
        // Poll the job thread's end (it has no completion channel);
        // 2 ms is far below any run's length.
        std::thread::sleep(Duration::from_millis(2));
    }
    let last = handle.metrics();
    let outcome = handle.wait();
    results.finish(outcome, last, interrupted, failures_planned)
}

/// Runs the reference job to its end: builds, starts, waits, checks.
///
/// # Errors
/// An invalid configuration or the engine's refusal to start. A job that
/// fails while running is not an error here: the report says so
/// ([`RefJobReport::job_error`]).
pub fn run_reference_job(
    cfg: &RefJobConfig,
    job_config: JobConfig,
    failures: FailurePlan,
) -> Result<RefJobReport, RefJobError> {
    let planned = failures.failures.len();
    let (handle, results) =
        start_reference_job(cfg, job_config, failures, serde_json::Value::Null)?;
    wait_reference_job(handle, &results, false, planned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check that took every third record of `0..records` below
    /// `frontier` (and the others below `frontier / 2`), over 500 keys.
    fn check_up_to(records: u64, frontier: u64) -> SinkCheck {
        let mut check = SinkCheck::new(records, 500).unwrap();
        for n in (0..frontier).filter(|n| n % 3 == 0 || *n < frontier / 2) {
            check.observe(&crate::workload::SumRecord {
                key: n % 500,
                sum: n * 7,
                n,
                ts_ns: 0,
            });
        }
        check
    }

    #[test]
    fn a_full_part_encoded_by_reference_is_the_owned_encoding_and_decodes() {
        let check = check_up_to(100_000, 60_000);
        let id = CheckpointId(300);
        let by_ref = encode_full_part(id, &check).unwrap();
        assert_eq!(
            by_ref.capacity(),
            by_ref.len(),
            "the buffer was sized exactly"
        );
        assert_eq!(by_ref.len(), full_part_bytes(id, &check).unwrap());
        let back: SinkState = postcard::from_bytes(&by_ref).unwrap();
        assert_eq!(back.id, id);
        // The owned layout's variant index is the one written by
        // reference: the owned state encodes to the same bytes.
        assert_eq!(postcard::to_allocvec(&back).unwrap(), by_ref);
        let SinkPart::CompactFull(compact) = back.part else {
            panic!("a compact full part")
        };
        let decoded = SinkCheck::from_compact(compact, check.sizes()).unwrap();
        assert_eq!(decoded, check);
        assert_eq!(decoded.distinct(), check.distinct());
        // The bitset's first 30,000 bits are all ones and its last 40,000
        // zeros (1,093 of its 1,563 words): the prefix is a count and the
        // suffix is left out.
        let raw = postcard::to_allocvec(&check).unwrap().len();
        assert!(
            by_ref.len() <= raw - 1_090 * 8,
            "compact {} bytes, raw {raw}",
            by_ref.len()
        );
    }

    #[test]
    fn a_compact_full_part_of_other_sizes_or_too_many_words_is_refused() {
        let check = check_up_to(10_000, 6_000);
        let bytes = encode_full_part(CheckpointId(1), &check).unwrap();
        let compact = || match postcard::from_bytes::<SinkState>(&bytes).unwrap().part {
            SinkPart::CompactFull(c) => c,
            _ => panic!("a compact full part"),
        };
        let err = SinkCheck::from_compact(compact(), (1 << 33, 500)).unwrap_err();
        assert!(
            err.to_string().contains("for 10000 records over 500 keys"),
            "{err}"
        );
        // A prefix longer than the bitset (a corrupt count whose CRC was
        // fixed up): refused, not a panic or a huge allocation.
        let mut crafted = postcard::to_allocvec(&CheckpointId(1)).unwrap();
        crafted.push(COMPACT_FULL as u8);
        crafted.extend(
            postcard::to_allocvec(&(10_000u64, 500u64, 1u64 << 40, Vec::<u8>::new())).unwrap(),
        );
        let tail = &bytes[bytes.len() - (check.compact_encoded_size() as usize)..];
        let (_, rest) = postcard::take_from_bytes::<(u64, u64, u64, Vec<u8>)>(tail).unwrap();
        crafted.extend_from_slice(rest);
        let part = match postcard::from_bytes::<SinkState>(&crafted).unwrap().part {
            SinkPart::CompactFull(c) => c,
            _ => panic!("a compact full part"),
        };
        let err = SinkCheck::from_compact(part, check.sizes()).unwrap_err();
        assert!(err.to_string().contains("more than 157"), "{err}");
    }

    #[test]
    fn parts_in_the_older_layouts_still_restore() {
        // Written before the compact layouts: a full part word by word,
        // then deltas that list every changed word.
        let mut check = SinkCheck::new(30_000, 40).unwrap();
        check.track_changes();
        let mut next = 0;
        let mut parts = Vec::new();
        let mut observe = |check: &mut SinkCheck, count: u64| {
            for n in next..next + count {
                check.observe(&crate::workload::SumRecord {
                    key: n % 40,
                    sum: n,
                    n,
                    ts_ns: 0,
                });
            }
            next += count;
        };
        observe(&mut check, 1_000);
        let mut changes = SinkChanges::default();
        check.take_changes_into(&mut changes);
        let old = |part: SinkPart| {
            postcard::to_allocvec(&SinkState {
                id: CheckpointId(1),
                part,
            })
            .unwrap()
        };
        parts.push(old(SinkPart::Full(check.clone())));
        for count in [9_000, 500] {
            observe(&mut check, count);
            check.take_changes_into(&mut changes);
            assert!(changes.word_indices().next().is_some());
            parts.push(old(SinkPart::Delta(SinkChangesV1::from(&changes))));
        }
        let decoded: Vec<SinkState> = parts
            .iter()
            .enumerate()
            .map(|(i, b)| decode_sink_state(b, i, parts.len()).unwrap())
            .collect();
        assert_eq!(check_of_chain(decoded, check.sizes()).unwrap(), check);
        // A delta that does not fit (a word past the end) is refused,
        // naming its checkpoint; so are bytes after a part's state.
        let mut bad = SinkChanges::default();
        check.take_changes_into(&mut bad);
        let mut v1 = SinkChangesV1::from(&bad);
        v1.words_mut().push((1 << 40, 1));
        let mut chain: Vec<SinkState> = parts
            .iter()
            .map(|b| postcard::from_bytes::<SinkState>(b).unwrap())
            .collect();
        chain.push(SinkState {
            id: CheckpointId(4),
            part: SinkPart::Delta(v1),
        });
        let err = check_of_chain(chain, check.sizes()).unwrap_err();
        assert!(
            err.to_string().starts_with("the sink's part of chk-4: "),
            "{err}"
        );
        let mut long = parts[1].clone();
        long.extend_from_slice(&[0; 70]);
        let err = decode_sink_state(&long, 1, 3)
            .err()
            .expect("trailing bytes");
        assert!(
            err.to_string().contains("70 bytes after its state"),
            "{err}"
        );
        let err = decode_sink_state(&long[..5], 1, 3)
            .err()
            .expect("cut short");
        assert!(
            err.to_string().starts_with("the sink's part 2 of 3"),
            "{err}"
        );
    }

    /// The check that `parts` (a full part, then deltas) restore.
    fn restored(parts: &[&EncodedState]) -> SinkCheck {
        let decoded: Vec<SinkState> = parts
            .iter()
            .map(|p| postcard::from_bytes::<SinkState>(&p.bytes).unwrap())
            .collect();
        let sizes = match &decoded[0].part {
            SinkPart::CompactFull(c) => {
                postcard::from_bytes::<(u64, u64)>(&postcard::to_allocvec(c).unwrap()).unwrap()
            }
            _ => panic!("the chain starts at a compact full part"),
        };
        check_of_chain(decoded, sizes).unwrap()
    }

    #[test]
    fn replica_parts_restore_the_check_whether_the_base_is_the_last_snapshot_or_older() {
        // Two sources far apart: the even records run ahead of the odd
        // ones, so a full part holds the words between them (the compact
        // layout leaves out only the all-ones prefix and the zero
        // suffix) and a delta the words near the two frontiers.
        let mut check = SinkCheck::new(24_000, 30).unwrap();
        let take = |check: &mut SinkCheck, ns: &mut dyn Iterator<Item = u64>| {
            for n in ns {
                check.observe(&crate::workload::SumRecord {
                    key: n * 7 % 30,
                    sum: n,
                    n,
                    ts_ns: 0,
                });
            }
        };
        take(&mut check, &mut (0..16_000).step_by(2));
        take(&mut check, &mut (1..2_000).step_by(2));
        let replica = seeded_replica(&mut check);
        let (even, odd) = (std::cell::Cell::new(16_000), std::cell::Cell::new(2_001));
        // `count` records: four even ones for each odd one.
        let observe = |check: &mut SinkCheck, count: u64| {
            for i in 0..count {
                let next = if i % 5 == 4 { &odd } else { &even };
                take(check, &mut std::iter::once(next.get()));
                next.set(next.get() + 2);
            }
        };
        let snap = |check: &mut SinkCheck, id: u64, base: Option<u64>, first: bool| {
            let changes = (!first).then(|| {
                let mut c = SinkChanges::default();
                check.take_changes_into(&mut c);
                c
            });
            let req = SnapshotRequest {
                id: CheckpointId(id),
                base: base.map(CheckpointId),
            };
            replica.lock().unwrap().snapshot(&req, changes).unwrap()
        };
        let (p1, done) = snap(&mut check, 1, None, true);
        assert!(!p1.delta);
        assert!(done.is_some(), "a full part hands its own changes back");
        observe(&mut check, 500);
        let at2 = check.clone();
        // Base 1 is the snapshot just before: the delta is 2's changes.
        let (p2, done) = snap(&mut check, 2, Some(1), false);
        assert!(p2.delta, "500 records change less than the whole check");
        assert!(done.is_none(), "nothing was logged before 2");
        assert_eq!(restored(&[&p1, &p2]), at2);
        observe(&mut check, 700);
        // 2 did not complete: 3's delta merges the changes of 2 and 3.
        let (p3, _) = snap(&mut check, 3, Some(1), false);
        assert!(p3.delta);
        assert_eq!(restored(&[&p1, &p3]), check);
        observe(&mut check, 300);
        let (p4, done) = snap(&mut check, 4, Some(3), false);
        assert!(p4.delta);
        let done = done.expect("2's and 3's entries are handed back");
        assert!(done.word_count() > 0, "the larger one, with its words");
        assert_eq!(restored(&[&p1, &p3, &p4]), check);
        assert_eq!(
            p4.full_bytes,
            encode_full_part(CheckpointId(4), &check).unwrap().len() as u64
        );
        // A delta as large as a full part is written full: a quarter of
        // the records between the frontiers change every word there, and
        // none is full.
        take(
            &mut check,
            &mut (odd.get() + 2..even.get()).filter(|n| n % 4 == 1),
        );
        let (p5, _) = snap(&mut check, 5, Some(4), false);
        assert!(!p5.delta, "every word changed: a full part is smaller");
        assert_eq!(restored(&[&p5]), check);
        assert!(
            replica.lock().unwrap().log.is_empty(),
            "a full part restarts the log"
        );
        // 5 did not complete and its log is gone: a delta on 4 would miss
        // 5's changes, so 6 is full; 7 on 6 is a delta again.
        observe(&mut check, 100);
        let (p6, _) = snap(&mut check, 6, Some(4), false);
        assert!(!p6.delta);
        assert_eq!(restored(&[&p6]), check);
        observe(&mut check, 100);
        let (p7, _) = snap(&mut check, 7, Some(6), false);
        assert!(p7.delta);
        assert_eq!(restored(&[&p6, &p7]), check);
        // Every part full (no base): the log stays empty.
        for id in 8..12 {
            observe(&mut check, 50);
            let (p, _) = snap(&mut check, id, None, false);
            assert!(!p.delta);
            assert!(replica.lock().unwrap().log.is_empty());
        }
    }
}
