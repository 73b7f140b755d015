//! What users write: the [`Source`], [`Operator`] and [`Sink`] traits and
//! their state hooks ([`Checkpointed`]) (`api`); the ingest source behind
//! `JobBuilder::ingest` (`ingest`); closure sinks (`sinks`); and
//! two-phase-commit sinks (`two_phase`).

mod api;
pub(crate) mod committed;
pub(crate) mod event_time;
pub(crate) mod ingest;
pub(crate) mod replayable;
pub(crate) mod sinks;
pub(crate) mod two_phase;

pub(crate) use api::{notify, FnOperator, SinkOperator};
pub use api::{
    Checkpointed, Context, Either, EncodedState, Operator, Sink, SnapshotRequest, Source,
    SourcePoll, StateSnapshot,
};
pub use committed::Committed;
