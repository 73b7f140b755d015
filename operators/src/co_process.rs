//! A keyed two-input operator with keyed state and timers: Flink's
//! `connect(a, b).keyBy(ka, kb).process(KeyedCoProcessFunction)`.
//!
//! Build the input with [`lockgate::Stream::connect`] and
//! [`lockgate::Connected::key_by`] (both inputs partitioned by the hash of
//! the same key), then `.task(name, parallelism).process(name, |_|
//! KeyedCoProcessOperator::new(f))`. The operator keeps one state value
//! per key (created on first use, dropped when the function clears it)
//! and a [`TimerService`] of keyed timers; both are checkpointed (JSON),
//! together with the function's own operator-wide state
//! ([`KeyedCoProcessFunction::snapshot_function`]).
//!
//! Event-time timers fire from the task's watermark (the minimum over both
//! inputs: an event-time timer at `t` fires once neither input can still
//! deliver a record with timestamp `<= t`). The end of the input is the
//! end of event time: every event-time timer left fires then.

use crate::timers::TimerService;
use crate::window::{RoutingKeyFn, WindowKey};
use lockgate::Checkpointed;
use lockgate::Context;
use lockgate::{
    error::FatalError, keys::Rescale, BoxError, CheckpointId, Either, Operator, Watermark,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A timer that fired.
///
/// # Examples
/// A function that sets a timer in each domain and emits what fires,
/// driven by hand (in a job the task makes these calls):
/// ```
/// use lockgate::{BoxError, Context, Either, Operator, Watermark};
/// use lockgate_operators::co_process::{CoContext, FiredTimer, KeyedCoProcessFunction, KeyedCoProcessOperator};
///
/// struct Both;
/// impl KeyedCoProcessFunction<u8, (), (u8, FiredTimer)> for Both {
///     type Key = u8;
///     type State = ();
///     fn key_left(&self, key: &u8) -> u8 { *key }
///     fn key_right(&self, _: &()) -> u8 { 0 }
///     fn process_left(&mut self, _: u8, ctx: &mut CoContext<'_, u8, (), (u8, FiredTimer)>) -> Result<(), BoxError> {
///         ctx.register_event_timer(100); // ms of event time
///         ctx.register_processing_timer(7); // ns on the clock
///         Ok(())
///     }
///     fn process_right(&mut self, _: (), _: &mut CoContext<'_, u8, (), (u8, FiredTimer)>) -> Result<(), BoxError> {
///         Ok(())
///     }
///     fn on_timer(&mut self, timer: FiredTimer, ctx: &mut CoContext<'_, u8, (), (u8, FiredTimer)>) -> Result<(), BoxError> {
///         let key = *ctx.key();
///         ctx.emit((key, timer));
///         Ok(())
///     }
/// }
///
/// let mut op = KeyedCoProcessOperator::new(Both);
/// let (mut out, mut wake) = (Vec::new(), None);
/// op.process(&mut vec![Either::Left(3)], &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// op.on_processing_time(7, &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// op.on_watermark(Watermark(100), &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// assert_eq!(out, [(3, FiredTimer::ProcessingTime(7)), (3, FiredTimer::EventTime(100))]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FiredTimer {
    /// An event-time timer at this time (ms).
    EventTime(i64),
    /// A processing-time timer at this time (ns on
    /// [`lockgate::tuning::now_ns`]'s clock).
    ProcessingTime(u64),
}

