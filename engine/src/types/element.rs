//! What a channel carries: [`StreamElement`], a tagged enum of record batches
//! and in-band events (checkpoint barrier, cancel-checkpoint marker, end of
//! partition, watermark).
//!
//! Records travel in batches ([`Batch`]) so that the per-record cost of a
//! channel hop is a few ns; events travel alone and keep their place in the
//! record order, which is what makes an aligned checkpoint consistent.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The id of a checkpoint. Ids grow by one per trigger, starting at 1; a
/// newer checkpoint has a larger id (as in Flink, where a checkpoint id is a
/// `long` from the coordinator's counter).
///
/// # Examples
/// ```
/// use lockgate::CheckpointId;
///
/// let first = CheckpointId::NONE.next();
/// assert_eq!(first, CheckpointId(1));
/// assert!(first.next() > first); // newer is larger
/// assert_eq!(first.next().get(), 2);
/// assert_eq!(CheckpointId(42).to_string(), "42");
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    /// The id that no checkpoint has; every real checkpoint is newer.
    pub const NONE: CheckpointId = CheckpointId(0);

    /// The raw number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The next id (`self + 1`).
    pub fn next(self) -> CheckpointId {
        CheckpointId(self.0 + 1)
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What kind of snapshot a barrier asks for (Flink's `CheckpointType`).
///
/// # Examples
/// A job stopped with a savepoint:
/// ```
/// use lockgate::{CheckpointMode, JobBuilder, JobConfig, SnapshotKind};
///
/// let mut config = JobConfig::default();
/// config.checkpoint.mode = CheckpointMode::ExactlyOnce; // no interval: on demand
/// let job = JobBuilder::new("savepoint", config);
/// let (numbers, _ingest) = job.ingest::<u64>("numbers", 16);
/// let _out = numbers.collect();
/// let handle = job.start()?;
/// handle.stop_with_savepoint();
/// let metrics = handle.wait()?;
/// let last = metrics.last_completed_checkpoint.expect("the savepoint completed");
/// assert_eq!(last.kind, SnapshotKind::Savepoint);
/// assert_eq!(SnapshotKind::default(), SnapshotKind::Checkpoint);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SnapshotKind {
    /// A periodic checkpoint, owned and retained by the engine.
    #[default]
    Checkpoint,
    /// A savepoint asked for by the user (e.g. when stopping a job); it is
    /// never removed by checkpoint retention.
    Savepoint,
}

/// Options carried by a barrier (Flink's `CheckpointOptions`, reduced to what
/// lockgate uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CheckpointOptions {
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// True when the barrier belongs to the final checkpoint taken after all
    /// sources ended (Flink's FLIP-147), so two-phase-commit sinks commit the
    /// tail of the output.
    pub is_final: bool,
    /// True when every subtask writes a full part, however short its
    /// incremental chain ([`crate::CheckpointConfig::full_min_interval`]):
    /// the checkpoint is then complete on its own. Savepoints are always
    /// full.
    #[serde(default)]
    pub full: bool,
}

/// A checkpoint barrier: injected by the checkpoint coordinator at the
/// sources, it travels in record order through every channel and splits the
/// stream into the part before checkpoint `id` and the part after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CheckpointBarrier {
    /// Which checkpoint this barrier belongs to.
    pub id: CheckpointId,
    /// When the coordinator triggered the checkpoint, in ns on the engine's
    /// monotonic clock ([`crate::util::clock::now_ns`]).
    pub timestamp_ns: u64,
    /// What kind of snapshot to take.
    pub options: CheckpointOptions,
}

impl CheckpointBarrier {
    /// A plain checkpoint barrier for `id`, triggered at `timestamp_ns`.
    pub fn new(id: CheckpointId, timestamp_ns: u64) -> Self {
        CheckpointBarrier {
            id,
            timestamp_ns,
            options: CheckpointOptions::default(),
        }
    }

    /// True for the barriers that stay aligned in unaligned mode: a
    /// savepoint's (as Flink: savepoints are always aligned) and the final
    /// checkpoint's (FLIP-147: it must follow every record, so that
    /// two-phase-commit sinks commit the whole tail of the output). They
    /// never travel on a priority lane.
    pub fn must_align(&self) -> bool {
        self.options.is_final || self.options.kind == SnapshotKind::Savepoint
    }
}

