//! The task runtime: one OS thread per task (or cooperative worker threads
//! that share them, `worker`), joined by bounded channels, driven by a job
//! thread that also coordinates checkpoints and restarts.
//!
//! Layers, bottom to top (each uses only those above it in this list and
//! the crate's leaf modules):
//! - `snapshot`: a task's snapshot thread, the asynchronous phase of its
//!   checkpoints.
//! - `plan`: the physical plan ([`JobGraph`](plan::JobGraph)), the channels
//!   of one run attempt, what a task is given.
//! - `task`: the loops of a source task and of an input-gate task.
//! - `worker`: where a task's loop runs: its own thread, or a cooperative
//!   worker thread shared with other tasks.
//! - `job`: starting the task threads, [`JobHandle`], failure handling,
//!   restarts, the checkpoint coordinator's loop.

pub(crate) mod job;
pub(crate) mod plan;
pub(crate) mod snapshot;
pub(crate) mod task;
pub(crate) mod worker;

pub use snapshot::set_after_snapshot_hook;

pub use job::{
    config_differences, load_restorable, JobFailure, JobHandle, JobMetrics, RestoredAtStart,
    SkippedCheckpoint,
};
