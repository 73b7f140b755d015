//! The user-facing operator contracts: [`Source`], [`Operator`] and
//! [`Sink`], with their state snapshot hooks.
//!
//! Operators work on batches: `process` is called with a batch of input
//! records (one channel element, up to the job's batch size) and appends its
//! output to `out`. A stateful operator returns its state from
//! `snapshot_state` when a checkpoint triggers (a synchronous copy on the
//! task thread: keep it cheap) and gets it back in `restore_state` before it
//! sees any record after a restart.

use crate::types::element::{CheckpointId, Watermark};
use crate::types::error::BoxError;
use crate::types::key_groups::Rescale;
use serde::{Deserialize, Serialize};

/// What takes part in checkpoints, in one place for sources, operators and
/// sinks: taking and restoring a snapshot of the state (Flink's
/// `CheckpointedFunction`) and hearing that a checkpoint completed or was
/// aborted (Flink's `CheckpointListener`). It is a supertrait of
/// [`Source`], [`Operator`] and [`Sink`], so none can forget its state: a
/// stateless one says so with an empty `impl Checkpointed for X {}` (every
/// hook defaults to nothing), a stateful one overrides the hooks it needs.
///
/// All four run on the task thread. `snapshot_state` runs between two
/// batches, after every record before the checkpoint's barrier and before
/// any record after it (a synchronous copy: keep it cheap); the runtime
/// stores the bytes as they are.
///
/// # Examples
/// A source whose state is its position: a restore rewinds a fresh one
/// (driven by hand; [`Operator`]'s example shows an operator's state).
/// ```
/// use lockgate::{BoxError, CheckpointId, Checkpointed, Source, SourcePoll};
///
/// /// Emits 0 to 9, three a poll.
/// #[derive(Default)]
/// struct Digits {
///     next: u64,
///     completed: Vec<CheckpointId>,
/// }
/// impl Source<u64> for Digits {
///     fn poll(&mut self, out: &mut Vec<u64>, _max: usize) -> Result<SourcePoll, BoxError> {
///         let end = (self.next + 3).min(10);
///         out.extend(self.next..end);
///         self.next = end;
///         Ok(if end == 10 { SourcePoll::Finished } else { SourcePoll::Ready })
///     }
/// }
/// impl Checkpointed for Digits {
///     fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
///         Ok(Some(self.next.to_le_bytes().to_vec()))
///     }
///     fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
///         self.next = u64::from_le_bytes(state.try_into()?);
///         Ok(())
///     }
///     fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
///         self.completed.push(id);
///         Ok(())
///     }
/// }
///
/// let mut digits = Digits::default();
/// let mut out = Vec::new();
/// digits.poll(&mut out, 100)?;
/// let state = digits.snapshot_state(CheckpointId(1))?.expect("a position");
/// digits.notify_checkpoint_complete(CheckpointId(1))?;
/// assert_eq!(digits.completed, [CheckpointId(1)]);
/// digits.poll(&mut out, 100)?;
/// assert_eq!(out, [0, 1, 2, 3, 4, 5]);
///
/// let mut restored = Digits::default();
/// restored.restore_state(&state)?;
/// out.clear();
/// restored.poll(&mut out, 100)?;
/// assert_eq!(out, [3, 4, 5]); // again from checkpoint 1's position
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub trait Checkpointed {
    /// Returns the state for checkpoint `id`, serialized. `None`: nothing
    /// to store this time (default).
    ///
    /// # Errors
    /// Any error declines the checkpoint and fails the task.
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(None)
    }

    /// The snapshot for checkpoint `id` in two parts, as Flink's snapshot
    /// strategies split it: what this call does is the synchronous part
    /// (records wait meanwhile: copy, do not encode), the returned
    /// [`StateSnapshot`]'s work is the asynchronous part, run on the task's
    /// snapshot thread while the task processes records again (on
    /// cooperative workers, [`JobConfig::workers`](crate::JobConfig::workers),
    /// on the worker itself, in its idle time: the work is cut into slices
    /// of ~50 µs at its [`yield_point`](crate::tuning::yield_point)s, and
    /// work with none runs whole, holding the worker's other tasks
    /// meanwhile). Default: the bytes of [`Checkpointed::snapshot_state`],
    /// taken synchronously. Override it when encoding the state costs more
    /// than copying it.
    ///
    /// # Errors
    /// Any error declines the checkpoint and fails the task (an error of
    /// the asynchronous part does the same, on the snapshot thread).
    fn snapshot_state_async(
        &mut self,
        id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        Ok(self.snapshot_state(id)?.map(StateSnapshot::ready))
    }

    /// Restores the state returned by an earlier
    /// [`Checkpointed::snapshot_state`], before any record is processed
    /// after a restart or a restore.
    ///
    /// # Errors
    /// When the bytes cannot be decoded: the job then fails to restore.
    fn restore_state(&mut self, _state: &[u8]) -> Result<(), BoxError> {
        Ok(())
    }

    /// Restores the state of an incremental checkpoint: `chain` holds
    /// this operator's bytes of every checkpoint from the last full one to
    /// the restored one, oldest first (one element unless its snapshots
    /// were deltas, see [`EncodedState::delta`]). Default: restores the
    /// newest bytes with [`Checkpointed::restore_state`], right for an
    /// operator whose snapshots are all full.
    ///
    /// # Errors
    /// When the bytes cannot be decoded: the job then fails to restore.
    fn restore_state_chain(&mut self, chain: &[&[u8]]) -> Result<(), BoxError> {
        match chain.last() {
            Some(last) => self.restore_state(last),
            None => Ok(()),
        }
    }

    /// Restores state taken at another parallelism (a rescale, as
    /// Flink's state redistribution on restore): `chains[j]` holds what
    /// old subtask `j` of `rescale.old_parallelism` stored for this
    /// operator (each chain oldest first, as in
    /// [`Checkpointed::restore_state_chain`]; empty where that subtask
    /// stored nothing), and the operator keeps what this subtask owns now:
    /// the key groups of [`Rescale::key_groups`] for keyed state, a share
    /// of a list, or the whole of a union. Called instead of
    /// `restore_state_chain`, before any record. Default: refused with a
    /// [`crate::error::FatalError`] (an operator whose state has no
    /// redistribution rule cannot be rescaled, and a restart would not
    /// change that); [`crate::Managed`] state implements it.
    ///
    /// # Errors
    /// When the state cannot be redistributed or does not decode: the job
    /// then fails to restore, naming the operator.
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        let _ = chains;
        Err(Box::new(crate::types::error::FatalError(format!(
            "it declares no rule to redistribute its state from parallelism {} to {} (implement Checkpointed::restore_rescaled, or keep the state in managed state such as KeyedState)",
            rescale.old_parallelism, rescale.parallelism
        ))))
    }

    /// Checkpoint `id` completed on every task (two-phase-commit sinks
    /// commit here, as Flink's `notifyCheckpointComplete`; sources may
    /// drop what that checkpoint no longer needs).
    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> Result<(), BoxError> {
        Ok(())
    }

    /// Checkpoint `id` was aborted (two-phase-commit sinks abort its
    /// pending transaction here).
    fn notify_checkpoint_aborted(&mut self, _id: CheckpointId) -> Result<(), BoxError> {
        Ok(())
    }
}

