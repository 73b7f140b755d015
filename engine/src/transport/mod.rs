//! How elements move between tasks: bounded channels with output batching,
//! backpressure, priority lanes and credits (`channel`); a task's input
//! gate, which reads its channels through the barrier handler
//! (`input_gate`); and the application's ends of a job (`handoff`).

pub(crate) mod channel;
pub(crate) mod handoff;
pub(crate) mod input_gate;
