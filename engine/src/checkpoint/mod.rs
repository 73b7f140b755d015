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
//! The coordinator calls the storage from the job thread, never from a task
//! thread, because a durable write blocks on `fsync`.

pub(crate) mod coordinator;
mod storage;

pub use storage::{
    unix_time_ms, CheckpointHandle, CheckpointMetadata, CheckpointStorage, JobFingerprint,
    LatestValid, LoadedCheckpoint, LocalDirStorage, MemoryStorage, StorageError, TaskStateKey,
    FORMAT_VERSION, MAGIC, MAX_CHECKPOINT_ID,
};

use crate::barrier::AbortReason;
use crate::element::{CheckpointId, SnapshotKind};
use crate::protocol::OperatorSnapshot;
use crate::task_id::TaskId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Where a checkpoint stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum CheckpointStatus {
    /// Triggered, not every task acknowledged yet.
    Pending,
    /// Every task acknowledged and the checkpoint was persisted.
    Completed,
    /// Given up, with the reason.
    Aborted(AbortReason),
}

/// The alignment of one task for one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAlignment {
    /// The task, shown as `keyed_sum[1]`.
    pub task: TaskId,
    /// First barrier to last barrier at the task, ns (0 with one input).
    pub duration_ns: u64,
    /// Most bytes held in the task's blocker during the alignment.
    pub buffered_bytes: u64,
}

/// Statistics of one checkpoint (Flink's checkpoint statistics, reduced).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointStats {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// True for the final checkpoint after all sources ended (FLIP-147).
    pub is_final: bool,
    /// Pending, completed or aborted (with the reason).
    pub status: CheckpointStatus,
    /// When it was triggered, ns on [`crate::clock::now_ns`]'s clock.
    pub trigger_ns: u64,
    /// Trigger to last acknowledgement (or to the abort), ns.
    pub duration_ns: u64,
    /// Trigger to the last source's snapshot (the barrier leaving every
    /// source), ns.
    pub start_delay_ns: u64,
    /// Per task with inputs: its alignment.
    pub alignments: Vec<TaskAlignment>,
    /// Bytes of state in the checkpoint (serialized operator states).
    pub state_bytes: u64,
}

impl CheckpointStats {
    /// True when completed.
    pub fn is_completed(&self) -> bool {
        self.status == CheckpointStatus::Completed
    }

    /// The slowest task's alignment duration, ns.
    pub fn max_alignment_ns(&self) -> u64 {
        self.alignments
            .iter()
            .map(|a| a.duration_ns)
            .max()
            .unwrap_or(0)
    }

    /// The most bytes any task buffered in alignment.
    pub fn max_buffered_bytes(&self) -> u64 {
        self.alignments
            .iter()
            .map(|a| a.buffered_bytes)
            .max()
            .unwrap_or(0)
    }
}

/// The state a job restores from: every task's operator snapshots of one
/// completed checkpoint, by task.
#[derive(Clone, Debug, Default)]
pub struct RestoredState {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// Task → its chain's operator snapshots.
    pub states: HashMap<TaskId, Vec<OperatorSnapshot>>,
}

impl RestoredState {
    /// The snapshots of task `task` (empty when it had none).
    pub fn states_of(&self, task: &TaskId) -> Vec<OperatorSnapshot> {
        self.states.get(task).cloned().unwrap_or_default()
    }
}
