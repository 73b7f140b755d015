//! Exactly-once output: the two-phase-commit sink protocol (Flink's
//! `TwoPhaseCommitSinkFunction`).
//!
//! A sink writes into a transaction; when a checkpoint's barrier reaches
//! it, the transaction is *pre-committed* (made durable but not visible) and
//! recorded in the sink's checkpointed state, and a new one begins. When the
//! coordinator reports the checkpoint complete, every pre-committed
//! transaction up to it is *committed* (made visible). After a failure the
//! job restores checkpoint k: the transactions that k's state lists were
//! pre-committed for a checkpoint that completed, so they are committed
//! (again: commits must be idempotent), and everything written after k is
//! discarded, so nothing is committed twice and nothing is lost.

use crate::operator::Checkpointed;
use crate::operator::Sink;
use crate::types::element::CheckpointId;
use crate::types::error::BoxError;
use crate::types::key_groups::Rescale;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A transactional output, driven by [`TwoPhaseCommitSink`].
///
/// # Examples
/// An output whose transactions are lists of lines, visible once
/// committed under their checkpoint (a commit of the same checkpoint again
/// writes the same lines: idempotent), run in a job with the shared
/// [`crate::example`] helper:
/// ```
/// use lockgate::{example, BoxError, CheckpointId, TwoPhaseCommit, TwoPhaseCommitSink};
/// use std::collections::BTreeMap;
/// use std::sync::{Arc, Mutex};
///
/// type Visible = Arc<Mutex<BTreeMap<u64, Vec<String>>>>;
///
/// struct Lines(Visible);
/// impl TwoPhaseCommit<String> for Lines {
///     type Txn = (u64, Vec<String>); // (checkpoint, lines)
///     fn begin(&mut self, _seq: u64) -> Result<Self::Txn, BoxError> {
///         Ok((0, Vec::new()))
///     }
///     fn write(&mut self, txn: &mut Self::Txn, records: &mut Vec<String>) -> Result<(), BoxError> {
///         txn.1.append(records);
///         Ok(())
///     }
///     fn pre_commit(&mut self, txn: &mut Self::Txn, checkpoint: CheckpointId) -> Result<(), BoxError> {
///         txn.0 = checkpoint.get(); // the lines are in the checkpoint with it
///         Ok(())
///     }
///     fn commit(&mut self, txn: Self::Txn) -> Result<(), BoxError> {
///         self.0.lock().unwrap().insert(txn.0, txn.1);
///         Ok(())
///     }
///     fn abort(&mut self, _txn: Self::Txn) -> Result<(), BoxError> {
///         Ok(())
///     }
///     fn recover(&mut self, _restored: CheckpointId, _pending: &[Self::Txn]) -> Result<(), BoxError> {
///         Ok(()) // nothing of this output outlives a transaction
///     }
/// }
///
/// let visible: Visible = Arc::default();
/// let shared = visible.clone();
/// let lines = vec!["a".to_string(), "b".to_string()];
/// example::run(lines, move |lines| {
///     lines.sink("lines", move |_| TwoPhaseCommitSink::new(Lines(shared.clone())))
/// });
/// // without checkpoints, the one transaction commits at the end of the input
/// let committed = visible.lock().unwrap().clone();
/// assert_eq!(committed, BTreeMap::from([(u64::MAX, vec!["a".to_string(), "b".to_string()])]));
/// ```
pub trait TwoPhaseCommit<T>: Send {
    /// A transaction's handle, stored in checkpoints.
    type Txn: Serialize + DeserializeOwned + Send;

    /// Begins a transaction; `seq` is unique within this sink subtask's
    /// run (it grows by one per transaction).
    ///
    /// # Errors
    /// Any I/O error; it fails the task.
    fn begin(&mut self, seq: u64) -> Result<Self::Txn, BoxError>;

    /// Writes records into `txn`.
    ///
    /// # Errors
    /// Any I/O error; it fails the task.
    fn write(&mut self, txn: &mut Self::Txn, records: &mut Vec<T>) -> Result<(), BoxError>;

    /// Makes `txn` durable, not yet visible, for `checkpoint`.
    ///
    /// # Errors
    /// Any I/O error; it fails the task and so the checkpoint.
    fn pre_commit(&mut self, txn: &mut Self::Txn, checkpoint: CheckpointId)
        -> Result<(), BoxError>;

    /// Makes a pre-committed `txn` visible. Must be idempotent: after a
    /// restore it may be called for a transaction committed before.
    ///
    /// # Errors
    /// Any I/O error; it fails the task.
    fn commit(&mut self, txn: Self::Txn) -> Result<(), BoxError>;

