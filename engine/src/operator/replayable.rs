//! Replayable sources: the contract of a source that reads splits from
//! positions and can seek back to them (Flink's `SourceReader` with
//! splits), and [`Replayable`], which turns one into a [`Source`] with its
//! positions checkpointed by split.
//!
//! What a source writes ([`SplitSource`], [`SplitReader`]): the splits a
//! subtask reads, "open these splits at these positions", "read", and,
//! for each record, the split and position it leaves the reader at
//! ([`SplitOutput::emit`]). What [`Replayable`] does with it:
//! - the positions are the state, by split, taken at each checkpoint's
//!   barrier (so they match exactly the records before it);
//! - at every restart and restore the reader of the earlier attempt is
//!   closed (dropped) before a new one is opened at the restored
//!   positions, so nothing an earlier reader read can leak in;
//! - restored at another parallelism, each subtask takes the positions of
//!   the splits it reads now from every old subtask's state (as the Kafka
//!   source hands each partition to its new owner);
//! - the application reads the restored positions once
//!   [`crate::JobBuilder::start`] returned
//!   ([`crate::JobBuilder::restored_source`], [`RestoredSource`]);
//! - event time: the reader's own watermark, or a
//!   [`WatermarkStrategy`] given to [`Replayable::with_watermarks`]
//!   (one watermark over the subtask's splits, moved record by record,
//!   the batch ending where it moves).

use crate::operator::event_time::{EventTime, WatermarkStrategy};
use crate::operator::{Checkpointed, Source, SourcePoll};
use crate::transport::handoff::WakeOn;
use crate::types::element::{CheckpointId, Watermark};
use crate::types::error::BoxError;
use crate::types::key_groups::Rescale;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::{Arc, Mutex, PoisonError};

/// The position of each split, sorted by split.
pub type SplitPositions<S> = Vec<(<S as SplitSource>::Split, <S as SplitSource>::Position)>;

/// A source that reads splits from positions it can seek back to (a file
/// from a row, a partition from an offset, a feed from a sequence number),
/// as one subtask sees it; [`Replayable`] makes it a [`Source`].
///
/// # Examples
/// A feed regenerable from a sequence number, in two splits (a full
/// example with a TCP feed: `examples/src/trades/`):
/// ```
/// use lockgate::source::{Replayable, SplitOutput, SplitReader, SplitSource};
/// use lockgate::{BoxError, JobBuilder, JobConfig, SourcePoll};
///
/// /// Split `s` holds the numbers `s, s + 2, s + 4, ...` below 100.
/// struct Numbers { subtask: usize, parallelism: usize }
/// struct Reader { at: Vec<(u32, u64)> } // per split: the next number
///
/// impl SplitSource for Numbers {
///     type Record = u64;
///     type Split = u32;
///     type Position = u64; // the next number of the split
///     type Reader = Reader;
///     fn splits(&self) -> Vec<u32> {
///         (0..2).filter(|s| *s as usize % self.parallelism == self.subtask).collect()
///     }
///     fn open(&mut self, splits: &[(u32, Option<u64>)]) -> Result<Reader, BoxError> {
///         Ok(Reader { at: splits.iter().map(|(s, p)| (*s, p.unwrap_or(u64::from(*s)))).collect() })
///     }
/// }
///
/// impl SplitReader<Numbers> for Reader {
///     fn read(&mut self, out: &mut SplitOutput<'_, Numbers>) -> Result<SourcePoll, BoxError> {
///         for (split, next) in &mut self.at {
///             while *next < 100 && !out.is_full() {
///                 out.emit(*next, split, *next + 2); // the record, where it leaves the split
///                 *next += 2;
///             }
///         }
///         let done = self.at.iter().all(|(_, n)| *n >= 100);
///         Ok(if done { SourcePoll::Finished } else { SourcePoll::Ready })
///     }
/// }
///
/// let job = JobBuilder::new("numbers", JobConfig::default());
/// let out = job
///     .source("numbers", 2, |info| Replayable::new(Numbers { subtask: info.index, parallelism: info.parallelism }))
///     .collect();
/// job.start().unwrap().wait().unwrap();
/// let mut got: Vec<u64> = out.try_iter().collect();
/// got.sort_unstable();
/// assert_eq!(got, (0..100).collect::<Vec<_>>());
/// ```
pub trait SplitSource: Send + 'static {
    /// What the source emits.
    type Record: Send;
    /// A split's id (a partition number, a file, a feed channel).
    type Split: Clone + Ord + std::fmt::Debug + Serialize + DeserializeOwned + Send + 'static;
    /// Where a split is read from next (an offset, a row, a sequence
    /// number).
    type Position: Clone + std::fmt::Debug + Serialize + DeserializeOwned + Send + 'static;
    /// The reader of an open source.
    type Reader: SplitReader<Self>;

    /// The splits this subtask reads (the same ones on every call; after
    /// a rescale, those it owns at its new parallelism).
    fn splits(&self) -> Vec<Self::Split>;

    /// Opens a reader on `splits`, each at its position (`None`: from
    /// its beginning). Called before the first read of each attempt; the
    /// reader of an earlier attempt has been dropped (closed) first.
    ///
    /// # Errors
    /// Any error fails the task (a [`crate::error::FatalError`] without restart).
    fn open(
        &mut self,
        splits: &[(Self::Split, Option<Self::Position>)],
    ) -> Result<Self::Reader, BoxError>;

    /// The checkpointed bytes of the positions (sorted by split). Default:
    /// postcard of `Vec<(Split, Position)>`. Override to keep a format of
    /// an earlier version.
    ///
    /// # Errors
    /// When they cannot be encoded.
    fn encode_positions(positions: &[(Self::Split, Self::Position)]) -> Result<Vec<u8>, BoxError> {
        Ok(postcard::to_allocvec(positions)?)
    }

    /// The positions from [`SplitSource::encode_positions`]'s bytes.
    ///
    /// # Errors
    /// When the bytes do not decode.
    fn decode_positions(bytes: &[u8]) -> Result<SplitPositions<Self>, BoxError> {
        postcard::from_bytes(bytes)
            .map_err(|e| format!("the source's positions do not decode: {e}").into())
    }
}

