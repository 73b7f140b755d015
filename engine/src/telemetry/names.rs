//! The metric names, labels and histogram buckets, and their descriptions.

use metrics::Unit;

/// Label: the job's name ([`crate::JobBuilder::new`]), on every metric.
pub const LABEL_JOB_NAME: &str = "job_name";
/// Label: the task (the operator that heads a chain), on per-task metrics.
pub const LABEL_TASK: &str = "task";
/// Label: the subtask index (`0..parallelism`), on per-task metrics.
pub const LABEL_SUBTASK: &str = "subtask";
/// Label: why a checkpoint was aborted ([`crate::barrier::AbortReason::as_str`]),
/// on [`CHECKPOINTS_ABORTED`] only.
pub const LABEL_REASON: &str = "reason";

/// Counter, per task: records received (for a source: records it
/// produced). `rate()` of a source's is the job's input rate.
pub const RECORDS_IN: &str = "lockgate_records_in_total";
/// Counter, per task: records sent to the task's output channels.
pub const RECORDS_OUT: &str = "lockgate_records_out_total";
/// Gauge, per task: seconds the task was blocked on a full output channel
/// (backpressure) since the job started. It only grows, but the `metrics`
/// facade has integer counters only, so it is a gauge: `rate()` of it is
/// the fraction of time backpressured (0 to 1), as Flink's
/// `backPressuredTimeMsPerSecond` / 1000.
pub const BACKPRESSURE_SECONDS: &str = "lockgate_task_backpressured_seconds";
/// Gauge, per task: seconds the task waited for input since the job
/// started (a gauge for the reason of [`BACKPRESSURE_SECONDS`]); `1 -
/// rate(idle) - rate(backpressured)` is how busy the task is.
pub const IDLE_SECONDS: &str = "lockgate_task_idle_seconds";
/// Gauge, per task: elements queued in the task's input channels.
pub const INPUT_QUEUE_LENGTH: &str = "lockgate_task_input_queue_length";

/// Counter: checkpoints completed.
pub const CHECKPOINTS_COMPLETED: &str = "lockgate_checkpoints_completed_total";
/// Counter, by [`LABEL_REASON`]: checkpoints aborted.
pub const CHECKPOINTS_ABORTED: &str = "lockgate_checkpoints_aborted_total";
/// Gauge: checkpoints triggered and not ended yet.
pub const CHECKPOINTS_IN_PROGRESS: &str = "lockgate_checkpoints_in_progress";
/// Gauge: checkpoints failed in a row, as counted against
/// [`crate::CheckpointConfig::tolerable_failures`] (timeouts, storage
/// errors, declines; 0 after a completed one).
pub const CHECKPOINT_CONSECUTIVE_FAILURES: &str = "lockgate_checkpoint_consecutive_failures";
/// Histogram: a completed checkpoint's end-to-end duration, trigger to
/// complete (every part and the metadata durable).
pub const CHECKPOINT_DURATION: &str = "lockgate_checkpoint_duration_seconds";
/// Histogram, per task: a subtask's synchronous part of a completed
/// checkpoint (the task does no other work meanwhile).
pub const CHECKPOINT_SYNC_DURATION: &str = "lockgate_checkpoint_sync_duration_seconds";
/// Histogram, per task: a subtask's asynchronous part (encoding, write,
/// `fsync`, on its snapshot thread).
pub const CHECKPOINT_ASYNC_DURATION: &str = "lockgate_checkpoint_async_duration_seconds";
/// Histogram, per task: the time a subtask's inputs were blocked for the
/// barrier alignment (exactly-once, two inputs or more).
pub const CHECKPOINT_ALIGNMENT_DURATION: &str = "lockgate_checkpoint_alignment_duration_seconds";
/// Histogram, per task: trigger to the first barrier at the subtask
/// (Flink's `checkpointStartDelayNanos`): how far barriers lag behind
/// the records queued before them.
pub const CHECKPOINT_START_DELAY: &str = "lockgate_checkpoint_start_delay_seconds";
/// Counter: bytes written by completed checkpoints (parts, headers,
/// metadata; channel state not included).
pub const CHECKPOINTED_BYTES: &str = "lockgate_checkpointed_bytes_total";
/// Counter: in-flight records persisted as channel state by completed
/// unaligned checkpoints, bytes.
pub const CHECKPOINT_PERSISTED_BYTES: &str = "lockgate_checkpoint_persisted_bytes_total";
/// Gauge, per task: the size of a full encoding of the subtask's state at
/// the last completed checkpoint, bytes.
pub const STATE_SIZE_BYTES: &str = "lockgate_state_size_bytes";
/// Gauge: when the last checkpoint completed, Unix time in seconds
/// (`time() - this` is the age of the newest restorable state).
pub const LAST_CHECKPOINT_COMPLETED_TIME: &str =
    "lockgate_last_checkpoint_completed_timestamp_seconds";

