//! Event time at a source: [`WatermarkStrategy`] (Flink's, for the
//! ingest source and replayable sources) and the generator it drives.
//!
//! Timestamps and watermarks are `i64` in the unit the job uses for event
//! time (ms for the window operator of `lockgate-operators`). The
//! watermark after a record is computed from the records before it only,
//! so it is the same at the same position in every attempt; a source
//! ends its batch right after a record (or explicit watermark) that moves
//! it, so the task emits it exactly there (a watermark element follows
//! that record, whatever the batching of the attempt).

use std::sync::Arc;
use std::time::Duration;

/// A record's timestamp function.
type TimestampFn<T> = Arc<dyn Fn(&T) -> i64 + Send + Sync>;

/// How a source assigns event time and generates watermarks (Flink's
/// `WatermarkStrategy`): bounded out-of-orderness (the watermark trails
/// the largest timestamp seen by a bound: `max - bound - 1`, Flink's
/// `BoundedOutOfOrdernessWatermarks`), or explicit watermarks only; a
/// timestamp per record from a function given here (or given with each
/// record, [`crate::Ingest::push_at`]); idleness after a quiet period.
///
/// Explicit watermarks ([`crate::Ingest::push_watermark`]) combine with
/// the generated ones: the source's watermark is the larger.
///
/// # Examples
/// ```
/// use lockgate::source::WatermarkStrategy;
/// use std::time::Duration;
///
/// #[derive(Clone)]
/// struct Trade { ts_ms: i64 }
/// let s = WatermarkStrategy::<Trade>::bounded_out_of_orderness(200)
///     .with_timestamps(|t: &Trade| t.ts_ms)
///     .with_idleness(Duration::from_secs(1));
/// assert_eq!(s.timestamp_of(&Trade { ts_ms: 7 }), Some(7));
/// assert_eq!(s.out_of_orderness(), Some(200));
/// ```
pub struct WatermarkStrategy<T> {
    bound: Option<i64>,
    timestamps: Option<TimestampFn<T>>,
    idleness: Option<Duration>,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            bound: self.bound,
            timestamps: self.timestamps.clone(),
            idleness: self.idleness,
        }
    }
}

impl<T> std::fmt::Debug for WatermarkStrategy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatermarkStrategy")
            .field("out_of_orderness", &self.bound)
            .field("timestamps", &self.timestamps.is_some())
            .field("idleness", &self.idleness)
            .finish()
    }
}

impl<T> WatermarkStrategy<T> {
    /// Watermarks `bound` behind the largest timestamp seen (negative: 0),
    /// as Flink's `forBoundedOutOfOrderness`.
    pub fn bounded_out_of_orderness(bound: i64) -> Self {
        WatermarkStrategy {
            bound: Some(bound.max(0)),
            timestamps: None,
            idleness: None,
        }
    }

    /// Timestamps that never go back (Flink's `forMonotonousTimestamps`):
    /// a bound of 0.
    pub fn monotonous_timestamps() -> Self {
        Self::bounded_out_of_orderness(0)
    }

    /// No generated watermarks: only the explicit ones the application
    /// pushes (Flink's `noWatermarks`, plus what it emits itself).
    pub fn explicit_only() -> Self {
        WatermarkStrategy {
            bound: None,
            timestamps: None,
            idleness: None,
        }
    }

    /// A record's timestamp is `f(record)` (Flink's
    /// `withTimestampAssigner`), unless it was pushed with one.
    pub fn with_timestamps(mut self, f: impl Fn(&T) -> i64 + Send + Sync + 'static) -> Self {
        self.timestamps = Some(Arc::new(f));
        self
    }

    /// The source is idle after `quiet` without a record (processing
    /// time, Flink's `withIdleness`): it then does not hold back the
    /// watermark downstream, until its next record. Idleness is not part
    /// of the state and is not replayed: a restarted source starts
    /// active.
    pub fn with_idleness(mut self, quiet: Duration) -> Self {
        self.idleness = Some(quiet);
        self
    }

    /// The out-of-orderness bound (`None`: no generated watermarks).
    pub fn out_of_orderness(&self) -> Option<i64> {
        self.bound
    }

    /// The idleness timeout, if any.
    pub fn idleness(&self) -> Option<Duration> {
        self.idleness
    }

    /// The timestamp of `record` by the strategy's function, if it has one.
    pub fn timestamp_of(&self, record: &T) -> Option<i64> {
        self.timestamps.as_ref().map(|f| f(record))
    }
}

/// The watermark state of a source: the largest timestamp seen, the
/// largest explicit watermark, and the bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EventTime {
    bound: Option<i64>,
    pub(crate) max_ts: Option<i64>,
    /// The largest explicit watermark (or the watermark restored).
    pub(crate) floor: Option<i64>,
}

impl EventTime {
    pub(crate) fn new(bound: Option<i64>) -> Self {
        EventTime {
            bound,
            max_ts: None,
            floor: None,
        }
    }

    /// The watermark now: the generated one and the explicit one, the
    /// larger.
    pub(crate) fn current(&self) -> Option<i64> {
        let generated = match (self.bound, self.max_ts) {
            (Some(b), Some(m)) => Some(m.saturating_sub(b).saturating_sub(1)),
            _ => None,
        };
        generated.max(self.floor)
    }

    /// Takes a record's timestamp.
    #[inline]
    pub(crate) fn observe(&mut self, ts: i64) {
        if self.max_ts.is_none_or(|m| ts > m) {
            self.max_ts = Some(ts);
        }
    }

    /// Takes an explicit watermark.
    pub(crate) fn explicit(&mut self, w: i64) {
        if self.floor.is_none_or(|f| w > f) {
            self.floor = Some(w);
        }
    }

    /// The state to checkpoint: the largest timestamp and the watermark.
    pub(crate) fn state(&self) -> (Option<i64>, Option<i64>) {
        (self.max_ts, self.current())
    }

    /// Back to a checkpointed state.
    pub(crate) fn restore(&mut self, (max_ts, watermark): (Option<i64>, Option<i64>)) {
        self.max_ts = max_ts;
        self.floor = watermark;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_trails_the_largest_timestamp_and_explicit_ones_raise_it() {
        let mut e = EventTime::new(Some(10));
        assert_eq!(e.current(), None);
        e.observe(100);
        e.observe(90);
        assert_eq!(e.current(), Some(89));
        e.explicit(95);
        assert_eq!(e.current(), Some(95));
        e.observe(200);
        assert_eq!(e.current(), Some(189));
        let mut back = EventTime::new(Some(10));
        back.restore(e.state());
        assert_eq!(back.current(), Some(189));
        let mut explicit = EventTime::new(None);
        explicit.observe(5);
        assert_eq!(explicit.current(), None);
        explicit.explicit(3);
        assert_eq!(explicit.current(), Some(3));
    }
}