/// The reader of an open [`SplitSource`]: reads its splits, telling each
/// record's split and position. Dropping it closes it (a connection, a
/// file, a thread it started: stop them in `Drop`).
pub trait SplitReader<S: SplitSource + ?Sized>: Send {
    /// Reads records into `out` until it [`is_full`](SplitOutput::is_full)
    /// or nothing is available now, as [`Source::poll`]: `Ready`, `Idle`
    /// (nothing now; wake at a time, or on what
    /// [`SplitReader::wake_on`] names) or `Finished` (every split read to
    /// its end).
    ///
    /// # Errors
    /// Any error fails the task.
    fn read(&mut self, out: &mut SplitOutput<'_, S>) -> Result<SourcePoll, BoxError>;

    /// The reader's own event-time watermark (e.g. per split, the
    /// smallest), used when the [`Replayable`] has no
    /// [`WatermarkStrategy`]. Default: none.
    fn current_watermark(&self) -> Option<Watermark> {
        None
    }

    /// True while every split is idle (see [`Source::is_idle`]).
    fn is_idle(&self) -> bool {
        false
    }

    /// What wakes a waiting reader (see [`Source::wake_on`]).
    fn wake_on<'a>(&'a self, on: &mut WakeOn<'a>) {
        let _ = on;
    }

    /// Checkpoint `id` completed with these positions (e.g. commit them
    /// where a monitor reads them). Default: nothing.
    ///
    /// # Errors
    /// Any error fails the task.
    fn checkpoint_complete(
        &mut self,
        id: CheckpointId,
        positions: &[(S::Split, S::Position)],
    ) -> Result<(), BoxError> {
        let _ = (id, positions);
        Ok(())
    }
}

/// Where a [`SplitReader`] puts records and their positions.
pub struct SplitOutput<'a, S: SplitSource + ?Sized> {
    out: &'a mut Vec<S::Record>,
    room: usize,
    positions: &'a mut Vec<(S::Split, S::Position)>,
    event_time: Option<(&'a WatermarkStrategy<S::Record>, &'a mut EventTime)>,
    w0: Option<i64>,
    moved: bool,
}

impl<S: SplitSource + ?Sized> std::fmt::Debug for SplitOutput<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitOutput")
            .field("emitted", &self.out.len())
            .field("room", &self.room)
            .finish_non_exhaustive()
    }
}

