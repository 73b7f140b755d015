//! Keyed timers in event time and processing time, kept in checkpointed
//! state (Flink's `TimerService` / `InternalTimerService`).
//!
//! An operator registers a timer for a key at a time; the service fires it
//! once: an event-time timer when the watermark reaches its time (`time <=
//! watermark`, as Flink's `InternalTimerServiceImpl::advanceWatermark`), a
//! processing-time timer when the clock reaches it. A key has at most one
//! timer per time and domain (registering it again is a no-op, as in
//! Flink). The whole service is `serde`-serializable: an operator stores it
//! in its snapshot so that timers survive a restore.
//!
//! Processing-time timers are in ns on [`lockgate::tuning::now_ns`]'s clock.
//! After a restore in a new process those values may lie in the past; they
//! then fire on the first check, as restored processing-time timers do in
//! Flink.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The time domain of a timer.
///
/// # Examples
/// It is serializable, so that an operator's checkpointed state can say
/// which clock a stored time is on:
/// ```
/// use lockgate_operators::timers::TimeDomain;
///
/// let stored = serde_json::to_string(&[(TimeDomain::EventTime, 1_000)]).unwrap();
/// assert_eq!(stored, r#"[["EventTime",1000]]"#);
/// let back: Vec<(TimeDomain, u64)> = serde_json::from_str(&stored).unwrap();
/// assert_eq!(back, [(TimeDomain::EventTime, 1_000)]);
/// assert_ne!(back[0].0, TimeDomain::ProcessingTime);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimeDomain {
    /// Fires when the watermark reaches its time (ms of event time).
    EventTime,
    /// Fires when the clock reaches its time (ns on
    /// [`lockgate::tuning::now_ns`]'s clock).
    ProcessingTime,
}

/// The timers of one operator instance, for keys of type `K`.
///
/// Costs: registering, deleting and firing one timer are O(log timers);
/// [`TimerService::next_processing_time`] is O(log timers).
///
/// # Examples
/// ```
/// use lockgate_operators::timers::TimerService;
///
/// let mut timers = TimerService::new();
/// timers.register_event_time(30, "b");
/// timers.register_event_time(10, "a");
/// timers.register_event_time(10, "a"); // one timer per key, time and domain
/// timers.register_processing_time(5_000, "c");
/// assert_eq!(timers.event_timers(), 2);
///
/// // event-time timers fire once the watermark reaches them, in time order
/// assert_eq!(timers.advance_watermark(9), []);
/// assert_eq!(timers.advance_watermark(30), [(10, "a"), (30, "b")]);
/// assert_eq!(timers.current_watermark(), 30);
///
/// // processing-time timers fire when the clock (ns) reaches them
/// assert_eq!(timers.next_processing_time(), Some(5_000));
/// assert_eq!(timers.pop_processing_due(4_999), []);
/// assert_eq!(timers.pop_processing_due(5_000), [(5_000, "c")]);
///
/// // the whole service goes into an operator's snapshot
/// timers.register_event_time(40, "d");
/// let bytes = serde_json::to_vec(&timers).unwrap();
/// let mut restored: TimerService<String> = serde_json::from_slice(&bytes).unwrap();
/// assert_eq!(restored.advance_watermark(40), [(40, "d".to_string())]);
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound(serialize = "K: Serialize", deserialize = "K: Deserialize<'de> + Ord"))]
pub struct TimerService<K> {
    event: BTreeSet<(i64, K)>,
    processing: BTreeSet<(u64, K)>,
    watermark: i64,
}

impl<K: Ord + Clone> Default for TimerService<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + Clone> TimerService<K> {
    /// No timers; the watermark is `i64::MIN` (no event time seen yet).
    pub fn new() -> Self {
        TimerService {
            event: BTreeSet::new(),
            processing: BTreeSet::new(),
            watermark: i64::MIN,
        }
    }

    /// The last watermark passed to [`TimerService::advance_watermark`]
    /// (`i64::MIN` before any), ms of event time.
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Registers an event-time timer for `key` at `time` (ms). A timer at
    /// or below the current watermark fires on the next
    /// [`TimerService::advance_watermark`] call, whatever its watermark.
    pub fn register_event_time(&mut self, time: i64, key: K) {
        self.event.insert((time, key));
    }

    /// Deletes the event-time timer of `key` at `time`; true if there was
    /// one.
    pub fn delete_event_time(&mut self, time: i64, key: &K) -> bool {
        self.event.remove(&(time, key.clone()))
    }

    /// Registers a processing-time timer for `key` at `time_ns`.
    pub fn register_processing_time(&mut self, time_ns: u64, key: K) {
        self.processing.insert((time_ns, key));
    }

    /// Deletes the processing-time timer of `key` at `time_ns`; true if
    /// there was one.
    pub fn delete_processing_time(&mut self, time_ns: u64, key: &K) -> bool {
        self.processing.remove(&(time_ns, key.clone()))
    }

    /// Moves event time to `watermark` (ignored when not above the current
    /// one, except that timers already due still fire) and removes and
    /// returns the event-time timers due, `time <= watermark`, in time
    /// order (then key order).
    pub fn advance_watermark(&mut self, watermark: i64) -> Vec<(i64, K)> {
        if watermark > self.watermark {
            self.watermark = watermark;
        }
        self.pop_event_due()
    }

