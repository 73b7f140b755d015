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

pub(crate) mod coordinator;
mod stats;
mod storage;

pub use stats::{CheckpointStats, CheckpointStatus, SubtaskCheckpointStats};

pub use storage::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStorage, FolderLock,
    JobFingerprint, LatestValid, LoadedCheckpoint, LocalDirStorage, MemoryStorage, PartHandle,
    StorageError, TaskStateKey, FORMAT_VERSION, MAGIC, MAX_CHECKPOINT_ID,
};

use crate::element::CheckpointId;
use crate::protocol::OperatorSnapshot;
use crate::task_id::TaskId;
use std::collections::{BTreeMap, HashMap};

/// The state a job restores from: every task's operator snapshots of one
/// completed checkpoint, by task.
#[derive(Clone, Debug, Default)]
pub struct RestoredState {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// Task → its chain's operator snapshots.
    pub states: HashMap<TaskId, Vec<OperatorSnapshot>>,
    /// Parallelism per task name when the checkpoint was taken (from its
    /// metadata); empty: the job's own (a checkpoint of the running job).
    /// A task whose parallelism differs is restored rescaled
    /// ([`crate::Checkpointed::restore_rescaled`]).
    pub parallelism: BTreeMap<String, u32>,
}

impl RestoredState {
    /// The snapshots of task `task` (empty when it had none).
    pub fn states_of(&self, task: &TaskId) -> Vec<OperatorSnapshot> {
        self.states.get(task).cloned().unwrap_or_default()
    }
}