impl<S: SplitSource + ?Sized> SplitOutput<'_, S> {
    /// Emits `record`, read from `split`, which the reader now reads from
    /// `position` on (the position to seek to so as to read what follows
    /// it: an offset + 1, the next sequence number).
    pub fn emit(&mut self, record: S::Record, split: &S::Split, position: S::Position) {
        if let Some((strategy, et)) = &mut self.event_time {
            if let Some(ts) = strategy.timestamp_of(&record) {
                et.observe(ts);
                self.moved = et.current() > self.w0;
            }
        }
        self.out.push(record);
        self.room = self.room.saturating_sub(1);
        self.advance(split, position);
    }

    /// Moves `split` to `position` without a record (rows skipped, a
    /// transaction marker, the end of a split).
    pub fn advance(&mut self, split: &S::Split, position: S::Position) {
        // Readers emit from one split in runs: the last one first.
        match self.positions.last_mut() {
            Some((s, p)) if s == split => *p = position,
            _ => match self.positions.binary_search_by(|(s, _)| s.cmp(split)) {
                Ok(i) => self.positions[i].1 = position,
                Err(i) => self.positions.insert(i, (split.clone(), position)),
            },
        }
    }

    /// True when the reader should stop for now: the batch is full, or
    /// the last record moved the watermark (it must follow that record).
    pub fn is_full(&self) -> bool {
        self.room == 0 || self.moved
    }

    /// Records emitted into this batch so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// True when nothing was emitted into this batch yet.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

/// A [`SplitSource`] as a [`Source`]: positions by split are its state
/// (see the module docs). Make one per subtask in the factory of
/// [`crate::JobBuilder::source`].
pub struct Replayable<S: SplitSource> {
    source: S,
    reader: Option<S::Reader>,
    /// The position of every split read or restored, sorted by split.
    positions: Vec<(S::Split, S::Position)>,
    /// Positions of the checkpoints taken and not yet completed.
    pending: Vec<(CheckpointId, SplitPositions<S>)>,
    event_time: Option<(WatermarkStrategy<S::Record>, EventTime)>,
    last_active_ns: u64,
    finished: bool,
}

