//! What both barrier handlers share: the [`BarrierHandler`] contract, its
//! signals and abort reasons, the checkpointing mode and the handlers'
//! configuration.

use super::ChannelSet;
use crate::types::element::{CheckpointBarrier, CheckpointId, StreamElement};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a checkpoint was aborted. The first three are decided by a barrier
/// handler; the others by the checkpoint coordinator or a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortReason {
    /// A barrier of a newer checkpoint arrived during the alignment
    /// (Flink's `CHECKPOINT_DECLINED_SUBSUMED`).
    Subsumed,
    /// A cancel-checkpoint marker arrived for it (Flink's
    /// `CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER`).
    Canceled,
    /// The bytes held for the alignment passed `max_alignment_bytes`
    /// (Flink's `CHECKPOINT_DECLINED_ALIGNMENT_LIMIT_EXCEEDED`).
    AlignmentLimit,
    /// The checkpoint did not complete within the checkpoint timeout.
    Timeout,
    /// A task declined it (e.g. it was aborted downstream of this task).
    Declined,
    /// A task failed while the checkpoint was pending.
    TaskFailure,
    /// Writing or publishing the snapshot failed.
    StorageError,
}

impl AbortReason {
    /// The reason as spelled in reports, JSON and scenario files
    /// (`subsumed`, `canceled`, `alignment_limit`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AbortReason::Subsumed => "subsumed",
            AbortReason::Canceled => "canceled",
            AbortReason::AlignmentLimit => "alignment_limit",
            AbortReason::Timeout => "timeout",
            AbortReason::Declined => "declined",
            AbortReason::TaskFailure => "task_failure",
            AbortReason::StorageError => "storage_error",
        }
    }

    /// True when the reason counts against the tolerable failed checkpoints,
    /// as Flink's `CheckpointFailureManager` counts them: timeouts, storage
    /// errors and task-side errors during a snapshot, not subsumption,
    /// cancellation or the alignment limit.
    pub fn counts_as_failure(self) -> bool {
        matches!(
            self,
            AbortReason::Timeout | AbortReason::StorageError | AbortReason::Declined
        )
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an alignment cost, reported with a trigger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlignmentStats {
    /// From the first barrier of the checkpoint to the last one, in ns on the
    /// clock the input gate passes in (0 for a single channel): the barrier
    /// spread, in both modes.
    pub duration_ns: u64,
    /// When the first barrier of the checkpoint arrived, ns on that clock.
    pub first_barrier_ns: u64,
    /// True when channels were blocked meanwhile (the aligner), false for
    /// the tracker, which never blocks.
    pub blocking: bool,
    /// The most bytes held in the blocker during the alignment (records'
    /// [`RecordSize`](crate::RecordSize) bytes; events count 0).
    pub buffered_bytes: u64,
    /// True when the snapshot is taken unaligned (the
    /// [`Unaligned`](crate::barrier::Unaligned) handler: at the first barrier, or
    /// when an aligned checkpoint's alignment timed out): the barrier goes
    /// downstream on the priority lanes too, and the channel state follows
    /// ([`BarrierSignal::ChannelStateDone`]).
    pub unaligned: bool,
}

/// A decision of a barrier handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierSignal {
    /// Every input delivered the barrier: snapshot now, then forward the
    /// barrier downstream before anything that follows.
    Trigger {
        /// The barrier that completed the alignment (its id, timestamp and
        /// options, as the first barrier of the checkpoint carried them).
        barrier: CheckpointBarrier,
        /// What the alignment cost.
        alignment: AlignmentStats,
    },
    /// Every input channel's state of unaligned checkpoint `id` has ended
    /// (its in-band barrier or end of partition was read): the task's part
    /// of `id`, snapshot and channel state, can be completed. Only the
    /// [`Unaligned`](crate::barrier::Unaligned) handler sends it, once per triggered
    /// checkpoint that is not aborted.
    ChannelStateDone {
        /// The checkpoint whose channel state is complete.
        id: CheckpointId,
    },
    /// The checkpoint is given up on this task: send a cancel-checkpoint
    /// marker downstream and decline it to the coordinator.
    Abort {
        /// The checkpoint given up.
        id: CheckpointId,
        /// Why.
        reason: AbortReason,
    },
}

/// The common interface of the [`Aligner`](crate::barrier::Aligner) and the [`Tracker`](crate::barrier::Tracker).
///
/// A handler is fed every element that arrives at an input gate, with the
/// index of its channel. It answers with the element to hand on to the
/// operator (records, watermarks and end of partition, which the operator
/// sees in-band) or `None` when it consumed the element (barriers, cancel
/// markers) or held it (a blocked channel in the aligner). Its decisions are
/// pushed to `signals` during the same call; act on them before handing on
/// the returned element.
pub trait BarrierHandler<T> {
    /// Feeds one element that arrived on `channel` at `now_ns` (any
    /// monotonic clock in ns; only differences are used).
    ///
    /// # Panics
    /// When `channel` is not below [`BarrierHandler::num_channels`].
    fn on_element(
        &mut self,
        channel: usize,
        element: StreamElement<T>,
        now_ns: u64,
        signals: &mut Vec<BarrierSignal>,
    ) -> Option<StreamElement<T>>;