    /// Removes and returns the event-time timers due at the current
    /// watermark (`time <= watermark`), in time order. Use it after
    /// registering timers while firing others.
    pub fn pop_event_due(&mut self) -> Vec<(i64, K)> {
        let mut due = Vec::new();
        while let Some(first) = self.event.first() {
            if first.0 > self.watermark {
                break;
            }
            if let Some(t) = self.event.pop_first() {
                due.push(t);
            }
        }
        due
    }

    /// Keeps only the timers of the keys `keep` accepts (a rescaled
    /// restore keeps the keys this subtask owns now).
    pub fn retain_keys(&mut self, keep: impl Fn(&K) -> bool) {
        self.event.retain(|(_, k)| keep(k));
        self.processing.retain(|(_, k)| keep(k));
    }

    /// The timers of several old subtasks' services (a rescaled restore),
    /// only those of the keys `keep` accepts; the watermark is the lowest
    /// of theirs (at an aligned checkpoint every subtask has seen the same
    /// watermarks, so they are equal). No services: an empty one.
    pub fn gather(
        parts: impl IntoIterator<Item = TimerService<K>>,
        keep: impl Fn(&K) -> bool,
    ) -> Self {
        let mut all: Option<TimerService<K>> = None;
        for mut t in parts {
            t.retain_keys(&keep);
            match &mut all {
                Some(a) => {
                    a.event.extend(t.event);
                    a.processing.extend(t.processing);
                    a.watermark = a.watermark.min(t.watermark);
                }
                None => all = Some(t),
            }
        }
        all.unwrap_or_default()
    }

    /// The earliest processing-time timer, ns.
    pub fn next_processing_time(&self) -> Option<u64> {
        self.processing.first().map(|(t, _)| *t)
    }

    /// Removes and returns the processing-time timers due at `now_ns`
    /// (`time <= now_ns`), in time order.
    pub fn pop_processing_due(&mut self, now_ns: u64) -> Vec<(u64, K)> {
        let mut due = Vec::new();
        while let Some(first) = self.processing.first() {
            if first.0 > now_ns {
                break;
            }
            if let Some(t) = self.processing.pop_first() {
                due.push(t);
            }
        }
        due
    }

    /// Event-time timers registered and not yet fired.
    pub fn event_timers(&self) -> usize {
        self.event.len()
    }

    /// Processing-time timers registered and not yet fired.
    pub fn processing_timers(&self) -> usize {
        self.processing.len()
    }

    /// Deletes every timer of `key` in both domains (O(timers)).
    pub fn delete_all_for(&mut self, key: &K) {
        self.event.retain(|(_, k)| k != key);
        self.processing.retain(|(_, k)| k != key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_timers_fire_in_order_when_the_watermark_reaches_them() {
        let mut t = TimerService::new();
        t.register_event_time(30, "c");
        t.register_event_time(10, "a");
        t.register_event_time(20, "b");
        t.register_event_time(10, "a"); // duplicate: one timer
        assert_eq!(t.event_timers(), 3);
        assert_eq!(t.advance_watermark(9), vec![]);
        assert_eq!(t.advance_watermark(20), vec![(10, "a"), (20, "b")]);
        // a lower watermark does not move event time back
        assert_eq!(t.advance_watermark(5), vec![]);
        assert_eq!(t.current_watermark(), 20);
        // a timer registered in the past fires on the next advance
        t.register_event_time(15, "late");
        assert_eq!(t.advance_watermark(20), vec![(15, "late")]);
        assert!(t.delete_event_time(30, &"c"));
        assert!(!t.delete_event_time(30, &"c"));
        assert_eq!(t.advance_watermark(i64::MAX), vec![]);
    }

    #[test]
    fn processing_timers_fire_when_due() {
        let mut t = TimerService::new();
        t.register_processing_time(500, 1u32);
        t.register_processing_time(100, 2u32);
        assert_eq!(t.next_processing_time(), Some(100));
        assert_eq!(t.pop_processing_due(99), vec![]);
        assert_eq!(t.pop_processing_due(100), vec![(100, 2)]);
        assert_eq!(t.next_processing_time(), Some(500));
        t.delete_all_for(&1);
        assert_eq!(t.next_processing_time(), None);
        assert_eq!(t.processing_timers(), 0);
    }

    #[test]
    fn timers_survive_a_snapshot_and_restore() {
        let mut t = TimerService::new();
        t.register_event_time(10, ("JFK".to_string(), 1i64));
        t.register_event_time(40, ("EWR".to_string(), 2i64));
        t.register_processing_time(7, ("LGA".to_string(), 3i64));
        assert_eq!(t.advance_watermark(10).len(), 1);
        let bytes = serde_json::to_vec(&t).unwrap();
        let mut r: TimerService<(String, i64)> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(r.current_watermark(), 10);
        assert_eq!(r.event_timers(), 1);
        assert_eq!(r.next_processing_time(), Some(7));
        assert_eq!(r.advance_watermark(40), vec![(40, ("EWR".to_string(), 2))]);
    }
}
