//! Checkpoint statistics, as Flink's checkpoint UI shows them: per
//! checkpoint ([`CheckpointStats`]) and per subtask
//! ([`SubtaskCheckpointStats`]). Times are ns, sizes bytes.

use crate::barrier::AbortReason;
use crate::types::element::{CheckpointId, SnapshotKind};
use crate::types::task_id::TaskId;
use serde::{Deserialize, Serialize};

/// Where a checkpoint stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum CheckpointStatus {
    /// Triggered, not complete yet (acknowledgements or the metadata
    /// write outstanding).
    Pending,
    /// Every task's part and the metadata are durable.
    Completed,
    /// Given up, with the reason.
    Aborted(AbortReason),
}

/// One subtask's part of one checkpoint (Flink's `SubtaskStateStats`).
/// Times in ns on [`crate::now_ns`]'s clock, sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskCheckpointStats {
    /// The subtask, shown as `keyed_sum[1]`.
    pub task: TaskId,
    /// The synchronous part: from the trigger (a source) or the last
    /// barrier (a task with inputs) until the task processes records
    /// again, the barrier forwarded and the state copied.
    pub sync_ns: u64,
    /// The asynchronous part, on the task's snapshot thread: encoding,
    /// checksum, write and `fsync` of its part.
    pub async_ns: u64,
    /// Time the task's channels were blocked for the alignment, first to
    /// last barrier (exactly-once with two inputs or more; 0 otherwise).
    pub alignment_ns: u64,
    /// First to last barrier of the checkpoint at the task, in every mode.
    pub barrier_spread_ns: u64,
    /// Most bytes held in the task's blocker during the alignment.
    pub buffered_bytes: u64,
    /// Trigger to the first barrier at this subtask (for a source: to
    /// the trigger's arrival), Flink's start delay.
    pub start_delay_ns: u64,
    /// Bytes written for this subtask's part (file header included).
    pub checkpointed_bytes: u64,
    /// In-flight records persisted as channel state by an unaligned
    /// checkpoint, bytes of their encoding (0 in the other modes); not in
    /// `checkpointed_bytes` or `state_bytes`.
    pub persisted_bytes: u64,
    /// The exact size of a full encoding of the subtask's state.
    pub state_bytes: u64,
    /// True when the part holds only the changes since an earlier one.
    pub incremental: bool,
    /// True for an unaligned checkpoint.
    pub unaligned: bool,
}

/// Statistics of one checkpoint (Flink's checkpoint statistics).
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
    /// When it was triggered, ns on [`crate::now_ns`]'s clock.
    pub trigger_ns: u64,
    /// End to end: from the trigger until the checkpoint is complete
    /// (every part and the metadata durable), or until the abort; ns.
    pub duration_ns: u64,
    /// The largest start delay of its subtasks, ns.
    pub start_delay_ns: u64,
    /// Every subtask that acknowledged, in the order they did.
    pub subtasks: Vec<SubtaskCheckpointStats>,
    /// The exact size of a full encoding of the state it represents, all
    /// subtasks, bytes.
    pub state_bytes: u64,
    /// Bytes written for it, every part and `_metadata` (0 without
    /// storage), bytes.
    pub checkpointed_bytes: u64,
    /// In-flight records persisted as channel state, all tasks, bytes
    /// (unaligned checkpoints; 0 otherwise).
    pub persisted_bytes: u64,
    /// True when some part holds only changes (incremental).
    pub incremental: bool,
    /// True for an unaligned checkpoint.
    pub unaligned: bool,
}

impl CheckpointStats {
    /// True when completed.
    pub fn is_completed(&self) -> bool {
        self.status == CheckpointStatus::Completed
    }

    /// The slowest subtask's alignment, ns.
    pub fn max_alignment_ns(&self) -> u64 {
        self.subtasks
            .iter()
            .map(|a| a.alignment_ns)
            .max()
            .unwrap_or(0)
    }

    /// The most bytes any subtask buffered in alignment.
    pub fn max_buffered_bytes(&self) -> u64 {
        self.subtasks
            .iter()
            .map(|a| a.buffered_bytes)
            .max()
            .unwrap_or(0)
    }
}
