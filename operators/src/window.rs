//! Event-time windows on keyed streams: tumbling, sliding and global
//! windows with incremental aggregates, allowed lateness and a side output
//! for late records (the semantics of Flink's `WindowOperator` with its
//! default `EventTimeTrigger`).
//!
//! - A record goes into every window its timestamp falls in
//!   ([`WindowAssigner::assign`]); each (key, window) keeps one accumulator
//!   of an [`AggregateFunction`] (keyed state, checkpointed).
//! - A window `[start, end)` fires when the watermark reaches its last
//!   timestamp `end - 1` (Flink's `TimeWindow.maxTimestamp`), emitting
//!   [`WindowOutput::Fired`] with the aggregate's result.
//! - With an allowed lateness `L`, the window's state is kept until the
//!   watermark reaches `end - 1 + L` (its *cleanup time*); a record that
//!   arrives for it in the meantime is added and the window fires again at
//!   once, marked [`WindowResult::late_update`] (Flink's late firing).
//! - A record all of whose windows are past their cleanup time is *late*:
//!   it is counted ([`WindowOperator::late_records`]) and, when the side
//!   output is on, emitted as [`WindowOutput::Late`] (Flink's
//!   `sideOutputLateData`); otherwise dropped.
//! - At the end of the input every window still open fires (the end of
//!   input is the end of event time, as a finished source's final
//!   `Watermark(i64::MAX)`).
//!
//! Time is in ms of event time; watermarks follow Flink: `Watermark(t)`
//! says no more records with a timestamp `<= t` are expected.
//!
//! State: the windows' accumulators are managed keyed state
//! ([`lockgate::KeyedState`], by key group of the key's routing key),
//! written incrementally (a checkpoint holds the windows changed since its
//! base), with the watermark and the late count; the timers are rebuilt
//! from the windows at a restore. The whole-JSON state of earlier builds
//! (windows and timers) still restores.

use crate::timers::TimerService;
use lockgate::Checkpointed;
use lockgate::Context;
use lockgate::{
    error::FatalError, keys::Rescale, state::StateKey, state::StateSnapshot, BoxError,
    CheckpointId, KeyedState, Operator, RecordSize, Watermark,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A half-open event-time interval `[start, end)`, ms.
///
/// # Examples
/// ```
/// use lockgate_operators::window::TimeWindow;
///
/// let w = TimeWindow { start: 0, end: 10 };
/// assert!(w.contains(0) && w.contains(9) && !w.contains(10));
/// assert_eq!(w.max_timestamp(), 9); // it fires once the watermark reaches 9
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimeWindow {
    /// First timestamp in the window.
    pub start: i64,
    /// First timestamp after the window.
    pub end: i64,
}

impl TimeWindow {
    /// The last timestamp in the window, `end - 1` (Flink's
    /// `maxTimestamp`): the window fires when the watermark reaches it.
    pub fn max_timestamp(&self) -> i64 {
        self.end.saturating_sub(1)
    }

    /// True when `t` lies in the window.
    pub fn contains(&self, t: i64) -> bool {
        self.start <= t && t < self.end
    }
}

/// Which windows a record belongs to.
///
/// # Examples
/// ```
/// use lockgate_operators::window::{TimeWindow, WindowAssigner};
///
/// let mut windows = Vec::new();
/// WindowAssigner::tumbling(10).unwrap().assign(25, &mut windows);
/// assert_eq!(windows, [TimeWindow { start: 20, end: 30 }]);
///
/// // a record is in every sliding window that contains it, latest first
/// windows.clear();
/// WindowAssigner::sliding(20, 10).unwrap().assign(25, &mut windows);
/// assert_eq!(windows, [TimeWindow { start: 20, end: 40 }, TimeWindow { start: 10, end: 30 }]);
///
/// windows.clear();
/// WindowAssigner::tumbling_with_offset(10, 3).unwrap().assign(25, &mut windows);
/// assert_eq!(windows, [TimeWindow { start: 23, end: 33 }]);
///
/// assert!(WindowAssigner::tumbling(0).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowAssigner {
    /// Back-to-back windows of `size_ms`, starting at `offset_ms` modulo
    /// `size_ms` (Flink's `TumblingEventTimeWindows`). An offset of 0 aligns
    /// them to the epoch: 24-hour windows then start at UTC midnight.
    Tumbling {
        /// Window length, ms (> 0).
        size_ms: i64,
        /// Alignment, ms.
        offset_ms: i64,
    },
    /// Windows of `size_ms` starting every `slide_ms` (Flink's
    /// `SlidingEventTimeWindows`): a record is in `ceil(size / slide)`
    /// windows (fewer when slide does not divide size).
    Sliding {
        /// Window length, ms (> 0).
        size_ms: i64,
        /// Distance between window starts, ms (> 0).
        slide_ms: i64,
        /// Alignment, ms.
        offset_ms: i64,
    },
    /// One window over all time per key (`[i64::MIN, i64::MAX)`), firing at
    /// the end of event time: a keyed aggregate over the whole input
    /// (Flink's `GlobalWindows` with a trigger at the end of input).
    Global,
}

impl WindowAssigner {
    /// Tumbling windows of `size_ms` aligned to the epoch.
    ///
    /// # Errors
    /// When `size_ms` is not positive.
    pub fn tumbling(size_ms: i64) -> Result<Self, String> {
        Self::tumbling_with_offset(size_ms, 0)
    }

    /// Tumbling windows of `size_ms` starting at `offset_ms` modulo the size.
    ///
    /// # Errors
    /// When `size_ms` is not positive.
    pub fn tumbling_with_offset(size_ms: i64, offset_ms: i64) -> Result<Self, String> {
        if size_ms <= 0 {
            return Err(format!(
                "tumbling window size must be positive, got {size_ms} ms"
            ));
        }
        Ok(WindowAssigner::Tumbling { size_ms, offset_ms })
    }

    /// Sliding windows of `size_ms` every `slide_ms`, aligned to the epoch.
    ///
    /// # Errors
    /// When the size or the slide is not positive.
    pub fn sliding(size_ms: i64, slide_ms: i64) -> Result<Self, String> {
        if size_ms <= 0 || slide_ms <= 0 {
            return Err(format!(
                "sliding window size and slide must be positive, got {size_ms} ms and {slide_ms} ms"
            ));
        }
        Ok(WindowAssigner::Sliding {
            size_ms,
            slide_ms,
            offset_ms: 0,
        })
    }

