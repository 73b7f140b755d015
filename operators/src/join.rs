//! An event-time enrichment join on the keyed co-process operator: each
//! record of the first input (a *fact*, e.g. a flight) is enriched with the
//! record of the second input (a *dimension row*, e.g. the weather) that
//! has the same key and the same event timestamp.
//!
//! Per (key, timestamp) the join keeps the first dimension row received
//! and buffers the facts that came before it:
//!
//! - a fact whose row is there is emitted at once, `combine(fact,
//!   Some(row))`;
//! - a fact whose row is not (yet) there waits; when the watermark reaches
//!   its timestamp, no row for it can arrive on time any more (the task
//!   watermark is the minimum over both inputs, so the dimension stream has
//!   passed that time), and the waiting facts are emitted as
//!   `combine(fact, None)` (*unmatched*);
//! - a row is kept until the watermark reaches its timestamp plus the
//!   retention ([`EnrichJoin::with_retention_ms`], default 0), then
//!   dropped;
//! - a fact at or below the watermark when it arrives is *late*: it is
//!   joined with the kept row if there is one, else emitted unmatched, and
//!   counted; a row at or below the watermark is late, counted and dropped
//!   (its facts were decided already). A second row for the same (key,
//!   timestamp) is ignored (the first wins, as in
//!   `lockgate_examples::flights::reference::compute`).
//!
//! This is Flink's event-time *temporal join* restricted to exact
//! timestamp matches (an interval join with a zero-length interval and an
//! outer side for unmatched facts).

use crate::co_process::{CoContext, FiredTimer, KeyedCoProcessFunction};
use crate::window::WindowKey;
use lockgate::BoxError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// The join's counters (checkpointed with its state, so exact after
/// restarts).
///
/// # Examples
/// Read after a job through [`EnrichJoin::with_counts_slot`] (with
/// lockgate's example helper):
/// ```
/// use lockgate::{example, Either};
/// use lockgate_operators::co_process::KeyedCoProcessOperator;
/// use lockgate_operators::join::{EnrichJoin, JoinCounts};
/// use std::sync::{Arc, Mutex};
///
/// type Fact = (u8, i64, u32); // (key, event time, id)
/// type Row = (u8, i64, char); // (key, event time, label)
///
/// let records = vec![
///     Either::Right((1, 10, 'a')),
///     Either::Right((1, 10, 'b')), // the same key and time again: ignored
///     Either::Left((1, 10, 7)),
///     Either::Left((2, 10, 8)), // no row for key 2
/// ];
/// let slot = Arc::new(Mutex::new(JoinCounts::default()));
/// let counts = slot.clone();
/// let mut joined = example::run(records, move |records| {
///     let (facts, rows) = records.split_either();
///     facts
///         .connect(rows)
///         .key_by(|f: &Fact| u64::from(f.0), |r: &Row| u64::from(r.0))
///         .task("join", 1)
///         .process("join", move |_| {
///             let join = EnrichJoin::new(
///                 |f: &Fact| f.0,
///                 |f: &Fact| f.1,
///                 |r: &Row| r.0,
///                 |r: &Row| r.1,
///                 |f: Fact, r: Option<&Row>| (f.2, r.map_or('-', |r| r.2)),
///             );
///             KeyedCoProcessOperator::new(join.with_counts_slot(counts.clone()))
///         })
/// });
/// joined.sort_unstable();
/// assert_eq!(joined, [(7, 'a'), (8, '-')]);
/// let counts = *slot.lock().unwrap();
/// assert_eq!(counts, JoinCounts { unmatched: 1, duplicate_rows: 1, ..JoinCounts::default() });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinCounts {
    /// Facts that arrived at or below the watermark.
    pub late_facts: u64,
    /// Dimension rows that arrived at or below the watermark (dropped).
    pub late_rows: u64,
    /// Facts emitted without a row.
    pub unmatched: u64,
    /// Rows ignored because an earlier row had the same key and time.
    pub duplicate_rows: u64,
}