/// What a [`KeyedCoProcessFunction`] call can reach: the current key, its
/// state, its timers, the watermark and the output.
///
/// # Examples
/// Counts the records of each side per key in the key's state and emits
/// the counts at the end of event time, in a job (with lockgate's example
/// helper; the two inputs come from one list of [`Either`] records):
/// ```
/// use lockgate::{example, BoxError, Either};
/// use lockgate_operators::co_process::{CoContext, FiredTimer, KeyedCoProcessFunction, KeyedCoProcessOperator};
///
/// type Ctx<'a> = CoContext<'a, char, (u32, u32), (char, u32, u32)>;
///
/// struct CountSides;
/// impl KeyedCoProcessFunction<char, char, (char, u32, u32)> for CountSides {
///     type Key = char;
///     type State = (u32, u32); // (left records, right records) of the key
///     fn key_left(&self, c: &char) -> char { *c }
///     fn key_right(&self, c: &char) -> char { *c }
///     fn process_left(&mut self, _: char, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         ctx.state_or_insert_with(|| (0, 0)).0 += 1;
///         ctx.register_event_timer(i64::MAX); // once per key: a second one is the same timer
///         Ok(())
///     }
///     fn process_right(&mut self, _: char, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         ctx.state_or_insert_with(|| (0, 0)).1 += 1;
///         ctx.register_event_timer(i64::MAX);
///         Ok(())
///     }
///     fn on_timer(&mut self, _: FiredTimer, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         let key = *ctx.key();
///         if let Some((left, right)) = ctx.clear_state() {
///             ctx.emit((key, left, right));
///         }
///         Ok(())
///     }
/// }
///
/// let records = vec![Either::Left('a'), Either::Right('a'), Either::Left('b'), Either::Left('a')];
/// let mut counts = example::run(records, |records| {
///     let (left, right) = records.split_either();
///     left.connect(right)
///         .key_by(|c| u64::from(*c), |c| u64::from(*c))
///         .task("count", 1)
///         .process("count", |_| KeyedCoProcessOperator::new(CountSides))
/// });
/// counts.sort_unstable();
/// assert_eq!(counts, [('a', 2, 1), ('b', 1, 0)]);
/// ```
pub struct CoContext<'a, K, S, O> {
    key: &'a K,
    state: &'a mut Option<S>,
    timers: &'a mut TimerService<K>,
    out: &'a mut Vec<O>,
}

impl<'a, K, S, O> std::fmt::Debug for CoContext<'a, K, S, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoContext").finish_non_exhaustive()
    }
}

impl<K: Ord + Clone, S, O> CoContext<'_, K, S, O> {
    /// The key of the record or timer being processed.
    pub fn key(&self) -> &K {
        self.key
    }

    /// The key's state, if it has one.
    pub fn state(&mut self) -> Option<&mut S> {
        self.state.as_mut()
    }

    /// The key's state, created by `init` if it has none.
    pub fn state_or_insert_with(&mut self, init: impl FnOnce() -> S) -> &mut S {
        self.state.get_or_insert_with(init)
    }

    /// Removes the key's state (its timers stay).
    pub fn clear_state(&mut self) -> Option<S> {
        self.state.take()
    }

    /// The operator's watermark (ms; `i64::MIN` before the first one).
    pub fn current_watermark(&self) -> i64 {
        self.timers.current_watermark()
    }

    /// Registers an event-time timer for this key at `time` (ms). One at or
    /// below the current watermark fires right after the current call.
    pub fn register_event_timer(&mut self, time: i64) {
        self.timers.register_event_time(time, self.key.clone());
    }

    /// Deletes this key's event-time timer at `time`.
    pub fn delete_event_timer(&mut self, time: i64) -> bool {
        self.timers.delete_event_time(time, self.key)
    }

    /// Registers a processing-time timer for this key at `time_ns`.
    pub fn register_processing_timer(&mut self, time_ns: u64) {
        self.timers
            .register_processing_time(time_ns, self.key.clone());
    }

    /// Deletes this key's processing-time timer at `time_ns`.
    pub fn delete_processing_timer(&mut self, time_ns: u64) -> bool {
        self.timers.delete_processing_time(time_ns, self.key)
    }

    /// Emits a record.
    pub fn emit(&mut self, record: O) {
        self.out.push(record);
    }
}

