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
//! bytes ([`Bytes`]), and report it in their [`RecordSize`](lockgate::RecordSize).
//!
//! # Sources
//! The records are made of 128 splits (split `s`: the records with
//! `n % 128 == s`); source `i` of `P` owns the splits with `s % P == i`
//! and emits their records with a [`Generator`](crate::workload::Generator) in increasing `n`. Its
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
//! The sink checks every record with a [`SinkCheck`](crate::workload::SinkCheck) (checkpointed, so an
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
//!
//! # Files
//! One file per part of the job: `config` (what runs: [`RefJobConfig`],
//! the job's limits and defaults, [`RefJobError`]), `records` (the
//! records between the tasks and their payload), the three operators
//! `source`, `keyed_sum` and `sink`, `sink_state` (the sink's
//! checkpointed parts: their layouts, the snapshot thread's replica and
//! its deltas, the restore of a chain), `shared` (what the tasks record
//! into across the run's attempts), `report` (the live progress and the
//! final [`RefJobReport`]), and `job` (the wiring, and starting, waiting
//! for and running the job).

mod committed;
mod config;
mod job;
mod keyed_sum;
mod recorded;
mod records;
mod report;
mod shared;
mod sink;
mod sink_state;
mod source;

pub use config::{
    OutputMode, RefJobConfig, RefJobError, DEFAULT_TICK, DEFAULT_TICK_US, INTERVAL_NS,
    MAX_PAYLOAD_BYTES, W4_IN_FLIGHT, W4_MAX_RATE, WORKERS_TICK_US,
};
pub use job::{
    build_reference_job, run_reference_job, seeded_failures, start_reference_job, task_names,
    wait_reference_job, JOB_NAME,
};
pub use records::{Bytes, Payload, RefEvent, RefSum};
pub use report::{
    CommittedReport, Recovery, RefJobReport, RefJobResults, RefProgress, SourceSummary,
};
pub use shared::{CheckpointBands, CheckpointInterval};
