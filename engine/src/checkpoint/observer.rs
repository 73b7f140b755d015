//! A hook for what watches checkpoints from outside the coordinator (the
//! job's telemetry: metrics and spans), called on the job thread as each
//! checkpoint is triggered and as it ends.

use super::CheckpointStats;
use crate::types::element::{CheckpointId, SnapshotKind};

/// Told of each checkpoint's trigger and end, in that order, by the
/// coordinator ([`super::coordinator::Coordinator::set_observer`]).
pub(crate) trait CheckpointObserver: Send {
    /// Checkpoint `id` was triggered now.
    fn triggered(&mut self, id: CheckpointId, kind: SnapshotKind, is_final: bool);
    /// A checkpoint ended, completed or aborted: its final statistics.
    fn ended(&mut self, stats: &CheckpointStats);
}