impl<S: SplitSource> std::fmt::Debug for Replayable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayable")
            .field("positions", &self.positions)
            .field("open", &self.reader.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: SplitSource> Replayable<S> {
    /// The source of `source`'s splits, from their beginnings (or from
    /// the restored positions).
    pub fn new(source: S) -> Self {
        Replayable {
            source,
            reader: None,
            positions: Vec::new(),
            pending: Vec::new(),
            event_time: None,
            last_active_ns: crate::util::clock::now_ns(),
            finished: false,
        }
    }

    /// Generates watermarks as `strategy` says, over every record of the
    /// subtask's splits (instead of the reader's own).
    pub fn with_watermarks(mut self, strategy: WatermarkStrategy<S::Record>) -> Self {
        let et = EventTime::new(strategy.out_of_orderness());
        self.event_time = Some((strategy, et));
        self
    }

    /// The split source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The reader, while open.
    pub fn reader(&self) -> Option<&S::Reader> {
        self.reader.as_ref()
    }

    /// The position of every split read or restored so far, by split.
    pub fn positions(&self) -> &[(S::Split, S::Position)] {
        &self.positions
    }

    /// Keeps the restored `positions` of the splits this subtask reads,
    /// closing the reader first.
    fn seek(&mut self, positions: Vec<(S::Split, S::Position)>) {
        // The old reader is closed before anything else (so nothing it
        // read can come after the seek).
        self.reader = None;
        let mine = self.source.splits();
        let mut kept: Vec<(S::Split, S::Position)> = positions
            .into_iter()
            .filter(|(s, _)| mine.contains(s))
            .collect();
        kept.sort_by(|a, b| a.0.cmp(&b.0));
        kept.dedup_by(|a, b| a.0 == b.0);
        self.positions = kept;
        self.pending.clear();
        self.finished = false;
        if let Some((strategy, et)) = &mut self.event_time {
            *et = EventTime::new(strategy.out_of_orderness());
        }
    }

    fn quiet_ns(&self) -> Option<u64> {
        self.event_time
            .as_ref()
            .and_then(|(s, _)| s.idleness())
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl<S: SplitSource> Source<S::Record> for Replayable<S> {
    fn poll(&mut self, out: &mut Vec<S::Record>, max: usize) -> Result<SourcePoll, BoxError> {
        if self.finished {
            return Ok(SourcePoll::Finished);
        }
        if self.reader.is_none() {
            let splits: Vec<(S::Split, Option<S::Position>)> = self
                .source
                .splits()
                .into_iter()
                .map(|s| {
                    let at = self
                        .positions
                        .iter()
                        .find(|(p, _)| *p == s)
                        .map(|(_, at)| at.clone());
                    (s, at)
                })
                .collect();
            self.reader = Some(self.source.open(&splits)?);
        }
        let Some(reader) = self.reader.as_mut() else {
            return Err("the split reader is not open".into());
        };
        let start = out.len();
        let w0 = self.event_time.as_ref().and_then(|(_, et)| et.current());
        let mut output = SplitOutput {
            out,
            room: max,
            positions: &mut self.positions,
            event_time: self.event_time.as_mut().map(|(s, et)| (&*s, et)),
            w0,
            moved: false,
        };
        let poll = reader.read(&mut output)?;
        let emitted = out.len() > start;
        if emitted {
            self.last_active_ns = crate::util::clock::now_ns();
        }
        Ok(match poll {
            SourcePoll::Finished => {
                self.finished = true;
                SourcePoll::Finished
            }
            SourcePoll::Idle { wake_at_ns } => {
                let quiet = self
                    .quiet_ns()
                    .map(|q| self.last_active_ns.saturating_add(q))
                    .filter(|at| *at > crate::util::clock::now_ns());
                SourcePoll::Idle {
                    wake_at_ns: match (wake_at_ns, quiet) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                }
            }
            SourcePoll::Ready => SourcePoll::Ready,
        })
    }

    fn wake_on<'a>(&'a self, on: &mut WakeOn<'a>) {
        if let Some(r) = &self.reader {
            r.wake_on(on);
        }
    }

    fn current_watermark(&self) -> Option<Watermark> {
        match &self.event_time {
            Some((_, et)) => et.current().map(Watermark),
            None => self
                .reader
                .as_ref()
                .and_then(SplitReader::current_watermark),
        }
    }

    fn is_idle(&self) -> bool {
        match self.quiet_ns() {
            Some(q) => crate::util::clock::now_ns().saturating_sub(self.last_active_ns) >= q,
            None => self.reader.as_ref().is_some_and(SplitReader::is_idle),
        }
    }
}

impl<S: SplitSource> Checkpointed for Replayable<S> {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let bytes = S::encode_positions(&self.positions)?;
        self.pending.push((id, self.positions.clone()));
        Ok(Some(bytes))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let positions = S::decode_positions(state)?;
        self.seek(positions);
        Ok(())
    }

    /// Every split goes, with its position, to the subtask that reads it
    /// now ([`SplitSource::splits`]).
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        _rescale: &Rescale,
    ) -> Result<(), BoxError> {
        let mut all = Vec::new();
        for chain in chains {
            if let Some(last) = chain.last() {
                all.extend(S::decode_positions(last)?);
            }
        }
        self.seek(all);
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        let Some(i) = self.pending.iter().rposition(|(c, _)| *c <= id) else {
            return Ok(());
        };
        let positions = self
            .pending
            .drain(..=i)
            .next_back()
            .map(|(_, p)| p)
            .unwrap_or_default();
        match self.reader.as_mut() {
            Some(r) => r.checkpoint_complete(id, &positions),
            None => Ok(()),
        }
    }

    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.pending.retain(|(c, _)| *c != id);
        Ok(())
    }
}

/// The checkpoint restored and each old subtask's state.
type RestoredStates = (CheckpointId, Vec<Option<Vec<u8>>>);

/// What a job restores for one source at start
/// ([`crate::JobBuilder::restored_source`]): set before
/// [`crate::JobBuilder::start`] returns, empty for a fresh start.
#[derive(Clone, Default)]
pub struct RestoredSource {
    inner: Arc<Mutex<Option<RestoredStates>>>,
}

impl std::fmt::Debug for RestoredSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoredSource")
            .field("checkpoint", &self.checkpoint())
            .finish_non_exhaustive()
    }
}

impl RestoredSource {
    pub(crate) fn set(&self, id: CheckpointId, states: Vec<Option<Vec<u8>>>) {
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner) = Some((id, states));
    }

    /// The checkpoint restored (`None`: the job started fresh).
    pub fn checkpoint(&self) -> Option<CheckpointId> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(id, _)| *id)
    }

    /// The source's state of each subtask of the checkpoint (at its
    /// parallelism then; `None` where a subtask stored none), as the
    /// source's `snapshot_state` returned it.
    pub fn states(&self) -> Vec<Option<Vec<u8>>> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }

    /// The positions of a [`Replayable`] source, every old subtask's,
    /// sorted by split (empty for a fresh start).
    ///
    /// # Errors
    /// When a state does not decode as `S`'s positions.
    pub fn positions<S: SplitSource>(&self) -> Result<SplitPositions<S>, BoxError> {
        let mut all = Vec::new();
        for bytes in self.states().into_iter().flatten() {
            all.extend(S::decode_positions(&bytes)?);
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }
}