/// The snapshot of one operator for one checkpoint, as returned by
/// [`Checkpointed::snapshot_state_async`]: bytes taken already, or the
/// asynchronous part still to run (a closure over a copy of the state, or
/// over the changes since the last snapshot, run once on the task's
/// snapshot thread, never on the task thread).
///
/// # Examples
/// ```
/// use lockgate::{CheckpointId, state::SnapshotRequest, state::StateSnapshot};
/// let state = vec![1u64, 2, 3];
/// let copy = state.clone(); // the synchronous part: a copy
/// let snap = StateSnapshot::deferred(move || Ok(postcard::to_allocvec(&copy)?));
/// let req = SnapshotRequest::full(CheckpointId(1));
/// let done = snap.run(&req).unwrap(); // the asynchronous part: the encoding
/// assert!(!done.delta);
/// assert_eq!(postcard::from_bytes::<Vec<u64>>(&done.bytes).unwrap(), state);
/// assert_eq!(StateSnapshot::ready(vec![7]).run(&req).unwrap().bytes, [7]);
/// ```
pub struct StateSnapshot(SnapshotWork);

type Incremental = Box<dyn FnOnce(&SnapshotRequest) -> Result<EncodedState, BoxError> + Send>;

enum SnapshotWork {
    Ready(Vec<u8>),
    Deferred(Box<dyn FnOnce() -> Result<Vec<u8>, BoxError> + Send>),
    Incremental(Incremental),
}