/// The user function of a [`KeyedCoProcessOperator`] (Flink's
/// `KeyedCoProcessFunction`).
///
/// # Examples
/// Sums the amounts of the first input per account until the deadline a
/// record of the second input sets, then emits the sum, in a job (with
/// lockgate's example helper):
/// ```
/// use lockgate::{example, BoxError, Either};
/// use lockgate_operators::co_process::{CoContext, FiredTimer, KeyedCoProcessFunction, KeyedCoProcessOperator};
///
/// type Amount = (u32, i64); // (account, amount)
/// type Deadline = (u32, i64); // (account, event time in ms)
/// type Ctx<'a> = CoContext<'a, u32, i64, (u32, i64)>;
///
/// struct SumUntil;
/// impl KeyedCoProcessFunction<Amount, Deadline, (u32, i64)> for SumUntil {
///     type Key = u32;
///     type State = i64;
///     fn key_left(&self, a: &Amount) -> u32 { a.0 }
///     fn key_right(&self, d: &Deadline) -> u32 { d.0 }
///     fn process_left(&mut self, a: Amount, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         *ctx.state_or_insert_with(|| 0) += a.1;
///         Ok(())
///     }
///     fn process_right(&mut self, d: Deadline, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         ctx.register_event_timer(d.1);
///         Ok(())
///     }
///     fn on_timer(&mut self, _: FiredTimer, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         let account = *ctx.key();
///         if let Some(sum) = ctx.clear_state() {
///             ctx.emit((account, sum));
///         }
///         Ok(())
///     }
/// }
///
/// let records = vec![
///     Either::Left((1, 5)),
///     Either::Left((2, 7)),
///     Either::Right((1, 100)),
///     Either::Left((1, 6)),
/// ];
/// // no watermark comes before the end of the input, the end of event time:
/// // account 1's timer fires then; account 2 has no deadline, no timer
/// let sums = example::run(records, |records| {
///     let (amounts, deadlines) = records.split_either();
///     amounts
///         .connect(deadlines)
///         .key_by(|a| u64::from(a.0), |d| u64::from(d.0))
///         .task("sum", 1)
///         .process("sum", |_| KeyedCoProcessOperator::new(SumUntil))
/// });
/// assert_eq!(sums, [(1, 11)]);
/// ```
pub trait KeyedCoProcessFunction<A, B, O>: Send {
    /// The key both inputs are grouped by. Records must be partitioned by
    /// a hash of it, so that a key's records of both inputs meet in one
    /// subtask.
    type Key: WindowKey;
    /// The state kept per key.
    type State: Serialize + DeserializeOwned + Send;

    /// The key of a record of the first input.
    fn key_left(&self, a: &A) -> Self::Key;
    /// The key of a record of the second input.
    fn key_right(&self, b: &B) -> Self::Key;

    /// Processes a record of the first input.
    ///
    /// # Errors
    /// Any error fails the task.
    fn process_left(
        &mut self,
        a: A,
        ctx: &mut CoContext<'_, Self::Key, Self::State, O>,
    ) -> Result<(), BoxError>;

    /// Processes a record of the second input.
    ///
    /// # Errors
    /// Any error fails the task.
    fn process_right(
        &mut self,
        b: B,
        ctx: &mut CoContext<'_, Self::Key, Self::State, O>,
    ) -> Result<(), BoxError>;

    /// A timer of `ctx.key()` fired. Default: nothing.
    ///
    /// # Errors
    /// Any error fails the task.
    fn on_timer(
        &mut self,
        _timer: FiredTimer,
        _ctx: &mut CoContext<'_, Self::Key, Self::State, O>,
    ) -> Result<(), BoxError> {
        Ok(())
    }

    /// The function's own state beyond the keyed state (e.g. counters), for
    /// checkpoints. Default: none.
    ///
    /// # Errors
    /// When it cannot be serialized; the checkpoint then fails.
    fn snapshot_function(&self) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(None)
    }

    /// Restores what [`KeyedCoProcessFunction::snapshot_function`] returned.
    ///
    /// # Errors
    /// When the bytes do not decode; the restore then fails.
    fn restore_function(&mut self, _bytes: &[u8]) -> Result<(), BoxError> {
        Ok(())
    }

    /// After a restore at another parallelism: adds the function state of
    /// one more old subtask (old subtask `j`'s goes to new subtask
    /// `j % P`, so counters summed over subtasks stay exact), after
    /// [`KeyedCoProcessFunction::restore_function`] of the first or none.
    /// Default: refused (a function with state must say how it merges).
    ///
    /// # Errors
    /// When the function cannot merge its state or the bytes do not decode.
    fn merge_function(&mut self, _bytes: &[u8]) -> Result<(), BoxError> {
        Err("the function declares no rule to merge its state (KeyedCoProcessFunction::merge_function)".into())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, S: Serialize",
    deserialize = "K: DeserializeOwned + Ord, S: DeserializeOwned"
))]
struct CoState<K, S> {
    keyed: Vec<(K, S)>,
    timers: TimerService<K>,
    function: Option<Vec<u8>>,
}

