//! The task protocol, in one leaf module: what the job thread tells a task
//! ([`Control`]), what a task tells the job thread ([`TaskEvent`]), the
//! state a task hands over for a checkpoint ([`OperatorSnapshot`]). Tasks
//! are named by [`TaskId`](crate::TaskId).

use crate::barrier::AbortReason;
use crate::checkpoint::{PartHandle, SubtaskCheckpointStats};
use crate::element::{CheckpointBarrier, CheckpointId};
use crate::error::BoxError;
use crate::error::TaskError;
use crate::key_groups::Rescale;
use crate::operator::{Checkpointed, StateSnapshot};

/// The state of one operator of a chain for one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OperatorSnapshot {
    /// The operator's name, unique in the job (its state key).
    pub operator: String,
    /// The operator's serialized state (in a part file: its length, then
    /// the bytes, as postcard encodes a byte string).
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// The bytes of operator `operator` in a task's restored snapshots, in
/// chain order (oldest first: a full snapshot, then deltas; see
/// [`crate::Checkpointed::restore_state_chain`]).
fn chain_of<'a>(states: &'a [OperatorSnapshot], operator: &str) -> Vec<&'a [u8]> {
    states
        .iter()
        .filter(|s| s.operator == operator)
        .map(|s| s.bytes.as_slice())
        .collect()
}

/// What one task restores from.
#[derive(Clone, Debug)]
pub(crate) enum TaskRestore {
    /// Its own snapshots: the checkpoint was taken at this parallelism.
    Same(Vec<OperatorSnapshot>),
    /// A restore at another parallelism: the snapshots of every old
    /// subtask (index: the old subtask), which each operator
    /// redistributes ([`crate::Checkpointed::restore_rescaled`]).
    Rescaled {
        old: Vec<Vec<OperatorSnapshot>>,
        rescale: Rescale,
    },
}

impl TaskRestore {
    /// Restores operator `operator` (its hooks in `target`) from what was
    /// stored for it; nothing when nothing was (a stateless operator).
    pub(crate) fn restore_into<C: Checkpointed + ?Sized>(
        &self,
        operator: &str,
        target: &mut C,
    ) -> Result<(), BoxError> {
        match self {
            TaskRestore::Same(states) => {
                let chain = chain_of(states, operator);
                if chain.is_empty() {
                    return Ok(());
                }
                target.restore_state_chain(&chain)
            }
            TaskRestore::Rescaled { old, rescale } => {
                let chains: Vec<Vec<&[u8]>> = old.iter().map(|s| chain_of(s, operator)).collect();
                if chains.iter().all(Vec::is_empty) {
                    return Ok(());
                }
                target.restore_rescaled(&chains, rescale)
            }
        }
    }
}

/// The synchronous part of one operator's snapshot, handed to the task's
/// snapshot thread, which runs the rest.
#[derive(Debug)]
pub(crate) struct PendingSnapshot {
    /// The operator's name (its state key).
    pub(crate) operator: String,
    /// Its snapshot, the asynchronous part still to run.
    pub(crate) snapshot: StateSnapshot,
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
    /// The task's snapshot for checkpoint `id` is complete (durable, in
    /// `part`, when the job has storage); sent by its snapshot thread.
    Ack {
        task: usize,
        id: CheckpointId,
        states: Vec<OperatorSnapshot>,
        part: Option<PartHandle>,
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