/// What the snapshot thread asks of an incremental snapshot
/// ([`StateSnapshot::incremental`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The checkpoint.
    pub id: CheckpointId,
    /// `Some(c)`: the bytes may hold only the changes since the state of
    /// completed checkpoint `c` (this subtask's part of `c` is kept while
    /// this one may need it); `None`: a full snapshot is required.
    pub base: Option<CheckpointId>,
    /// For a state that rewrites itself piece by piece inside its deltas
    /// ([`EncodedState::chain_from`]): every piece is rewritten at least
    /// once every this many checkpoints (at least 1). The engine derives it
    /// from [`crate::CheckpointConfig::full_min_interval`] and the interval.
    pub spread: u32,
}

impl SnapshotRequest {
    /// The spread of [`SnapshotRequest::full`] and [`SnapshotRequest::delta`]:
    /// 2 s at a 10 ms interval, the engine's default.
    pub const DEFAULT_SPREAD: u32 = 200;

    /// A request for a full snapshot of checkpoint `id`.
    pub fn full(id: CheckpointId) -> Self {
        SnapshotRequest {
            id,
            base: None,
            spread: Self::DEFAULT_SPREAD,
        }
    }

    /// A request for checkpoint `id` that may hold only the changes since
    /// completed checkpoint `base`.
    pub fn delta(id: CheckpointId, base: CheckpointId) -> Self {
        SnapshotRequest {
            id,
            base: Some(base),
            spread: Self::DEFAULT_SPREAD,
        }
    }
}

/// The result of a snapshot's asynchronous part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedState {
    /// The encoded state (or changes).
    pub bytes: Vec<u8>,
    /// True when `bytes` hold only changes since the request's base; the
    /// operator's restore then gets the whole chain
    /// ([`Checkpointed::restore_state_chain`]).
    pub delta: bool,
    /// The exact size of a full encoding of the state, bytes (equal to
    /// `bytes.len()` when not a delta).
    pub full_bytes: u64,
    /// For a delta: `Some(c)` when a restore needs only the chain's parts
    /// from checkpoint `c` on (this one included), because every piece of
    /// the state older parts held was rewritten since (a rolling rewrite,
    /// as [`KeyedState`](crate::KeyedState)'s deltas do key group by key
    /// group); the engine then drops the older parts from the chain, so
    /// that no checkpoint ever writes the whole state at once. `None`: the
    /// whole chain back to its full part. Ignored for a full part.
    pub chain_from: Option<CheckpointId>,
}

impl EncodedState {
    /// A full snapshot's bytes.
    pub fn full(bytes: Vec<u8>) -> Self {
        EncodedState {
            full_bytes: bytes.len() as u64,
            bytes,
            delta: false,
            chain_from: None,
        }
    }

    /// A delta's bytes (changes since the request's base) for a state whose
    /// full encoding takes `full_bytes`; a restore needs the whole chain.
    pub fn delta(bytes: Vec<u8>, full_bytes: u64) -> Self {
        EncodedState {
            bytes,
            delta: true,
            full_bytes,
            chain_from: None,
        }
    }

    /// A rolling delta's bytes: as [`EncodedState::delta`], but a restore
    /// needs only the chain's parts from checkpoint `from` on.
    pub fn rolling(bytes: Vec<u8>, full_bytes: u64, from: CheckpointId) -> Self {
        EncodedState {
            chain_from: Some(from),
            ..Self::delta(bytes, full_bytes)
        }
    }
}

impl StateSnapshot {
    /// Bytes taken synchronously (a full snapshot).
    pub fn ready(bytes: Vec<u8>) -> Self {
        StateSnapshot(SnapshotWork::Ready(bytes))
    }

    /// A full snapshot whose bytes `encode` makes later, on the snapshot
    /// thread. `encode` must own what it encodes (a copy taken now): the
    /// operator goes on changing its state meanwhile.
    pub fn deferred(encode: impl FnOnce() -> Result<Vec<u8>, BoxError> + Send + 'static) -> Self {
        StateSnapshot(SnapshotWork::Deferred(Box::new(encode)))
    }

