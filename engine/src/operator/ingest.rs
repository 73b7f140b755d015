//! Sources the engine itself provides: the ingest source behind
//! [`crate::JobBuilder::ingest`], with the replay log that makes what the
//! application pushed survive an in-process restart, and event time on
//! what it pushed ([`crate::JobBuilder::ingest_event_time`]).

use crate::operator::event_time::{EventTime, WatermarkStrategy};
use crate::operator::Checkpointed;
use crate::operator::{Source, SourcePoll};
use crate::transport::handoff::{IngestReceiver, Pushed, TryRecvError, WakeOn};
use crate::types::element::{CheckpointId, Watermark};
use crate::types::error::BoxError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What an ingest source consumed since the last completed checkpoint, kept
/// across in-process restarts so that they can be replayed: records with
/// the absolute positions `base..base + records.len()` (position = how many
/// records the source had consumed before it, over the whole run), their
/// timestamps when pushed with one, and the explicit watermarks pushed
/// among them, each at the position of the record it precedes.
///
/// The engine cannot ask the application to push again after a failure
/// inside the process, so it keeps what it would need itself, as a
/// replayable source keeps its offset (Flink's sources rewind to the
/// checkpointed offset; here the log is the rewindable input). It is cut
/// when a checkpoint completes: nothing before a completed checkpoint's
/// position is ever replayed again.
#[derive(Debug)]
pub(crate) struct ReplayLog<T> {
    /// The position of `records[0]`.
    base: u64,
    records: VecDeque<T>,
    /// With event time: each record's pushed timestamp, beside `records`
    /// (empty without event time).
    times: VecDeque<Option<i64>>,
    /// Explicit watermarks, `(position of the record after it, watermark)`,
    /// in push order.
    watermarks: VecDeque<(u64, i64)>,
    /// Positions recorded at each checkpoint's snapshot, oldest first.
    pending: VecDeque<(CheckpointId, u64)>,
    /// The most records kept; the source stops taking records from the
    /// application (which then feels backpressure) when the log is full.
    capacity: usize,
}

impl<T> ReplayLog<T> {
    /// An empty log that keeps at most `capacity` records (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        ReplayLog {
            base: 0,
            records: VecDeque::new(),
            times: VecDeque::new(),
            watermarks: VecDeque::new(),
            pending: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// One past the last position held.
    fn end(&self) -> u64 {
        self.base + self.records.len() as u64
    }

    fn is_full(&self) -> bool {
        self.records.len() >= self.capacity
    }

    /// The largest explicit watermark pushed before the record at
    /// `position` and after the one before it.
    fn watermark_at(&self, position: u64) -> Option<i64> {
        let from = self.watermarks.partition_point(|(p, _)| *p < position);
        self.watermarks
            .range(from..)
            .take_while(|(p, _)| *p == position)
            .map(|(_, w)| *w)
            .max()
    }

    /// Checkpoint `id` completed: drops every record before its position.
    fn complete(&mut self, id: CheckpointId) {
        let mut cut = None;
        while let Some(&(c, pos)) = self.pending.front() {
            if c > id {
                break;
            }
            cut = Some(pos);
            self.pending.pop_front();
        }
        if let Some(pos) = cut {
            let drop = pos.saturating_sub(self.base).min(self.records.len() as u64);
            self.records.drain(..drop as usize);
            let times = (drop as usize).min(self.times.len());
            self.times.drain(..times);
            self.base += drop;
            // A watermark at the cut itself may not have been emitted
            // before the checkpoint: kept.
            while self.watermarks.front().is_some_and(|(p, _)| *p < self.base) {
                self.watermarks.pop_front();
            }
        }
    }
}

/// The event time of an ingest source: its strategy, its watermark state,
/// and when it last took something (for idleness, in processing time).
pub(crate) struct IngestEventTime<T> {
    pub(crate) strategy: WatermarkStrategy<T>,
    pub(crate) state: EventTime,
    pub(crate) last_active_ns: u64,
}

