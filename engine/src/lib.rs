//! lockgate: a streaming dataflow engine for low-latency work, with Flink's
//! checkpoint semantics.
//!
//! A record travels top to bottom through these modules:
//! [`element`] (what a channel carries) → `channel` (bounded crossbeam
//! channels, output batching) → `input_gate` (polling a task's channels) →
//! [`barrier`] (the handler that aligns or tracks checkpoint barriers) →
//! the operator chain of a task (`runtime`) → its output channels.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, missing_docs)]

pub mod barrier;
pub mod clock;
pub mod element;
pub mod scenario;

pub use barrier::{
    AbortReason, Aligner, AlignmentStats, AnyHandler, BarrierHandler, BarrierSignal,
    CheckpointMode, HandlerConfig, Tracker,
};
pub use element::{
    Batch, CheckpointBarrier, CheckpointId, CheckpointOptions, RecordSize, SnapshotKind,
    StreamElement, Watermark,
};
