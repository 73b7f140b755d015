//! lockgate: a streaming dataflow engine for low-latency work, with Flink's
//! checkpoint semantics.
//!
//! Build a job with [`JobBuilder`]: sources, chained operators on a
//! [`Stream`], exchanges ([`Exchange`], [`Exchange::task`] starts the next
//! task), sinks; configure it with [`JobConfig`] and [`CheckpointConfig`];
//! run it with [`JobBuilder::start`] and a [`JobHandle`]. Every public item
//! is re-exported here, flat (as crossbeam does); the modules are private.
//!
//! A record's path, one module (file) each, under `engine/src/`:
//! `element` ([`StreamElement`]: what a channel carries) → `channel`
//! (bounded crossbeam channels, output batching, backpressure) →
//! `input_gate` (polling a task's channels, [`WaitStrategy`]) → `barrier`
//! (the handler, [`Aligner`] or [`Tracker`], that aligns or tracks
//! checkpoint barriers) → the task (`runtime/task.rs`) and its operator
//! chain (`chain`, calling [`Operator`]s) → the chain's output, a channel
//! again.
//!
//! Layers, bottom to top; a module imports only from layers below it
//! (checked in CI by `.ci/module-cycles.py`, pictured in ARCHITECTURE.md):
//! 1. leaf vocabulary: `element`, `clock`, `background`, `task_id`, `error`, `key_groups`,
//!    `state`, `metrics`, `buffers`, `checkpoint/storage/api`;
//! 2. sans-I/O state machines and the task protocol: `barrier`,
//!    `watermark`, `protocol`;
//! 3. the record path: `operator`, `failure`, `channel`, `input_gate`,
//!    `chain`, `config`, `handoff`, `two_phase`, `sources`, `sinks`;
//! 4. `checkpoint`: the coordinator's state machine and storage;
//! 5. `runtime`: the physical plan, the task loops, the job thread;
//! 6. `graph`: the builder API over the runtime.

mod background;
mod barrier;
mod buffers;
mod chain;
mod channel;
mod channel_state;
mod checkpoint;
mod clock;
mod config;
mod element;
mod error;
mod failure;
mod graph;
mod handoff;
mod input_gate;
mod key_groups;
mod metrics;
mod operator;
mod protocol;
mod runtime;
mod sinks;
mod sources;
mod state;
mod task_id;
mod two_phase;
mod watermark;

pub use background::{yield_point, YIELD_EVERY_NS};
pub use barrier::{
    AbortReason, Aligner, AlignmentStats, AnyHandler, BarrierHandler, BarrierSignal, ChannelSet,
    CheckpointMode, HandlerConfig, Tracker, Unaligned, DEFAULT_BLOCKER_CAPACITY_BYTES,
    INLINE_CHANNELS, MAX_PENDING_CHECKPOINTS,
};
pub use buffers::snapshot_buffer;
pub use checkpoint::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStats, CheckpointStatus,
    CheckpointStorage, FolderLock, JobFingerprint, LatestValid, LoadedCheckpoint, LocalDirStorage,
    MemoryStorage, PartHandle, RestoredState, StorageError, SubtaskCheckpointStats, TaskStateKey,
    FORMAT_VERSION, MAGIC, MAX_CHECKPOINT_ID,
};
pub use clock::now_ns;
pub use config::{
    CheckpointConfig, IngestConfig, JobConfig, PinPolicy, RestartStrategy, DEFAULT_TIMER_SLACK_NS,
    MAX_BATCH_SIZE, MAX_CHANNEL_CAPACITY, MAX_PARALLELISM, MAX_PIN_CORE, MAX_TIME, MAX_WORKERS,
};
pub use element::{
    Batch, CheckpointBarrier, CheckpointId, CheckpointOptions, RecordSize, SnapshotKind,
    StreamElement, Watermark,
};
pub use error::{
    is_fatal_error, BoxError, FatalError, JobError, OperatorError, SharedError, TaskError,
};
pub use failure::{FailurePlan, FailurePoint, PlannedFailure};
pub use graph::{Connected, Data, Exchange, JobBuilder, Stream};
pub use handoff::{
    ingest_channel, Ingest, IngestReceiver, Output, PushError, RecvTimeoutError, TryRecvError,
};
pub use input_gate::{WaitStrategy, DEFAULT_SPINS, SPIN_YIELD_EVERY};
pub use key_groups::{
    hash_key, key_group_of, key_hash, key_to_subtask, subtask_of_key_group, KeyGroupRange, Rescale,
    DEFAULT_MAX_PARALLELISM, KEY_HASH_MULTIPLIER, UPPER_MAX_PARALLELISM,
};
pub use metrics::{peak_rss_bytes, Pinning, TaskMetrics, TaskMetricsSnapshot};
pub use operator::{
    Checkpointed, Context, Either, EncodedState, Operator, Sink, SnapshotRequest, Source,
    SourcePoll, StateSnapshot,
};
pub use protocol::OperatorSnapshot;
pub use runtime::{
    config_differences, load_restorable, set_after_snapshot_hook, JobFailure, JobHandle,
    JobMetrics, RestoredAtStart, SkippedCheckpoint,
};
pub use state::{
    key_group, KeyedState, ListState, Managed, ManagedState, StateError, StateKey,
    StatefulOperator, UnionListState, ValueState,
};
pub use task_id::{ParseTaskIdError, SubtaskInfo, TaskId};
pub use two_phase::{TwoPhaseCommit, TwoPhaseCommitSink};

/// The README's Rust blocks, compiled and run as doctests (as timely does).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