    /// The next element released by an ended alignment, to be fed again
    /// through [`BarrierHandler::on_element`] before any new input (it may be
    /// held again by a newer alignment). Always `None` for a tracker.
    fn next_replay(&mut self) -> Option<(usize, StreamElement<T>)>;

    /// True when released elements wait to be replayed.
    fn has_replay(&self) -> bool;

    /// True when `channel` is blocked by the running alignment.
    fn is_blocked(&self, channel: usize) -> bool;

    /// The channels blocked by the running alignment.
    fn blocked(&self) -> &ChannelSet;

    /// True when the blocker holds at least its capacity in bytes: the input
    /// gate must then stop reading the blocked channels, so that their
    /// bounded channels push back upstream. Advice only: the handler still
    /// accepts whatever it is fed.
    fn blocker_full(&self) -> bool;

    /// The number of input channels.
    fn num_channels(&self) -> usize;

    /// The number of channels that delivered end of partition.
    fn num_closed(&self) -> usize;

    /// The end of the input: a running alignment ends without a signal and
    /// everything held becomes available through
    /// [`BarrierHandler::next_replay`], in replay order. From then on the
    /// handler holds nothing and consumes barriers and cancel markers
    /// without a signal, so that the replay hands on every held record
    /// (the aligner's module docs say why).
    fn end_of_input(&mut self);

    /// The bytes held by the blocker now.
    fn held_bytes(&self) -> u64;
}

/// The checkpointing mode of a job (Flink's `CheckpointingMode`, plus none).
///
/// # Examples
/// ```
/// use lockgate::{CheckpointMode, JobConfig};
/// use std::time::Duration;
///
/// // as a configuration file names it
/// let mode: CheckpointMode = serde_json::from_str(r#""at-least-once""#).unwrap();
/// assert_eq!(mode, CheckpointMode::AtLeastOnce);
///
/// // a job checkpoints only in a mode other than `None`, its default
/// let mut config = JobConfig::default();
/// assert_eq!(config.checkpoint.mode, CheckpointMode::None);
/// config.checkpoint.interval = Some(Duration::from_millis(100));
/// assert!(config.validate().is_err()); // an interval without checkpoints
/// config.checkpoint.mode = mode;
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointMode {
    /// Aligned barriers: every record is reflected in the state exactly once.
    #[default]
    ExactlyOnce,
    /// Barrier tracking: no blocking; after a restore, records may be applied
    /// twice, never lost.
    AtLeastOnce,
    /// Unaligned checkpoints (FLIP-76): a task snapshots at the first
    /// barrier, which overtakes the records in flight on a priority lane;
    /// the records it overtook are persisted as channel state and replayed
    /// on restore. Exactly-once, like the aligned mode, without waiting for
    /// the slowest channel under backpressure.
    Unaligned,
    /// No checkpoints: barriers are never injected.
    None,
}

impl CheckpointMode {
    /// The mode as spelled in configuration and reports (`exactly-once`,
    /// `at-least-once`, `unaligned`, `none`; the serde spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointMode::ExactlyOnce => "exactly-once",
            CheckpointMode::AtLeastOnce => "at-least-once",
            CheckpointMode::Unaligned => "unaligned",
            CheckpointMode::None => "none",
        }
    }
}

/// Configuration shared by the handlers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlerConfig {
    /// Abort the aligning checkpoint when the held bytes plus the bytes of
    /// earlier releases not yet replayed exceed this (Flink's
    /// `execution.checkpointing.alignment-max-size`, rule 7 of the scenario
    /// contract). `None`: no limit.
    pub max_alignment_bytes: Option<u64>,
    /// The blocker's capacity in bytes: past it the input gate stops reading
    /// blocked channels. 0 = pure blocking, as Flink 1.11+ does.
    pub blocker_capacity_bytes: u64,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        HandlerConfig {
            max_alignment_bytes: None,
            blocker_capacity_bytes: DEFAULT_BLOCKER_CAPACITY_BYTES,
        }
    }
}

/// Default blocker capacity: 1 MiB, about 43,000 24-byte records, i.e. a
/// W3 burst of ~200 ms at 200,000 records/s, so a short skew never
/// backpressures the faster input. (A guess to be replaced by measurement.)
pub const DEFAULT_BLOCKER_CAPACITY_BYTES: u64 = 1 << 20;
