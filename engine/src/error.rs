//! The errors of lockgate, in one leaf module: what operators return
//! ([`BoxError`], [`OperatorError`], [`FatalError`]), why a task stopped
//! ([`TaskError`]) and why a job did not start or end well ([`JobError`]).

use crate::checkpoint::StorageError;
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
#[derive(Debug, Clone)]
pub enum TaskError {
    /// An operator returned an error; its chain of causes is kept
    /// ([`std::error::Error::source`]).
    Operator {
        /// The operator's name.
        operator: String,
        /// The call that failed (`process`, `snapshot_state`, ...).
        call: &'static str,
        /// What the operator returned.
        source: SharedError,
    },
    /// The task's code panicked.
    Panic(String),
    /// A neighbour task is gone (it failed or was cancelled).
    Disconnected(String),
    /// The job cancelled the task (another task failed, or the job stopped).
    Cancelled,
    /// A failure planned by a [`crate::FailurePlan`].
    Injected(String),
    /// An operator returned an error with a [`FatalError`] in its chain of
    /// causes: restarting cannot help (e.g. malformed input), so the job
    /// fails at once.
    Fatal {
        /// The operator's name.
        operator: String,
        /// The call that failed.
        call: &'static str,
        /// What the operator returned.
        source: SharedError,
    },
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Operator {
                operator,
                call,
                source,
            } => write!(f, "operator '{operator}' failed in {call}: {source}"),
            TaskError::Panic(m) => write!(f, "panicked: {m}"),
            TaskError::Disconnected(to) => write!(f, "channel to '{to}' disconnected"),
            TaskError::Cancelled => f.write_str("cancelled"),
            TaskError::Injected(what) => write!(f, "injected failure: {what}"),
            TaskError::Fatal {
                operator,
                call,
                source,
            } => write!(
                f,
                "operator '{operator}' failed for good in {call}: {source}"
            ),
        }
    }
}

impl std::error::Error for TaskError {
    /// The operator's own error (not a wrapper of it), so that downcasting
    /// a link of the chain finds the operator's type.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TaskError::Operator { source, .. } | TaskError::Fatal { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// An operator's error, shared so that a [`TaskError`] can be cloned (the
/// job thread logs it and returns it) with its chain of causes intact.
pub type SharedError = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// True when `e` or any error in its chain of causes is a [`FatalError`],
/// so that wrapping a fatal error with context keeps it fatal.
///
/// # Examples
/// ```
/// use lockgate::{is_fatal_error, FatalError};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("reading the input")]
/// struct Context(#[source] FatalError);
///
/// assert!(is_fatal_error(&Context(FatalError("line 7: bad date".into()))));
/// assert!(!is_fatal_error(&std::io::Error::other("disk hiccup")));
/// ```
pub fn is_fatal_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err.is::<FatalError>() {
            return true;
        }
        next = err.source();
    }
    false
}

impl TaskError {
    /// The error of operator `operator` returned from its call `call`:
    /// [`TaskError::Fatal`] when a [`FatalError`] is in its chain of
    /// causes, else [`TaskError::Operator`].
    pub(crate) fn from_operator(operator: &str, call: &'static str, e: BoxError) -> TaskError {
        let fatal = is_fatal_error(&*e);
        let source: SharedError = std::sync::Arc::from(e);
        let operator = operator.to_string();
        if fatal {
            TaskError::Fatal {
                operator,
                call,
                source,
            }
        } else {
            TaskError::Operator {
                operator,
                call,
                source,
            }
        }
    }

    /// True when restarting the job cannot help.
    pub fn is_fatal(&self) -> bool {
        matches!(self, TaskError::Fatal { .. })
    }
}

/// Why a job could not start or did not end well.
#[derive(thiserror::Error, Debug)]
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
        #[source]
        cause: TaskError,
    },
    /// More checkpoints failed in a row than tolerated (Flink's
    /// `CheckpointFailureManager`); the message gives the last reason.
    #[error("checkpointing failed: {0}")]
    Checkpoint(String),
    /// Checkpoint storage could not be used (the storage's own error,
    /// naming the file or folder; shown, not repeated as a source).
    #[error("checkpoint storage: {0}")]
    Storage(StorageError),
    /// The checkpoint folder already holds checkpoints and the job was not
    /// told to restore from them (they are never overwritten).
    #[error(
        "checkpoint folder {0} already holds checkpoints; restore from it or use an empty folder"
    )]
    FolderInUse(String),
    /// The job cannot restore from the given checkpoint.
    #[error("cannot restore: {0}")]
    Restore(String),
    /// A bug in lockgate.
    #[error("internal error: {0}")]
    Internal(String),
}