    /// Appends the windows containing timestamp `t` to `out`, latest start
    /// first (as Flink lists sliding windows).
    pub fn assign(&self, t: i64, out: &mut Vec<TimeWindow>) {
        match *self {
            WindowAssigner::Tumbling { size_ms, offset_ms } => {
                let start = window_start(t, offset_ms, size_ms);
                out.push(TimeWindow {
                    start,
                    end: start.saturating_add(size_ms),
                });
            }
            WindowAssigner::Sliding {
                size_ms,
                slide_ms,
                offset_ms,
            } => {
                let mut start = window_start(t, offset_ms, slide_ms);
                while start > t.saturating_sub(size_ms) {
                    out.push(TimeWindow {
                        start,
                        end: start.saturating_add(size_ms),
                    });
                    match start.checked_sub(slide_ms) {
                        Some(s) => start = s,
                        None => break,
                    }
                }
            }
            WindowAssigner::Global => out.push(TimeWindow {
                start: i64::MIN,
                end: i64::MAX,
            }),
        }
    }
}

/// The start of the window of length `size` (aligned to `offset`) that
/// contains `t` (Flink's `TimeWindow.getWindowStartWithOffset`, with a
/// Euclidean remainder so that negative times work too).
fn window_start(t: i64, offset: i64, size: i64) -> i64 {
    t - (t.wrapping_sub(offset)).rem_euclid(size)
}

/// An incremental aggregate (Flink's `AggregateFunction`): records are
/// added to an accumulator one at a time; the result is read when the
/// window fires. The accumulator is checkpointed, so it must serialize.
///
/// # Examples
/// The largest value per key and tumbling window of 10 ms, in a job (with
/// lockgate's example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{AggregateFunction, WindowAssigner, WindowOperator};
///
/// type Reading = (u64, i64, i64); // (sensor, event time in ms, value)
///
/// struct Max;
/// impl AggregateFunction<Reading> for Max {
///     type Acc = Option<i64>;
///     type Out = i64;
///     fn create(&self) -> Option<i64> {
///         None
///     }
///     fn add(&self, acc: &mut Option<i64>, r: &Reading) {
///         *acc = Some(acc.map_or(r.2, |m| m.max(r.2)));
///     }
///     fn result(&self, acc: &Option<i64>) -> i64 {
///         acc.unwrap_or(i64::MIN)
///     }
/// }
///
/// let readings = vec![(1, 1, 5), (1, 4, 9), (1, 12, 3), (2, 2, -1)];
/// let mut max = example::run(readings, |readings| {
///     readings
///         .key_by(|r| r.0)
///         .task("max", 2)
///         .process("max", |_| {
///             let tumbling = WindowAssigner::tumbling(10).unwrap();
///             WindowOperator::new(tumbling, Max, |r: &Reading| r.0, |r: &Reading| r.1)
///         })
///         .flat_map(|out| out.fired().map(|w| (w.key, w.window.start, w.value)))
/// });
/// max.sort_unstable();
/// assert_eq!(max, [(1, 0, 9), (1, 10, 3), (2, 0, -1)]);
/// ```
pub trait AggregateFunction<T>: Send {
    /// The running state of one window.
    type Acc: Clone + Serialize + DeserializeOwned + Send + 'static;
    /// What a window emits.
    type Out: Clone + Send + 'static;

    /// An empty accumulator.
    fn create(&self) -> Self::Acc;
    /// Adds one record.
    fn add(&self, acc: &mut Self::Acc, record: &T);
    /// The result of a window.
    fn result(&self, acc: &Self::Acc) -> Self::Out;
}

/// Counts records (result: the count).
///
/// # Examples
/// Words counted over the whole input ([`WindowAssigner::Global`]: one
/// window per key that fires at the end), in a job (with lockgate's
/// example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{Count, WindowAssigner, WindowOperator};
///
/// let words: Vec<String> = "to be or not to be".split(' ').map(String::from).collect();
/// let mut counts = example::run(words, |words| {
///     words
///         .key_by(|w| lockgate::keys::hash_key(w))
///         .task("count", 2)
///         .process("count", |_| {
///             WindowOperator::new(WindowAssigner::Global, Count, |w: &String| w.clone(), |_: &String| 0)
///         })
///         .flat_map(|out| out.fired().map(|w| (w.key, w.value)))
/// });
/// counts.sort();
/// let counts: Vec<(&str, u64)> = counts.iter().map(|(w, n)| (w.as_str(), *n)).collect();
/// assert_eq!(counts, [("be", 2), ("not", 1), ("or", 1), ("to", 2)]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Count;

impl<T> AggregateFunction<T> for Count {
    type Acc = u64;
    type Out = u64;
    fn create(&self) -> u64 {
        0
    }
    fn add(&self, acc: &mut u64, _record: &T) {
        *acc += 1;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// Sums an integer field (saturating in `i128`, so that the sum does not
/// depend on the order records arrive in and cannot overflow for any
/// realistic input).
///
/// # Examples
/// Bytes per host in sliding windows of 20 ms every 10 ms, in a job (with
/// lockgate's example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{Sum, WindowAssigner, WindowOperator};
///
/// type Request = (u64, i64, i64); // (host, event time in ms, bytes)
///
/// let requests = vec![(7, 5, 100), (7, 15, 10), (7, 25, 1)];
/// let mut sums = example::run(requests, |requests| {
///     requests
///         .key_by(|r| r.0)
///         .task("bytes", 1)
///         .process("bytes", |_| {
///             let sliding = WindowAssigner::sliding(20, 10).unwrap();
///             WindowOperator::new(sliding, Sum(|r: &Request| r.2), |r: &Request| r.0, |r: &Request| r.1)
///         })
///         .flat_map(|out| out.fired().map(|w| (w.window.start, w.value as i64)))
/// });
/// sums.sort_unstable();
/// // windows [-10, 10), [0, 20), [10, 30) and [20, 40)
/// assert_eq!(sums, [(-10, 100), (0, 110), (10, 11), (20, 1)]);
/// ```
pub struct Sum<F>(pub F);

impl<F> std::fmt::Debug for Sum<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sum").finish_non_exhaustive()
    }
}

impl<T, F: Fn(&T) -> i64 + Send> AggregateFunction<T> for Sum<F> {
    type Acc = i128;
    type Out = i128;
    fn create(&self) -> i128 {
        0
    }
    fn add(&self, acc: &mut i128, record: &T) {
        *acc = acc.saturating_add(i128::from((self.0)(record)));
    }
    fn result(&self, acc: &i128) -> i128 {
        *acc
    }
}

