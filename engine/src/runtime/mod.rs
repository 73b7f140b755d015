//! The task runtime: what runs a task, on its own OS thread or on a
//! cooperative worker thread shared with other tasks.
//!
//! - `chain`: an operator chain, the operators a task runs one after
//!   another, batch by batch.
//! - `events`: what a task (and its snapshot thread) tells the job thread.
//! - `plan`: the physical plan (`JobGraph`), the channels of one run
//!   attempt, what a task is given.
//! - `task`: the loops of a source task and of an input-gate task, as
//!   steps.
//! - `worker`: where a task's loop runs: its own thread, or a cooperative
//!   worker thread shared with other tasks.

pub(crate) mod chain;
pub(crate) mod events;
pub(crate) mod plan;
pub(crate) mod task;
pub(crate) mod worker;
