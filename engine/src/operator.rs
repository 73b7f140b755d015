//! The user-facing operator contracts: [`Source`], [`Operator`] and
//! [`Sink`], with their state snapshot hooks.
//!
//! Operators work on batches: `process` is called with a batch of input
//! records (one channel element, up to the job's batch size) and appends its
//! output to `out`. A stateful operator returns its state from
//! `snapshot_state` when a checkpoint triggers (a synchronous copy on the
//! task thread: keep it cheap) and gets it back in `restore_state` before it
//! sees any record after a restart.

use crate::element::{CheckpointId, Watermark};
use crate::error::BoxError;
use serde::{Deserialize, Serialize};

/// What takes part in checkpoints, in one place for sources, operators and
/// sinks: taking and restoring a snapshot of the state (Flink's
/// `CheckpointedFunction`) and hearing that a checkpoint completed or was
/// aborted (Flink's `CheckpointListener`). An implementor returns itself
/// from [`Operator::checkpointed`], [`Source::checkpointed`] or
/// [`Sink::checkpointed`]; whatever returns `None` there is stateless.
///
/// All four run on the task thread. `snapshot_state` runs between two
/// batches, after every record before the checkpoint's barrier and before
/// any record after it (a synchronous copy: keep it cheap); the runtime
/// stores the bytes as they are.
///
/// # Examples
/// See [`Operator`]'s example: a count per key, snapshotted and restored.
pub trait Checkpointed {
    /// Returns the state for checkpoint `id`, serialized. `None`: nothing
    /// to store this time (default).
    ///
    /// # Errors
    /// Any error declines the checkpoint and fails the task.
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(None)
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
/// use lockgate::{BoxError, CheckpointId, Checkpointed, KeyedState, Operator};
///
/// #[derive(Default)]
/// struct CountPerKey(KeyedState<char, u64>);
///
/// impl Operator<char, (char, u64)> for CountPerKey {
///     fn process(&mut self, input: &mut Vec<char>, _out: &mut Vec<(char, u64)>) -> Result<(), BoxError> {
///         for c in input.drain(..) {
///             *self.0.get_or_default(c) += 1;
///         }
///         Ok(())
///     }
///     fn end_of_input(&mut self, out: &mut Vec<(char, u64)>) -> Result<(), BoxError> {
///         out.extend(self.0.iter().map(|(c, n)| (*c, *n)));
///         Ok(())
///     }
///     fn checkpointed(&mut self) -> Option<&mut dyn Checkpointed> {
///         Some(self) // it has state
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
/// op.process(&mut vec!['a', 'b', 'a'], &mut Vec::new()).unwrap();
/// let snapshot = op.snapshot_state(CheckpointId(1)).unwrap().unwrap();
/// let mut restored = CountPerKey::default();
/// restored.restore_state(&snapshot).unwrap();
/// let mut out = Vec::new();
/// restored.end_of_input(&mut out).unwrap();
/// out.sort();
/// assert_eq!(out, [('a', 2), ('b', 1)]);
/// ```
pub trait Operator<I, O>: Send {
    /// Processes a batch of records, appending results to `out`. `input` is
    /// the whole batch; the operator may drain it (what is left is dropped).
    ///
    /// # Errors
    /// Any error fails the task and the job (and triggers a restart when a
    /// restart strategy is set).
    fn process(&mut self, input: &mut Vec<I>, out: &mut Vec<O>) -> Result<(), BoxError>;

    /// Called when the task's event-time watermark advances. Default: nothing
    /// to do (the runtime forwards the watermark downstream itself).
    fn on_watermark(&mut self, _watermark: Watermark, _out: &mut Vec<O>) -> Result<(), BoxError> {
        Ok(())
    }

    /// All inputs ended: emit what is left (e.g. open windows).
    fn end_of_input(&mut self, _out: &mut Vec<O>) -> Result<(), BoxError> {
        Ok(())
    }

    /// The earliest processing-time timer of the operator, in ns on
    /// [`crate::clock::now_ns`]'s clock, if any. The task wakes at that time
    /// even without input and calls [`Operator::on_processing_time`].
    /// Called between batches: keep it O(1).
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }

