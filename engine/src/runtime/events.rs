//! What a task tells the job thread ([`TaskEvent`]): its snapshot thread's
//! acknowledgements and declines, and the task's own end.

use crate::barrier::AbortReason;
use crate::checkpoint::snapshot::SnapshotOutcome;
use crate::checkpoint::{PartHandle, SubtaskCheckpointStats};
use crate::types::element::CheckpointId;
use crate::types::error::TaskError;

/// A message from a task to the job thread.
#[derive(Debug)]
pub(crate) enum TaskEvent {
    /// The task's snapshot for checkpoint `id` is complete and durable, in
    /// `part`; sent by its snapshot thread.
    Ack {
        task: usize,
        id: CheckpointId,
        part: PartHandle,
        stats: SubtaskCheckpointStats,
    },
    /// The task gave up checkpoint `id` (`detail`: what the storage said,
    /// for [`AbortReason::StorageError`]).
    Decline {
        task: usize,
        id: CheckpointId,
        reason: AbortReason,
        detail: Option<String>,
    },
    /// A source reached its end and waits for the final checkpoint
    /// (FLIP-147) before ending its output.
    SourceDrained { task: usize },
    /// The task ended cleanly.
    Finished { task: usize },
    /// The task failed.
    Failed { task: usize, error: TaskError },
}

impl From<(usize, SnapshotOutcome)> for TaskEvent {
    fn from((task, outcome): (usize, SnapshotOutcome)) -> Self {
        match outcome {
            SnapshotOutcome::Ack { id, part, stats } => TaskEvent::Ack {
                task,
                id,
                part,
                stats,
            },
            SnapshotOutcome::Decline { id, reason, detail } => TaskEvent::Decline {
                task,
                id,
                reason,
                detail,
            },
            SnapshotOutcome::Failed(error) => TaskEvent::Failed { task, error },
        }
    }
}