/// The mean of an integer field, `None` for a window whose records all
/// had no value (the field function returns `None` to leave a record out).
/// The accumulator is the exact integer sum and count, so the result does
/// not depend on the arrival order.
///
/// # Examples
/// The mean delay per airport and tumbling hour, leaving out flights with
/// no delay recorded, in a job (with lockgate's example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{Mean, WindowAssigner, WindowOperator};
///
/// type Flight = (u64, i64, i64); // (airport, event time in ms, delay in minutes; -1: none)
/// const HOUR: i64 = 3_600_000;
///
/// let flights = vec![(1, 10, 4), (1, 20, 7), (1, 30, -1), (2, HOUR + 5, -1)];
/// let mut means = example::run(flights, |flights| {
///     flights
///         .key_by(|f| f.0)
///         .task("mean", 1)
///         .process("mean", |_| {
///             let delay = |f: &Flight| (f.2 >= 0).then_some(f.2);
///             WindowOperator::new(WindowAssigner::tumbling(HOUR).unwrap(), Mean(delay), |f: &Flight| f.0, |f: &Flight| f.1)
///         })
///         // `None`: no flight of the window had a delay
///         .flat_map(|out| out.fired().map(|w| (w.key, w.value.map_or(-1.0, |m| m))))
/// });
/// means.sort_by_key(|m| m.0);
/// assert_eq!(means, [(1, 5.5), (2, -1.0)]);
/// ```
pub struct Mean<F>(pub F);

impl<F> std::fmt::Debug for Mean<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mean").finish_non_exhaustive()
    }
}

impl<T, F: Fn(&T) -> Option<i64> + Send> AggregateFunction<T> for Mean<F> {
    type Acc = (i128, u64);
    type Out = Option<f64>;
    fn create(&self) -> (i128, u64) {
        (0, 0)
    }
    fn add(&self, acc: &mut (i128, u64), record: &T) {
        if let Some(v) = (self.0)(record) {
            acc.0 = acc.0.saturating_add(i128::from(v));
            acc.1 += 1;
        }
    }
    fn result(&self, acc: &(i128, u64)) -> Option<f64> {
        (acc.1 > 0).then(|| acc.0 as f64 / acc.1 as f64)
    }
}

/// A custom aggregate from three closures: `create()`, `add(&mut acc,
/// &record)` and `result(&acc)`.
///
/// # Examples
/// The lowest and highest price per symbol and tumbling second, in a job
/// (with lockgate's example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{AggregateFn, WindowAssigner, WindowOperator};
///
/// type Trade = (u64, i64, i64); // (symbol, event time in ms, price)
///
/// let trades = vec![(1, 100, 50), (1, 200, 48), (1, 900, 53), (1, 1_100, 51)];
/// let mut ranges = example::run(trades, |trades| {
///     trades
///         .key_by(|t| t.0)
///         .task("range", 1)
///         .process("range", |_| {
///             let range = AggregateFn::new(
///                 || (i64::MAX, i64::MIN),
///                 |acc: &mut (i64, i64), t: &Trade| *acc = (acc.0.min(t.2), acc.1.max(t.2)),
///                 |acc: &(i64, i64)| *acc,
///             );
///             WindowOperator::new(WindowAssigner::tumbling(1_000).unwrap(), range, |t: &Trade| t.0, |t: &Trade| t.1)
///         })
///         .flat_map(|out| out.fired().map(|w| (w.window.start, w.value)))
/// });
/// ranges.sort_unstable();
/// assert_eq!(ranges, [(0, (48, 53)), (1_000, (51, 51))]);
/// ```
pub struct AggregateFn<C, A, R> {
    create: C,
    add: A,
    result: R,
}

impl<C, A, R> std::fmt::Debug for AggregateFn<C, A, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AggregateFn").finish_non_exhaustive()
    }
}

impl<C, A, R> AggregateFn<C, A, R> {
    /// The aggregate made of these functions.
    pub fn new(create: C, add: A, result: R) -> Self {
        AggregateFn {
            create,
            add,
            result,
        }
    }
}

impl<T, Acc, Out, C, A, R> AggregateFunction<T> for AggregateFn<C, A, R>
where
    Acc: Clone + Serialize + DeserializeOwned + Send + 'static,
    Out: Clone + Send + 'static,
    C: Fn() -> Acc + Send,
    A: Fn(&mut Acc, &T) + Send,
    R: Fn(&Acc) -> Out + Send,
{
    type Acc = Acc;
    type Out = Out;
    fn create(&self) -> Acc {
        (self.create)()
    }
    fn add(&self, acc: &mut Acc, record: &T) {
        (self.add)(acc, record)
    }
    fn result(&self, acc: &Acc) -> Out {
        (self.result)(acc)
    }
}

/// The result of one window of one key.
///
/// # Examples
/// What a window operator emits when a window fires, in a job (with
/// lockgate's example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{Count, TimeWindow, WindowAssigner, WindowOperator, WindowResult};
///
/// let clicks = vec![(3u64, 12i64), (3, 17)]; // (user, event time in ms)
/// let outputs = example::run(clicks, |clicks| {
///     clicks
///         .key_by(|c| c.0)
///         .task("clicks", 1)
///         .process("clicks", |_| {
///             let tumbling = WindowAssigner::tumbling(10).unwrap();
///             WindowOperator::new(tumbling, Count, |c: &(u64, i64)| c.0, |c: &(u64, i64)| c.1)
///         })
/// });
/// let results: Vec<WindowResult<u64, u64>> = outputs.into_iter().filter_map(|o| o.fired()).collect();
/// let window = TimeWindow { start: 10, end: 20 };
/// assert_eq!(results, [WindowResult { key: 3, window, value: 2, late_update: false }]);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowResult<K, O> {
    /// The key.
    pub key: K,
    /// The window.
    pub window: TimeWindow,
    /// The aggregate's result.
    pub value: O,
    /// True for a late firing: the window had fired already and a record
    /// within the allowed lateness updated it (the value includes it).
    pub late_update: bool,
}

/// What a [`WindowOperator`] emits.
///
/// # Examples
/// A late record goes to the side output (driven by hand with watermarks;
/// in a job the task makes these calls):
/// ```
/// use lockgate::{Context, Operator, Watermark};
/// use lockgate_operators::window::{Count, TimeWindow, WindowAssigner, WindowOperator, WindowOutput};
///
/// type Click = (u64, i64); // (user, event time in ms)
/// let mut op = WindowOperator::new(WindowAssigner::tumbling(10).unwrap(), Count, |c: &Click| c.0, |c: &Click| c.1)
///     .with_late_side_output();
/// let (mut out, mut wake) = (Vec::new(), None);
/// op.process(&mut vec![(1, 5)], &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// op.on_watermark(Watermark(9), &mut Context::new(&mut out, None, &mut wake)).unwrap(); // [0, 10) fires
/// op.process(&mut vec![(1, 8)], &mut Context::new(&mut out, None, &mut wake)).unwrap(); // too late for it
///
/// let fired = out[0].clone().fired().unwrap();
/// assert_eq!((fired.window, fired.value), (TimeWindow { start: 0, end: 10 }, 1));
/// assert_eq!(out[1], WindowOutput::Late((1, 8)));
/// assert_eq!(out[1].clone().late(), Some((1, 8)));
/// assert_eq!(op.late_records(), 1);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WindowOutput<K, O, T> {
    /// A window fired.
    Fired(WindowResult<K, O>),
    /// A record later than the allowed lateness (side output; only with
    /// [`WindowOperator::with_late_side_output`]).
    Late(T),
}

