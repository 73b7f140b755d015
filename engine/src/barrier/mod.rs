//! Barrier handling: the rules that decide when a multi-input task takes its
//! snapshot for a checkpoint.
//!
//! Both handlers are sans-I/O state machines: the input gate feeds them
//! `(channel, element, now_ns)` and they answer with what to do. They own no
//! thread, channel or clock, so every rule is tested deterministically, by a
//! property test against a reference model, and by the scenario files
//! translated from Flink's own tests (`testdata/scenarios/`).
//!
//! - [`Aligner`]: exactly-once, aligned checkpoints (Flink 1.8's
//!   `BarrierBuffer`, with the Flink 1.9 cancel-marker fix and FLIP-147's
//!   rule for ended channels). Every rule lives in `aligner.rs`.
//! - [`Tracker`]: at-least-once (Flink 1.20's `CheckpointBarrierTracker`).
//!   Every rule lives in `tracker.rs`.
//! - [`Unaligned`]: unaligned checkpoints (FLIP-76; Flink's unaligned
//!   `SingleCheckpointBarrierHandler` and `ChannelStatePersister`): the
//!   first barrier triggers, nothing is held, and what arrives before each
//!   channel's in-band barrier is channel state. Every rule lives in
//!   `unaligned.rs`.
//!
//! # How the input gate drives a handler
//! ```text
//! loop {
//!     // 1. replay what an alignment released, in order, before new input
//!     let (ch, el) = handler.next_replay().or_else(|| gate.poll())?;
//!     // 2. feed it; signals are acted on first, then the passed element
//!     let passed = handler.on_element(ch, el, now_ns, &mut signals);
//!     for s in signals.drain(..) { /* Trigger: snapshot + forward barrier;
//!                                     Abort: cancel marker + decline */ }
//!     if let Some(el) = passed { operator.process(ch, el) }
//! }
//! ```

mod aligner;
mod any;
mod channel_set;
mod handler;
mod tracker;
mod unaligned;

pub use aligner::Aligner;
pub use any::AnyHandler;
pub use channel_set::{ChannelSet, INLINE_CHANNELS};
pub use handler::{
    AbortReason, AlignmentStats, BarrierHandler, BarrierSignal, CheckpointMode, HandlerConfig,
    DEFAULT_BLOCKER_CAPACITY_BYTES,
};
pub(crate) mod watermark;
pub use tracker::{Tracker, MAX_PENDING_CHECKPOINTS};
pub use unaligned::Unaligned;

/// The elements a handler reads, and the barrier's options.
pub use crate::types::element::{CheckpointBarrier, CheckpointOptions, StreamElement};
