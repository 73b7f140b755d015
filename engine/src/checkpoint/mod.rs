//! Checkpoints: the coordinator's decisions, their statistics, the state a
//! job restores from, and where completed snapshots are kept.
//!
//! A checkpoint (as in Flink) is a consistent snapshot of every task's
//! state, taken when the barriers of one checkpoint id have passed every
//! task.
//!
//! - `coordinator`: the checkpoint coordinator's state machine (trigger,
//!   acknowledgements, completion, aborts, the final checkpoint).
//! - [`storage`]: the [`CheckpointStorage`] trait and its stores,
//!   [`LocalDirStorage`] (the default: one atomically published,
//!   checksummed `chk-<n>/` folder per checkpoint under a root directory)
//!   and [`MemoryStorage`] (for tests).
//!
//! No task thread and not the job thread calls the storage, because a
//! durable write blocks on `fsync`: each task's snapshot thread writes its
//! part ([`CheckpointStorage::write_part`]), the job's publisher thread
//! writes the metadata and publishes ([`CheckpointStorage::publish`]).

pub(crate) mod channel_state;
pub(crate) mod coordinator;
pub(crate) mod snapshot;
mod stats;
mod storage;
pub(crate) mod task_state;

pub use snapshot::set_after_snapshot_hook;
pub use task_state::{OperatorSnapshot, RestoredState};

pub use stats::{CheckpointStats, CheckpointStatus, SubtaskCheckpointStats};

pub use storage::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStorage, FolderLock,
    JobFingerprint, LatestValid, LoadedCheckpoint, LocalDirStorage, MemoryStorage, PartHandle,
    StorageError, TaskStateKey, FORMAT_VERSION, MAGIC, MAX_CHECKPOINT_ID,
};
