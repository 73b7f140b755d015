//! Checkpoints: the coordinator's decisions, their statistics, the state a
//! job restores from, and where completed snapshots are kept.
//!
//! A checkpoint (as in Flink) is a consistent snapshot of every task's
//! state, taken when the barriers of one checkpoint id have passed every
//! task.
//!
//! Everything a checkpoint is lives here, in the order it happens:
//! - `coordinator`: the checkpoint coordinator's state machine (trigger,
//!   acknowledgements, completion, aborts, subsumption, the final
//!   checkpoint, the priority-lane deadlines of unaligned checkpoints),
//!   the one owner of a pending checkpoint's state;
//! - `snapshot`: a task's snapshot thread, the asynchronous phase (deferred
//!   encodings, the part written and made durable), and which base a
//!   delta builds on;
//! - `channel_state`: the in-flight records an unaligned checkpoint
//!   persists;
//! - `publisher`: the thread that writes `_metadata`, publishes and
//!   applies retention;
//! - [`storage`]: the [`CheckpointStorage`] trait and its stores,
//!   [`LocalDirStorage`] (one atomically published, checksummed `chk-<n>/`
//!   folder per checkpoint under a root directory) and [`MemoryStorage`]
//!   (where a job without a folder keeps its checkpoints);
//! - `restore`: which checkpoint a job starts or restarts from, and the
//!   checks before it may;
//! - `task_state`, `stats`: what a checkpoint holds and what it cost.
//!
//! No task thread and not the job thread calls the storage, because a
//! durable write blocks on `fsync`: each task's snapshot thread writes its
//! part ([`CheckpointStorage::write_part`]), the publisher thread writes
//! the metadata and publishes ([`CheckpointStorage::publish`]).

pub(crate) mod channel_state;
pub(crate) mod coordinator;
pub(crate) mod observer;
pub(crate) mod publisher;
pub(crate) mod restore;
mod retention;
pub(crate) mod snapshot;
pub(crate) mod stats;
mod storage;
pub(crate) mod task_state;

pub use restore::{config_differences, load_restorable, SkippedCheckpoint};
pub use snapshot::set_after_snapshot_hook;
pub use task_state::{OperatorSnapshot, RestoredState};

pub use stats::{
    CheckpointCounts, CheckpointStats, CheckpointStatus, CheckpointSummary, Distribution,
    SubtaskCheckpointStats,
};

pub use storage::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStorage, FolderLock,
    JobFingerprint, LatestValid, LoadedCheckpoint, LocalDirStorage, MemoryStorage, PartHandle,
    PartLink, StorageError, TaskStateKey, FORMAT_VERSION, MAGIC, MAX_CHECKPOINT_ID,
};