/// An event-time watermark: no record with a timestamp at or below
/// `timestamp_ms` is expected on this channel any more (as Flink's
/// `Watermark`, in ms since the Unix epoch).
///
/// # Examples
/// The watermarks an operator sees, from an ingest source whose
/// application pushes them:
/// ```
/// use lockgate::source::WatermarkStrategy;
/// use lockgate::{BoxError, Checkpointed, Context, IngestConfig, JobBuilder, JobConfig, Operator, Watermark};
///
/// /// Drops records, emits the watermarks it sees.
/// struct Watermarks;
/// impl Operator<u64, i64> for Watermarks {
///     fn process(&mut self, input: &mut Vec<u64>, _ctx: &mut Context<'_, i64>) -> Result<(), BoxError> {
///         input.clear();
///         Ok(())
///     }
///     fn on_watermark(&mut self, watermark: Watermark, ctx: &mut Context<'_, i64>) -> Result<(), BoxError> {
///         ctx.emit(watermark.0);
///         Ok(())
///     }
/// }
/// impl Checkpointed for Watermarks {}
///
/// let job = JobBuilder::new("watermarks", JobConfig::default());
/// let strategy = WatermarkStrategy::explicit_only();
/// let (records, ingest) = job.ingest_event_time::<u64>("records", IngestConfig::default(), strategy);
/// let seen = records.process("watermarks", |_| Watermarks).collect();
/// let handle = job.start()?;
/// ingest.push(1).expect("the job runs");
/// ingest.push_watermark(Watermark(100)).expect("the job runs");
/// ingest.push_watermark(Watermark(200)).expect("the job runs");
/// drop(ingest);
/// handle.wait()?;
/// assert_eq!(seen.try_iter().collect::<Vec<i64>>(), [100, 200, i64::MAX]);
/// assert!(Watermark(100) < Watermark(200));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Watermark(pub i64);

/// A batch of records as it travels through a channel.
///
/// # Examples
/// A batch function ([`crate::Stream::map_batch`]) sees whole batches,
/// run with the shared [`crate::example`] helper:
/// ```
/// use lockgate::{example, Batch};
///
/// let sums = example::run(1..=100u64, |numbers| {
///     numbers.map_batch(|batch: &mut Batch<u64>, out: &mut Batch<u64>| out.push(batch.drain(..).sum()))
/// });
/// // the batches depend on timing, their total does not
/// assert!(!sums.is_empty() && sums.len() <= 100);
/// assert_eq!(sums.iter().sum::<u64>(), 5050);
/// ```
pub type Batch<T> = Vec<T>;

/// One element of a channel: a batch of records or an in-band event.
///
/// Events keep their place among the records: a barrier splits its channel's
/// stream into "before checkpoint n" and "after checkpoint n".
#[derive(Clone, Debug, PartialEq)]
pub enum StreamElement<T> {
    /// A batch of records, in order; never empty when sent by the runtime.
    Records(Batch<T>),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// Flink's `CancelCheckpointMarker`: an upstream task gave up checkpoint
    /// `id`, so downstream tasks must stop aligning for it.
    CancelCheckpoint(CheckpointId),
    /// The channel's producer ended: nothing follows on this channel.
    EndOfPartition,
    /// An event-time watermark.
    Watermark(Watermark),
    /// The channel's producer became idle (`true`: it emits no records for
    /// now, so it must not hold back the watermark of the consumer) or
    /// active again (`false`), as Flink's `WatermarkStatus` (IDLE/ACTIVE)
    /// that `withIdleness` sources emit.
    Idle(bool),
}

impl<T> StreamElement<T> {
    /// True for every element but `Records`.
    pub fn is_event(&self) -> bool {
        !matches!(self, StreamElement::Records(_))
    }
}

impl<T: RecordSize> StreamElement<T> {
    /// The bytes this element counts for in alignment buffering: the sum of
    /// its records' [`RecordSize::size_bytes`] for a batch, 0 for an event
    /// (as rule 7 of the scenario contract counts events).
    ///
    /// Cost: O(1) for records whose size is their type's size (the default),
    /// O(records) for records that override [`RecordSize::size_bytes`].
    #[inline]
    pub fn size_bytes(&self) -> usize {
        match self {
            StreamElement::Records(batch) => T::batch_size_bytes(batch),
            _ => 0,
        }
    }
}