    /// A snapshot that may hold only the changes since the request's base
    /// (an incremental checkpoint); `encode` decides, as
    /// [`KeyedState::snapshot_async`](crate::KeyedState::snapshot_async)
    /// does.
    pub fn incremental(
        encode: impl FnOnce(&SnapshotRequest) -> Result<EncodedState, BoxError> + Send + 'static,
    ) -> Self {
        StateSnapshot(SnapshotWork::Incremental(Box::new(encode)))
    }

    /// Runs the asynchronous part (nothing for [`StateSnapshot::ready`]).
    ///
    /// # Errors
    /// The error of the deferred encoding.
    pub fn run(self, req: &SnapshotRequest) -> Result<EncodedState, BoxError> {
        match self.0 {
            SnapshotWork::Ready(b) => Ok(EncodedState::full(b)),
            SnapshotWork::Deferred(f) => f().map(EncodedState::full),
            SnapshotWork::Incremental(f) => f(req),
        }
    }
}

impl std::fmt::Debug for StateSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            SnapshotWork::Ready(b) => write!(f, "StateSnapshot::ready({} bytes)", b.len()),
            SnapshotWork::Deferred(_) => f.write_str("StateSnapshot::deferred(..)"),
            SnapshotWork::Incremental(_) => f.write_str("StateSnapshot::incremental(..)"),
        }
    }
}

/// Tells `c` that checkpoint `id` completed (`true`) or was aborted;
/// on error, the call that failed and its error.
pub(crate) fn notify(
    c: &mut dyn Checkpointed,
    id: CheckpointId,
    completed: bool,
) -> Result<(), (&'static str, BoxError)> {
    if completed {
        c.notify_checkpoint_complete(id)
            .map_err(|e| ("notify_checkpoint_complete", e))
    } else {
        c.notify_checkpoint_aborted(id)
            .map_err(|e| ("notify_checkpoint_aborted", e))
    }
}

