//! Managed state: [`ManagedState`], what the runtime snapshots and
//! restores by itself, and [`Managed`], which runs a [`StatefulOperator`]
//! with its state as an [`Operator`] (Flink's managed state).

use super::keyed::KeyedState;
use super::varint_len;
use super::StateKey;
use crate::operator::{Checkpointed, Context, EncodedState, Operator, StateSnapshot};
use crate::types::element::{CheckpointId, Watermark};
use crate::types::error::BoxError;
use crate::types::key_groups::Rescale;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_bytes::ByteBuf;
use std::hash::Hash;
use std::marker::PhantomData;

/// State the runtime snapshots and restores by itself (Flink's managed
/// state): [`KeyedState`] (incrementally), [`ValueState`](super::ValueState), and pairs of
/// them. An operator that keeps its state in one (see [`Managed`]) writes
/// no snapshot or restore code, so it cannot forget any.
pub trait ManagedState: Send + Sized + 'static {
    /// The synchronous part of a snapshot (see
    /// [`crate::Checkpointed::snapshot_state_async`]).
    ///
    /// # Errors
    /// When the state cannot be encoded.
    fn snapshot_managed(&mut self) -> Result<StateSnapshot, BoxError>;

    /// The state from a chain of snapshots, oldest first (see
    /// [`crate::Checkpointed::restore_state_chain`]).
    ///
    /// # Errors
    /// When the bytes do not decode.
    fn restore_managed(chain: &[&[u8]]) -> Result<Self, BoxError>;

    /// The state of one subtask from the chains of every old subtask of
    /// a checkpoint taken at another parallelism (see
    /// [`crate::Checkpointed::restore_rescaled`]). Default: refused, for
    /// state with no rule to redistribute it (one value per subtask
    /// cannot be split or merged without knowing what it means).
    ///
    /// # Errors
    /// When the state has no redistribution rule, or the bytes do not
    /// decode.
    fn restore_managed_rescaled(
        _chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<Self, BoxError> {
        Err(Box::new(crate::types::error::FatalError(format!(
            "{} declares no rule to redistribute its state from parallelism {} to {}",
            std::any::type_name::<Self>(),
            rescale.old_parallelism,
            rescale.parallelism
        ))))
    }
}

impl<K, V> ManagedState for KeyedState<K, V>
where
    K: Serialize + DeserializeOwned + Eq + Hash + Clone + StateKey + Send + 'static,
    V: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    fn snapshot_managed(&mut self) -> Result<StateSnapshot, BoxError> {
        Ok(self.snapshot_async())
    }

    fn restore_managed(chain: &[&[u8]]) -> Result<Self, BoxError> {
        Ok(KeyedState::restore_chain(chain)?.with_replica()?)
    }

    fn restore_managed_rescaled(
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<Self, BoxError> {
        Ok(KeyedState::restore_rescaled(chains, rescale)?.with_replica()?)
    }
}

/// Two managed states side by side: one snapshot holds both, each part
/// full or a delta on its own.
impl<A: ManagedState, B: ManagedState> ManagedState for (A, B) {
    fn snapshot_managed(&mut self) -> Result<StateSnapshot, BoxError> {
        let (a, b) = (self.0.snapshot_managed()?, self.1.snapshot_managed()?);
        Ok(StateSnapshot::incremental(move |req| {
            let (a, b) = (a.run(req)?, b.run(req)?);
            let pair: PairPart = (
                (a.delta, ByteBuf::from(a.bytes)),
                (b.delta, ByteBuf::from(b.bytes)),
            );
            let bytes = postcard::to_allocvec(&pair)?;
            let full = |n: u64| varint_len(n) + n + 1;
            // The older of the halves' chain starts, when both say one.
            let chain_from = match (a.delta, b.delta) {
                (true, true) => a.chain_from.zip(b.chain_from).map(|(x, y)| x.min(y)),
                (true, false) => a.chain_from,
                (false, true) => b.chain_from,
                (false, false) => None,
            };
            Ok(EncodedState {
                full_bytes: full(a.full_bytes) + full(b.full_bytes),
                delta: pair.0 .0 || pair.1 .0,
                bytes,
                chain_from,
            })
        }))
    }