    /// Drops `txn` and what it wrote.
    ///
    /// # Errors
    /// Any I/O error; it fails the task.
    fn abort(&mut self, txn: Self::Txn) -> Result<(), BoxError>;

    /// Called on a restore from checkpoint `restored`, before `pending`
    /// (the transactions pre-committed up to it and not yet committed) are
    /// committed: remove whatever this subtask wrote after `restored`
    /// (open transactions, transactions pre-committed or even committed for
    /// newer checkpoints, e.g. when the newest checkpoint was found corrupt).
    ///
    /// # Errors
    /// Any I/O error; the restore then fails.
    fn recover(&mut self, restored: CheckpointId, pending: &[Self::Txn]) -> Result<(), BoxError>;

    /// After a restore at another parallelism, for each old subtask
    /// `old` this subtask takes over (`old % parallelism == subtask`):
    /// what [`TwoPhaseCommit::recover`] and then `commit` of each of
    /// `pending` do, for the output of old subtask `old` (remove what it
    /// wrote after `restored`, make its pending transactions visible).
    /// Default: refused (an output must say how another subtask finishes
    /// its transactions).
    ///
    /// # Errors
    /// Any I/O error, or no such rule; the restore then fails.
    fn adopt(
        &mut self,
        old: usize,
        restored: CheckpointId,
        pending: Vec<Self::Txn>,
    ) -> Result<(), BoxError> {
        let _ = (restored, pending);
        Err(Box::new(crate::types::error::FatalError(format!(
            "the transactional output declares no rule to take over the transactions of old subtask {old} (TwoPhaseCommit::adopt)"
        ))))
    }

    /// Called when the sink starts without restored state: remove leftovers
    /// of this subtask from an earlier run (open transactions). Default:
    /// nothing.
    ///
    /// # Errors
    /// Any I/O error; the task then fails.
    fn start_fresh(&mut self) -> Result<(), BoxError> {
        Ok(())
    }

    /// True when `txn` holds no record (an empty transaction is aborted
    /// instead of committed at the end of the input). Default: false.
    fn is_empty(&self, _txn: &Self::Txn) -> bool {
        false
    }
}

#[derive(Serialize, Deserialize)]
struct SinkState<X> {
    checkpoint: CheckpointId,
    pending: Vec<(CheckpointId, X)>,
}

/// A [`Sink`] that drives a [`TwoPhaseCommit`] output through checkpoints
/// (see the module docs). Without checkpoints, the one transaction is
/// committed at the end of the input.
///
/// # Examples
/// The protocol driven by hand (in a job the task makes these calls): what
/// a sink writes becomes visible when the checkpoint after it completes.
/// ```
/// use lockgate::{BoxError, CheckpointId, Checkpointed, Sink, TwoPhaseCommit, TwoPhaseCommitSink};
/// use std::sync::{Arc, Mutex};
///
/// /// Committed numbers go to a shared list.
/// struct Shared(Arc<Mutex<Vec<u32>>>);
/// impl TwoPhaseCommit<u32> for Shared {
///     type Txn = Vec<u32>;
///     fn begin(&mut self, _: u64) -> Result<Vec<u32>, BoxError> {
///         Ok(Vec::new())
///     }
///     fn write(&mut self, txn: &mut Vec<u32>, records: &mut Vec<u32>) -> Result<(), BoxError> {
///         txn.append(records);
///         Ok(())
///     }
///     fn pre_commit(&mut self, _: &mut Vec<u32>, _: CheckpointId) -> Result<(), BoxError> {
///         Ok(())
///     }
///     fn commit(&mut self, txn: Vec<u32>) -> Result<(), BoxError> {
///         self.0.lock().unwrap().extend(txn);
///         Ok(())
///     }
///     fn abort(&mut self, _: Vec<u32>) -> Result<(), BoxError> {
///         Ok(())
///     }
///     fn recover(&mut self, _: CheckpointId, _: &[Vec<u32>]) -> Result<(), BoxError> {
///         Ok(())
///     }
/// }
///
/// let visible = Arc::new(Mutex::new(Vec::new()));
/// let mut sink = TwoPhaseCommitSink::new(Shared(visible.clone()));
/// sink.write(&mut vec![1, 2])?;
/// sink.snapshot_state(CheckpointId(1))?; // checkpoint 1's barrier: pre-commit
/// sink.write(&mut vec![3])?; // the next transaction
/// assert!(visible.lock().unwrap().is_empty());
/// sink.notify_checkpoint_complete(CheckpointId(1))?;
/// assert_eq!(*visible.lock().unwrap(), [1, 2]); // 3 waits for checkpoint 2
/// # Ok::<(), lockgate::BoxError>(())
/// ```
pub struct TwoPhaseCommitSink<T, P: TwoPhaseCommit<T>> {
    inner: P,
    current: Option<P::Txn>,
    pending: Vec<(CheckpointId, P::Txn)>,
    next_seq: u64,
    started: bool,
    _t: std::marker::PhantomData<fn(T)>,
}