/// An operator with one input (or two, through [`Either`]): the unit of a
/// task's operator chain.
///
/// # Examples
/// A stateful operator: a count per key, snapshotted for checkpoints and
/// emitted at the end of the input.
/// ```
/// use lockgate::{BoxError, CheckpointId, Checkpointed, Context, KeyedState, Operator};
///
/// #[derive(Default)]
/// struct CountPerKey(KeyedState<char, u64>);
///
/// impl Operator<char, (char, u64)> for CountPerKey {
///     fn process(&mut self, input: &mut Vec<char>, _ctx: &mut Context<'_, (char, u64)>) -> Result<(), BoxError> {
///         for c in input.drain(..) {
///             *self.0.get_or_default(c) += 1;
///         }
///         Ok(())
///     }
///     fn end_of_input(&mut self, ctx: &mut Context<'_, (char, u64)>) -> Result<(), BoxError> {
///         ctx.output().extend(self.0.iter().map(|(c, n)| (*c, *n)));
///         Ok(())
///     }
/// }
///
/// impl Checkpointed for CountPerKey {
///     fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
///         Ok(Some(self.0.snapshot()?))
///     }
///     fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
///         self.0 = KeyedState::restore(state)?;
///         Ok(())
///     }
/// }
///
/// // Driven by hand here; in a job the task calls it.
/// let mut op = CountPerKey::default();
/// let (mut out, mut timer) = (Vec::new(), None);
/// op.process(&mut vec!['a', 'b', 'a'], &mut Context::new(&mut out, None, &mut timer)).unwrap();
/// let snapshot = op.snapshot_state(CheckpointId(1)).unwrap().unwrap();
/// let mut restored = CountPerKey::default();
/// restored.restore_state(&snapshot).unwrap();
/// restored.end_of_input(&mut Context::new(&mut out, None, &mut timer)).unwrap();
/// out.sort();
/// assert_eq!(out, [('a', 2), ('b', 1)]);
/// ```
pub trait Operator<I, O>: Checkpointed + Send {
    /// Processes a batch of records, emitting results through `ctx`.
    /// `input` is the whole batch; the operator may drain it (what is left
    /// is dropped).
    ///
    /// # Errors
    /// Any error fails the task and the job (and triggers a restart when a
    /// restart strategy is set).
    fn process(&mut self, input: &mut Vec<I>, ctx: &mut Context<'_, O>) -> Result<(), BoxError>;

    /// Called once before the first record of a run attempt, after the
    /// state was restored (Flink's `open`): e.g. ask for the processing-time
    /// timer a restored timer service needs. Default: nothing.
    fn open(&mut self, _ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        Ok(())
    }

    /// Called when the task's event-time watermark advances (it is
    /// [`Context::current_watermark`] already). Default: nothing to do (the
    /// runtime forwards the watermark downstream itself).
    fn on_watermark(
        &mut self,
        _watermark: Watermark,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// Processing time reached `now_ns`, at or after the time asked for
    /// with [`Context::set_processing_timer`] (that request is cleared
    /// first: ask again for a later one).
    fn on_processing_time(
        &mut self,
        _now_ns: u64,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// All inputs ended: emit what is left (e.g. open windows).
    fn end_of_input(&mut self, _ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        Ok(())
    }
}

/// What an [`Operator`] call can reach: its output (and side output, see
/// [`Context::emit_side`]), the task's event-time
/// watermark, and its processing-time timer. One value carries every
/// capability, so a new one is a method here, not a new trait method (as
/// Flink's `ProcessFunction.Context`).
///
/// # Examples
/// ```
/// use lockgate::{BoxError, Checkpointed, Context, Operator};
///
/// /// Passes records on and asks to be woken 1 ms after the last one.
/// struct Debounce;
/// impl Operator<u32, u32> for Debounce {
///     fn process(&mut self, input: &mut Vec<u32>, ctx: &mut Context<'_, u32>) -> Result<(), BoxError> {
///         ctx.output().append(input);
///         ctx.set_processing_timer(Some(lockgate::tuning::now_ns() + 1_000_000));
///         Ok(())
///     }
/// }
///
/// impl Checkpointed for Debounce {}
///
/// let (mut out, mut timer) = (Vec::new(), None);
/// let mut ctx = Context::new(&mut out, None, &mut timer);
/// Debounce.process(&mut vec![1, 2], &mut ctx).unwrap();
/// assert!(ctx.processing_timer().is_some());
/// assert_eq!(out, [1, 2]);
/// ```
pub struct Context<'a, O> {
    out: &'a mut Vec<O>,
    watermark: Option<Watermark>,
    timer: &'a mut Option<u64>,
}

impl<O> std::fmt::Debug for Context<'_, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("emitted", &self.out.len())
            .field("watermark", &self.watermark)
            .field("timer", &self.timer)
            .finish()
    }
}

impl<'a, O> Context<'a, O> {
    /// A context over `out` (where emitted records go), the task's
    /// `watermark` and the operator's pending `timer` (ns on
    /// [`crate::tuning::now_ns`]'s clock). The runtime makes one per call; tests
    /// and benchmarks drive operators by hand with it.
    pub fn new(
        out: &'a mut Vec<O>,
        watermark: Option<Watermark>,
        timer: &'a mut Option<u64>,
    ) -> Self {
        Context {
            out,
            watermark,
            timer,
        }
    }

    /// Emits one record downstream (after the operator's call returns, in
    /// order).
    #[inline]
    pub fn emit(&mut self, record: O) {
        self.out.push(record);
    }

    /// The batch being emitted, to extend, append to or swap with.
    #[inline]
    pub fn output(&mut self) -> &mut Vec<O> {
        self.out
    }

    /// The task's event-time watermark (`None` before the first one).
    pub fn current_watermark(&self) -> Option<Watermark> {
        self.watermark
    }

    /// Asks for [`Operator::on_processing_time`] at (or soon after)
    /// `at_ns`, ns on [`crate::tuning::now_ns`]'s clock, replacing an earlier
    /// request; `None` cancels it. The task wakes for it even without
    /// input. One request per operator: an operator with many timers keeps
    /// them itself and asks for its earliest.
    pub fn set_processing_timer(&mut self, at_ns: Option<u64>) {
        *self.timer = at_ns;
    }

    /// The processing-time timer asked for, if any.
    pub fn processing_timer(&self) -> Option<u64> {
        *self.timer
    }
}