    /// Processing time reached `now_ns` (at or after
    /// [`Operator::next_timer_ns`]): fire the timers that are due.
    fn on_processing_time(&mut self, _now_ns: u64, _out: &mut Vec<O>) -> Result<(), BoxError> {
        Ok(())
    }

    /// The operator's checkpointed state and checkpoint notifications, if
    /// it has any: a stateful operator implements [`Checkpointed`] and
    /// returns itself here (`Some(self)`). Default: `None`, stateless (its
    /// task takes no snapshot of it and sends it no notification).
    fn checkpointed(&mut self) -> Option<&mut dyn Checkpointed> {
        None
    }
}

/// What [`Source::poll`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePoll {
    /// It appended records (possibly none) and may have more right away.
    Ready,
    /// Nothing is available now. The task flushes its outputs and waits until
    /// `wake_at_ns` (on [`crate::clock::now_ns`]'s clock), or for a control
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
pub trait Source<T>: Send {
    /// Appends up to `max` records to `out`.
    ///
    /// # Errors
    /// Any error fails the task.
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourcePoll, BoxError>;

    /// A channel whose readiness ends an idle wait (after
    /// [`SourcePoll::Idle`]) besides the wake-up time: a source fed through
    /// an [`crate::ingest_channel`] returns its receiver, so that it wakes
    /// as soon as records arrive. Default: none.
    fn wake_on(&self) -> Option<&crate::handoff::IngestReceiver<T>> {
        None
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
    /// forwards every change as [`crate::StreamElement::Idle`]. Default:
    /// never idle.
    fn is_idle(&self) -> bool {
        false
    }

    /// The source's checkpointed state and checkpoint notifications, if
    /// it has any: a replayable source (its read position is its state) implements [`Checkpointed`] and
    /// returns itself here (`Some(self)`). Default: `None`, not replayable (a restore cannot rewind it).
    fn checkpointed(&mut self) -> Option<&mut dyn Checkpointed> {
        None
    }
}

/// A sink: an operator with no output.
pub trait Sink<T>: Send {
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

    /// As [`Operator::next_timer_ns`].
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }

    /// As [`Operator::on_processing_time`].
    fn on_processing_time(&mut self, _now_ns: u64) -> Result<(), BoxError> {
        Ok(())
    }

    /// The sink's checkpointed state and checkpoint notifications, if
    /// it has any: a stateful or two-phase-commit sink implements [`Checkpointed`] and
    /// returns itself here (`Some(self)`). Default: `None`, stateless (its
    /// task takes no snapshot of it and sends it no notification).
    fn checkpointed(&mut self) -> Option<&mut dyn Checkpointed> {
        None
    }
}

/// Adapts a [`Sink`] to the [`Operator`] interface of a chain.
pub(crate) struct SinkOperator<S>(pub S);

impl<T, S: Sink<T>> Operator<T, ()> for SinkOperator<S> {
    fn process(&mut self, input: &mut Vec<T>, _out: &mut Vec<()>) -> Result<(), BoxError> {
        self.0.write(input)
    }
    fn on_watermark(&mut self, watermark: Watermark, _out: &mut Vec<()>) -> Result<(), BoxError> {
        self.0.on_watermark(watermark)
    }
    fn checkpointed(&mut self) -> Option<&mut dyn Checkpointed> {
        self.0.checkpointed()
    }
    fn end_of_input(&mut self, _out: &mut Vec<()>) -> Result<(), BoxError> {
        self.0.end_of_input()
    }
    fn next_timer_ns(&self) -> Option<u64> {
        self.0.next_timer_ns()
    }
    fn on_processing_time(&mut self, now_ns: u64, _out: &mut Vec<()>) -> Result<(), BoxError> {
        self.0.on_processing_time(now_ns)
    }
}

/// A record of a two-input operator: from the first input (`Left`) or the
/// second (`Right`), as Flink's `connect` tags them.
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

impl<I, O, F> Operator<I, O> for FnOperator<F>
where
    F: FnMut(&mut Vec<I>, &mut Vec<O>) + Send,
{
    #[inline]
    fn process(&mut self, input: &mut Vec<I>, out: &mut Vec<O>) -> Result<(), BoxError> {
        (self.0)(input, out);
        Ok(())
    }
}