/// The state of one (key, timestamp).
///
/// # Examples
/// The join keeps one per (key, timestamp) while a fact waits for its row
/// or a row is kept, and drops it once the watermark passed it (driven by
/// hand here; in a job the task makes these calls):
/// ```
/// use lockgate::{Context, Either, Operator, Watermark};
/// use lockgate_operators::co_process::KeyedCoProcessOperator;
/// use lockgate_operators::join::EnrichJoin;
///
/// type Fact = (u8, i64, u32); // (key, event time, id)
/// type Row = (u8, i64, char); // (key, event time, label)
///
/// let mut op = KeyedCoProcessOperator::new(EnrichJoin::new(
///     |f: &Fact| f.0,
///     |f: &Fact| f.1,
///     |r: &Row| r.0,
///     |r: &Row| r.1,
///     |f: Fact, r: Option<&Row>| (f.2, r.map(|r| r.2)),
/// ));
/// let (mut out, mut wake) = (Vec::new(), None);
/// let facts = vec![Either::Left((1, 10, 7)), Either::Left((2, 20, 8))];
/// op.process(&mut facts.clone(), &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// assert!(out.is_empty());
/// assert_eq!(op.keys_with_state(), 2); // two states, each with a waiting fact
///
/// op.process(&mut vec![Either::Right((2, 20, 'x'))], &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// assert_eq!(out, [(8, Some('x'))]); // the row came: its fact goes
///
/// // no row for (1, 10) can come on time any more: the fact goes unmatched
/// op.on_watermark(Watermark(10), &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// assert_eq!(out, [(8, Some('x')), (7, None)]);
/// assert_eq!(op.keys_with_state(), 1); // (2, 20) keeps its row until the watermark passes 20
/// op.on_watermark(Watermark(20), &mut Context::new(&mut out, None, &mut wake)).unwrap();
/// assert_eq!(op.keys_with_state(), 0);
/// ```
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "A: Serialize, B: Serialize",
    deserialize = "A: DeserializeOwned, B: DeserializeOwned"
))]
pub struct EnrichState<A, B> {
    row: Option<B>,
    waiting: Vec<A>,
}

impl<A, B> std::fmt::Debug for EnrichState<A, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrichState").finish_non_exhaustive()
    }
}

type KeyFn<T, K> = Box<dyn Fn(&T) -> K + Send>;
type TimeFn<T> = Box<dyn Fn(&T) -> i64 + Send>;
type CombineFn<A, B, O> = Box<dyn Fn(A, Option<&B>) -> O + Send>;

/// The enrichment join (see the module docs); run it in a
/// [`crate::co_process::KeyedCoProcessOperator`] over facts (left) and
/// rows (right) partitioned by the same hash of `key`.
///
/// # Examples
/// Flights enriched with the weather at their airport and hour, in a job
/// (with lockgate's example helper):
/// ```
/// use lockgate::{example, Either};
/// use lockgate_operators::co_process::KeyedCoProcessOperator;
/// use lockgate_operators::join::EnrichJoin;
///
/// type Flight = (String, i64, u32); // (airport, hour, flight number)
/// type Weather = (String, i64, char); // (airport, hour, sky)
///
/// let records = vec![
///     Either::Left(("JFK".to_string(), 10, 100)),
///     Either::Right(("JFK".to_string(), 10, 'S')),
///     Either::Left(("JFK".to_string(), 10, 101)),
///     Either::Right(("JFK".to_string(), 11, 'R')),
///     Either::Left(("EWR".to_string(), 10, 200)), // no weather for EWR
/// ];
/// let mut enriched = example::run(records, |records| {
///     let (flights, weather) = records.split_either();
///     flights
///         .connect(weather)
///         .key_by(
///             |f: &Flight| lockgate::keys::hash_key(&f.0),
///             |w: &Weather| lockgate::keys::hash_key(&w.0),
///         )
///         .task("enrich", 2)
///         .process("enrich", |_| {
///             KeyedCoProcessOperator::new(EnrichJoin::new(
///                 |f: &Flight| f.0.clone(),
///                 |f: &Flight| f.1,
///                 |w: &Weather| w.0.clone(),
///                 |w: &Weather| w.1,
///                 // unmatched flights get '?' once no weather can come on time
///                 |f: Flight, w: Option<&Weather>| (f.2, w.map_or('?', |w| w.2)),
///             ))
///         })
/// });
/// enriched.sort_unstable();
/// assert_eq!(enriched, [(100, 'S'), (101, 'S'), (200, '?')]);
/// ```
pub struct EnrichJoin<A, B, K, O> {
    fact_key: KeyFn<A, K>,
    fact_time: TimeFn<A>,
    row_key: KeyFn<B, K>,
    row_time: TimeFn<B>,
    combine: CombineFn<A, B, O>,
    retention_ms: i64,
    counts: JoinCounts,
    slot: Option<Arc<Mutex<JoinCounts>>>,
}