/// Side outputs: an operator whose output is [`Either`]`<O, S>` emits
/// its main records as `Left` and its side records (late records,
/// rejects, alerts) as `Right`; [`crate::Stream::split_either`] turns the
/// stream into the two typed streams, in the same task (Flink's
/// `OutputTag` side outputs, without a second channel).
///
/// # Examples
/// ```
/// use lockgate::{BoxError, Checkpointed, Context, Either, JobBuilder, JobConfig, Operator};
///
/// /// Passes even numbers on, sends odd ones to the side.
/// struct Evens;
/// impl Operator<u32, Either<u32, u32>> for Evens {
///     fn process(&mut self, input: &mut Vec<u32>, ctx: &mut Context<'_, Either<u32, u32>>) -> Result<(), BoxError> {
///         for x in input.drain(..) {
///             if x % 2 == 0 { ctx.emit_main(x) } else { ctx.emit_side(x) }
///         }
///         Ok(())
///     }
/// }
///
/// impl Checkpointed for Evens {}
///
/// let job = JobBuilder::new("side", JobConfig::default());
/// let (input, ingest) = job.ingest::<u32>("input", 8);
/// let (evens, odds) = input.process("evens", |_| Evens).split_either();
/// let (evens, odds) = (evens.collect(), odds.collect());
/// let handle = job.start().unwrap();
/// for x in 1..=5 {
///     ingest.push(x).unwrap();
/// }
/// ingest.close();
/// handle.wait().unwrap();
/// assert_eq!(evens.try_iter().collect::<Vec<_>>(), [2, 4]);
/// assert_eq!(odds.try_iter().collect::<Vec<_>>(), [1, 3, 5]);
/// ```
impl<O, S> Context<'_, Either<O, S>> {
    /// Emits a main record (`Either::Left`).
    #[inline]
    pub fn emit_main(&mut self, record: O) {
        self.out.push(Either::Left(record));
    }

    /// Emits a side record (`Either::Right`).
    #[inline]
    pub fn emit_side(&mut self, record: S) {
        self.out.push(Either::Right(record));
    }
}

/// What [`Source::poll`] did.
///
/// # Examples
/// A source fed by another thread through an
/// [`ingest_channel`](crate::ingest::ingest_channel), polled by hand:
/// ```
/// use lockgate::ingest::{ingest_channel, IngestReceiver, TryRecvError};
/// use lockgate::source::WakeOn;
/// use lockgate::{BoxError, Checkpointed, Source, SourcePoll};
///
/// struct Feed(IngestReceiver<u32>);
/// impl Source<u32> for Feed {
///     fn poll(&mut self, out: &mut Vec<u32>, max: usize) -> Result<SourcePoll, BoxError> {
///         while out.len() < max {
///             match self.0.try_recv() {
///                 Ok(x) => out.push(x),
///                 Err(TryRecvError::Empty) if out.is_empty() => {
///                     return Ok(SourcePoll::Idle { wake_at_ns: None }); // a push wakes it
///                 }
///                 Err(TryRecvError::Empty) => break,
///                 Err(TryRecvError::Ended) => return Ok(SourcePoll::Finished),
///             }
///         }
///         Ok(SourcePoll::Ready)
///     }
///     fn wake_on<'a>(&'a self, on: &mut WakeOn<'a>) {
///         on.channel(&self.0);
///     }
/// }
/// impl Checkpointed for Feed {}
///
/// let (ingest, rx) = ingest_channel(8);
/// let mut feed = Feed(rx);
/// let mut out = Vec::new();
/// assert_eq!(feed.poll(&mut out, 10)?, SourcePoll::Idle { wake_at_ns: None });
/// ingest.push(1).unwrap();
/// ingest.push(2).unwrap();
/// assert_eq!(feed.poll(&mut out, 10)?, SourcePoll::Ready);
/// assert_eq!(out, [1, 2]);
/// ingest.close();
/// assert_eq!(feed.poll(&mut out, 10)?, SourcePoll::Finished);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePoll {
    /// It appended records (possibly none) and may have more right away.
    Ready,
    /// Nothing is available now. The task flushes its outputs and waits until
    /// `wake_at_ns` (on [`crate::util::clock::now_ns`]'s clock), or for a control
    /// message when `None`, before polling again.
    Idle {
        /// When to poll again.
        wake_at_ns: Option<u64>,
    },
    /// The source has nothing more to emit, ever.
    Finished,
}