    fn restore_managed(chain: &[&[u8]]) -> Result<Self, BoxError> {
        let (a, b) = split_pair_chain(chain)?;
        Ok((
            A::restore_managed(&slices(&a))?,
            B::restore_managed(&slices(&b))?,
        ))
    }

    fn restore_managed_rescaled(
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<Self, BoxError> {
        let mut a = Vec::with_capacity(chains.len());
        let mut b = Vec::with_capacity(chains.len());
        for chain in chains {
            let (ca, cb) = split_pair_chain(chain)?;
            a.push(ca);
            b.push(cb);
        }
        let a: Vec<Vec<&[u8]>> = a.iter().map(|c| slices(c)).collect();
        let b: Vec<Vec<&[u8]>> = b.iter().map(|c| slices(c)).collect();
        Ok((
            A::restore_managed_rescaled(&a, rescale)?,
            B::restore_managed_rescaled(&b, rescale)?,
        ))
    }
}

/// The parts of one chain, oldest first.
type Parts = Vec<Vec<u8>>;

/// A chain of pair snapshots as the two halves' chains.
fn split_pair_chain(chain: &[&[u8]]) -> Result<(Parts, Parts), BoxError> {
    let mut a = Vec::with_capacity(chain.len());
    let mut b = Vec::with_capacity(chain.len());
    for bytes in chain {
        let ((_, pa), (_, pb)): PairPart = postcard::from_bytes(bytes)?;
        a.push(pa.into_vec());
        b.push(pb.into_vec());
    }
    Ok((a, b))
}

/// The parts of a chain as the slices the restore hooks take.
fn slices(parts: &[Vec<u8>]) -> Vec<&[u8]> {
    parts.iter().map(Vec::as_slice).collect()
}

/// One snapshot of a pair: (delta?, bytes) of each (`ByteBuf`: one
/// length and the raw bytes, not a sequence of bytes one by one).
type PairPart = ((bool, ByteBuf), (bool, ByteBuf));

/// An operator whose state the runtime manages: its calls get the state
/// as an argument, and [`Managed`] snapshots and restores it.
///
/// # Examples
/// ```
/// use lockgate::{BoxError, Context, KeyedState, Managed, Operator, StatefulOperator};
///
/// /// Counts records per key; no snapshot or restore code.
/// struct Count;
/// impl StatefulOperator<u64, (u64, u64)> for Count {
///     type State = KeyedState<u64, u64>;
///     fn process(
///         &mut self,
///         counts: &mut Self::State,
///         input: &mut Vec<u64>,
///         ctx: &mut Context<'_, (u64, u64)>,
///     ) -> Result<(), BoxError> {
///         for r in input.drain(..) {
///             let c = counts.get_or_default(r % 10);
///             *c += 1;
///             ctx.emit((r % 10, *c));
///         }
///         Ok(())
///     }
/// }
///
/// let mut op = Managed::new(Count);
/// let (mut out, mut timer) = (Vec::new(), None);
/// op.process(&mut vec![1, 11, 2], &mut Context::new(&mut out, None, &mut timer)).unwrap();
/// assert_eq!(out, [(1, 1), (1, 2), (2, 1)]);
/// assert_eq!(op.state().get(&1), Some(&2));
/// ```
pub trait StatefulOperator<I, O>: Send {
    /// The operator's state, managed by the runtime.
    type State: ManagedState + Default;