impl<A, B, K, O> std::fmt::Debug for EnrichJoin<A, B, K, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrichJoin").finish_non_exhaustive()
    }
}

impl<A, B, K, O> EnrichJoin<A, B, K, O> {
    /// Joins facts and rows by `(key, time)`; `combine` makes the output
    /// of a fact and its row (`None`: unmatched).
    pub fn new(
        fact_key: impl Fn(&A) -> K + Send + 'static,
        fact_time: impl Fn(&A) -> i64 + Send + 'static,
        row_key: impl Fn(&B) -> K + Send + 'static,
        row_time: impl Fn(&B) -> i64 + Send + 'static,
        combine: impl Fn(A, Option<&B>) -> O + Send + 'static,
    ) -> Self {
        EnrichJoin {
            fact_key: Box::new(fact_key),
            fact_time: Box::new(fact_time),
            row_key: Box::new(row_key),
            row_time: Box::new(row_time),
            combine: Box::new(combine),
            retention_ms: 0,
            counts: JoinCounts::default(),
            slot: None,
        }
    }

    /// Keeps a row `ms` past its timestamp for late facts (negative: 0).
    pub fn with_retention_ms(mut self, ms: i64) -> Self {
        self.retention_ms = ms.max(0);
        self
    }

    /// Publishes the counters into `slot` (stored, not added, on every
    /// change and after a restore: the last value is exact even after
    /// restarts). Give each subtask its own slot.
    pub fn with_counts_slot(mut self, slot: Arc<Mutex<JoinCounts>>) -> Self {
        self.slot = Some(slot);
        self
    }

    /// The counters so far.
    pub fn counts(&self) -> JoinCounts {
        self.counts
    }

    fn publish(&self) {
        if let Some(s) = &self.slot {
            if let Ok(mut c) = s.lock() {
                *c = self.counts;
            }
        }
    }
}