impl<K, O, T> WindowOutput<K, O, T> {
    /// The window result, if this is one.
    pub fn fired(self) -> Option<WindowResult<K, O>> {
        match self {
            WindowOutput::Fired(r) => Some(r),
            WindowOutput::Late(_) => None,
        }
    }

    /// The late record, if this is one.
    pub fn late(self) -> Option<T> {
        match self {
            WindowOutput::Fired(_) => None,
            WindowOutput::Late(t) => Some(t),
        }
    }
}

/// Counts as its own size, or as the late record's size when that has a
/// heap payload (keys and results are counted by their inline size only).
impl<K, O, T: RecordSize> RecordSize for WindowOutput<K, O, T> {
    const FIXED_SIZE: bool = T::FIXED_SIZE;
    fn size_bytes(&self) -> usize {
        match self {
            WindowOutput::Late(t) if !T::FIXED_SIZE => t.size_bytes(),
            _ => std::mem::size_of::<Self>(),
        }
    }
}

/// What a window key must be: hashable, ordered (timers are ordered by
/// time then key), cloneable and serializable (keyed state).
///
/// # Examples
/// Every type with those traits is one, a tuple of a `String` and a
/// number for instance, in a job (with lockgate's example helper):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{Count, WindowAssigner, WindowKey, WindowOperator};
///
/// fn is_window_key<K: WindowKey>(_: &K) {}
/// is_window_key(&("JFK".to_string(), 2024u32));
///
/// type Flight = (String, u32, i64); // (airport, year, event time in ms)
/// let flights = vec![("JFK".to_string(), 2024, 1), ("JFK".to_string(), 2025, 2), ("JFK".to_string(), 2024, 3)];
/// let mut counts = example::run(flights, |flights| {
///     flights
///         .key_by(|f| lockgate::keys::hash_key(&(&f.0, f.1)))
///         .task("per-year", 1)
///         .process("per-year", |_| {
///             let key = |f: &Flight| (f.0.clone(), f.1); // the window key
///             WindowOperator::new(WindowAssigner::Global, Count, key, |f: &Flight| f.2)
///         })
///         .flat_map(|out| out.fired().map(|w| (w.key.1, w.value)))
/// });
/// counts.sort_unstable();
/// assert_eq!(counts, [(2024, 2), (2025, 1)]);
/// ```
pub trait WindowKey:
    Clone + Eq + Hash + Ord + Serialize + DeserializeOwned + Send + 'static
{
}
impl<K: Clone + Eq + Hash + Ord + Serialize + DeserializeOwned + Send + 'static> WindowKey for K {}

#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, Acc: Serialize",
    deserialize = "K: DeserializeOwned + Ord, Acc: DeserializeOwned"
))]
struct WindowState<K, Acc> {
    windows: Vec<((K, TimeWindow), Acc)>,
    timers: TimerService<(K, TimeWindow)>,
    late: u64,
}

/// A window's state key: its key's routing key (which decides its key
/// group), the key and the window.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(bound(serialize = "K: Serialize", deserialize = "K: DeserializeOwned"))]
struct Slot<K> {
    route: u64,
    key: K,
    window: TimeWindow,
}

impl<K> StateKey for Slot<K> {
    fn routing_key(&self) -> u64 {
        self.route
    }
}

/// The tag of the window state since it is managed (earlier builds wrote
/// JSON, which starts with `{`).
const MANAGED_TAG: &[u8; 4] = b"LGW1";

/// What a managed-state part holds besides the windows: the watermark the
/// timers had reached and the late count.
#[derive(Serialize, Deserialize)]
struct Header {
    watermark: i64,
    late: u64,
}

/// A part of the window state: the header and the keyed state's bytes, or
/// `None` for the JSON of an earlier build.
fn split_part(bytes: &[u8]) -> Result<Option<(Header, &[u8])>, BoxError> {
    let Some(rest) = bytes.strip_prefix(MANAGED_TAG) else {
        return Ok(None);
    };
    let (header, keyed) = postcard::take_from_bytes::<Header>(rest)
        .map_err(|e| format!("window state header does not decode: {e}"))?;
    Ok(Some((header, keyed)))
}

fn join_part(header: &Header, keyed: &[u8]) -> Result<Vec<u8>, BoxError> {
    let mut bytes = MANAGED_TAG.to_vec();
    bytes = postcard::to_extend(header, bytes)?;
    bytes.extend_from_slice(keyed);
    Ok(bytes)
}

/// The routing key of a state key: the `u64` the input's `key_by` returns
/// for that key's records (see [`WindowOperator::with_routing_key`]).
pub(crate) type RoutingKeyFn<K> = Box<dyn Fn(&K) -> u64 + Send>;

