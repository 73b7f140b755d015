//! Exactly-once output to the application itself: records handed over
//! once, when the checkpoint that covers them completes
//! ([`crate::Stream::collect_committed`],
//! [`crate::Stream::for_each_committed`]).
//!
//! A [`TwoPhaseCommit`] whose transactions are the records a sink subtask
//! took between two barriers: pre-committed (kept in the checkpoint) at
//! the barrier, handed over when the checkpoint completes. A restart (or a
//! restore in a new process, told what was handed over before) hands over
//! again only what was not: each subtask remembers the newest checkpoint
//! it handed over, and checkpoint ids only grow.

use super::two_phase::TwoPhaseCommit;
use crate::types::element::CheckpointId;
use crate::types::error::BoxError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The records one sink subtask took for one completed checkpoint, handed
/// to the application once ([`crate::Stream::collect_committed`]).
///
/// # Examples
/// ```
/// use lockgate::{CheckpointId, Committed, JobBuilder, JobConfig};
///
/// let job = JobBuilder::new("committed", JobConfig::default());
/// let (numbers, ingest) = job.ingest::<u64>("numbers", 16);
/// let batches = numbers.map(|x| x + 1).collect_committed(None);
/// let handle = job.start()?;
/// for x in 0..3 {
///     ingest.push(x).expect("the job runs");
/// }
/// drop(ingest);
/// handle.wait()?;
/// // without checkpoints: one batch at the end of the input
/// let batches: Vec<Committed<u64>> = batches.try_iter().collect();
/// assert_eq!(batches, [Committed { checkpoint: CheckpointId(u64::MAX), subtask: 0, records: vec![1, 2, 3] }]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed<T> {
    /// The checkpoint whose completion committed them (`CheckpointId(u64::MAX)`
    /// for a job without checkpointing: everything at the end of the
    /// input). Kept by the application, it tells a job restored in a new
    /// process what it already has.
    pub checkpoint: CheckpointId,
    /// The sink subtask that took them (records of one subtask come in
    /// order; several subtasks' batches interleave).
    pub subtask: usize,
    /// The records, in the order the subtask took them.
    pub records: Vec<T>,
}

/// What each sink subtask handed over last, shared by every attempt of
/// the job (an in-process restart does not hand it over again).
#[derive(Debug)]
pub(crate) struct Delivered {
    after: Option<CheckpointId>,
    by_subtask: Mutex<HashMap<usize, CheckpointId>>,
}

impl Delivered {
    /// Nothing handed over yet, but what the application already has from
    /// an earlier process: every checkpoint up to `after`.
    pub(crate) fn new(after: Option<CheckpointId>) -> Arc<Self> {
        Arc::new(Delivered {
            after,
            by_subtask: Mutex::new(HashMap::new()),
        })
    }

    /// True (and recorded) when `checkpoint` of `subtask` was not handed
    /// over yet.
    fn take(&self, subtask: usize, checkpoint: CheckpointId) -> bool {
        let mut m = self
            .by_subtask
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let last = m.get(&subtask).copied().or(self.after);
        if last.is_some_and(|l| checkpoint <= l) {
            return false;
        }
        m.insert(subtask, checkpoint);
        true
    }
}

/// One transaction: the records since the last barrier, and the
/// checkpoint that pre-committed them.
#[derive(Serialize, Deserialize)]
pub(crate) struct Batch<T> {
    checkpoint: Option<CheckpointId>,
    records: Vec<T>,
}

/// The two-phase-commit output behind `collect_committed`.
pub(crate) struct CommittedOutput<T> {
    pub(crate) subtask: usize,
    pub(crate) delivered: Arc<Delivered>,
    pub(crate) deliver: Arc<dyn Fn(Committed<T>) + Send + Sync>,
}

impl<T> CommittedOutput<T> {
    fn hand_over(&self, subtask: usize, batch: Batch<T>) {
        let checkpoint = batch.checkpoint.unwrap_or(CheckpointId(u64::MAX));
        if self.delivered.take(subtask, checkpoint) && !batch.records.is_empty() {
            (self.deliver)(Committed {
                checkpoint,
                subtask,
                records: batch.records,
            });
        }
    }
}

impl<T: Serialize + DeserializeOwned + Send> TwoPhaseCommit<T> for CommittedOutput<T> {
    type Txn = Batch<T>;

    fn begin(&mut self, _seq: u64) -> Result<Batch<T>, BoxError> {
        Ok(Batch {
            checkpoint: None,
            records: Vec::new(),
        })
    }

    fn write(&mut self, txn: &mut Batch<T>, records: &mut Vec<T>) -> Result<(), BoxError> {
        txn.records.append(records);
        Ok(())
    }

    fn pre_commit(&mut self, txn: &mut Batch<T>, checkpoint: CheckpointId) -> Result<(), BoxError> {
        txn.checkpoint = Some(checkpoint);
        Ok(())
    }

    /// Hands the batch over, unless this subtask handed over that
    /// checkpoint (or a newer one) before: idempotent.
    fn commit(&mut self, txn: Batch<T>) -> Result<(), BoxError> {
        self.hand_over(self.subtask, txn);
        Ok(())
    }

    fn abort(&mut self, _txn: Batch<T>) -> Result<(), BoxError> {
        Ok(())
    }

    /// Nothing was handed over past the restored checkpoint: batches are
    /// handed over only once their checkpoint completed.
    fn recover(&mut self, _restored: CheckpointId, _pending: &[Batch<T>]) -> Result<(), BoxError> {
        Ok(())
    }

    /// An old subtask's pending batches are handed over by this one, as
    /// the old subtask's (checked against what it handed over).
    fn adopt(
        &mut self,
        old: usize,
        _restored: CheckpointId,
        pending: Vec<Batch<T>>,
    ) -> Result<(), BoxError> {
        for b in pending {
            self.hand_over(old, b);
        }
        Ok(())
    }

    fn is_empty(&self, txn: &Batch<T>) -> bool {
        txn.records.is_empty()
    }
}
