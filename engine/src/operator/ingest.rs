//! Sources the engine itself provides: the ingest source behind
//! [`crate::JobBuilder::ingest`], with the replay log that makes what the
//! application pushed survive an in-process restart.

use crate::operator::Checkpointed;
use crate::operator::{Source, SourcePoll};
use crate::transport::handoff::{IngestReceiver, TryRecvError};
use crate::types::element::CheckpointId;
use crate::types::error::BoxError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What an ingest source consumed since the last completed checkpoint, kept
/// across in-process restarts so that they can be replayed: records with
/// the absolute positions `base..base + records.len()` (position = how many
/// records the source had consumed before it, over the whole run).
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
            self.base += drop;
        }
    }
}

/// The source behind [`crate::JobBuilder::ingest`]: reads what the
/// application pushes, replaying first what its [`ReplayLog`] holds past
/// the restored position. Its state is its position (records consumed).
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
}

impl<T> std::fmt::Debug for IngestSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestSource")
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send> Source<T> for IngestSource<T> {
    fn poll(&mut self, out: &mut Vec<T>, max: usize) -> Result<SourcePoll, BoxError> {
        let mut log = match &self.log {
            Some(l) => Some(l.lock().map_err(|_| "the ingest replay log is poisoned")?),
            None => None,
        };
        if let Some(log) = log.as_deref() {
            if self.position < log.base {
                return Err(format!(
                    "the ingest source is at position {} but its replay log starts at {}: \
                     the records between were cut by a completed checkpoint",
                    self.position, log.base
                )
                .into());
            }
            // 1. replay what the log holds past our position (after a restart)
            while out.len() < max && self.position < log.end() {
                let i = (self.position - log.base) as usize;
                out.push(log.records[i].clone());
                self.position += 1;
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
            match self.rx.try_recv() {
                Ok(r) => {
                    if let Some(log) = log.as_deref_mut() {
                        log.records.push_back(r.clone());
                    }
                    out.push(r);
                    self.position += 1;
                }
                Err(TryRecvError::Empty) => return Ok(SourcePoll::Idle { wake_at_ns: None }),
                Err(TryRecvError::Ended) => return Ok(SourcePoll::Finished),
            }
        }
        Ok(SourcePoll::Ready)
    }

    fn wake_on(&self) -> Option<&IngestReceiver<T>> {
        let full = self
            .log
            .as_ref()
            .is_some_and(|l| l.lock().map(|l| l.is_full()).unwrap_or(false));
        (!full).then_some(&self.rx)
    }
}

impl<T: Clone + Send> Checkpointed for IngestSource<T> {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        if let Some(log) = &self.log {
            let mut log = log
                .lock()
                .map_err(|_| "the ingest replay log is poisoned")?;
            log.pending.push_back((id, self.position));
        }
        Ok(Some(self.position.to_le_bytes().to_vec()))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let bytes: [u8; 8] = state
            .try_into()
            .map_err(|_| format!("ingest position must be 8 bytes, got {}", state.len()))?;
        let position = u64::from_le_bytes(bytes);
        if let Some(log) = &self.log {
            let mut log = log
                .lock()
                .map_err(|_| "the ingest replay log is poisoned")?;
            if log.records.is_empty() && log.base <= position {
                // A new process restoring a checkpoint of an earlier one:
                // the application pushes again from `position`.
                log.base = position;
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
        IngestSource {
            rx: rx.clone(),
            position: 0,
            restored: Arc::new(AtomicU64::new(0)),
            log: Some(log.clone()),
        }
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
        assert!(s.wake_on().is_none(), "no wake-up on input while full");
        assert_eq!(
            s.poll(&mut Vec::new(), 10).unwrap(),
            SourcePoll::Idle { wake_at_ns: None }
        );
        s.snapshot_state(CheckpointId(4)).unwrap();
        s.notify_checkpoint_complete(CheckpointId(4)).unwrap();
        assert!(s.wake_on().is_some());
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
