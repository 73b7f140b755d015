//! lockgate: a streaming dataflow engine for low-latency work, with Flink's
//! checkpoint semantics.
//!
//! A record's path, one module each: [`element`] (what a channel carries)
//! → [`channel`] (bounded crossbeam channels, output batching,
//! backpressure) → [`input_gate`] (polling a task's channels) →
//! [`barrier`] (the handler that aligns or tracks checkpoint barriers) →
//! the task (`runtime::task`) and its operator chain (`chain`, calling
//! [`operator`]s) → the chain's output, a [`channel`] again.
//!
//! Layers, bottom to top; a module imports only from layers below it
//! (checked in CI by `.ci/module-cycles.py`, pictured in ARCHITECTURE.md):
//! 1. leaf vocabulary: [`element`], [`clock`], [`task_id`], [`error`],
//!    [`state`], [`metrics`];
//! 2. sans-I/O state machines and the task protocol: [`barrier`],
//!    `watermark`, [`protocol`];
//! 3. the record path: [`operator`], [`failure`], [`channel`],
//!    [`input_gate`], `chain`, [`config`], [`two_phase`];
//! 4. [`checkpoint`]: the coordinator's state machine and storage;
//! 5. [`runtime`]: the physical plan, the task loops, the job thread;
//! 6. [`graph`]: the builder API over the runtime.

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
pub mod handoff;
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
pub use config::{CheckpointConfig, IngestConfig, JobConfig, PinPolicy, RestartStrategy};
pub use element::{
    Batch, CheckpointBarrier, CheckpointId, CheckpointOptions, RecordSize, SnapshotKind,
    StreamElement, Watermark,
};
pub use error::{BoxError, FatalError, JobError, OperatorError, TaskError};
pub use failure::{FailurePlan, FailurePoint, PlannedFailure};
pub use graph::{Connected, Data, Exchange, JobBuilder, Stream};
pub use handoff::{
    ingest_channel, Ingest, IngestReceiver, Output, PushError, RecvTimeoutError, TryRecvError,
};
pub use input_gate::WaitStrategy;
pub use metrics::{Pinning, TaskMetrics, TaskMetricsSnapshot};
pub use operator::{Either, Operator, Sink, Source, SourcePoll};
pub use protocol::OperatorSnapshot;
pub use runtime::{JobHandle, JobMetrics};
pub use state::{KeyedState, StateError, ValueState};
pub use task_id::{ParseTaskIdError, TaskId};

/// The README's Rust blocks, compiled and run as doctests (as timely does).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