/// A source of records. Replayable sources (files, generators) keep their
/// read position as state so that a restore rewinds them.
///
/// # Examples
/// A source of 2 subtasks, each with its share of the squares below 36,
/// run with the shared [`crate::example`] helper:
/// ```
/// use lockgate::{example, BoxError, Checkpointed, Source, SourcePoll};
///
/// struct Squares {
///     next: u64,
///     end: u64,
/// }
/// impl Source<u64> for Squares {
///     fn poll(&mut self, out: &mut Vec<u64>, max: usize) -> Result<SourcePoll, BoxError> {
///         while out.len() < max && self.next < self.end {
///             out.push(self.next * self.next);
///             self.next += 1;
///         }
///         Ok(if self.next == self.end { SourcePoll::Finished } else { SourcePoll::Ready })
///     }
/// }
/// impl Checkpointed for Squares {} // not replayable: a restart would start it over
///
/// let mut squares = example::run_source(
///     2,
///     |info| {
///         let first = 3 * info.index as u64; // subtask 0: 0..3, subtask 1: 3..6
///         Squares { next: first, end: first + 3 }
///     },
///     |squares| squares,
/// );
/// squares.sort_unstable();
/// assert_eq!(squares, [0, 1, 4, 9, 16, 25]);
/// ```
pub trait Source<T>: Checkpointed + Send {
    /// Appends up to `max` records to `out`.
    ///
    /// # Errors
    /// Any error fails the task.
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourcePoll, BoxError>;

    /// What ends an idle wait (after [`SourcePoll::Idle`]) besides the
    /// wake-up time, named in `on`: ingest channels of any record type (a
    /// source fed through an [`crate::ingest::ingest_channel`] names its
    /// receiver, so that it wakes as soon as records arrive; one of
    /// control messages as well) and [`crate::source::Wakeup`]s (a signal
    /// with no record: a reader thread's "reconnected", "end of feed").
    /// Asked again at every wait; nothing named (the default): only the
    /// wake-up time and the job's own messages wake the source.
    fn wake_on<'a>(&'a self, on: &mut crate::transport::handoff::WakeOn<'a>) {
        let _ = on;
    }

    /// The source's event-time watermark after the last poll (e.g. the
    /// largest timestamp emitted minus the allowed out-of-orderness, as
    /// Flink's `BoundedOutOfOrdernessWatermarks`). The task forwards it
    /// downstream whenever it advances. Default: none (no event time).
    fn current_watermark(&self) -> Option<Watermark> {
        None
    }

    /// True while the source is idle: it emits nothing for now and must not
    /// hold back the watermark downstream (Flink's `withIdleness`). The task
    /// forwards every change as [`crate::barrier::StreamElement::Idle`]. Default:
    /// never idle.
    fn is_idle(&self) -> bool {
        false
    }
}

/// A sink: an operator with no output.
///
/// # Examples
/// A sink that adds up its records and publishes the total at the end of
/// the input, run with the shared [`crate::example`] helper:
/// ```
/// use lockgate::{example, BoxError, Checkpointed, Sink};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
///
/// struct Total {
///     sum: u64,
///     published: Arc<AtomicU64>,
/// }
/// impl Sink<u64> for Total {
///     fn write(&mut self, input: &mut Vec<u64>) -> Result<(), BoxError> {
///         self.sum += input.drain(..).sum::<u64>();
///         Ok(())
///     }
///     fn end_of_input(&mut self) -> Result<(), BoxError> {
///         self.published.store(self.sum, Ordering::SeqCst);
///         Ok(())
///     }
/// }
/// impl Checkpointed for Total {}
///
/// let total = Arc::new(AtomicU64::new(0));
/// let published = total.clone();
/// example::run(1..=100u64, move |numbers| {
///     numbers.sink("total", move |_| Total { sum: 0, published: published.clone() })
/// });
/// assert_eq!(total.load(Ordering::SeqCst), 5050);
/// ```
pub trait Sink<T>: Checkpointed + Send {
    /// Consumes a batch.
    ///
    /// # Errors
    /// Any error fails the task.
    fn write(&mut self, input: &mut Vec<T>) -> Result<(), BoxError>;