/// Counter: restarts after a task failure.
pub const RESTARTS: &str = "lockgate_restarts_total";
/// Histogram: a recovery's duration, from the failure (or, for a job
/// restored at start, the job's start) to the first record after the
/// restore.
pub const RECOVERY_DURATION: &str = "lockgate_recovery_duration_seconds";
/// Gauge: the last recovery's duration (see [`RECOVERY_DURATION`]).
pub const LAST_RECOVERY_DURATION: &str = "lockgate_last_recovery_duration_seconds";
/// Gauge: the job's state, [`crate::telemetry::JobState::code`]: 0
/// starting, 1 running, 2 restarting, 3 finished, 4 failed.
pub const JOB_STATE: &str = "lockgate_job_state";
/// Gauge: 1 when the job is healthy as `/health` says
/// ([`crate::telemetry::Health`]), else 0.
pub const JOB_HEALTHY: &str = "lockgate_job_healthy";
/// Gauge, per sink subtask: how far committed output is behind the
/// records' event time, seconds, at its last commit. The engine does not
/// record it: a two-phase-commit sink sets it through
/// [`crate::telemetry::set_committed_output_lag`] (the load generator's
/// sink does, with `--output committed`).
pub const COMMITTED_OUTPUT_LAG: &str = "lockgate_committed_output_lag_seconds";

/// Bucket upper bounds (seconds) for every `_seconds` histogram, from
/// 100 µs to 2 minutes: give them to the exporter (e.g.
/// `PrometheusBuilder::set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)`)
/// so that they render as Prometheus histograms, which aggregate across
/// tasks and jobs, instead of summaries.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Gives the installed recorder the unit and help text of every lockgate
/// metric (what Prometheus shows as `# HELP`). A job calls it when it
/// starts; calling it again is harmless.
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        RECORDS_IN,
        Unit::Count,
        "Records received by the task (a source: produced)."
    );
    describe_counter!(
        RECORDS_OUT,
        Unit::Count,
        "Records sent by the task to its output channels."
    );
    describe_gauge!(
        BACKPRESSURE_SECONDS,
        Unit::Seconds,
        "Time the task was blocked on a full output channel since the job started (cumulative)."
    );
    describe_gauge!(
        IDLE_SECONDS,
        Unit::Seconds,
        "Time the task waited for input since the job started (cumulative)."
    );
    describe_gauge!(
        INPUT_QUEUE_LENGTH,
        Unit::Count,
        "Elements queued in the task's input channels."
    );
    describe_counter!(CHECKPOINTS_COMPLETED, Unit::Count, "Checkpoints completed.");
    describe_counter!(
        CHECKPOINTS_ABORTED,
        Unit::Count,
        "Checkpoints aborted, by reason."
    );
    describe_gauge!(
        CHECKPOINTS_IN_PROGRESS,
        Unit::Count,
        "Checkpoints triggered and not ended."
    );
    describe_gauge!(
        CHECKPOINT_CONSECUTIVE_FAILURES,
        Unit::Count,
        "Checkpoints failed in a row (timeouts, storage errors, declines)."
    );
    describe_histogram!(
        CHECKPOINT_DURATION,
        Unit::Seconds,
        "Completed checkpoints' duration, trigger to complete."
    );
    describe_histogram!(
        CHECKPOINT_SYNC_DURATION,
        Unit::Seconds,
        "A subtask's synchronous part of a completed checkpoint."
    );
    describe_histogram!(
        CHECKPOINT_ASYNC_DURATION,
        Unit::Seconds,
        "A subtask's asynchronous part (encode, write, fsync) of a completed checkpoint."
    );
    describe_histogram!(
        CHECKPOINT_ALIGNMENT_DURATION,
        Unit::Seconds,
        "Time a subtask's inputs were blocked for the barrier alignment."
    );
    describe_histogram!(
        CHECKPOINT_START_DELAY,
        Unit::Seconds,
        "Trigger to the first barrier at a subtask."
    );
    describe_counter!(
        CHECKPOINTED_BYTES,
        Unit::Bytes,
        "Bytes written by completed checkpoints."
    );
    describe_counter!(
        CHECKPOINT_PERSISTED_BYTES,
        Unit::Bytes,
        "In-flight records persisted by completed unaligned checkpoints."
    );
    describe_gauge!(
        STATE_SIZE_BYTES,
        Unit::Bytes,
        "Full size of the subtask's state at the last completed checkpoint."
    );
    describe_gauge!(
        LAST_CHECKPOINT_COMPLETED_TIME,
        Unit::Seconds,
        "Unix time of the last completed checkpoint."
    );
    describe_counter!(RESTARTS, Unit::Count, "Restarts after a task failure.");
    describe_histogram!(
        RECOVERY_DURATION,
        Unit::Seconds,
        "Failure (or start, for a restored job) to the first record after the restore."
    );
    describe_gauge!(
        LAST_RECOVERY_DURATION,
        Unit::Seconds,
        "The last recovery's duration."
    );
    describe_gauge!(
        JOB_STATE,
        "The job's state: 0 starting, 1 running, 2 restarting, 3 finished, 4 failed."
    );
    describe_gauge!(
        JOB_HEALTHY,
        "1 when the job is healthy (as /health says), else 0."
    );
    describe_gauge!(
        COMMITTED_OUTPUT_LAG,
        Unit::Seconds,
        "How far committed output is behind its records' event time (set by sinks)."
    );
}
