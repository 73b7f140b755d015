//! The task protocol, in one leaf module: what the job thread tells a task
//! ([`Control`]), what a task tells the job thread ([`TaskEvent`]), the
//! state a task hands over for a checkpoint ([`OperatorSnapshot`]). Tasks
//! are named by [`TaskId`](crate::TaskId).

use crate::barrier::{AbortReason, AlignmentStats};
use crate::element::{CheckpointBarrier, CheckpointId};
use crate::error::TaskError;

/// The state of one operator of a chain for one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OperatorSnapshot {
    /// The operator's name, unique in the job (its state key).
    pub operator: String,
    /// The operator's serialized state.
    pub bytes: Vec<u8>,
}

/// A message from the job thread to a task.
#[derive(Clone, Debug)]
pub(crate) enum Control {
    /// Sources only: inject this barrier now (after everything emitted).
    Trigger(CheckpointBarrier),
    /// Checkpoint `id` completed (`true`) or was aborted (`false`).
    Done(CheckpointId, bool),
    /// Sources only: stop emitting and end (the job drains and ends).
    Stop,
}

/// A message from a task to the job thread.
#[derive(Debug)]
pub(crate) enum TaskEvent {
    /// The task took its snapshot for checkpoint `id`.
    Ack {
        task: usize,
        id: CheckpointId,
        states: Vec<OperatorSnapshot>,
        alignment: AlignmentStats,
    },
    /// The task gave up checkpoint `id`.
    Decline {
        task: usize,
        id: CheckpointId,
        reason: AbortReason,
    },
    /// A source reached its end and waits for the final checkpoint
    /// (FLIP-147) before ending its output.
    SourceDrained { task: usize },
    /// The task ended cleanly.
    Finished { task: usize },
    /// The task failed.
    Failed { task: usize, error: TaskError },
}
