//! What the job thread tells a task ([`Control`]): the one message type
//! that crosses from the job thread into the record path (read between
//! batches, so a trigger lands exactly between two batches).

use crate::types::element::{CheckpointBarrier, CheckpointId};

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
