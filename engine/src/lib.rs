//! lockgate: a streaming dataflow engine for low-latency work, with Flink's
//! checkpoint semantics.
//!
//! # A tour
//!
//! **1. Build a job.** A [`JobBuilder`] adds sources; a [`Stream`] is an
//! operator chain still open at its end (`map`, `filter`, `process`,
//! `sink` run in the same task); `key_by` and `rebalance` end the chain
//! with an [`Exchange`], whose `task` starts the next task. Records enter
//! through a [`Source`] or, pushed by the application, an [`Ingest`];
//! they leave through a [`Sink`] or an [`Output`].
//!
//! ```
//! use lockgate::{JobBuilder, JobConfig};
//! let job = JobBuilder::new("double", JobConfig::default());
//! let (numbers, ingest) = job.ingest::<u64>("in", 64);
//! let out = numbers.map(|x| x * 2).collect();
//! let handle = job.start()?;
//! for x in 0..100 {
//!     ingest.push(x).expect("the job runs");
//! }
//! drop(ingest); // the end of the input
//! handle.wait()?;
//! let mut got: Vec<u64> = out.iter().collect();
//! got.sort_unstable();
//! assert_eq!(got, (0..100).map(|x| x * 2).collect::<Vec<_>>());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **2. Checkpoint it.** [`JobConfig::checkpoint`] takes a
//! [`CheckpointConfig`]: a [`CheckpointMode`] (exactly-once aligned,
//! unaligned, at-least-once), an interval, a folder. A failed task
//! restarts the job from the newest completed checkpoint
//! ([`RestartStrategy`]); a new process restores the folder. State lives in
//! an [`Operator`]'s [`Managed`] state ([`KeyedState`], [`ValueState`],
//! [`ListState`], through [`StatefulOperator`]) or in its own
//! [`Checkpointed`] implementation.
//!
//! **3. Output exactly once.** A [`TwoPhaseCommitSink`] pre-commits at the
//! barrier and commits when the checkpoint completes ([`TwoPhaseCommit`]);
//! [`Stream::collect_committed`] hands the application each record once,
//! as a [`Committed`] batch naming its [`CheckpointId`]:
//!
//! ```
//! use lockgate::{CheckpointConfig, JobBuilder, JobConfig};
//! use std::time::Duration;
//! let mut config = JobConfig::default();
//! config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(5), None);
//! let job = JobBuilder::new("committed", config);
//! let (numbers, ingest) = job.ingest::<u64>("in", 64);
//! let out = numbers.collect_committed(None);
//! let handle = job.start()?;
//! for x in 0..100 {
//!     ingest.push(x).expect("the job runs");
//! }
//! drop(ingest);
//! handle.wait()?;
//! assert_eq!(out.iter().map(|batch| batch.records.len()).sum::<usize>(), 100);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **4. Observe it.** A [`JobHandle`] triggers checkpoints and savepoints,
//! stops the job and reads its [`JobMetrics`] (each checkpoint's
//! [`CheckpointStats`]); [`telemetry`] publishes them through the
//! `metrics` facade and `tracing`.
//!
//! # The root
//!
//! Building: [`JobBuilder`], [`Stream`], [`Exchange`], [`Connected`],
//! [`Data`], [`Either`]. Configuring: [`JobConfig`], [`CheckpointConfig`],
//! [`CheckpointMode`], [`RestartStrategy`], [`RestoreMode`], [`IngestConfig`]. Operators:
//! [`Source`], [`SourcePoll`], [`Operator`], [`Sink`], [`Context`],
//! [`Checkpointed`], [`Batch`], [`RecordSize`], [`Watermark`],
//! [`SnapshotKind`]. State: [`Managed`], [`StatefulOperator`],
//! [`KeyedState`], [`ValueState`], [`ListState`]. The application's ends:
//! [`Ingest`], [`Output`]. Exactly-once output: [`TwoPhaseCommit`],
//! [`TwoPhaseCommitSink`], [`Committed`], [`CheckpointId`]. Running:
//! [`JobHandle`], [`JobMonitor`], [`JobMetrics`], [`CheckpointStats`]. Errors:
//! [`JobError`], [`OperatorError`], [`BoxError`].
//!
//! # The modules
//!
//! - [`barrier`]: the barrier handlers ([`barrier::Aligner`],
//!   [`barrier::Tracker`], [`barrier::Unaligned`]), sans-I/O.
//! - [`storage`]: checkpoint storage ([`storage::LocalDirStorage`], one
//!   file per checkpoint) and its format.
//! - [`state`]: every managed state type and the snapshot types.
//! - [`config`]: the limits and tuning of [`JobConfig`].
//! - [`stats`], [`telemetry`]: what a job reports.
//! - [`keys`]: key groups, the unit of rescaling.
//! - [`ingest`], [`task`], [`error`], [`tuning`]: the rest of the
//!   vocabulary.
//! - [`source`]: replayable sources by split and position, event time at
//!   a source, what wakes a waiting source.
//! - [`testing`]: failure injection for chaos tests.
//! - [`example`]: the helper the documentation's examples share
//!   ([`example::run`]: a job from a list of records, run to its end).
//!
//! Inside `engine/src/` the folders are layers, bottom to top: `util`,
//! `types`, `testing`, `barrier`, `transport`, `config`, `operator`,
//! `state`, `checkpoint`, `telemetry`, `runtime`, `job`, `graph`,
//! `example`. A module imports only from the layers below it
//! (`layers.toml`, checked by `.ci/layers.py`).