/// A keyed event-time window operator (see the module docs). Its input
/// must be partitioned by the same key (`key_by`), so that a key's records
/// meet in one subtask.
///
/// # Examples
/// Page views per page in tumbling windows of 1 s, in a task of 2
/// subtasks (a job with lockgate's example helper; the windows still open
/// fire at the end of the input):
/// ```
/// use lockgate::example;
/// use lockgate_operators::window::{Count, WindowAssigner, WindowOperator};
///
/// type View = (u64, i64); // (page, event time in ms)
///
/// let views = vec![(1, 100), (2, 300), (1, 700), (1, 1_200), (2, 1_900)];
/// let mut counts = example::run(views, |views| {
///     views
///         .key_by(|v| v.0)
///         .task("views", 2)
///         .process("views", |_| {
///             WindowOperator::new(WindowAssigner::tumbling(1_000).unwrap(), Count, |v: &View| v.0, |v: &View| v.1)
///                 .with_allowed_lateness_ms(500)
///                 .with_routing_key(|page| *page) // rescalable: the key_by above
///         })
///         .flat_map(|out| out.fired().map(|w| (w.key, w.window.start, w.value)))
/// });
/// counts.sort_unstable();
/// assert_eq!(counts, [(1, 0, 2), (1, 1_000, 1), (2, 0, 1), (2, 1_000, 1)]);
/// ```
///
/// Driven by hand, a window fires when the watermark reaches its last
/// millisecond:
/// ```
/// use lockgate::{Context, Operator, Watermark};
/// use lockgate_operators::window::{Count, WindowAssigner, WindowOperator};
///
/// let mut op = WindowOperator::new(WindowAssigner::tumbling(10).unwrap(), Count, |_: &i64| 0u8, |t: &i64| *t);
/// let (mut out, mut wake) = (Vec::new(), None);
/// op.process(&mut vec![1, 5, 12], &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// op.on_watermark(Watermark(8), &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// assert!(out.is_empty());
/// assert_eq!(op.open_windows(), 2);
/// op.on_watermark(Watermark(9), &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// let fired: Vec<u64> = out.into_iter().filter_map(|o| o.fired()).map(|w| w.value).collect();
/// assert_eq!(fired, [2]);
/// assert_eq!(op.open_windows(), 1);
/// ```
pub struct WindowOperator<T, K, A: AggregateFunction<T>> {
    key_of: Box<dyn Fn(&T) -> K + Send>,
    time_of: Box<dyn Fn(&T) -> i64 + Send>,
    assigner: WindowAssigner,
    agg: A,
    allowed_lateness_ms: i64,
    late_side_output: bool,
    late_slot: Option<Arc<AtomicU64>>,
    routing_key: Option<RoutingKeyFn<K>>,
    windows: KeyedState<Slot<K>, A::Acc>,
    timers: TimerService<(K, TimeWindow)>,
    late: u64,
    scratch: Vec<TimeWindow>,
}

impl<T, K, A: AggregateFunction<T>> std::fmt::Debug for WindowOperator<T, K, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowOperator").finish_non_exhaustive()
    }
}

impl<T, K: WindowKey, A: AggregateFunction<T>> WindowOperator<T, K, A> {
    /// Windows of `assigner` per key `key_of(record)` over event time
    /// `time_of(record)` (ms), aggregated by `agg`; no allowed lateness, no
    /// side output.
    pub fn new(
        assigner: WindowAssigner,
        agg: A,
        key_of: impl Fn(&T) -> K + Send + 'static,
        time_of: impl Fn(&T) -> i64 + Send + 'static,
    ) -> Self {
        WindowOperator {
            key_of: Box::new(key_of),
            time_of: Box::new(time_of),
            assigner,
            agg,
            allowed_lateness_ms: 0,
            late_side_output: false,
            late_slot: None,
            routing_key: None,
            windows: KeyedState::new(),
            timers: TimerService::new(),
            late: 0,
            scratch: Vec::new(),
        }
    }

    /// Keeps windows open `ms` past their end for late records (negative
    /// values count as 0).
    pub fn with_allowed_lateness_ms(mut self, ms: i64) -> Self {
        self.allowed_lateness_ms = ms.max(0);
        self
    }

    /// Emits late records as [`WindowOutput::Late`] instead of dropping
    /// them (they are counted either way).
    pub fn with_late_side_output(mut self) -> Self {
        self.late_side_output = true;
        self
    }

    /// Publishes the late-record count into `slot` (stored, not added,
    /// whenever it changes and after a restore), so that the application
    /// can read it after the job: the count is part of the checkpointed
    /// state, so the last value stored is exact even after restarts. Give
    /// each subtask its own slot.
    pub fn with_late_count_slot(mut self, slot: Arc<AtomicU64>) -> Self {
        self.late_slot = Some(slot);
        self
    }

    /// Makes the windows rescalable: `routing_key(key)` is the `u64` the
    /// input's `key_by` returns for the records of `key`, so that a
    /// restore at another parallelism keeps at each subtask the windows
    /// (and timers) of the keys routed to it now
    /// ([`lockgate::Checkpointed::restore_rescaled`]); the late-record
    /// count of old subtask `j` goes to new subtask `j % P`, so the sum is
    /// kept. Without it a rescaled restore fails, naming the operator.
    pub fn with_routing_key(mut self, routing_key: impl Fn(&K) -> u64 + Send + 'static) -> Self {
        self.routing_key = Some(Box::new(routing_key));
        self
    }

    /// Records dropped (or side-output) as late so far.
    pub fn late_records(&self) -> u64 {
        self.late
    }

    /// Windows (key, window pairs) holding state.
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }

    fn slot(&self, key: &K, window: TimeWindow) -> Slot<K> {
        Slot {
            route: self.routing_key.as_ref().map_or(0, |r| r(key)),
            key: key.clone(),
            window,
        }
    }

    /// The event-time timers of the windows held, at `watermark` (a
    /// restore): each window's firing, unless it fired, and its cleanup.
    fn rebuild_timers(&mut self, watermark: i64) {
        let mut timers = TimerService::new();
        timers.advance_watermark(watermark);
        for (slot, _) in self.windows.iter() {
            let w = slot.window;
            if w.max_timestamp() > watermark {
                timers.register_event_time(w.max_timestamp(), (slot.key.clone(), w));
            }
            let cleanup = self.cleanup_time(&w);
            if cleanup > watermark {
                timers.register_event_time(cleanup, (slot.key.clone(), w));
            }
        }
        self.timers = timers;
    }

    fn header(&self) -> Header {
        Header {
            watermark: self.timers.current_watermark(),
            late: self.late,
        }
    }

    /// `restored`'s windows that `keep` keeps, their state keys made
    /// again with this operator's routing key (a snapshot taken without
    /// one has them in key group 0).
    fn rekeyed(
        &self,
        restored: KeyedState<Slot<K>, A::Acc>,
        keep: impl Fn(&K) -> bool,
        into: &mut KeyedState<Slot<K>, A::Acc>,
    ) {
        for (slot, acc) in restored.iter() {
            if keep(&slot.key) {
                into.insert(self.slot(&slot.key, slot.window), acc.clone());
            }
        }
    }

    /// The windows and timers of the JSON state of an earlier build.
    fn windows_of_json(
        &self,
        state: WindowState<K, A::Acc>,
        keep: impl Fn(&K) -> bool,
    ) -> KeyedState<Slot<K>, A::Acc> {
        let mut windows = KeyedState::new();
        for ((k, w), acc) in state.windows {
            if keep(&k) {
                windows.insert(self.slot(&k, w), acc);
            }
        }
        windows
    }

    fn cleanup_time(&self, w: &TimeWindow) -> i64 {
        w.max_timestamp().saturating_add(self.allowed_lateness_ms)
    }

    fn publish_late(&self) {
        if let Some(s) = &self.late_slot {
            s.store(self.late, Ordering::Relaxed);
        }
    }

    fn fire(
        &self,
        key: &K,
        window: TimeWindow,
        late_update: bool,
    ) -> Option<WindowResult<K, A::Out>> {
        self.windows
            .get(&self.slot(key, window))
            .map(|acc| WindowResult {
                key: key.clone(),
                window,
                value: self.agg.result(acc),
                late_update,
            })
    }

    fn advance(&mut self, watermark: i64, out: &mut Vec<WindowOutput<K, A::Out, T>>) {
        for (time, (key, window)) in self.timers.advance_watermark(watermark) {
            if time == window.max_timestamp() {
                if let Some(r) = self.fire(&key, window, false) {
                    out.push(WindowOutput::Fired(r));
                }
            }
            if time >= self.cleanup_time(&window) {
                let slot = self.slot(&key, window);
                self.windows.remove(&slot);
            }
        }
    }
}