impl<A, B, K, O> KeyedCoProcessFunction<A, B, O> for EnrichJoin<A, B, K, O>
where
    A: Serialize + DeserializeOwned + Send,
    B: Serialize + DeserializeOwned + Send,
    K: WindowKey,
{
    type Key = (K, i64);
    type State = EnrichState<A, B>;

    fn key_left(&self, a: &A) -> (K, i64) {
        ((self.fact_key)(a), (self.fact_time)(a))
    }

    fn key_right(&self, b: &B) -> (K, i64) {
        ((self.row_key)(b), (self.row_time)(b))
    }

    fn process_left(
        &mut self,
        a: A,
        ctx: &mut CoContext<'_, (K, i64), EnrichState<A, B>, O>,
    ) -> Result<(), BoxError> {
        let t = ctx.key().1;
        let late = t <= ctx.current_watermark();
        if let Some(row) = ctx.state().and_then(|s| s.row.as_ref()) {
            let o = (self.combine)(a, Some(row));
            ctx.emit(o);
        } else if late {
            self.counts.unmatched += 1;
            let o = (self.combine)(a, None);
            ctx.emit(o);
        } else {
            ctx.state_or_insert_with(|| EnrichState {
                row: None,
                waiting: Vec::new(),
            })
            .waiting
            .push(a);
            ctx.register_event_timer(t);
            return Ok(());
        }
        if late {
            // (the unmatched branch above is only taken for late facts)
            self.counts.late_facts += 1;
            self.publish();
        }
        Ok(())
    }

    fn process_right(
        &mut self,
        b: B,
        ctx: &mut CoContext<'_, (K, i64), EnrichState<A, B>, O>,
    ) -> Result<(), BoxError> {
        let t = ctx.key().1;
        if t <= ctx.current_watermark() {
            self.counts.late_rows += 1;
            self.publish();
            return Ok(());
        }
        let state = ctx.state_or_insert_with(|| EnrichState {
            row: None,
            waiting: Vec::new(),
        });
        if state.row.is_some() {
            self.counts.duplicate_rows += 1;
            self.publish();
            return Ok(());
        }
        let waiting = std::mem::take(&mut state.waiting);
        state.row = Some(b);
        let mut outs = Vec::with_capacity(waiting.len());
        if let Some(row) = state.row.as_ref() {
            for a in waiting {
                outs.push((self.combine)(a, Some(row)));
            }
        }
        for o in outs {
            ctx.emit(o);
        }
        ctx.register_event_timer(t.saturating_add(self.retention_ms));
        Ok(())
    }

    fn on_timer(
        &mut self,
        timer: FiredTimer,
        ctx: &mut CoContext<'_, (K, i64), EnrichState<A, B>, O>,
    ) -> Result<(), BoxError> {
        let FiredTimer::EventTime(time) = timer else {
            return Ok(());
        };
        let t = ctx.key().1;
        let waiting = match ctx.state() {
            Some(s) if time >= t => std::mem::take(&mut s.waiting),
            _ => Vec::new(),
        };
        if !waiting.is_empty() {
            self.counts.unmatched += waiting.len() as u64;
            for a in waiting {
                let o = (self.combine)(a, None);
                ctx.emit(o);
            }
            self.publish();
        }
        if time >= t.saturating_add(self.retention_ms) {
            ctx.clear_state();
        }
        Ok(())
    }

    fn snapshot_function(&self) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(serde_json::to_vec(&self.counts)?))
    }

    fn restore_function(&mut self, bytes: &[u8]) -> Result<(), BoxError> {
        self.counts = serde_json::from_slice(bytes)
            .map_err(|e| format!("join counters do not decode: {e}"))?;
        self.publish();
        Ok(())
    }

    /// Adds the counters of another old subtask (a rescaled restore).
    fn merge_function(&mut self, bytes: &[u8]) -> Result<(), BoxError> {
        let other: JoinCounts = serde_json::from_slice(bytes)
            .map_err(|e| format!("join counters do not decode: {e}"))?;
        self.counts.late_facts += other.late_facts;
        self.counts.late_rows += other.late_rows;
        self.counts.unmatched += other.unmatched;
        self.counts.duplicate_rows += other.duplicate_rows;
        self.publish();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::co_process::KeyedCoProcessOperator;
    use lockgate::Context;
    use lockgate::{CheckpointId, Checkpointed, Either, Operator, Watermark};

    /// fact: (key, time, id); row: (key, time, label)
    type Fact = (u8, i64, u32);
    type Row = (u8, i64, char);
    type Out = (u32, Option<char>);

    fn join() -> KeyedCoProcessOperator<Fact, Row, Out, EnrichJoin<Fact, Row, u8, Out>> {
        KeyedCoProcessOperator::new(EnrichJoin::new(
            |f: &Fact| f.0,
            |f: &Fact| f.1,
            |r: &Row| r.0,
            |r: &Row| r.1,
            |f: Fact, r: Option<&Row>| (f.2, r.map(|r| r.2)),
        ))
    }

    fn push(
        op: &mut KeyedCoProcessOperator<Fact, Row, Out, EnrichJoin<Fact, Row, u8, Out>>,
        recs: Vec<Either<Fact, Row>>,
    ) -> Vec<Out> {
        let mut out = Vec::new();
        let mut recs = recs;
        op.process(&mut recs, &mut Context::new(&mut out, None, &mut None))
            .unwrap();
        out
    }

    fn wm(
        op: &mut KeyedCoProcessOperator<Fact, Row, Out, EnrichJoin<Fact, Row, u8, Out>>,
        w: i64,
    ) -> Vec<Out> {
        let mut out = Vec::new();
        op.on_watermark(Watermark(w), &mut Context::new(&mut out, None, &mut None))
            .unwrap();
        out
    }

    #[test]
    fn facts_with_a_row_are_emitted_at_once_and_waiting_ones_when_it_comes() {
        let mut op = join();
        // row first
        assert!(push(&mut op, vec![Either::Right((1, 10, 'a'))]).is_empty());
        assert_eq!(
            push(&mut op, vec![Either::Left((1, 10, 1))]),
            [(1, Some('a'))]
        );
        // facts first (the row comes later, within the bound)
        assert!(push(
            &mut op,
            vec![Either::Left((2, 10, 2)), Either::Left((2, 10, 3))]
        )
        .is_empty());
        assert_eq!(
            push(&mut op, vec![Either::Right((2, 10, 'b'))]),
            [(2, Some('b')), (3, Some('b'))]
        );
        // same key, other time: no match
        assert!(push(&mut op, vec![Either::Left((1, 20, 4))]).is_empty());
        assert!(wm(&mut op, 19).is_empty());
        assert_eq!(
            op.keys_with_state(),
            1,
            "rows at 10 dropped once the watermark passed them"
        );
        assert_eq!(op.function().counts(), JoinCounts::default());
    }

    #[test]
    fn unknown_is_decided_by_the_watermark() {
        let slot = Arc::new(Mutex::new(JoinCounts::default()));
        let mut op = KeyedCoProcessOperator::new(
            EnrichJoin::new(
                |f: &Fact| f.0,
                |f: &Fact| f.1,
                |r: &Row| r.0,
                |r: &Row| r.1,
                |f: Fact, r: Option<&Row>| (f.2, r.map(|r| r.2)),
            )
            .with_counts_slot(slot.clone()),
        );
        let mut out = Vec::new();
        op.process(
            &mut vec![Either::Left((1, 10, 1))],
            &mut Context::new(&mut out, None, &mut None),
        )
        .unwrap();
        op.on_watermark(Watermark(9), &mut Context::new(&mut out, None, &mut None))
            .unwrap();
        assert!(out.is_empty(), "the row may still come");
        op.on_watermark(Watermark(10), &mut Context::new(&mut out, None, &mut None))
            .unwrap();
        assert_eq!(out, [(1, None)]);
        assert_eq!(slot.lock().unwrap().unmatched, 1);
        // late row and late fact
        out.clear();
        op.process(
            &mut vec![Either::Right((1, 10, 'x')), Either::Left((1, 5, 2))],
            &mut Context::new(&mut out, None, &mut None),
        )
        .unwrap();
        assert_eq!(out, [(2, None)]);
        let c = *slot.lock().unwrap();
        assert_eq!((c.late_rows, c.late_facts, c.unmatched), (1, 1, 2));
    }

    #[test]
    fn retention_serves_late_facts_and_state_survives_a_restore() {
        let make = || {
            KeyedCoProcessOperator::new(
                EnrichJoin::new(
                    |f: &Fact| f.0,
                    |f: &Fact| f.1,
                    |r: &Row| r.0,
                    |r: &Row| r.1,
                    |f: Fact, r: Option<&Row>| (f.2, r.map(|r| r.2)),
                )
                .with_retention_ms(5),
            )
        };
        let mut op = make();
        push(
            &mut op,
            vec![Either::Right((1, 10, 'a')), Either::Left((3, 12, 9))],
        );
        push(&mut op, vec![Either::Right((1, 10, 'z'))]);
        assert_eq!(op.function().counts().duplicate_rows, 1);
        let snap = op.snapshot_state(CheckpointId(3)).unwrap().unwrap();
        let mut restored = make();
        restored.restore_state(&snap).unwrap();
        for o in [&mut op, &mut restored] {
            assert!(wm(o, 11).is_empty());
            // late (11 >= 10) but within retention: joined, counted late
            assert_eq!(push(o, vec![Either::Left((1, 10, 7))]), [(7, Some('a'))]);
            assert_eq!(wm(o, 12), [(9, None)]);
            assert_eq!(wm(o, 15), []);
            assert_eq!(push(o, vec![Either::Left((1, 10, 8))]), [(8, None)]);
            let c = o.function().counts();
            assert_eq!((c.late_facts, c.unmatched, c.duplicate_rows), (2, 2, 1));
        }
    }
}
