//! The task runtime: one OS thread per task, joined by bounded channels,
//! driven by a job thread that also coordinates checkpoints and restarts.
//!
//! - `task`: the loops of a source task and of an input-gate task.
//! - `job`: starting the task threads, [`JobHandle`], failure handling,
//!   restarts, the checkpoint coordinator's loop.

pub(crate) mod job;
pub(crate) mod task;

pub use job::{JobHandle, JobMetrics, JobResult};

use crate::barrier::{AbortReason, AlignmentStats};
use crate::chain::OperatorSnapshot;
use crate::element::{CheckpointBarrier, CheckpointId, StreamElement};
use crate::metrics::TaskMetrics;
use crossbeam_channel::{Receiver, Sender};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// Why a task stopped with an error.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum TaskError {
    /// An operator returned an error.
    #[error("operator '{operator}' failed in {message}")]
    Operator {
        /// The operator's name.
        operator: String,
        /// What it said, prefixed by the call that failed.
        message: String,
    },
    /// The task's code panicked.
    #[error("panicked: {0}")]
    Panic(String),
    /// A neighbour task is gone (it failed or was cancelled).
    #[error("channel to '{0}' disconnected")]
    Disconnected(String),
    /// The job cancelled the task (another task failed, or the job stopped).
    #[error("cancelled")]
    Cancelled,
    /// A failure planned by a [`crate::FailurePlan`].
    #[error("injected failure: {0}")]
    Injected(String),
    /// An operator returned a [`crate::FatalError`]: restarting cannot help
    /// (e.g. malformed input), so the job fails at once.
    #[error("operator '{operator}' failed for good in {message}")]
    Fatal {
        /// The operator's name.
        operator: String,
        /// What it said, prefixed by the call that failed.
        message: String,
    },
}

impl TaskError {
    /// The error of operator `operator` returned from its call `what`:
    /// [`TaskError::Fatal`] for a [`crate::FatalError`], else
    /// [`TaskError::Operator`].
    pub(crate) fn from_operator(operator: &str, what: &str, e: crate::BoxError) -> TaskError {
        let message = format!("{what}: {e}");
        if e.downcast_ref::<crate::FatalError>().is_some() {
            TaskError::Fatal {
                operator: operator.to_string(),
                message,
            }
        } else {
            TaskError::Operator {
                operator: operator.to_string(),
                message,
            }
        }
    }

    /// True when restarting the job cannot help.
    pub fn is_fatal(&self) -> bool {
        matches!(self, TaskError::Fatal { .. })
    }
}

/// A message from the job thread to a task.
#[derive(Clone, Debug)]
pub(crate) enum Control {
    /// Sources only: inject this barrier now (after everything emitted).
    Trigger(CheckpointBarrier),
    /// Checkpoint `id` completed (`true`) or was aborted (`false`).
    Done(CheckpointId, bool),
    /// Sources only: stop emitting and end (the job drains and ends).
    Stop,
}

/// A message from a task to the job thread.
#[derive(Debug)]
pub(crate) enum TaskEvent {
    /// The task took its snapshot for checkpoint `id`.
    Ack {
        task: usize,
        id: CheckpointId,
        states: Vec<OperatorSnapshot>,
        alignment: AlignmentStats,
    },
    /// The task gave up checkpoint `id`.
    Decline {
        task: usize,
        id: CheckpointId,
        reason: AbortReason,
    },
    /// A source reached its end and waits for the final checkpoint
    /// (FLIP-147) before ending its output.
    SourceDrained { task: usize },
    /// The task ended cleanly.
    Finished { task: usize },
    /// The task failed.
    Failed { task: usize, error: TaskError },
}

/// The run-time channel ends of one edge: `[producer][consumer]`.
pub(crate) struct EdgeEnds<T> {
    pub(crate) senders: Vec<Option<Vec<crate::channel::ChannelSender<T>>>>,
    pub(crate) receivers: Vec<Option<Vec<Receiver<StreamElement<T>>>>>,
    pub(crate) producer_names: Vec<Arc<str>>,
}

/// All edges' channel ends of one run attempt, type-erased.
#[derive(Default)]
pub(crate) struct Wiring {
    pub(crate) edges: HashMap<usize, Box<dyn Any + Send>>,
}

impl Wiring {
    pub(crate) fn edge<T: 'static>(&mut self, edge: usize) -> &mut EdgeEnds<T> {
        self.edges
            .get_mut(&edge)
            .and_then(|e| e.downcast_mut::<EdgeEnds<T>>())
            .expect("edge wired with its record type")
    }
}

/// What a task's constructor gets.
pub(crate) struct SubtaskCtx<'a> {
    pub(crate) subtask: usize,
    pub(crate) wiring: &'a mut Wiring,
    pub(crate) config: &'a crate::JobConfig,
    pub(crate) metrics: Arc<TaskMetrics>,
    pub(crate) cancel: Receiver<()>,
    pub(crate) control: Receiver<Control>,
}

/// What a running task can reach.
pub(crate) struct TaskRt {
    pub(crate) task: usize,
    pub(crate) events: Sender<TaskEvent>,
    pub(crate) restored: Option<Vec<OperatorSnapshot>>,
    pub(crate) checkpointing: bool,
    pub(crate) failure: Option<task::InjectedFailure>,
}

/// A runnable task (a source loop or an input-gate loop with its chain).
pub(crate) trait TaskBody: Send {
    fn run(&mut self, rt: &mut TaskRt) -> Result<(), TaskError>;
}