    /// As [`Operator::process`], with the state.
    ///
    /// # Errors
    /// As [`Operator::process`].
    fn process(
        &mut self,
        state: &mut Self::State,
        input: &mut Vec<I>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError>;

    /// As [`Operator::on_watermark`], with the state. Default: nothing.
    ///
    /// # Errors
    /// As [`Operator::on_watermark`].
    fn on_watermark(
        &mut self,
        _state: &mut Self::State,
        _watermark: Watermark,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// As [`Operator::on_processing_time`], with the state. Default:
    /// nothing.
    ///
    /// # Errors
    /// As [`Operator::on_processing_time`].
    fn on_processing_time(
        &mut self,
        _state: &mut Self::State,
        _now_ns: u64,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// As [`Operator::end_of_input`], with the state. Default: nothing.
    ///
    /// # Errors
    /// As [`Operator::end_of_input`].
    fn end_of_input(
        &mut self,
        _state: &mut Self::State,
        _ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A [`StatefulOperator`] with its state, as an [`Operator`] whose
/// snapshots and restores the runtime takes care of (incrementally for
/// [`KeyedState`]).
///
/// # Examples
/// A running maximum per key in a job (with the shared [`crate::example`]
/// helper), then its snapshot and restore driven by hand:
/// ```
/// use lockgate::state::SnapshotRequest;
/// use lockgate::{example, BoxError, CheckpointId, Checkpointed, Context, KeyedState, Managed, Operator, StatefulOperator};
///
/// struct RunningMax;
/// impl StatefulOperator<(u64, i64), (u64, i64)> for RunningMax {
///     type State = KeyedState<u64, i64>;
///     fn process(
///         &mut self,
///         max: &mut Self::State,
///         input: &mut Vec<(u64, i64)>,
///         ctx: &mut Context<'_, (u64, i64)>,
///     ) -> Result<(), BoxError> {
///         for (key, x) in input.drain(..) {
///             let m = *max.get(&key).unwrap_or(&x);
///             max.insert(key, m.max(x));
///             ctx.emit((key, m.max(x)));
///         }
///         Ok(())
///     }
/// }
///
/// let records = vec![(1, 5), (2, -3), (1, 2), (1, 9)];
/// let mut maxima = example::run(records, |records| {
///     records.key_by(|r| r.0).task("max", 2).process("max", |_| Managed::new(RunningMax))
/// });
/// maxima.sort_unstable();
/// assert_eq!(maxima, [(1, 5), (1, 5), (1, 9), (2, -3)]);
///
/// let mut op = Managed::new(RunningMax);
/// let (mut out, mut timer) = (Vec::new(), None);
/// op.process(&mut vec![(1, 5), (2, -3)], &mut Context::new(&mut out, None, &mut timer))?;
/// let snapshot = op.snapshot_state_async(CheckpointId(1))?.expect("managed state");
/// let part = snapshot.run(&SnapshotRequest::full(CheckpointId(1)))?;
/// let mut restored: Managed<RunningMax, KeyedState<u64, i64>> = Managed::new(RunningMax);
/// restored.restore_state_chain(&[&part.bytes])?;
/// assert_eq!(restored.state().get(&1), Some(&5));
/// assert_eq!(restored.state().len(), 2);
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub struct Managed<Op, S> {
    op: Op,
    state: S,
    after_rescale: Option<RescaleHook<S>>,
}

/// What [`Managed::after_rescale`] runs.
type RescaleHook<S> = Box<dyn FnMut(&mut S, &Rescale) -> Result<(), BoxError> + Send>;

impl<Op, S> std::fmt::Debug for Managed<Op, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Managed { .. }")
    }
}

impl<Op, S: Default> Managed<Op, S> {
    /// `op` with an empty state.
    pub fn new(op: Op) -> Self {
        Managed {
            op,
            state: S::default(),
            after_rescale: None,
        }
    }
}

impl<Op, S> Managed<Op, S> {
    /// The state (for tests and inspection).
    pub fn state(&self) -> &S {
        &self.state
    }

    /// Runs `hook` on the state after each restore at another parallelism
    /// (once the state kept its share: a [`KeyedState`] its key groups),
    /// before any record: for an operator that owns less than its key
    /// groups, e.g. the keys of the Kafka partitions its process reads. An
    /// error fails the restore, as the state's own would.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{Checkpointed, state::KeyedFold, KeyedState, Managed, keys::Rescale};
    ///
    /// let mut old = KeyedState::<u64, u64>::new();
    /// for k in 0..100 {
    ///     old.insert(k, k);
    /// }
    /// let bytes = old.snapshot().unwrap();
    /// // One old subtask, one new: every key group is kept, then the hook
    /// // drops the odd keys.
    /// let mut sum = Managed::new(KeyedFold::new(|r: &u64| *r, |s: &mut u64, r: u64| *s + r))
    ///     .after_rescale(|sums: &mut KeyedState<u64, u64>, _| {
    ///         sums.retain(|k, _| k % 2 == 0);
    ///         Ok(())
    ///     });
    /// let rescale = Rescale { subtask: 0, parallelism: 1, old_parallelism: 1, max_parallelism: 128 };
    /// sum.restore_rescaled(&[vec![bytes.as_slice()]], &rescale).unwrap();
    /// assert_eq!(sum.state().len(), 50);
    /// ```
    pub fn after_rescale(
        mut self,
        hook: impl FnMut(&mut S, &Rescale) -> Result<(), BoxError> + Send + 'static,
    ) -> Self {
        self.after_rescale = Some(Box::new(hook));
        self
    }
}

impl<I, O, Op> Operator<I, O> for Managed<Op, Op::State>
where
    Op: StatefulOperator<I, O>,
{
    #[inline]
    fn process(&mut self, input: &mut Vec<I>, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        self.op.process(&mut self.state, input, ctx)
    }

    fn on_watermark(&mut self, w: Watermark, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        self.op.on_watermark(&mut self.state, w, ctx)
    }

    fn on_processing_time(
        &mut self,
        now_ns: u64,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        self.op.on_processing_time(&mut self.state, now_ns, ctx)
    }

    fn end_of_input(&mut self, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        self.op.end_of_input(&mut self.state, ctx)
    }
}

impl<Op: Send, S: ManagedState> Checkpointed for Managed<Op, S> {
    fn snapshot_state_async(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        Ok(Some(self.state.snapshot_managed()?))
    }

    fn restore_state_chain(&mut self, chain: &[&[u8]]) -> Result<(), BoxError> {
        self.state = S::restore_managed(chain)?;
        Ok(())
    }

    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        self.state = S::restore_managed_rescaled(chains, rescale)?;
        if let Some(hook) = &mut self.after_rescale {
            hook(&mut self.state, rescale)?;
        }
        Ok(())
    }
}

/// A running fold per key (Flink's `KeyedStream#reduce`), in managed
/// keyed state: for each record, `key_of` names its key and `fold`
/// updates the key's value (`V::default()` before its first record) and
/// returns what to emit. Wrapped in [`Managed`], the state is snapshotted
/// incrementally and redistributed by key group on a rescale, with no
/// code of the operator's own.
///
/// # Examples
/// ```
/// use lockgate::{Context, state::KeyedFold, Managed, Operator};
///
/// // A running sum per key `r % 10`, emitting (key, sum).
/// let mut op = Managed::new(KeyedFold::new(
///     |r: &u64| r % 10,
///     |sum: &mut u64, r: u64| {
///         *sum += r;
///         (r % 10, *sum)
///     },
/// ));
/// let (mut out, mut timer) = (Vec::new(), None);
/// op.process(&mut vec![1, 11, 2], &mut Context::new(&mut out, None, &mut timer)).unwrap();
/// assert_eq!(out, [(1, 1), (1, 12), (2, 2)]);
/// ```
pub struct KeyedFold<I, O, K, V, KeyOf, Fold> {
    key_of: KeyOf,
    fold: Fold,
    _types: PhantomData<FoldTypes<I, O, K, V>>,
}

/// The types a [`KeyedFold`] maps between, for inference only.
type FoldTypes<I, O, K, V> = fn(I) -> (O, K, V);

impl<I, O, K, V, KeyOf, Fold> KeyedFold<I, O, K, V, KeyOf, Fold>
where
    KeyOf: Fn(&I) -> K,
    Fold: FnMut(&mut V, I) -> O,
{
    /// The fold of `fold` per key `key_of(record)`.
    pub fn new(key_of: KeyOf, fold: Fold) -> Self {
        KeyedFold {
            key_of,
            fold,
            _types: PhantomData,
        }
    }
}

impl<I, O, K, V, KeyOf, Fold> std::fmt::Debug for KeyedFold<I, O, K, V, KeyOf, Fold> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyedFold { .. }")
    }
}

impl<I, O, K, V, KeyOf, Fold> StatefulOperator<I, O> for KeyedFold<I, O, K, V, KeyOf, Fold>
where
    K: Serialize + DeserializeOwned + Eq + Hash + Clone + StateKey + Send + 'static,
    V: Serialize + DeserializeOwned + Clone + Default + Send + 'static,
    KeyOf: Fn(&I) -> K + Send,
    Fold: FnMut(&mut V, I) -> O + Send,
{
    type State = KeyedState<K, V>;

    #[inline]
    fn process(
        &mut self,
        state: &mut Self::State,
        input: &mut Vec<I>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        for r in input.drain(..) {
            let v = state.get_or_default((self.key_of)(&r));
            ctx.emit((self.fold)(v, r));
        }
        Ok(())
    }
}
