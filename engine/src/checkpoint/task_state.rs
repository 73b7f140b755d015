//! The state a checkpoint holds for a task: each chained operator's bytes
//! ([`OperatorSnapshot`]), what a task is handed to restore from
//! ([`TaskRestore`]), the synchronous part handed to the snapshot thread
//! ([`PendingSnapshot`]), and a whole job's restored state
//! ([`RestoredState`]).

use crate::operator::{Checkpointed, StateSnapshot};
use crate::types::element::CheckpointId;
use crate::types::error::BoxError;
use crate::types::key_groups::Rescale;
use crate::types::task_id::TaskId;
use std::collections::{BTreeMap, HashMap};

/// The state of one operator of a chain for one checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OperatorSnapshot {
    /// The operator's name, unique in the job (its state key).
    pub operator: String,
    /// The operator's serialized state (in a part file: its length, then
    /// the bytes, as postcard encodes a byte string).
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// The bytes of operator `operator` in a task's restored snapshots, in
/// chain order (oldest first: a full snapshot, then deltas; see
/// [`crate::Checkpointed::restore_state_chain`]).
fn chain_of<'a>(states: &'a [OperatorSnapshot], operator: &str) -> Vec<&'a [u8]> {
    states
        .iter()
        .filter(|s| s.operator == operator)
        .map(|s| s.bytes.as_slice())
        .collect()
}

/// What one task restores from.
#[derive(Clone, Debug)]
pub(crate) enum TaskRestore {
    /// Its own snapshots: the checkpoint was taken at this parallelism.
    Same(Vec<OperatorSnapshot>),
    /// A restore at another parallelism: the snapshots of every old
    /// subtask (index: the old subtask), which each operator
    /// redistributes ([`crate::Checkpointed::restore_rescaled`]).
    Rescaled {
        old: Vec<Vec<OperatorSnapshot>>,
        rescale: Rescale,
    },
}

impl TaskRestore {
    /// Restores operator `operator` (its hooks in `target`) from what was
    /// stored for it; nothing when nothing was (a stateless operator).
    pub(crate) fn restore_into<C: Checkpointed + ?Sized>(
        &self,
        operator: &str,
        target: &mut C,
    ) -> Result<(), BoxError> {
        match self {
            TaskRestore::Same(states) => {
                let chain = chain_of(states, operator);
                if chain.is_empty() {
                    return Ok(());
                }
                target.restore_state_chain(&chain)
            }
            TaskRestore::Rescaled { old, rescale } => {
                let chains: Vec<Vec<&[u8]>> = old.iter().map(|s| chain_of(s, operator)).collect();
                if chains.iter().all(Vec::is_empty) {
                    return Ok(());
                }
                target.restore_rescaled(&chains, rescale)
            }
        }
    }
}

/// The synchronous part of one operator's snapshot, handed to the task's
/// snapshot thread, which runs the rest.
#[derive(Debug)]
pub(crate) struct PendingSnapshot {
    /// The operator's name (its state key).
    pub(crate) operator: String,
    /// Its snapshot, the asynchronous part still to run.
    pub(crate) snapshot: StateSnapshot,
}

/// The state a job restores from: every task's operator snapshots of one
/// completed checkpoint, by task.
#[derive(Clone, Debug, Default)]
pub struct RestoredState {
    /// The checkpoint.
    pub checkpoint: CheckpointId,
    /// Task → its chain's operator snapshots.
    pub states: HashMap<TaskId, Vec<OperatorSnapshot>>,
    /// Parallelism per task name when the checkpoint was taken (from its
    /// metadata); empty: the job's own (a checkpoint of the running job).
    /// A task whose parallelism differs is restored rescaled
    /// ([`crate::Checkpointed::restore_rescaled`]).
    pub parallelism: BTreeMap<String, u32>,
    /// True when every task restores through
    /// [`crate::Checkpointed::restore_rescaled`], even at the same
    /// parallelism: the state was merged from several jobs' checkpoints
    /// ([`RestoredState::merge`]), so old subtask `j` is not new subtask
    /// `j`.
    pub always_rescale: bool,
}

impl RestoredState {
    /// The snapshots of task `task` (empty when it had none).
    pub fn states_of(&self, task: &TaskId) -> Vec<OperatorSnapshot> {
        self.states.get(task).cloned().unwrap_or_default()
    }

    /// Merges the checkpoints of several jobs of the same graph that each
    /// ran a disjoint share of the input and of the keys (one process
    /// each, as `lockgate kafka run --processes N`), for a job that takes
    /// over from all of them: task `t`'s old subtasks are the
    /// concatenation of each part's, in the order given (part 0's
    /// subtasks first), and every task restores rescaled
    /// ([`RestoredState::always_rescale`]), each new subtask keeping what
    /// it owns of all of them. Each part is a valid cut of its own share,
    /// so their checkpoint ids need not match; the merged id is the
    /// largest. `keep(part, operator)` false leaves that part's state of
    /// that operator out (its slots stay, empty): e.g. sink transactions
    /// another process finishes.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{CheckpointId, storage::OperatorSnapshot, storage::RestoredState, task::TaskId};
    /// let part = |id, bytes: &[u8]| {
    ///     let mut r = RestoredState::default();
    ///     r.checkpoint = CheckpointId(id);
    ///     r.parallelism.insert("sum".into(), 1);
    ///     let snap = OperatorSnapshot { operator: "sum".into(), bytes: bytes.to_vec() };
    ///     r.states.insert(TaskId::new("sum", 0), vec![snap]);
    ///     r
    /// };
    /// let m = RestoredState::merge(vec![part(4, b"a"), part(9, b"b")], |_, _| true);
    /// assert_eq!((m.checkpoint, m.parallelism["sum"], m.always_rescale), (CheckpointId(9), 2, true));
    /// assert_eq!(m.states_of(&TaskId::new("sum", 1))[0].bytes, b"b");
    /// ```
    pub fn merge(parts: Vec<RestoredState>, keep: impl Fn(usize, &str) -> bool) -> RestoredState {
        let mut merged = RestoredState {
            always_rescale: true,
            ..RestoredState::default()
        };
        for (i, part) in parts.into_iter().enumerate() {
            merged.checkpoint = merged.checkpoint.max(part.checkpoint);
            let offsets: BTreeMap<String, u32> = part
                .parallelism
                .keys()
                .map(|t| (t.clone(), merged.parallelism.get(t).copied().unwrap_or(0)))
                .collect();
            for (task, mut snaps) in part.states {
                let base = offsets.get(&task.operator).copied().unwrap_or(0) as usize;
                snaps.retain(|s| keep(i, &s.operator));
                merged.states.insert(
                    TaskId::new(task.operator.clone(), base + task.subtask),
                    snaps,
                );
            }
            for (t, p) in part.parallelism {
                *merged.parallelism.entry(t).or_insert(0) += p;
            }
        }
        merged
    }
}
