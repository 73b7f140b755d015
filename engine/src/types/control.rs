//! What the job thread tells a task ([`Control`]): the one message type
//! that crosses from the job thread into the record path (read between
//! batches, so a trigger lands exactly between two batches).

use crate::types::element::{CheckpointBarrier, CheckpointId};

/// A message from the job thread to a task.
#[derive(Clone, Debug)]
pub(crate) enum Control {
    /// Sources only: inject this barrier now (after everything emitted).
    Trigger(CheckpointBarrier),
    /// Checkpoint `id` ended: completed or aborted.
    Ended(CheckpointId, CheckpointEnd),
    /// Sources only: stop emitting and end (the job drains and ends).
    Stop,
}

/// How a checkpoint ended, as the job thread tells the tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckpointEnd {
    /// Complete and durable: a two-phase-commit sink commits it.
    Completed,
    /// Given up (a timeout, a decline, a failed write): nothing commits.
    Aborted,
}
