//! What the reference job runs ([`RefJobConfig`]: the workload and its
//! parameters, checked by [`RefJobConfig::validate`] and recorded in
//! every checkpoint), the job's limits and defaults (W4's bounds, the
//! latency interval, the source tick, the payload limit), and
//! [`RefJobError`].

use crate::latency::LatencyError;
use crate::workload::{KeyDist, KeySpace, Workload, WorkloadError, MAX_CHECKED_RECORDS};
use lockgate::JobError;
use serde::Serialize;
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
/// Chosen from a measurement (docs/benchmarks-history.md, "Source pacing"): W2 at
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
/// VM (docs/benchmarks-history.md, "A shorter source tick on workers"), W2 on 2
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
    /// What the sink's output is: every record as it arrives
    /// (processing, the default), or records committed when their
    /// checkpoint completes (committed: the sink is a two-phase-commit
    /// sink; needs checkpoints).
    pub output: OutputMode,
    /// Where an earlier process's committed output is logged and this
    /// one's goes (the checkpoint folder; committed output only).
    pub committed_log_dir: Option<std::path::PathBuf>,
    /// The sink's latency intervals (the timeline's points, the `.hlog`'s
    /// intervals), ns of intended send time: [`INTERVAL_NS`] unless a
    /// finer view is asked for (`loadgen --ab`: 10 ms).
    pub interval_ns: u64,
}

/// The reference sink's output (see [`RefJobConfig::output`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// Every record counts when the sink receives it.
    #[default]
    Processing,
    /// A record counts when the sink commits it: at the completion of the
    /// first checkpoint whose barrier followed it.
    Committed,
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
            output: OutputMode::Processing,
            committed_log_dir: None,
            interval_ns: INTERVAL_NS,
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
            // Absent for processing output: checkpoints written before
            // the field existed restore.
            "output": (self.output == OutputMode::Committed).then_some("committed"),
        })
    }
}
