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

pub mod barrier;
pub(crate) mod chain;
pub mod channel;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod element;
pub mod error;
pub mod failure;
pub mod graph;
pub mod input_gate;
pub mod metrics;
pub mod operator;
pub mod protocol;
pub mod runtime;

pub(crate) mod sinks;
pub(crate) mod sources;
pub mod state;
pub mod task_id;
pub mod two_phase;
pub(crate) mod watermark;

pub use barrier::{
    AbortReason, Aligner, AlignmentStats, AnyHandler, BarrierHandler, BarrierSignal,
    CheckpointMode, HandlerConfig, Tracker,
};
pub use checkpoint::{CheckpointStats, CheckpointStatus, RestoredState};
pub use config::{CheckpointConfig, JobConfig, PinPolicy, RestartStrategy};
pub use element::{
    Batch, CheckpointBarrier, CheckpointId, CheckpointOptions, RecordSize, SnapshotKind,
    StreamElement, Watermark,
};
pub use error::{BoxError, FatalError, JobError, OperatorError, TaskError};
pub use failure::{FailurePlan, FailurePoint, PlannedFailure};
pub use graph::{Connected, Data, Exchange, Ingest, JobBuilder, PushError, Stream};
pub use input_gate::WaitStrategy;
pub use metrics::{TaskMetrics, TaskMetricsSnapshot};
pub use operator::{Either, Operator, Sink, Source, SourcePoll};
pub use protocol::OperatorSnapshot;
pub use runtime::{JobHandle, JobMetrics, JobResult};
pub use state::{KeyedState, StateError, ValueState};
pub use task_id::{ParseTaskIdError, TaskId};
