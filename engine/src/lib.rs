//! lockgate: a streaming dataflow engine for low-latency work, with Flink's
//! checkpoint semantics.
//!
//! Build a job with [`JobBuilder`]: sources, chained operators on a
//! [`Stream`], exchanges ([`Exchange`], [`Exchange::task`] starts the next
//! task), sinks; configure it with [`JobConfig`] and [`CheckpointConfig`];
//! run it with [`JobBuilder::start`] and a [`JobHandle`]. Every public item
//! is re-exported here, flat (as crossbeam does); the modules are private,
//! but for [`telemetry`]: the metric names, health and spans a job shows
//! outside its process.
//!
//! A record's path, one module each, under `engine/src/`:
//! `types::element` ([`StreamElement`]: what a channel carries) →
//! `transport::channel` (bounded crossbeam channels, output batching,
//! backpressure) → `transport::input_gate` (polling a task's channels,
//! [`WaitStrategy`]) → `barrier` (the handler, [`Aligner`] or [`Tracker`],
//! that aligns or tracks checkpoint barriers) → the task
//! (`runtime::task`) and its operator chain (`runtime::chain`, calling
//! [`Operator`]s) → the chain's output, a channel again. A checkpoint's
//! path is all under `checkpoint/`: the coordinator, the snapshot threads,
//! storage, publication and retention, restore.
//!
//! The top-level modules are layers, bottom to top: `util`, `types`,
//! `testing`, `barrier`, `transport`, `config`, `operator`, `state`,
//! `checkpoint`, `telemetry`, `runtime`, `job`, `graph`. A module imports only from the
//! layers below it: the order is declared once, in `layers.toml` at the
//! repository root, and `.ci/layers.py` enforces it in CI.

mod barrier;
mod checkpoint;
mod config;
mod graph;
mod job;
mod operator;
mod runtime;
mod state;
pub mod telemetry;
mod testing;
mod transport;
mod types;
mod util;

pub use barrier::{
    AbortReason, Aligner, AlignmentStats, AnyHandler, BarrierHandler, BarrierSignal, ChannelSet,
    CheckpointMode, HandlerConfig, Tracker, Unaligned, DEFAULT_BLOCKER_CAPACITY_BYTES,
    INLINE_CHANNELS, MAX_PENDING_CHECKPOINTS,
};
pub use checkpoint::{
    config_differences, load_restorable, set_after_snapshot_hook, unix_time_ms, CheckpointCounts,
    CheckpointHandle, CheckpointMetadata, CheckpointStats, CheckpointStatus, CheckpointStorage,
    CheckpointSummary, Distribution, FolderLock, JobFingerprint, LatestValid, LoadedCheckpoint,
    LocalDirStorage, MemoryStorage, OperatorSnapshot, PartHandle, RestoredState, SkippedCheckpoint,
    StorageError, SubtaskCheckpointStats, TaskStateKey, FORMAT_VERSION, MAGIC, MAX_CHECKPOINT_ID,
};
pub use config::{
    CheckpointConfig, IngestConfig, JobConfig, PinPolicy, RestartStrategy, RestoreMode,
    DEFAULT_TIMER_SLACK_NS, MAX_BATCH_SIZE, MAX_CHANNEL_CAPACITY, MAX_PARALLELISM, MAX_PIN_CORE,
    MAX_TIME, MAX_WORKERS,
};
pub use graph::{Connected, Data, Exchange, JobBuilder, Stream};
pub use job::{JobFailure, JobHandle, JobMetrics, JobMonitor, RestoredAtStart};
/// `#[derive(RecordSize)]`: the trait's defaults for a plain record type.
pub use lockgate_derive::RecordSize;
pub use operator::two_phase::{TwoPhaseCommit, TwoPhaseCommitSink};
pub use operator::Committed;
pub use operator::{
    Checkpointed, Context, Either, EncodedState, Operator, Sink, SnapshotRequest, Source,
    SourcePoll, StateSnapshot,
};
pub use state::{
    key_group, KeyedFold, KeyedState, ListState, Managed, ManagedState, StateError, StateKey,
    StatefulOperator, UnionListState, ValueState,
};
pub use testing::{FailurePlan, FailurePoint, PlannedFailure};
pub use transport::handoff::{
    ingest_channel, Ingest, IngestReceiver, Output, PushError, RecvTimeoutError, TryRecvError,
};
pub use transport::input_gate::{WaitStrategy, DEFAULT_SPINS, SPIN_YIELD_EVERY};
pub use types::element::{
    Batch, CheckpointBarrier, CheckpointId, CheckpointOptions, RecordSize, SnapshotKind,
    StreamElement, Watermark,
};
pub use types::error::{
    is_fatal_error, BoxError, FatalError, JobError, OperatorError, SharedError, TaskError,
};
pub use types::key_groups::{
    hash_key, key_group_of, key_hash, key_to_subtask, subtask_of_key_group, KeyGroupRange, Rescale,
    DEFAULT_MAX_PARALLELISM, KEY_HASH_MULTIPLIER, UPPER_MAX_PARALLELISM,
};
pub use types::metrics::{peak_rss_bytes, Pinning, TaskMetrics, TaskMetricsSnapshot};
pub use types::task_id::{ParseTaskIdError, SubtaskInfo, TaskId};
pub use util::background::{yield_point, YIELD_EVERY_NS};
pub use util::buffers::snapshot_buffer;
pub use util::calls::{storage_calls_in_progress, StorageCall};
pub use util::clock::now_ns;

/// Sources: replayable sources by split and position ([`Replayable`](source::Replayable),
/// [`SplitSource`](source::SplitSource), [`SplitReader`](source::SplitReader)),
/// event time at a source ([`WatermarkStrategy`](source::WatermarkStrategy)),
/// what wakes a waiting source ([`WakeOn`](source::WakeOn),
/// [`Wakeup`](source::Wakeup)) and what a job restored for a source
/// ([`RestoredSource`](source::RestoredSource)).
pub mod source {
    pub use crate::operator::event_time::WatermarkStrategy;
    pub use crate::operator::replayable::{
        Replayable, RestoredSource, SplitOutput, SplitPositions, SplitReader, SplitSource,
    };
    pub use crate::transport::handoff::{WakeOn, Waker, Wakeup};
}

/// The README's Rust blocks, compiled and run as doctests (as timely does).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