pub mod barrier;
mod checkpoint;
pub mod config;
pub mod example;
mod graph;
mod job;
mod operator;
mod runtime;
pub mod state;
pub mod telemetry;
pub mod testing;
mod transport;
mod types;
mod util;

// The root: building, running and observing a job (40 names, listed above).
pub use barrier::CheckpointMode;
/// # Examples
/// A checkpoint asked for while the job runs, then the final one at the
/// end of the input:
/// ```
/// use lockgate::{CheckpointId, CheckpointMode, JobBuilder, JobConfig, SnapshotKind};
///
/// let mut config = JobConfig::default();
/// config.checkpoint.mode = CheckpointMode::ExactlyOnce; // no interval: on demand
/// let job = JobBuilder::new("stats", config);
/// let (numbers, ingest) = job.ingest::<u64>("numbers", 16);
/// let _out = numbers.collect();
/// let handle = job.start()?;
/// ingest.push(1).expect("the job runs");
/// assert_eq!(handle.trigger_checkpoint(), Ok(CheckpointId(1)));
/// drop(ingest); // the end of the input: the final checkpoint
/// let metrics = handle.wait()?;
///
/// let ends: Vec<(CheckpointId, bool)> = metrics.checkpoints.iter().map(|c| (c.id, c.is_final)).collect();
/// assert_eq!(ends, [(CheckpointId(1), false), (CheckpointId(2), true)]);
/// let last = metrics.last_completed_checkpoint.expect("the final checkpoint completed");
/// assert!(last.is_completed());
/// assert_eq!(last.kind, SnapshotKind::Checkpoint);
/// assert_eq!(last.subtasks.len(), 1); // the one task acknowledged it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub use checkpoint::CheckpointStats;
pub use config::{CheckpointConfig, IngestConfig, JobConfig, RestartStrategy, RestoreMode};
pub use graph::{Connected, Data, Exchange, JobBuilder, Stream};
pub use job::{JobHandle, JobMetrics, JobMonitor};
/// `#[derive(RecordSize)]`: the trait's defaults for a plain record type.
///
/// # Examples
/// With serde's derives, a record type of the application's own travels
/// through a job (here with the shared [`example`] helper):
/// ```
/// use lockgate::{example, RecordSize};
///
/// #[derive(Clone, Debug, PartialEq, RecordSize, serde::Serialize, serde::Deserialize)]
/// struct Order {
///     id: u32,
///     qty: u64,
/// }
///
/// let orders = vec![Order { id: 1, qty: 5 }, Order { id: 2, qty: 500 }];
/// let large = example::run(orders, |orders| orders.filter(|o| o.qty >= 100));
/// assert_eq!(large, [Order { id: 2, qty: 500 }]);
/// assert_eq!(large[0].size_bytes(), std::mem::size_of::<Order>());
/// ```
pub use lockgate_derive::RecordSize;
pub use operator::two_phase::{TwoPhaseCommit, TwoPhaseCommitSink};
pub use operator::{Checkpointed, Committed, Context, Either, Operator, Sink, Source, SourcePoll};
pub use state::{KeyedState, ListState, Managed, StatefulOperator, ValueState};
pub use transport::handoff::{Ingest, Output};
pub use types::element::{Batch, CheckpointId, RecordSize, SnapshotKind, Watermark};
pub use types::error::{BoxError, JobError, OperatorError};

