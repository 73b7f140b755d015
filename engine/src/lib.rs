//! lockgate: a streaming dataflow engine for low-latency work, with Flink's
//! checkpoint semantics.
//!
//! A record travels top to bottom through these modules:
//! [`element`] (what a channel carries) → [`channel`] (bounded crossbeam
//! channels, output batching, backpressure) → [`input_gate`] (polling a
//! task's channels) → [`barrier`] (the handler that aligns or tracks
//! checkpoint barriers) → the task's operator chain (`chain`, `runtime`) →
//! its output channels. [`graph`] builds jobs, `runtime` runs them, and
//! [`checkpoint`] coordinates, stores and restores their state.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

pub mod barrier;
pub(crate) mod chain;
pub mod channel;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod element;
pub mod failure;
pub mod graph;
pub mod input_gate;
pub mod metrics;
pub mod operator;
pub mod runtime;
pub mod scenario;
pub(crate) mod sinks;
pub(crate) mod sources;
pub mod state;
pub mod two_phase;

pub use barrier::{
    AbortReason, Aligner, AlignmentStats, AnyHandler, BarrierHandler, BarrierSignal,
    CheckpointMode, HandlerConfig, Tracker,
};
pub use chain::OperatorSnapshot;
pub use checkpoint::{CheckpointStats, CheckpointStatus, RestoredState};
pub use config::{CheckpointConfig, JobConfig, PinPolicy, RestartStrategy};
pub use element::{
    Batch, CheckpointBarrier, CheckpointId, CheckpointOptions, RecordSize, SnapshotKind,
    StreamElement, Watermark,
};
pub use failure::{FailurePlan, FailurePoint, PlannedFailure};
pub use graph::{Connected, Data, Exchange, Ingest, JobBuilder, PushError, Stream};
pub use input_gate::WaitStrategy;
pub use metrics::{TaskMetrics, TaskMetricsSnapshot};
pub use operator::{
    BoxError, Either, FatalError, Operator, OperatorError, Sink, Source, SourcePoll,
};
pub use runtime::{JobHandle, JobMetrics, JobResult, TaskError};
pub use state::{KeyedState, StateError, ValueState};

/// Why a job could not start or did not end well.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// The configuration or the graph is invalid; the message names the
    /// problem.
    #[error("invalid job: {0}")]
    Config(String),
    /// A task failed and no restart was left.
    #[error("task {task} failed: {cause}")]
    TaskFailed {
        /// The task's full name, e.g. `keyed_sum[1]`.
        task: String,
        /// Why it failed.
        cause: TaskError,
    },
    /// More checkpoints failed in a row than tolerated (Flink's
    /// `CheckpointFailureManager`); the message gives the last reason.
    #[error("checkpointing failed: {0}")]
    Checkpoint(String),
    /// Checkpoint storage could not be used.
    #[error("checkpoint storage: {0}")]
    Storage(String),
    /// The job cannot restore from the given checkpoint.
    #[error("cannot restore: {0}")]
    Restore(String),
    /// A bug in lockgate.
    #[error("internal error: {0}")]
    Internal(String),
}
