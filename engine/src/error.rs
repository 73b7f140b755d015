//! The errors of lockgate, in one leaf module: what operators return
//! ([`BoxError`], [`OperatorError`], [`FatalError`]), why a task stopped
//! ([`TaskError`]) and why a job did not start or end well ([`JobError`]).

use crate::task_id::TaskId;
use std::fmt;

/// The error type operators return: any error, sent across threads.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An operator error with a message, for operators that have no error type
/// of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorError(pub String);

impl fmt::Display for OperatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OperatorError {}

/// An error after which restarting the job cannot help (malformed input, a
/// missing file, a bad configuration): an operator or source that returns
/// it fails the job at once, whatever the restart strategy allows. Other
/// errors are retried by restarting from the latest checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatalError(pub String);

impl fmt::Display for FatalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FatalError {}

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
    /// An operator returned a [`FatalError`]: restarting cannot help
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
    /// [`TaskError::Fatal`] for a [`FatalError`], else
    /// [`TaskError::Operator`].
    pub(crate) fn from_operator(operator: &str, what: &str, e: BoxError) -> TaskError {
        let message = format!("{what}: {e}");
        if e.downcast_ref::<FatalError>().is_some() {
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

/// Why a job could not start or did not end well.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum JobError {
    /// The configuration or the graph is invalid; the message names the
    /// problem.
    #[error("invalid job: {0}")]
    Config(String),
    /// A task failed and no restart was left.
    #[error("task {task} failed: {cause}")]
    TaskFailed {
        /// The task, shown as `keyed_sum[1]`.
        task: TaskId,
        /// Why it failed.
        cause: TaskError,
    },
    /// More checkpoints failed in a row than tolerated (Flink's
    /// `CheckpointFailureManager`); the message gives the last reason.
    #[error("checkpointing failed: {0}")]
    Checkpoint(String),
    /// Checkpoint storage could not be used.
    #[error("checkpoint storage: {0}")]
    Storage(String),
    /// The job cannot restore from the given checkpoint.
    #[error("cannot restore: {0}")]
    Restore(String),
    /// A bug in lockgate.
    #[error("internal error: {0}")]
    Internal(String),
}