impl<T, K, A> Operator<T, WindowOutput<K, A::Out, T>> for WindowOperator<T, K, A>
where
    T: Send,
    K: WindowKey,
    A: AggregateFunction<T>,
{
    fn process(
        &mut self,
        input: &mut Vec<T>,
        ctx: &mut Context<'_, WindowOutput<K, A::Out, T>>,
    ) -> Result<(), BoxError> {
        let watermark = self.timers.current_watermark();
        let late_before = self.late;
        for record in input.drain(..) {
            let t = (self.time_of)(&record);
            let key = (self.key_of)(&record);
            self.scratch.clear();
            self.assigner.assign(t, &mut self.scratch);
            let mut placed = false;
            for i in 0..self.scratch.len() {
                let w = self.scratch[i];
                let cleanup = self.cleanup_time(&w);
                if cleanup <= watermark {
                    continue; // this window is gone: the record is late for it
                }
                placed = true;
                let slot = self.slot(&key, w);
                if self.windows.get(&slot).is_none() {
                    // A window that has fired already (a record within the
                    // allowed lateness) fires again below, not by timer.
                    if w.max_timestamp() > watermark {
                        self.timers
                            .register_event_time(w.max_timestamp(), (key.clone(), w));
                    }
                    self.timers.register_event_time(cleanup, (key.clone(), w));
                    self.windows.insert(slot.clone(), self.agg.create());
                }
                if let Some(acc) = self.windows.get_mut(&slot) {
                    self.agg.add(acc, &record);
                }
                if w.max_timestamp() <= watermark {
                    if let Some(r) = self.fire(&key, w, true) {
                        ctx.emit(WindowOutput::Fired(r));
                    }
                }
            }
            if !placed {
                self.late += 1;
                if self.late_side_output {
                    ctx.emit(WindowOutput::Late(record));
                }
            }
        }
        if self.late != late_before {
            self.publish_late();
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, WindowOutput<K, A::Out, T>>,
    ) -> Result<(), BoxError> {
        self.advance(watermark.0, ctx.output());
        Ok(())
    }

    fn end_of_input(
        &mut self,
        ctx: &mut Context<'_, WindowOutput<K, A::Out, T>>,
    ) -> Result<(), BoxError> {
        self.advance(i64::MAX, ctx.output());
        Ok(())
    }
}

impl<T, K, A> Checkpointed for WindowOperator<T, K, A>
where
    T: Send,
    K: WindowKey,
    A: AggregateFunction<T>,
{
    /// The whole state (managed format, a full part).
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(join_part(&self.header(), &self.windows.snapshot()?)?))
    }

    /// Incremental: the windows changed since the request's base (see
    /// [`KeyedState::snapshot_async`]), with the watermark and late count.
    fn snapshot_state_async(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<StateSnapshot>, BoxError> {
        let header = self.header();
        let windows = self.windows.snapshot_async();
        Ok(Some(StateSnapshot::incremental(move |req| {
            let mut part = windows.run(req)?;
            part.bytes = join_part(&header, &part.bytes)?;
            Ok(part)
        })))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        self.restore_state_chain(&[state])
    }

    fn restore_state_chain(&mut self, chain: &[&[u8]]) -> Result<(), BoxError> {
        // Parts before the newest JSON one (an earlier build's) are not
        // needed: JSON parts are whole.
        let from = chain
            .iter()
            .rposition(|p| !p.starts_with(MANAGED_TAG))
            .unwrap_or(0);
        let chain = &chain[from..];
        let Some(last) = chain.last() else {
            return Ok(());
        };
        if split_part(last)?.is_none() {
            let state: WindowState<K, A::Acc> = serde_json::from_slice(last)
                .map_err(|e| format!("window state does not decode: {e}"))?;
            self.windows = KeyedState::new();
            self.timers = state.timers.clone();
            self.late = state.late;
            self.windows = self.windows_of_json(state, |_| true);
        } else {
            let mut keyed = Vec::with_capacity(chain.len());
            let mut header = None;
            for part in chain {
                let Some((h, k)) = split_part(part)? else {
                    return Err("window state: a JSON part inside a managed chain".into());
                };
                keyed.push(k);
                header = Some(h);
            }
            let header = header.ok_or("window state: no part")?;
            let restored = KeyedState::restore_chain(&keyed)?;
            let mut windows = KeyedState::new();
            self.rekeyed(restored, |_| true, &mut windows);
            self.windows = windows;
            self.late = header.late;
            self.rebuild_timers(header.watermark);
        }
        self.publish_late();
        Ok(())
    }

    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        let Some(route) = &self.routing_key else {
            return Err(Box::new(FatalError(format!(
                "the window operator has no routing key (WindowOperator::with_routing_key) to redistribute its windows from parallelism {} to {}",
                rescale.old_parallelism, rescale.parallelism
            ))));
        };
        let json = chains
            .iter()
            .filter_map(|c| c.last())
            .any(|last| !last.starts_with(MANAGED_TAG));
        if json {
            // An earlier build's JSON state: windows and timers as stored.
            let (mut windows, mut timers, mut late) = (Vec::new(), Vec::new(), 0);
            for (j, chain) in chains.iter().enumerate() {
                let Some(last) = chain.last() else { continue };
                let state: WindowState<K, A::Acc> = serde_json::from_slice(last)
                    .map_err(|e| format!("window state of old subtask {j} does not decode: {e}"))?;
                windows.extend(
                    state
                        .windows
                        .into_iter()
                        .filter(|((k, _), _)| rescale.owns_key(route(k))),
                );
                timers.push(state.timers);
                if j % rescale.parallelism == rescale.subtask {
                    late += state.late;
                }
            }
            let state = WindowState {
                windows,
                timers: TimerService::new(),
                late,
            };
            self.windows = self.windows_of_json(state, |_| true);
            self.timers = TimerService::gather(timers, |(k, _)| rescale.owns_key(route(k)));
            self.late = late;
        } else {
            let (mut windows, mut watermark, mut late) = (KeyedState::new(), None::<i64>, 0);
            for (j, chain) in chains.iter().enumerate() {
                if chain.is_empty() {
                    continue; // that old subtask stored nothing
                }
                let mut parts = Vec::with_capacity(chain.len());
                for (i, part) in chain.iter().enumerate() {
                    let (h, k) = split_part(part)?
                        .ok_or("window state: a JSON part inside a managed chain")?;
                    parts.push(k);
                    if i + 1 == chain.len() {
                        // Every old subtask had seen at least the smallest.
                        watermark = Some(watermark.map_or(h.watermark, |w| w.min(h.watermark)));
                        if j % rescale.parallelism == rescale.subtask {
                            late += h.late;
                        }
                    }
                }
                // Each old subtask's windows, kept by the routing key of
                // this operator (not the one stored: a snapshot taken
                // without a routing key has them all in key group 0).
                let restored = KeyedState::restore_chain(&parts)?;
                self.rekeyed(restored, |k| rescale.owns_key(route(k)), &mut windows);
            }
            self.windows = windows;
            self.late = late;
            self.rebuild_timers(watermark.unwrap_or(i64::MIN));
        }
        self.publish_late();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (key, timestamp ms, value)
    type Rec = (u32, i64, i64);

    fn drive<A: AggregateFunction<Rec>>(
        op: &mut WindowOperator<Rec, u32, A>,
        records: &[Rec],
    ) -> Vec<WindowOutput<u32, A::Out, Rec>> {
        let mut out = Vec::new();
        op.process(
            &mut records.to_vec(),
            &mut Context::new(&mut out, None, &mut None),
        )
        .unwrap();
        out
    }

    fn watermark<A: AggregateFunction<Rec>>(
        op: &mut WindowOperator<Rec, u32, A>,
        w: i64,
    ) -> Vec<WindowOutput<u32, A::Out, Rec>> {
        let mut out = Vec::new();
        op.on_watermark(Watermark(w), &mut Context::new(&mut out, None, &mut None))
            .unwrap();
        out
    }

    fn fired<O: Clone>(outs: &[WindowOutput<u32, O, Rec>]) -> Vec<(u32, i64, O, bool)> {
        let mut v: Vec<_> = outs
            .iter()
            .filter_map(|o| match o {
                WindowOutput::Fired(r) => {
                    Some((r.key, r.window.start, r.value.clone(), r.late_update))
                }
                WindowOutput::Late(_) => None,
            })
            .collect();
        v.sort_by_key(|x| (x.0, x.1));
        v
    }

    type SumOp = WindowOperator<Rec, u32, Sum<fn(&Rec) -> i64>>;

    fn sum_op() -> SumOp {
        WindowOperator::new(
            WindowAssigner::tumbling(10).unwrap(),
            Sum((|r: &Rec| r.2) as fn(&Rec) -> i64),
            |r: &Rec| r.0,
            |r: &Rec| r.1,
        )
    }

    #[test]
    fn assigners() {
        let mut v = Vec::new();
        WindowAssigner::tumbling(10).unwrap().assign(25, &mut v);
        assert_eq!(v, [TimeWindow { start: 20, end: 30 }]);
        v.clear();
        WindowAssigner::tumbling(10).unwrap().assign(-1, &mut v);
        assert_eq!(v, [TimeWindow { start: -10, end: 0 }]);
        v.clear();
        WindowAssigner::tumbling_with_offset(10, 3)
            .unwrap()
            .assign(12, &mut v);
        assert_eq!(v, [TimeWindow { start: 3, end: 13 }]);
        v.clear();
        WindowAssigner::sliding(30, 10).unwrap().assign(25, &mut v);
        assert_eq!(
            v,
            [
                TimeWindow { start: 20, end: 50 },
                TimeWindow { start: 10, end: 40 },
                TimeWindow { start: 0, end: 30 }
            ]
        );
        assert!(v.iter().all(|w| w.contains(25)));
        v.clear();
        // slide not dividing size: 20 lies in [15,40) and [0,25), 25 only
        // in [15,40)
        WindowAssigner::sliding(25, 15).unwrap().assign(20, &mut v);
        assert_eq!(
            v,
            [
                TimeWindow { start: 15, end: 40 },
                TimeWindow { start: 0, end: 25 }
            ]
        );
        v.clear();
        WindowAssigner::sliding(25, 15).unwrap().assign(25, &mut v);
        assert_eq!(v, [TimeWindow { start: 15, end: 40 }]);
        assert!(WindowAssigner::tumbling(0).is_err());
        assert!(WindowAssigner::sliding(10, 0).is_err());
    }

    #[test]
    fn tumbling_windows_fire_when_the_watermark_passes_their_end() {
        let mut op = sum_op();
        // out of order within the bound: 12 after 17
        assert!(drive(&mut op, &[(1, 3, 1), (1, 17, 10), (1, 12, 100), (2, 5, 7)]).is_empty());
        assert!(watermark(&mut op, 8).is_empty(), "window [0,10) needs 9");
        assert_eq!(
            fired(&watermark(&mut op, 9)),
            [(1, 0, 1, false), (2, 0, 7, false)]
        );
        assert_eq!(fired(&watermark(&mut op, 19)), [(1, 10, 110, false)]);
        assert_eq!(op.open_windows(), 0);
        assert_eq!(op.late_records(), 0);
    }

    #[test]
    fn sliding_windows_count_each_record_in_every_window() {
        let mut op = WindowOperator::new(
            WindowAssigner::sliding(20, 10).unwrap(),
            Count,
            |r: &Rec| r.0,
            |r: &Rec| r.1,
        );
        drive(&mut op, &[(1, 5, 0), (1, 15, 0), (1, 25, 0)]);
        let out = fired(&watermark(&mut op, i64::MAX));
        // windows [-10,10) [0,20) [10,30) [20,40)
        assert_eq!(
            out,
            [
                (1, -10, 1, false),
                (1, 0, 2, false),
                (1, 10, 2, false),
                (1, 20, 1, false)
            ]
        );
    }

    #[test]
    fn late_records_are_counted_and_side_output() {
        let slot = Arc::new(AtomicU64::new(0));
        let mut op = sum_op()
            .with_late_side_output()
            .with_late_count_slot(slot.clone());
        drive(&mut op, &[(1, 5, 1)]);
        assert_eq!(fired(&watermark(&mut op, 20)), [(1, 0, 1, false)]);
        let out = drive(&mut op, &[(1, 9, 2), (1, 21, 3)]);
        assert_eq!(out, [WindowOutput::Late((1, 9, 2))]);
        assert_eq!(op.late_records(), 1);
        assert_eq!(slot.load(Ordering::Relaxed), 1);
        // without the side output: counted, not emitted
        let mut quiet = sum_op();
        watermark(&mut quiet, 100);
        assert!(drive(&mut quiet, &[(1, 5, 1)]).is_empty());
        assert_eq!(quiet.late_records(), 1);
    }

    #[test]
    fn allowed_lateness_keeps_a_window_open_and_fires_updates() {
        let mut op = sum_op().with_allowed_lateness_ms(5).with_late_side_output();
        drive(&mut op, &[(1, 5, 1)]);
        assert_eq!(fired(&watermark(&mut op, 9)), [(1, 0, 1, false)]);
        // within lateness (cleanup at 9 + 5 = 14): updates and fires again
        assert_eq!(fired(&drive(&mut op, &[(1, 7, 10)])), [(1, 0, 11, true)]);
        // a new key's window within lateness also fires at once
        assert_eq!(fired(&drive(&mut op, &[(2, 1, 4)])), [(2, 0, 4, true)]);
        assert!(
            watermark(&mut op, 13).is_empty(),
            "no second on-time firing"
        );
        assert_eq!(op.open_windows(), 2);
        assert!(watermark(&mut op, 14).is_empty());
        assert_eq!(op.open_windows(), 0, "cleaned at end - 1 + lateness");
        assert_eq!(
            drive(&mut op, &[(1, 8, 1)]),
            [WindowOutput::Late((1, 8, 1))]
        );
    }

    #[test]
    fn a_custom_aggregate_and_mean() {
        // max and min of the values
        let agg = AggregateFn::new(
            || (i64::MIN, i64::MAX),
            |acc: &mut (i64, i64), r: &Rec| {
                acc.0 = acc.0.max(r.2);
                acc.1 = acc.1.min(r.2);
            },
            |acc: &(i64, i64)| *acc,
        );
        let mut op = WindowOperator::new(WindowAssigner::Global, agg, |r: &Rec| r.0, |r: &Rec| r.1);
        drive(&mut op, &[(1, 5, 3), (1, 500, -2), (1, 7, 9)]);
        assert!(
            watermark(&mut op, 1_000_000).is_empty(),
            "global fires at the end"
        );
        let mut out = Vec::new();
        op.end_of_input(&mut Context::new(&mut out, None, &mut None))
            .unwrap();
        assert_eq!(fired(&out), [(1, i64::MIN, (9, -2), false)]);

        let mut mean = WindowOperator::new(
            WindowAssigner::tumbling(10).unwrap(),
            Mean(|r: &Rec| (r.2 >= 0).then_some(r.2)),
            |r: &Rec| r.0,
            |r: &Rec| r.1,
        );
        drive(&mut mean, &[(1, 1, 1), (1, 2, 2), (1, 3, -1), (2, 4, -5)]);
        assert_eq!(
            fired(&watermark(&mut mean, 9)),
            [(1, 0, Some(1.5), false), (2, 0, None, false)]
        );
    }

    #[test]
    fn windows_survive_a_checkpoint_and_restore() {
        let mut op = sum_op().with_allowed_lateness_ms(100);
        drive(&mut op, &[(1, 5, 1), (1, 15, 2), (2, 25, 3)]);
        assert_eq!(fired(&watermark(&mut op, 9)), [(1, 0, 1, false)]);
        let snap = op.snapshot_state(CheckpointId(1)).unwrap().unwrap();
        // the original goes on
        let mut outs = drive(&mut op, &[(1, 16, 10), (1, 6, 5)]);
        outs.extend(watermark(&mut op, i64::MAX));
        let mut expected = fired(&outs);
        expected.sort_by_key(|x| (x.0, x.1, x.3));
        // a fresh operator restored from the snapshot sees the same records
        let slot = Arc::new(AtomicU64::new(9));
        let mut restored = sum_op()
            .with_allowed_lateness_ms(100)
            .with_late_count_slot(slot.clone());
        restored.restore_state(&snap).unwrap();
        assert_eq!(slot.load(Ordering::Relaxed), 0, "restored count published");
        assert_eq!(restored.open_windows(), 3);
        let mut out = drive(&mut restored, &[(1, 16, 10), (1, 6, 5)]);
        out.extend(watermark(&mut restored, i64::MAX));
        let mut got = fired(&out);
        got.sort_by_key(|x| (x.0, x.1, x.3));
        assert_eq!(got, expected);
        // window [0,10) had fired before the checkpoint: the record at 6 is
        // a late update of it after the restore too
        assert!(got.contains(&(1, 0, 6, true)));
        assert!(restored.restore_state(b"not json").is_err());
    }

    #[test]
    fn a_rescaled_restore_keeps_the_windows_of_the_keys_routed_here() {
        // Two old subtasks with windows of keys 1..=6; restored at 2 and 1.
        let mut olds = [sum_op(), sum_op()];
        drive(&mut olds[0], &[(1, 5, 1), (2, 5, 2), (3, 15, 3)]);
        drive(&mut olds[1], &[(4, 5, 4), (5, 25, 5), (6, 5, 6)]);
        let snaps: Vec<Vec<u8>> = olds
            .iter_mut()
            .map(|o| o.snapshot_state(CheckpointId(1)).unwrap().unwrap())
            .collect();
        let chains: Vec<Vec<&[u8]>> = snaps.iter().map(|b| vec![&b[..]]).collect();
        let rescale = |subtask, parallelism| Rescale {
            subtask,
            parallelism,
            old_parallelism: 2,
            max_parallelism: 128,
        };
        let restored = |subtask, parallelism| {
            let mut op = sum_op().with_routing_key(|k: &u32| u64::from(*k));
            op.restore_rescaled(&chains, &rescale(subtask, parallelism))
                .unwrap();
            op
        };
        let fired_at = |mut op: WindowOperator<Rec, u32, _>| -> Vec<u32> {
            let mut keys: Vec<u32> = fired(&watermark(&mut op, i64::MAX))
                .into_iter()
                .map(|f| f.0)
                .collect();
            keys.sort_unstable();
            keys
        };
        // At 1: every window; at 2: each key where key_to_subtask sends it.
        assert_eq!(fired_at(restored(0, 1)), [1, 2, 3, 4, 5, 6]);
        for i in 0..2 {
            let want: Vec<u32> = (1..=6u32)
                .filter(|k| lockgate::keys::key_to_subtask(u64::from(*k), 2) == i)
                .collect();
            assert_eq!(fired_at(restored(i, 2)), want, "subtask {i}");
        }
        // Without a routing key the restore is refused, naming the rule.
        let err = sum_op()
            .restore_rescaled(&chains, &rescale(0, 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("with_routing_key"), "{err}");
    }
}