    /// Called on every event-time watermark advance.
    fn on_watermark(&mut self, _watermark: Watermark) -> Result<(), BoxError> {
        Ok(())
    }

    /// All inputs ended.
    fn end_of_input(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// The processing-time timer the sink wants, ns on [`crate::tuning::now_ns`]'s
    /// clock (read after each call, as [`Context::set_processing_timer`]
    /// sets it for an operator). Default: none.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }

    /// As [`Operator::on_processing_time`].
    fn on_processing_time(&mut self, _now_ns: u64) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Adapts a [`Sink`] to the [`Operator`] interface of a chain.
pub(crate) struct SinkOperator<S>(pub S);

impl<T, S: Sink<T>> Operator<T, ()> for SinkOperator<S> {
    fn process(&mut self, input: &mut Vec<T>, ctx: &mut Context<'_, ()>) -> Result<(), BoxError> {
        self.0.write(input)?;
        ctx.set_processing_timer(self.0.next_timer_ns());
        Ok(())
    }
    fn open(&mut self, ctx: &mut Context<'_, ()>) -> Result<(), BoxError> {
        ctx.set_processing_timer(self.0.next_timer_ns());
        Ok(())
    }
    fn on_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, ()>,
    ) -> Result<(), BoxError> {
        self.0.on_watermark(watermark)?;
        ctx.set_processing_timer(self.0.next_timer_ns());
        Ok(())
    }
    fn on_processing_time(
        &mut self,
        now_ns: u64,
        ctx: &mut Context<'_, ()>,
    ) -> Result<(), BoxError> {
        self.0.on_processing_time(now_ns)?;
        ctx.set_processing_timer(self.0.next_timer_ns());
        Ok(())
    }
    fn end_of_input(&mut self, _ctx: &mut Context<'_, ()>) -> Result<(), BoxError> {
        self.0.end_of_input()
    }
}

/// A sink's state is the sink operator's.
impl<S: Checkpointed> Checkpointed for SinkOperator<S> {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        self.0.snapshot_state(id)
    }
    fn snapshot_state_async(
        &mut self,
        id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        self.0.snapshot_state_async(id)
    }
    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.0.restore_state(state)
    }
    fn restore_state_chain(&mut self, chain: &[&[u8]]) -> Result<(), BoxError> {
        self.0.restore_state_chain(chain)
    }
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        self.0.restore_rescaled(chains, rescale)
    }
    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.0.notify_checkpoint_complete(id)
    }
    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.0.notify_checkpoint_aborted(id)
    }
}

/// A record of a two-input operator: from the first input (`Left`) or the
/// second (`Right`), as Flink's `connect` tags them.
///
/// # Examples
/// Records of two types in one stream, run with the shared
/// [`crate::example`] helper ([`crate::Connected`] shows two inputs
/// keyed together):
/// ```
/// use lockgate::{example, Either};
///
/// let records = vec![Either::Left(2u32), Either::Right("two".to_string()), Either::Left(3)];
/// let text = example::run(records, |records| {
///     records.map(|r| match r {
///         Either::Left(n) => n.to_string(),
///         Either::Right(word) => word,
///     })
/// });
/// assert_eq!(text, ["2", "two", "3"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Either<A, B> {
    /// From the first input.
    Left(A),
    /// From the second input.
    Right(B),
}

impl<A: crate::RecordSize, B: crate::RecordSize> crate::RecordSize for Either<A, B> {
    const FIXED_SIZE: bool = A::FIXED_SIZE && B::FIXED_SIZE;
    fn size_bytes(&self) -> usize {
        match self {
            Either::Left(a) if !A::FIXED_SIZE => a.size_bytes(),
            Either::Right(b) if !B::FIXED_SIZE => b.size_bytes(),
            _ => std::mem::size_of::<Self>(),
        }
    }
}

/// A stateless operator from a closure over whole batches.
pub(crate) struct FnOperator<F>(pub F);

impl<F> Checkpointed for FnOperator<F> {}

impl<I, O, F> Operator<I, O> for FnOperator<F>
where
    F: FnMut(&mut Vec<I>, &mut Vec<O>) + Send,
{
    #[inline]
    fn process(&mut self, input: &mut Vec<I>, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        (self.0)(input, ctx.output());
        Ok(())
    }
}
