//! The errors of lockgate, in one leaf module: what operators return
//! ([`BoxError`], [`OperatorError`], [`FatalError`]), why a task stopped
//! ([`TaskError`]) and why a job did not start or end well ([`JobError`]).

use crate::types::element::CheckpointId;
use crate::types::task_id::TaskId;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

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
    /// A failure planned by a [`crate::testing::FailurePlan`].
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
/// use lockgate::{error::is_fatal_error, error::FatalError};
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

/// Everything that can go wrong when writing or reading checkpoints. Every
/// message names the file or folder concerned and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An operating-system I/O call failed.
    #[error("I/O error while {op} {path}: {source}")]
    Io {
        /// What was being done ("reading", "creating", "syncing", ...).
        op: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with [`MAGIC`](crate::storage::MAGIC): not a lockgate checkpoint file.
    #[error("bad magic in {path}: expected {expected:?}, found {found:?} (not a lockgate checkpoint file)")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// [`MAGIC`](crate::storage::MAGIC).
        expected: [u8; 4],
        /// The first bytes of the file (fewer than 4 if the file is shorter).
        found: Vec<u8>,
    },
    /// The file was written by a format version this build cannot read.
    #[error("unsupported format version {found} in {path} (this build reads version {supported})")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u16,
        /// [`FORMAT_VERSION`](crate::storage::FORMAT_VERSION).
        supported: u16,
    },
    /// The file is shorter than its header says (e.g. a torn or cut copy).
    #[error(
        "truncated: {path} holds {found} bytes, its header says {expected} (a cut copy, or a corrupt length field)"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the file should hold (header included).
        expected: u64,
        /// Bytes it holds.
        found: u64,
    },
    /// The file is longer than its header says.
    #[error("trailing bytes: {path} holds {found} bytes, expected {expected}")]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Bytes the file should hold (header included).
        expected: u64,
        /// Bytes it holds.
        found: u64,
    },
    /// The bytes' CRC32C differs from the one recorded for them (a flipped
    /// bit): a folder file's header, a one-file checkpoint's header (its
    /// metadata) or its metadata (a part, named `chk-<n>#<part>`).
    #[error("checksum mismatch in {path}: expected 0x{expected:08x}, found 0x{found:08x}")]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// CRC32C stored in the header.
        expected: u32,
        /// CRC32C computed over the payload.
        found: u32,
    },
    /// A checkpoint folder has no `_metadata` file.
    #[error("missing metadata: {path} does not exist")]
    MissingMetadata {
        /// The expected path of `_metadata`.
        path: PathBuf,
    },
    /// The `_metadata` file is intact but its content is invalid.
    #[error("invalid metadata in {path}: {reason}")]
    BadMetadata {
        /// The `_metadata` file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A state file listed in `_metadata` does not exist.
    #[error("missing state file {path} (listed in _metadata)")]
    MissingStateFile {
        /// The expected path of the state file.
        path: PathBuf,
    },
    /// A state file is intact on its own but differs from what `_metadata`
    /// recorded for it (e.g. a file from another checkpoint copied in).
    #[error(
        "state file {path} does not match _metadata: {what} expected {expected}, found {found}"
    )]
    StateMismatch {
        /// The state file.
        path: PathBuf,
        /// "payload size" or "crc32c".
        what: &'static str,
        /// What `_metadata` says.
        expected: u64,
        /// What the file holds.
        found: u64,
    },
    /// An incremental checkpoint's part refers to an earlier checkpoint
    /// (its base) that is not there or lacks the subtask's part.
    #[error("checkpoint {id} needs the part of task {task:?} subtask {subtask} in its base checkpoint {base}: {why} ({path})")]
    MissingBase {
        /// The checkpoint being loaded.
        id: CheckpointId,
        /// The base it refers to.
        base: CheckpointId,
        /// The task.
        task: String,
        /// The subtask.
        subtask: u32,
        /// What is wrong with the base.
        why: String,
        /// The base's location.
        path: PathBuf,
    },
    /// Another running job holds the folder ([`LocalDirStorage::lock`](crate::storage::LocalDirStorage::lock)).
    #[error("checkpoint folder {root} is in use by another running job{}; wait for it to end or use another folder", .holder.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Locked {
        /// The storage's root.
        root: PathBuf,
        /// The holder's process id, when it wrote one.
        holder: Option<u32>,
    },
    /// A part written for a checkpoint that was discarded (aborted) before
    /// it: refused, so that a late write does not leave a staging folder
    /// behind ([`LocalDirStorage`](crate::storage::LocalDirStorage)).
    #[error(
        "checkpoint {id} was aborted and its parts dropped in {root}; a late part is not written"
    )]
    Discarded {
        /// The checkpoint.
        id: CheckpointId,
        /// The storage's root.
        root: PathBuf,
    },
    /// No published checkpoint with this id.
    #[error("checkpoint {id} not found in {root}")]
    NotFound {
        /// The id asked for.
        id: CheckpointId,
        /// The storage's root.
        root: PathBuf,
    },
    /// A checkpoint with this id is already published.
    #[error("checkpoint {id} already exists: {path}")]
    AlreadyExists {
        /// The id written.
        id: CheckpointId,
        /// The existing checkpoint's location.
        path: PathBuf,
    },
    /// The caller's input to a write is invalid (id 0, duplicate state key).
    #[error("invalid checkpoint {id}: {reason}")]
    InvalidInput {
        /// The id written.
        id: CheckpointId,
        /// What is wrong.
        reason: String,
    },
}

impl StorageError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> StorageError {
        StorageError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The message of a caught panic (`&str` or `String` payloads).
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}