/// Checkpoint storage: the [`CheckpointStorage`](storage::CheckpointStorage)
/// trait, [`LocalDirStorage`](storage::LocalDirStorage) (one file per
/// checkpoint in a folder), [`MemoryStorage`](storage::MemoryStorage), the
/// format's constants, and what a restore reads.
pub mod storage {
    pub use crate::checkpoint::{
        config_differences, load_restorable, unix_time_ms, CheckpointHandle, CheckpointMetadata,
        CheckpointStorage, FolderLock, JobFingerprint, LatestValid, LoadedCheckpoint,
        LocalDirStorage, MemoryStorage, OperatorSnapshot, PartHandle, PartLink, RestoredState,
        SkippedCheckpoint, StorageError, TaskStateKey, FORMAT_VERSION, MAGIC, MAX_CHECKPOINT_ID,
    };
    pub use crate::util::calls::{storage_calls_in_progress, StorageCall};
}

/// What a running job reports: checkpoint statistics (counts, summaries,
/// per subtask) and task counters.
pub mod stats {
    pub use crate::checkpoint::{
        CheckpointCounts, CheckpointStats, CheckpointStatus, CheckpointSummary, Distribution,
        SubtaskCheckpointStats,
    };
    pub use crate::job::RestoredAtStart;
    pub use crate::types::metrics::{peak_rss_bytes, Pinning, TaskMetrics, TaskMetricsSnapshot};
}

/// Key groups: how keys map to key groups and key groups to subtasks
/// (Flink's `KeyGroupRangeAssignment`), the unit of rescaling.
pub mod keys {
    pub use crate::types::key_groups::{
        hash_key, key_group_of, key_hash, key_to_subtask, subtask_of_key_group, KeyGroupRange,
        Rescale, DEFAULT_MAX_PARALLELISM, KEY_HASH_MULTIPLIER, UPPER_MAX_PARALLELISM,
    };
}

/// Every error type: the root's [`JobError`], [`OperatorError`] and
/// [`BoxError`], and those of tasks and job failures.
pub mod error {
    pub use crate::job::JobFailure;
    pub use crate::types::error::{
        is_fatal_error, BoxError, FatalError, JobError, OperatorError, SharedError, TaskError,
    };
}

/// Tasks and subtasks: ids, names and what a subtask knows about itself.
pub mod task {
    pub use crate::types::task_id::{ParseTaskIdError, SubtaskInfo, TaskId};
}

/// The application's ends of a job: [`Ingest`] (push records in, replayed
/// after a failure) and [`Output`] (take records out), and their errors.
pub mod ingest {
    pub use crate::transport::handoff::{
        ingest_channel, Ingest, IngestReceiver, Output, PushError, RecvTimeoutError, TryRecvError,
    };
}

/// Hooks and helpers for applications tuned to the last microsecond:
/// background threads' yield points, the idle priority for an
/// application's own housekeeping, the engine's clock, snapshot buffers
/// and the allocator hook after a snapshot.
pub mod tuning {
    pub use crate::checkpoint::set_after_snapshot_hook;
    pub use crate::util::background::{idle_priority, yield_point, YIELD_EVERY_NS};
    pub use crate::util::buffers::snapshot_buffer;
    pub use crate::util::clock::now_ns;
}

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