impl<T> IngestEventTime<T> {
    pub(crate) fn new(strategy: WatermarkStrategy<T>) -> Self {
        IngestEventTime {
            state: EventTime::new(strategy.out_of_orderness()),
            strategy,
            last_active_ns: crate::util::clock::now_ns(),
        }
    }

    fn quiet_ns(&self) -> Option<u64> {
        self.strategy
            .idleness()
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The source behind [`crate::JobBuilder::ingest`]: reads what the
/// application pushes, replaying first what its [`ReplayLog`] holds past
/// the restored position. Its state is its position (records consumed),
/// and with event time the largest timestamp and the watermark.
pub(crate) struct IngestSource<T> {
    pub(crate) rx: IngestReceiver<T>,
    /// The position of the next record this source emits.
    pub(crate) position: u64,
    /// The position of the restored checkpoint, for
    /// [`crate::Ingest::restored_position`].
    pub(crate) restored: Arc<AtomicU64>,
    /// `None`: no checkpoints, nothing is kept (a restart starts from no
    /// state, and what was pushed before it is gone, as the docs say).
    pub(crate) log: Option<Arc<Mutex<ReplayLog<T>>>>,
    /// Event time ([`crate::JobBuilder::ingest_event_time`]).
    pub(crate) event_time: Option<IngestEventTime<T>>,
    /// Without a log: an explicit watermark taken after records of the
    /// same poll, emitted first at the next.
    pub(crate) held_watermark: Option<i64>,
}

impl<T> std::fmt::Debug for IngestSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestSource")
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send> IngestSource<T> {
    /// A source reading `rx` (see the fields).
    pub(crate) fn new(
        rx: IngestReceiver<T>,
        restored: Arc<AtomicU64>,
        log: Option<Arc<Mutex<ReplayLog<T>>>>,
        strategy: Option<WatermarkStrategy<T>>,
    ) -> Self {
        IngestSource {
            rx,
            position: 0,
            restored,
            log,
            event_time: strategy.map(IngestEventTime::new),
            held_watermark: None,
        }
    }

    /// Takes record `r` (pushed with `pushed_ts`, if any) at the current
    /// position; true when it moved the watermark past `w0` (the batch
    /// then ends after it, so that the watermark follows it exactly).
    #[inline]
    fn take(&mut self, r: T, pushed_ts: Option<i64>, out: &mut Vec<T>, w0: Option<i64>) -> bool {
        let moved = match &mut self.event_time {
            Some(et) => {
                if let Some(ts) = pushed_ts.or_else(|| et.strategy.timestamp_of(&r)) {
                    et.state.observe(ts);
                }
                et.state.current() > w0
            }
            None => false,
        };
        out.push(r);
        self.position += 1;
        moved
    }

    /// Applies explicit watermark `w` unless records of this poll are
    /// before it and it would move the watermark (then the poll ends
    /// first: `Err`). `Ok(true)`: it moved the watermark.
    fn watermark(&mut self, w: i64, out: &[T], w0: Option<i64>) -> Result<bool, ()> {
        let Some(et) = &mut self.event_time else {
            return Ok(false);
        };
        let mut next = et.state;
        next.explicit(w);
        if next.current() <= et.state.current() {
            return Ok(false);
        }
        if !out.is_empty() {
            return Err(());
        }
        et.state = next;
        Ok(et.state.current() > w0)
    }

    fn idle_poll(&self) -> SourcePoll {
        let wake_at_ns = self.event_time.as_ref().and_then(|et| {
            let q = et.quiet_ns()?;
            let at = et.last_active_ns.saturating_add(q);
            (at > crate::util::clock::now_ns()).then_some(at)
        });
        SourcePoll::Idle { wake_at_ns }
    }

    fn active(&mut self) {
        if let Some(et) = &mut self.event_time {
            if et.strategy.idleness().is_some() {
                et.last_active_ns = crate::util::clock::now_ns();
            }
        }
    }
}

impl<T: Clone + Send> Source<T> for IngestSource<T> {
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourcePoll, BoxError> {
        let log_arc = self.log.clone();
        let mut log = match &log_arc {
            Some(l) => Some(l.lock().map_err(|_| "the ingest replay log is poisoned")?),
            None => None,
        };
        let w0 = self.event_time.as_ref().and_then(|et| et.state.current());
        if let Some(w) = self.held_watermark.take() {
            if self.watermark(w, out, w0) == Ok(true) {
                return Ok(SourcePoll::Ready);
            }
        }
        if let Some(log) = log.as_deref() {
            if self.position < log.base {
                return Err(format!(
                    "the ingest source is at position {} but its replay log starts at {}: \
                     the records between were cut by a completed checkpoint",
                    self.position, log.base
                )
                .into());
            }
            // 1. replay what the log holds past our position (after a
            // restart), with the watermarks pushed among the records
            loop {
                if let Some(w) = log.watermark_at(self.position) {
                    match self.watermark(w, out, w0) {
                        Ok(true) | Err(()) => return Ok(SourcePoll::Ready),
                        Ok(false) => {}
                    }
                }
                if out.len() >= max || self.position >= log.end() {
                    break;
                }
                let i = (self.position - log.base) as usize;
                let ts = log.times.get(i).copied().flatten();
                if self.take(log.records[i].clone(), ts, out, w0) {
                    return Ok(SourcePoll::Ready);
                }
            }
        }
        // 2. then take new records, keeping each in the log (if any)
        while out.len() < max {
            if log.as_deref().is_some_and(ReplayLog::is_full) {
                // Backpressure on the application until a checkpoint
                // completes and cuts the log; `wake_on` is off meanwhile,
                // so the task waits for the checkpoint's notification.
                return Ok(if out.is_empty() {
                    SourcePoll::Idle { wake_at_ns: None }
                } else {
                    SourcePoll::Ready
                });
            }
            let (r, ts) = match self.rx.try_recv_pushed() {
                Ok(Pushed::Record(r)) => (r, None),
                Ok(Pushed::Timed(r, ts)) => (r, Some(ts)),
                Ok(Pushed::Watermark(w)) => {
                    self.active();
                    if self.event_time.is_none() {
                        continue;
                    }
                    match log.as_deref_mut() {
                        // Logged at its place; the replay step applies it.
                        Some(log) => {
                            log.watermarks.push_back((self.position, w));
                            match self.watermark(w, out, w0) {
                                Ok(true) | Err(()) => return Ok(SourcePoll::Ready),
                                Ok(false) => {}
                            }
                        }
                        None => match self.watermark(w, out, w0) {
                            Ok(true) => return Ok(SourcePoll::Ready),
                            Err(()) => {
                                self.held_watermark = Some(w);
                                return Ok(SourcePoll::Ready);
                            }
                            Ok(false) => {}
                        },
                    }
                    continue;
                }
                Err(TryRecvError::Empty) => {
                    return Ok(if out.is_empty() {
                        self.idle_poll()
                    } else {
                        SourcePoll::Ready
                    })
                }
                Err(TryRecvError::Ended) => return Ok(SourcePoll::Finished),
            };
            self.active();
            if let Some(log) = log.as_deref_mut() {
                log.records.push_back(r.clone());
                if self.event_time.is_some() {
                    log.times.push_back(ts);
                }
            }
            if self.take(r, ts, out, w0) {
                return Ok(SourcePoll::Ready);
            }
        }
        Ok(SourcePoll::Ready)
    }

    fn wake_on<'a>(&'a self, on: &mut WakeOn<'a>) {
        let full = self
            .log
            .as_ref()
            .is_some_and(|l| l.lock().map(|l| l.is_full()).unwrap_or(false));
        if !full {
            on.channel(&self.rx);
        }
    }

    fn current_watermark(&self) -> Option<Watermark> {
        self.event_time
            .as_ref()
            .and_then(|et| et.state.current())
            .map(Watermark)
    }

    fn is_idle(&self) -> bool {
        self.event_time.as_ref().is_some_and(|et| {
            et.quiet_ns().is_some_and(|q| {
                crate::util::clock::now_ns().saturating_sub(et.last_active_ns) >= q
            })
        })
    }
}

/// The ingest source's state: its position (8 bytes, little-endian, all
/// there is without event time: the format of every earlier build), then
/// with event time the largest timestamp and the watermark (postcard).
pub(crate) fn decode_position(state: &[u8]) -> Result<u64, String> {
    let bytes: [u8; 8] = state
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| format!("ingest position must be 8 bytes, got {}", state.len()))?;
    Ok(u64::from_le_bytes(bytes))
}