impl<T, P: TwoPhaseCommit<T>> std::fmt::Debug for TwoPhaseCommitSink<T, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoPhaseCommitSink").finish_non_exhaustive()
    }
}

impl<T, P: TwoPhaseCommit<T>> TwoPhaseCommitSink<T, P> {
    /// Wraps a transactional output.
    pub fn new(inner: P) -> Self {
        TwoPhaseCommitSink {
            inner,
            current: None,
            pending: Vec::new(),
            next_seq: 0,
            started: false,
            _t: std::marker::PhantomData,
        }
    }

    /// The wrapped output.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    fn ensure_started(&mut self) -> Result<(), BoxError> {
        if !self.started {
            self.started = true;
            self.inner.start_fresh()?;
        }
        Ok(())
    }

    fn commit_up_to(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(c, _)| *c <= id);
        self.pending = keep;
        for (_, txn) in done {
            self.inner.commit(txn)?;
        }
        Ok(())
    }
}

impl<T, P: TwoPhaseCommit<T>> Sink<T> for TwoPhaseCommitSink<T, P> {
    fn write(&mut self, input: &mut Vec<T>) -> Result<(), BoxError> {
        self.ensure_started()?;
        if self.current.is_none() {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.current = Some(self.inner.begin(seq)?);
        }
        let txn = self.current.as_mut().expect("begun above");
        self.inner.write(txn, input)
    }

    fn end_of_input(&mut self) -> Result<(), BoxError> {
        self.ensure_started()?;
        if let Some(mut txn) = self.current.take() {
            if self.inner.is_empty(&txn) {
                self.inner.abort(txn)?;
            } else {
                // Only reached without checkpoints (with checkpoints, the
                // final checkpoint's barrier came after the last record and
                // pre-committed it): commit directly.
                self.inner.pre_commit(&mut txn, CheckpointId(u64::MAX))?;
                self.inner.commit(txn)?;
            }
        }
        Ok(())
    }
}

impl<T, P: TwoPhaseCommit<T>> Checkpointed for TwoPhaseCommitSink<T, P> {
    fn snapshot_state(&mut self, id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        self.ensure_started()?;
        if let Some(mut txn) = self.current.take() {
            self.inner.pre_commit(&mut txn, id)?;
            self.pending.push((id, txn));
        }
        let state = SinkState {
            checkpoint: id,
            pending: std::mem::take(&mut self.pending),
        };
        let bytes = serde_json::to_vec(&state)?;
        self.pending = state.pending;
        Ok(Some(bytes))
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), BoxError> {
        let state: SinkState<P::Txn> = serde_json::from_slice(state)
            .map_err(|e| format!("two-phase-commit sink state does not decode: {e}"))?;
        self.started = true;
        let txns: Vec<P::Txn> = state.pending.into_iter().map(|(_, t)| t).collect();
        self.inner.recover(state.checkpoint, &txns)?;
        for txn in txns {
            self.inner.commit(txn)?;
        }
        Ok(())
    }

    /// Each old subtask `j`'s pre-committed transactions are finished by
    /// new subtask `j % parallelism` ([`TwoPhaseCommit::adopt`]); a new
    /// subtask that takes over none starts fresh.
    fn restore_rescaled(
        &mut self,
        chains: &[Vec<&[u8]>],
        rescale: &Rescale,
    ) -> Result<(), BoxError> {
        self.started = true;
        let mut adopted = false;
        for (j, chain) in chains.iter().enumerate() {
            if j % rescale.parallelism != rescale.subtask {
                continue;
            }
            let Some(last) = chain.last() else { continue };
            let state: SinkState<P::Txn> = serde_json::from_slice(last).map_err(|e| {
                format!("two-phase-commit sink state of old subtask {j} does not decode: {e}")
            })?;
            let txns: Vec<P::Txn> = state.pending.into_iter().map(|(_, t)| t).collect();
            self.inner.adopt(j, state.checkpoint, txns)?;
            adopted |= j == rescale.subtask;
        }
        if !adopted {
            // Its own leftovers (open transactions of an earlier run).
            self.inner.start_fresh()?;
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), BoxError> {
        self.commit_up_to(id)
    }
}