/// Runs a [`KeyedCoProcessFunction`] over `Either<A, B>` records (see the
/// module docs).
///
/// # Examples
/// Orders (first input) and payments (second input) by order id, in a
/// task of 2 subtasks; the orders still unpaid at the end are emitted (a
/// job with lockgate's example helper):
/// ```
/// use lockgate::{example, BoxError, Either};
/// use lockgate_operators::co_process::{CoContext, FiredTimer, KeyedCoProcessFunction, KeyedCoProcessOperator};
///
/// type Ctx<'a> = CoContext<'a, u64, (bool, bool), u64>;
///
/// /// State per order id: (ordered, paid).
/// struct Unpaid;
/// impl KeyedCoProcessFunction<u64, u64, u64> for Unpaid {
///     type Key = u64;
///     type State = (bool, bool);
///     fn key_left(&self, order: &u64) -> u64 { *order }
///     fn key_right(&self, payment: &u64) -> u64 { *payment }
///     fn process_left(&mut self, _: u64, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         ctx.state_or_insert_with(|| (false, false)).0 = true;
///         ctx.register_event_timer(i64::MAX); // the end of event time
///         Ok(())
///     }
///     fn process_right(&mut self, _: u64, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         ctx.state_or_insert_with(|| (false, false)).1 = true;
///         Ok(())
///     }
///     fn on_timer(&mut self, _: FiredTimer, ctx: &mut Ctx<'_>) -> Result<(), BoxError> {
///         let order = *ctx.key();
///         if ctx.clear_state() == Some((true, false)) {
///             ctx.emit(order);
///         }
///         Ok(())
///     }
/// }
///
/// let records = vec![
///     Either::Left(1),
///     Either::Left(2),
///     Either::Right(1),
///     Either::Left(3),
///     Either::Right(3),
///     Either::Left(4),
/// ];
/// let mut unpaid = example::run(records, |records| {
///     let (orders, payments) = records.split_either();
///     orders
///         .connect(payments)
///         .key_by(|o| *o, |p| *p) // the same key on both sides
///         .task("unpaid", 2)
///         .process("unpaid", |_| {
///             // rescalable: the routing key of an order id is the id
///             KeyedCoProcessOperator::new(Unpaid).with_routing_key(|order| *order)
///         })
/// });
/// unpaid.sort_unstable();
/// assert_eq!(unpaid, [2, 4]);
/// ```
pub struct KeyedCoProcessOperator<A, B, O, F: KeyedCoProcessFunction<A, B, O>> {
    f: F,
    keyed: HashMap<F::Key, F::State>,
    timers: TimerService<F::Key>,
    routing_key: Option<RoutingKeyFn<F::Key>>,
    _types: std::marker::PhantomData<fn(A, B) -> O>,
}

impl<A, B, O, F: KeyedCoProcessFunction<A, B, O>> std::fmt::Debug
    for KeyedCoProcessOperator<A, B, O, F>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedCoProcessOperator")
            .finish_non_exhaustive()
    }
}

impl<A, B, O, F: KeyedCoProcessFunction<A, B, O>> KeyedCoProcessOperator<A, B, O, F> {
    /// The operator running `f`, with no state.
    pub fn new(f: F) -> Self {
        KeyedCoProcessOperator {
            f,
            keyed: HashMap::new(),
            timers: TimerService::new(),
            routing_key: None,
            _types: std::marker::PhantomData,
        }
    }

    /// Makes the keyed state rescalable: `routing_key(key)` is the `u64`
    /// the input's `key_by` returns for the records of `key`, so that a
    /// restore at another parallelism keeps at each subtask the state and
    /// timers of the keys routed to it now; the function's own state is
    /// merged by [`KeyedCoProcessFunction::merge_function`]. Without it a
    /// rescaled restore fails, naming the operator.
    pub fn with_routing_key(
        mut self,
        routing_key: impl Fn(&F::Key) -> u64 + Send + 'static,
    ) -> Self {
        self.routing_key = Some(Box::new(routing_key));
        self
    }

    /// The function.
    pub fn function(&self) -> &F {
        &self.f
    }

    /// Keys holding state.
    pub fn keys_with_state(&self) -> usize {
        self.keyed.len()
    }

    /// Timers registered (both domains).
    pub fn timers(&self) -> usize {
        self.timers.event_timers() + self.timers.processing_timers()
    }