impl<T: Clone + Send> Checkpointed for IngestSource<T> {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        if let Some(log) = &self.log {
            let mut log = log
                .lock()
                .map_err(|_| "the ingest replay log is poisoned")?;
            log.pending.push_back((id, self.position));
        }
        let mut bytes = self.position.to_le_bytes().to_vec();
        if let Some(et) = &self.event_time {
            bytes = postcard::to_extend(&et.state.state(), bytes)?;
        }
        Ok(Some(bytes))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let position = decode_position(state)?;
        if let Some(et) = &mut self.event_time {
            if state.len() > 8 {
                let s: (Option<i64>, Option<i64>) = postcard::from_bytes(&state[8..])
                    .map_err(|e| format!("the ingest source's event time does not decode: {e}"))?;
                et.state.restore(s);
            }
        }
        if let Some(log) = &self.log {
            let mut log = log
                .lock()
                .map_err(|_| "the ingest replay log is poisoned")?;
            if log.records.is_empty() && log.base <= position {
                // A new process restoring a checkpoint of an earlier one:
                // the application pushes again from `position`.
                log.base = position;
                while log.watermarks.front().is_some_and(|(p, _)| *p < position) {
                    log.watermarks.pop_front();
                }
            } else if position < log.base || position > log.end() {
                return Err(format!(
                    "cannot replay the ingest source from position {position}: \
                     its replay log holds positions {}..{}",
                    log.base,
                    log.end()
                )
                .into());
            }
            // Checkpoints after the restored one never completed.
            log.pending.clear();
        }
        self.position = position;
        self.restored.store(position, Ordering::Release);
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        if let Some(log) = &self.log {
            log.lock()
                .map_err(|_| "the ingest replay log is poisoned")?
                .complete(id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(rx: &IngestReceiver<u32>, log: &Arc<Mutex<ReplayLog<u32>>>) -> IngestSource<u32> {
        IngestSource::new(
            rx.clone(),
            Arc::new(AtomicU64::new(0)),
            Some(log.clone()),
            None,
        )
    }

    fn wakes_on_input(s: &IngestSource<u32>) -> bool {
        let mut on = WakeOn::default();
        s.wake_on(&mut on);
        !on.is_empty()
    }

    #[test]
    fn a_restarted_source_replays_from_the_restored_position() {
        let (tx, rx) = crate::transport::handoff::ingest_channel(16);
        let log = Arc::new(Mutex::new(ReplayLog::new(100)));
        let mut s = source(&rx, &log);
        for i in 0..5 {
            tx.push(i).unwrap();
        }
        let mut out = Vec::new();
        s.poll(&mut out, 2).unwrap();
        let snap = s.snapshot_state(CheckpointId(1)).unwrap().unwrap();
        s.poll(&mut out, 10).unwrap();
        assert_eq!(out, [0, 1, 2, 3, 4]);
        s.notify_checkpoint_complete(CheckpointId(1)).unwrap();
        assert_eq!(log.lock().unwrap().base, 2, "cut at checkpoint 1");

        // a restart from checkpoint 1 replays 2, 3, 4, then reads on
        let mut r = source(&rx, &log);
        r.restore_state(&snap).unwrap();
        tx.push(5).unwrap();
        let mut again = Vec::new();
        r.poll(&mut again, 10).unwrap();
        assert_eq!(again, [2, 3, 4, 5]);
    }

    #[test]
    fn without_a_checkpoint_a_restart_replays_everything() {
        let (tx, rx) = crate::transport::handoff::ingest_channel(16);
        let log = Arc::new(Mutex::new(ReplayLog::new(100)));
        let mut s = source(&rx, &log);
        tx.push(7).unwrap();
        tx.push(8).unwrap();
        s.poll(&mut Vec::new(), 10).unwrap();
        // an aborted checkpoint's snapshot cuts nothing
        s.snapshot_state(CheckpointId(1)).unwrap();
        let mut r = source(&rx, &log);
        let mut out = Vec::new();
        r.poll(&mut out, 10).unwrap();
        assert_eq!(out, [7, 8]);
    }

    #[test]
    fn a_full_log_stops_taking_records_until_a_checkpoint_completes() {
        let (tx, rx) = crate::transport::handoff::ingest_channel(16);
        let log = Arc::new(Mutex::new(ReplayLog::new(3)));
        let mut s = source(&rx, &log);
        for i in 0..5 {
            tx.push(i).unwrap();
        }
        let mut out = Vec::new();
        s.poll(&mut out, 10).unwrap();
        assert_eq!(out, [0, 1, 2]);
        assert!(!wakes_on_input(&s), "no wake-up on input while full");
        assert_eq!(
            s.poll(&mut Vec::new(), 10).unwrap(),
            SourcePoll::Idle { wake_at_ns: None }
        );
        s.snapshot_state(CheckpointId(4)).unwrap();
        s.notify_checkpoint_complete(CheckpointId(4)).unwrap();
        assert!(wakes_on_input(&s));
        out.clear();
        s.poll(&mut out, 10).unwrap();
        assert_eq!(out, [3, 4]);
    }

    #[test]
    fn a_position_outside_the_log_is_refused_not_replayed_wrongly() {
        let (tx, rx) = crate::transport::handoff::ingest_channel(16);
        let log = Arc::new(Mutex::new(ReplayLog::new(100)));
        let mut s = source(&rx, &log);
        tx.push(1).unwrap();
        s.poll(&mut Vec::new(), 10).unwrap();
        let err = source(&rx, &log)
            .restore_state(&9u64.to_le_bytes())
            .unwrap_err();
        assert!(err.to_string().contains("position 9"), "{err}");
        assert!(source(&rx, &log).restore_state(b"short").is_err());
        // a fresh process: an empty log starts at the restored position
        let fresh = Arc::new(Mutex::new(ReplayLog::new(100)));
        let mut f = source(&rx, &fresh);
        f.restore_state(&9u64.to_le_bytes()).unwrap();
        assert_eq!(fresh.lock().unwrap().base, 9);
    }
}

#[cfg(test)]
mod event_time_tests {
    use super::*;
    use crate::transport::handoff::ingest_channel;

    type Rec = (u32, i64); // (id, timestamp)

    fn timed(
        rx: &IngestReceiver<Rec>,
        log: &Arc<Mutex<ReplayLog<Rec>>>,
        bound: i64,
    ) -> IngestSource<Rec> {
        IngestSource::new(
            rx.clone(),
            Arc::new(AtomicU64::new(0)),
            Some(log.clone()),
            Some(WatermarkStrategy::bounded_out_of_orderness(bound).with_timestamps(|r: &Rec| r.1)),
        )
    }

    /// Polls until the channel is empty, as the task does: after each poll
    /// the watermark, when it moved. Returns records and watermarks in the
    /// order a downstream channel would carry them.
    fn drain(s: &mut IngestSource<Rec>, max: usize) -> Vec<Result<u32, i64>> {
        let mut seen = Vec::new();
        let mut last = None;
        loop {
            let mut out = Vec::new();
            let poll = s.poll(&mut out, max).unwrap();
            seen.extend(out.iter().map(|r| Ok(r.0)));
            if let Some(w) = s.current_watermark() {
                if last.is_none_or(|l| w.0 > l) {
                    last = Some(w.0);
                    seen.push(Err(w.0));
                }
            }
            if poll != SourcePoll::Ready {
                return seen;
            }
        }
    }

    #[test]
    fn watermarks_follow_the_same_records_whatever_the_batching() {
        let (tx, rx) = ingest_channel::<Rec>(64);
        let input: [(Rec, Option<i64>); 6] = [
            ((0, 10), None),
            ((1, 8), None),
            ((2, 30), None),
            ((3, 0), Some(31)), // pushed with its timestamp
            ((4, 20), None),
            ((5, 50), None),
        ];
        let push_all = |tx: &crate::Ingest<Rec>| {
            for (i, (r, ts)) in input.iter().enumerate() {
                match ts {
                    Some(ts) => tx.push_at(*r, *ts).unwrap(),
                    None => tx.push(*r).unwrap(),
                }
                if i == 4 {
                    tx.push_watermark(Watermark(40)).unwrap();
                }
            }
        };
        push_all(&tx);
        let log = Arc::new(Mutex::new(ReplayLog::new(100)));
        let mut a = timed(&rx, &log, 5);
        let in_batches_of_100 = drain(&mut a, 100);
        // The watermark (max - 5 - 1) comes right after the record that
        // moved it; the explicit 40 after record 4, before record 5.
        assert_eq!(
            in_batches_of_100,
            [
                Ok(0),
                Err(4),
                Ok(1),
                Ok(2),
                Err(24),
                Ok(3),
                Err(25),
                Ok(4),
                Err(40),
                Ok(5),
                Err(44)
            ]
        );
        // In-process restart from the start: the log replays the same.
        let mut b = timed(&rx, &log, 5);
        assert_eq!(drain(&mut b, 1), in_batches_of_100);
        // A snapshot mid-way restores the largest timestamp and watermark.
        let mut c = timed(&rx, &log, 5);
        while c.position < 3 {
            c.poll(&mut Vec::new(), 1).unwrap();
        }
        let snap = c.snapshot_state(CheckpointId(1)).unwrap().unwrap();
        assert_eq!(decode_position(&snap), Ok(3));
        let mut d = timed(&rx, &log, 5);
        d.restore_state(&snap).unwrap();
        assert_eq!(d.current_watermark(), Some(Watermark(24)));
        assert_eq!(drain(&mut d, 7), in_batches_of_100[5..]);
    }

    #[test]
    fn an_old_position_restores_and_idleness_is_processing_time() {
        let (tx, rx) = ingest_channel::<Rec>(4);
        let log = Arc::new(Mutex::new(ReplayLog::new(100)));
        let mut s = IngestSource::new(
            rx.clone(),
            Arc::new(AtomicU64::new(0)),
            Some(log),
            Some(
                WatermarkStrategy::bounded_out_of_orderness(0)
                    .with_timestamps(|r: &Rec| r.1)
                    .with_idleness(std::time::Duration::from_millis(20)),
            ),
        );
        // A position of an earlier build (8 bytes) restores.
        s.restore_state(&7u64.to_le_bytes()).unwrap();
        assert_eq!((s.position, s.current_watermark()), (7, None));
        assert!(!s.is_idle());
        let poll = s.poll(&mut Vec::new(), 10).unwrap();
        assert!(
            matches!(
                poll,
                SourcePoll::Idle {
                    wake_at_ns: Some(_)
                }
            ),
            "{poll:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(s.is_idle());
        tx.push((1, 5)).unwrap();
        s.poll(&mut Vec::new(), 10).unwrap();
        assert!(!s.is_idle(), "a record ends idleness");
        assert_eq!(s.current_watermark(), Some(Watermark(4)));
    }
}
