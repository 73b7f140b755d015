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
    /// True when every task restores through
    /// [`crate::Checkpointed::restore_rescaled`], even at the same
    /// parallelism: the state was merged from several jobs' checkpoints
    /// ([`RestoredState::merge`]), so old subtask `j` is not new subtask
    /// `j`.
    pub always_rescale: bool,
}

impl RestoredState {
    /// The snapshots of task `task` (empty when it had none).
    pub fn states_of(&self, task: &TaskId) -> Vec<OperatorSnapshot> {
        self.states.get(task).cloned().unwrap_or_default()
    }

    /// Merges the checkpoints of several jobs of the same graph that each
    /// ran a disjoint share of the input and of the keys (one process
    /// each, as `lockgate kafka run --processes N`), for a job that takes
    /// over from all of them: task `t`'s old subtasks are the
    /// concatenation of each part's, in the order given (part 0's
    /// subtasks first), and every task restores rescaled
    /// ([`RestoredState::always_rescale`]), each new subtask keeping what
    /// it owns of all of them. Each part is a valid cut of its own share,
    /// so their checkpoint ids need not match; the merged id is the
    /// largest. `keep(part, operator)` false leaves that part's state of
    /// that operator out (its slots stay, empty): e.g. sink transactions
    /// another process finishes.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointId, OperatorSnapshot, RestoredState, TaskId};
    /// let part = |id, bytes: &[u8]| {
    ///     let mut r = RestoredState::default();
    ///     r.checkpoint = CheckpointId(id);
    ///     r.parallelism.insert("sum".into(), 1);
    ///     let snap = OperatorSnapshot { operator: "sum".into(), bytes: bytes.to_vec() };
    ///     r.states.insert(TaskId::new("sum", 0), vec![snap]);
    ///     r
    /// };
    /// let m = RestoredState::merge(vec![part(4, b"a"), part(9, b"b")], |_, _| true);
    /// assert_eq!((m.checkpoint, m.parallelism["sum"], m.always_rescale), (CheckpointId(9), 2, true));
    /// assert_eq!(m.states_of(&TaskId::new("sum", 1))[0].bytes, b"b");
    /// ```
    pub fn merge(parts: Vec<RestoredState>, keep: impl Fn(usize, &str) -> bool) -> RestoredState {
        let mut merged = RestoredState {
            always_rescale: true,
            ..RestoredState::default()
        };
        for (i, part) in parts.into_iter().enumerate() {
            merged.checkpoint = merged.checkpoint.max(part.checkpoint);
            let offsets: BTreeMap<String, u32> = part
                .parallelism
                .keys()
                .map(|t| (t.clone(), merged.parallelism.get(t).copied().unwrap_or(0)))
                .collect();
            for (task, mut snaps) in part.states {
                let base = offsets.get(&task.operator).copied().unwrap_or(0) as usize;
                snaps.retain(|s| keep(i, &s.operator));
                merged.states.insert(
                    TaskId::new(task.operator.clone(), base + task.subtask),
                    snaps,
                );
            }
            for (t, p) in part.parallelism {
                *merged.parallelism.entry(t).or_insert(0) += p;
            }
        }
        merged
    }
}
