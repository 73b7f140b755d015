//! A running job seen from outside: metrics through the [`metrics`]
//! facade, `tracing` spans of checkpoints and recoveries, and health.
//!
//! **Metrics.** Every job records into whatever [`metrics`] recorder the
//! application installed globally *before starting it* (e.g.
//! `metrics-exporter-prometheus`'s `PrometheusBuilder`, with
//! [`SECONDS_BUCKETS`] for the `_seconds` histograms); without one, each
//! call is a no-op. The names below are Prometheus's conventions
//! (`lockgate_` prefix, base units, `_total` counters); the labels are
//! [`LABEL_JOB_NAME`] on every metric, [`LABEL_TASK`] and
//! [`LABEL_SUBTASK`] on per-task ones, [`LABEL_REASON`] on aborted
//! checkpoints only (never a checkpoint id or a key). A task's counters
//! are the atomics its thread keeps anyway: a sampler thread per job
//! copies them into the facade every 100 ms, so the record path does no
//! more work with a recorder than without; checkpoint metrics are
//! recorded as each checkpoint ends (every one, whatever the interval:
//! durations are histograms, not a "last" gauge a scrape would miss).
//!
//! | question | metric |
//! |---|---|
//! | is it keeping up? | `rate(`[`RECORDS_IN`]`)` of sources against the input's rate, [`BACKPRESSURE_SECONDS`] (its `rate()` is the fraction of time blocked), [`INPUT_QUEUE_LENGTH`] |
//! | are checkpoints healthy? | [`CHECKPOINTS_COMPLETED`], [`CHECKPOINTS_ABORTED`] by reason, [`CHECKPOINT_CONSECUTIVE_FAILURES`], [`CHECKPOINT_DURATION`] quantiles, [`LAST_CHECKPOINT_COMPLETED_TIME`] |
//! | what does a checkpoint cost? | [`CHECKPOINT_SYNC_DURATION`], [`CHECKPOINT_ASYNC_DURATION`], [`CHECKPOINT_ALIGNMENT_DURATION`], [`CHECKPOINT_START_DELAY`], [`CHECKPOINTED_BYTES`], [`CHECKPOINT_PERSISTED_BYTES`], [`STATE_SIZE_BYTES`] |
//! | how long did the last recovery take? | [`LAST_RECOVERY_DURATION`], [`RECOVERY_DURATION`], [`RESTARTS`] |
//! | is the job up? | [`JOB_STATE`], [`JOB_HEALTHY`] |
//! | how far behind is committed output? | [`COMMITTED_OUTPUT_LAG`] (set by two-phase-commit sinks that call [`set_committed_output_lag`]) |
//!
//! **Traces.** With a `tracing` subscriber (and `tracing-opentelemetry`
//! for OTLP), each checkpoint is a `checkpoint` span at debug level, from
//! its trigger to its end (fields `id`, `kind`, `mode`, `status`,
//! `duration_ms`, `checkpointed_bytes`, `persisted_bytes`, `state_bytes`,
//! `unaligned`), with a debug event per subtask part (`sync_ms`,
//! `async_ms`, `alignment_ms`, `start_delay_ms`) and a warning per
//! aborted or failed checkpoint (a timeout's is the coordinator's, when
//! it happens; none for one subsumed by a newer completed checkpoint or
//! aborted by a task failure, which is warned itself). Each recovery is a `recovery` span
//! at info level, from the failure (or, restored at start, from the
//! job's start) to the first record after the restore (fields `cause`,
//! `restart`, `checkpoint` restored, `state_bytes` read,
//! `first_record`, `duration_ms`).
//!
//! **Health.** [`crate::JobHandle::health`] (or a [`HealthProbe`] for
//! another thread) and [`process_health`] for every job of the process
//! say whether a job is healthy, by the rule of [`Health`].

mod checkpoints;
mod health;
mod job;
mod names;
mod sampler;

pub(crate) use checkpoints::CheckpointTelemetry;
pub(crate) use health::HealthCell;
pub(crate) use job::JobTelemetry;

pub use health::{process_health, Health, HealthProbe, JobState};
pub use names::*;

/// Sets [`COMMITTED_OUTPUT_LAG`] for sink subtask `task[subtask]` of job
/// `job_name`: how far its committed output is behind its records' event
/// time, in seconds.
///
/// The reference workload's sink sets it at each commit with
/// `lockgate loadgen --output committed` (the oldest record the commit
/// made visible, from its intended send time); a two-phase-commit sink of
/// an application may call it after each commit.
pub fn set_committed_output_lag(job_name: &str, task: &str, subtask: usize, seconds: f64) {
    metrics::gauge!(
        COMMITTED_OUTPUT_LAG,
        LABEL_JOB_NAME => job_name.to_string(),
        LABEL_TASK => task.to_string(),
        LABEL_SUBTASK => subtask.to_string()
    )
    .set(seconds);
}