    /// Calls `call` with the context of `key`, then stores the key's state
    /// back (or drops it when cleared).
    fn with_key(
        &mut self,
        key: F::Key,
        out: &mut Vec<O>,
        call: impl FnOnce(&mut F, &mut CoContext<'_, F::Key, F::State, O>) -> Result<(), BoxError>,
    ) -> Result<(), BoxError> {
        let mut state = self.keyed.remove(&key);
        let mut ctx = CoContext {
            key: &key,
            state: &mut state,
            timers: &mut self.timers,
            out,
        };
        let r = call(&mut self.f, &mut ctx);
        if let Some(s) = state {
            self.keyed.insert(key, s);
        }
        r
    }

    fn fire_event_timers(&mut self, watermark: i64, out: &mut Vec<O>) -> Result<(), BoxError> {
        let mut due = self.timers.advance_watermark(watermark);
        // Timers registered at or below the watermark by a firing timer fire
        // in the same round.
        while !due.is_empty() {
            for (time, key) in due {
                self.with_key(key, out, |f, ctx| {
                    f.on_timer(FiredTimer::EventTime(time), ctx)
                })?;
            }
            due = self.timers.pop_event_due();
        }
        Ok(())
    }
}

impl<A, B, O, F> Operator<Either<A, B>, O> for KeyedCoProcessOperator<A, B, O, F>
where
    A: Send,
    B: Send,
    O: Send,
    F: KeyedCoProcessFunction<A, B, O>,
{
    fn process(
        &mut self,
        input: &mut Vec<Either<A, B>>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        for record in input.drain(..) {
            match record {
                Either::Left(a) => {
                    let key = self.f.key_left(&a);
                    self.with_key(key, ctx.output(), |f, ctx| f.process_left(a, ctx))?;
                }
                Either::Right(b) => {
                    let key = self.f.key_right(&b);
                    self.with_key(key, ctx.output(), |f, ctx| f.process_right(b, ctx))?;
                }
            }
        }
        // Timers a call registered at or below the watermark.
        let w = self.timers.current_watermark();
        self.fire_event_timers(w, ctx.output())?;
        ctx.set_processing_timer(self.timers.next_processing_time());
        Ok(())
    }

    fn open(&mut self, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        // restored processing-time timers wake the task again
        ctx.set_processing_timer(self.timers.next_processing_time());
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        self.fire_event_timers(watermark.0, ctx.output())?;
        ctx.set_processing_timer(self.timers.next_processing_time());
        Ok(())
    }

    fn on_processing_time(
        &mut self,
        now_ns: u64,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), BoxError> {
        for (time, key) in self.timers.pop_processing_due(now_ns) {
            self.with_key(key, ctx.output(), |f, ctx| {
                f.on_timer(FiredTimer::ProcessingTime(time), ctx)
            })?;
        }
        ctx.set_processing_timer(self.timers.next_processing_time());
        Ok(())
    }

    fn end_of_input(&mut self, ctx: &mut Context<'_, O>) -> Result<(), BoxError> {
        self.fire_event_timers(i64::MAX, ctx.output())
    }
}

impl<A, B, O, F> Checkpointed for KeyedCoProcessOperator<A, B, O, F>
where
    A: Send,
    B: Send,
    O: Send,
    F: KeyedCoProcessFunction<A, B, O>,
{
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        let state = CoState {
            keyed: self.keyed.iter().map(|(k, s)| (k.clone(), s)).collect(),
            timers: self.timers.clone(),
            function: self.f.snapshot_function()?,
        };
        Ok(Some(serde_json::to_vec(&state)?))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let state: CoState<F::Key, F::State> = serde_json::from_slice(state)
            .map_err(|e| format!("co-process state does not decode: {e}"))?;
        self.keyed = state.keyed.into_iter().collect();
        self.timers = state.timers;
        if let Some(bytes) = state.function {
            self.f.restore_function(&bytes)?;
        }
        Ok(())
    }

    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        let Some(route) = &self.routing_key else {
            return Err(Box::new(FatalError(format!(
                "the co-process operator has no routing key (KeyedCoProcessOperator::with_routing_key) to redistribute its state from parallelism {} to {}",
                rescale.old_parallelism, rescale.parallelism
            ))));
        };
        let (mut keyed, mut timers) = (HashMap::new(), Vec::new());
        let mut functions = 0;
        for (j, chain) in chains.iter().enumerate() {
            let Some(last) = chain.last() else { continue };
            let state: CoState<F::Key, F::State> = serde_json::from_slice(last)
                .map_err(|e| format!("co-process state of old subtask {j} does not decode: {e}"))?;
            keyed.extend(
                state
                    .keyed
                    .into_iter()
                    .filter(|(k, _)| rescale.owns_key(route(k))),
            );
            timers.push(state.timers);
            if let Some(bytes) = state
                .function
                .filter(|_| j % rescale.parallelism == rescale.subtask)
            {
                if functions == 0 {
                    self.f.restore_function(&bytes)?;
                } else {
                    self.f.merge_function(&bytes)?;
                }
                functions += 1;
            }
        }
        self.keyed = keyed;
        self.timers = TimerService::gather(timers, |k| rescale.owns_key(route(k)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums left values per key; a right record `(k, t)` sets an event
    /// timer at `t` that emits the sum and clears the key.
    struct SumUntil;

    impl KeyedCoProcessFunction<(u8, i64), (u8, i64), (u8, i64)> for SumUntil {
        type Key = u8;
        type State = i64;
        fn key_left(&self, a: &(u8, i64)) -> u8 {
            a.0
        }
        fn key_right(&self, b: &(u8, i64)) -> u8 {
            b.0
        }
        fn process_left(
            &mut self,
            a: (u8, i64),
            ctx: &mut CoContext<'_, u8, i64, (u8, i64)>,
        ) -> Result<(), BoxError> {
            *ctx.state_or_insert_with(|| 0) += a.1;
            Ok(())
        }
        fn process_right(
            &mut self,
            b: (u8, i64),
            ctx: &mut CoContext<'_, u8, i64, (u8, i64)>,
        ) -> Result<(), BoxError> {
            ctx.register_event_timer(b.1);
            Ok(())
        }
        fn on_timer(
            &mut self,
            timer: FiredTimer,
            ctx: &mut CoContext<'_, u8, i64, (u8, i64)>,
        ) -> Result<(), BoxError> {
            assert!(matches!(timer, FiredTimer::EventTime(_)));
            let key = *ctx.key();
            if let Some(s) = ctx.clear_state() {
                ctx.emit((key, s));
            }
            Ok(())
        }
    }

    #[test]
    fn keyed_state_and_timers_of_two_inputs_survive_a_restore() {
        let mut op = KeyedCoProcessOperator::new(SumUntil);
        let mut out = Vec::new();
        op.process(
            &mut vec![
                Either::Left((1, 5)),
                Either::Left((2, 7)),
                Either::Right((1, 100)),
            ],
            &mut Context::new(&mut out, None, &mut None),
        )
        .unwrap();
        op.process(
            &mut vec![Either::Left((1, 6))],
            &mut Context::new(&mut out, None, &mut None),
        )
        .unwrap();
        assert!(out.is_empty());
        assert_eq!(op.keys_with_state(), 2);
        let snap = op.snapshot_state(CheckpointId(1)).unwrap().unwrap();
        let mut restored = KeyedCoProcessOperator::new(SumUntil);
        restored.restore_state(&snap).unwrap();
        for o in [&mut op, &mut restored] {
            let mut out = Vec::new();
            o.on_watermark(Watermark(99), &mut Context::new(&mut out, None, &mut None))
                .unwrap();
            assert!(out.is_empty());
            o.on_watermark(Watermark(100), &mut Context::new(&mut out, None, &mut None))
                .unwrap();
            assert_eq!(out, [(1, 11)]);
            assert_eq!(o.keys_with_state(), 1, "key 1 cleared");
            out.clear();
            o.end_of_input(&mut Context::new(&mut out, None, &mut None))
                .unwrap();
            assert!(out.is_empty(), "key 2 has no timer");
        }
        assert!(restored.restore_state(b"{").is_err());
    }

    #[test]
    fn a_timer_registered_in_the_past_fires_after_the_call() {
        let mut op = KeyedCoProcessOperator::new(SumUntil);
        let mut out = Vec::new();
        op.on_watermark(Watermark(50), &mut Context::new(&mut out, None, &mut None))
            .unwrap();
        op.process(
            &mut vec![Either::Left((3, 1)), Either::Right((3, 10))],
            &mut Context::new(&mut out, None, &mut None),
        )
        .unwrap();
        assert_eq!(out, [(3, 1)]);
    }
}