/// The size in bytes a record counts for (in alignment buffering and in
/// metrics). The default is the record's in-memory size, `size_of::<T>()`;
/// records with heap payloads override [`RecordSize::size_bytes`] so that the
/// alignment limit and the blocker capacity see their real size.
///
/// A plain record type takes the default with `#[derive(RecordSize)]`
/// (no impl to write); one with heap payloads implements it by hand.
///
/// # Examples
/// ```
/// use lockgate::RecordSize;
/// #[derive(Clone, Debug, RecordSize, serde::Serialize, serde::Deserialize)]
/// struct Trade { symbol: u32, price: f64, qty: u64 }
/// assert_eq!(Trade { symbol: 1, price: 2.0, qty: 3 }.size_bytes(), std::mem::size_of::<Trade>());
///
/// #[derive(Clone, Copy, Debug, RecordSize)]
/// struct Pair<A: Copy, B: Copy>(A, B); // generics too
/// assert!(<Pair<u8, u64> as RecordSize>::FIXED_SIZE);
/// ```
pub trait RecordSize: Sized {
    /// True when every record counts `size_of::<Self>()` bytes, so that a
    /// batch's size is `len * size_of::<Self>()` without looking at records.
    /// Set it to `false` when overriding [`RecordSize::size_bytes`].
    const FIXED_SIZE: bool = true;

    /// The bytes this record counts for. Default: `size_of::<Self>()`.
    #[inline]
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
    }

    /// The bytes a batch counts for: `records × size_of::<Self>()` when
    /// [`RecordSize::FIXED_SIZE`], else the sum over the records.
    #[inline]
    fn batch_size_bytes(batch: &[Self]) -> usize {
        if Self::FIXED_SIZE {
            std::mem::size_of_val(batch)
        } else {
            batch.iter().map(Self::size_bytes).sum()
        }
    }
}

macro_rules! fixed_size_records {
    ($($t:ty),*) => { $(impl RecordSize for $t {})* };
}
fixed_size_records!(
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    bool,
    char,
    ()
);
impl<A: RecordSize, B: RecordSize> RecordSize for (A, B) {
    const FIXED_SIZE: bool = A::FIXED_SIZE && B::FIXED_SIZE;
    fn size_bytes(&self) -> usize {
        if Self::FIXED_SIZE {
            std::mem::size_of::<Self>()
        } else {
            self.0.size_bytes() + self.1.size_bytes()
        }
    }
}
impl<A: RecordSize, B: RecordSize, C: RecordSize> RecordSize for (A, B, C) {
    const FIXED_SIZE: bool = A::FIXED_SIZE && B::FIXED_SIZE && C::FIXED_SIZE;
    fn size_bytes(&self) -> usize {
        if Self::FIXED_SIZE {
            std::mem::size_of::<Self>()
        } else {
            self.0.size_bytes() + self.1.size_bytes() + self.2.size_bytes()
        }
    }
}
impl RecordSize for String {
    const FIXED_SIZE: bool = false;
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.len()
    }
}
impl<T: RecordSize> RecordSize for Vec<T> {
    const FIXED_SIZE: bool = false;
    fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + T::batch_size_bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Payload(Vec<u8>);
    impl RecordSize for Payload {
        const FIXED_SIZE: bool = false;
        fn size_bytes(&self) -> usize {
            self.0.len()
        }
    }

    #[test]
    fn batch_size_is_records_times_type_size_by_default() {
        let el: StreamElement<u64> = StreamElement::Records(vec![1, 2, 3]);
        assert_eq!(el.size_bytes(), 24);
        let el: StreamElement<(u64, u32)> = StreamElement::Records(vec![(1, 2); 5]);
        assert_eq!(el.size_bytes(), 5 * std::mem::size_of::<(u64, u32)>());
    }

    #[test]
    fn heap_records_report_their_own_size() {
        let el = StreamElement::Records(vec![Payload(vec![0; 100]), Payload(vec![0; 7])]);
        assert_eq!(el.size_bytes(), 107);
    }

    #[test]
    fn events_count_zero_bytes() {
        let b = CheckpointBarrier::new(CheckpointId(3), 17);
        assert_eq!(StreamElement::<u64>::Barrier(b).size_bytes(), 0);
        assert_eq!(StreamElement::<u64>::EndOfPartition.size_bytes(), 0);
        assert!(StreamElement::<u64>::CancelCheckpoint(CheckpointId(1)).is_event());
        assert!(!StreamElement::<u64>::Records(vec![]).is_event());
    }

    #[test]
    fn checkpoint_ids_order_and_serialize_as_numbers() {
        assert!(CheckpointId(2) > CheckpointId(1));
        assert_eq!(CheckpointId(4).next(), CheckpointId(5));
        assert_eq!(serde_json::to_string(&CheckpointId(9)).unwrap(), "9");
    }
}
