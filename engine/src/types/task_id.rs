//! [`TaskId`]: the name of one subtask, `operator[subtask]`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One subtask of an operator: the unit the runtime runs on one thread,
/// restarts and checkpoints. Shown (and stored in reports) as
/// `operator[subtask]`, e.g. `keyed_sum[1]`.
///
/// # Examples
/// ```
/// use lockgate::task::TaskId;
/// let id = TaskId::new("keyed_sum", 1);
/// assert_eq!(id.to_string(), "keyed_sum[1]");
/// assert_eq!("keyed_sum[1]".parse::<TaskId>().unwrap(), id);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The operator's name, unique in the job (for a chain: its head).
    pub operator: String,
    /// The subtask index, `0..parallelism`.
    pub subtask: usize,
}

impl TaskId {
    /// The task of subtask `subtask` of operator `operator`.
    pub fn new(operator: impl Into<String>, subtask: usize) -> Self {
        TaskId {
            operator: operator.into(),
            subtask,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.operator, self.subtask)
    }
}

/// Why a string is not a task name `operator[subtask]`.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("'{0}' is not a task name of the form operator[subtask]")]
pub struct ParseTaskIdError(String);

impl std::str::FromStr for TaskId {
    type Err = ParseTaskIdError;

    /// Parses `operator[subtask]`, the form [`TaskId`]'s `Display` writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseTaskIdError(s.to_string());
        let open = s.rfind('[').ok_or_else(bad)?;
        let index = s[open + 1..].strip_suffix(']').ok_or_else(bad)?;
        let subtask = index.parse::<usize>().map_err(|_| bad())?;
        if open == 0 {
            return Err(bad());
        }
        Ok(TaskId::new(&s[..open], subtask))
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What a factory is told about the subtask it makes a source, operator or
/// sink for (the argument of the factories given to
/// [`crate::JobBuilder::source`], [`crate::Stream::process`] and
/// [`crate::Stream::sink`]), as Flink's `RuntimeContext` tells a function
/// its task.
///
/// # Examples
/// ```
/// use lockgate::{BoxError, Checkpointed, JobBuilder, JobConfig, Sink, task::SubtaskInfo};
/// use std::sync::{Arc, Mutex};
///
/// struct Discard;
/// impl Sink<u8> for Discard {
///     fn write(&mut self, input: &mut Vec<u8>) -> Result<(), BoxError> {
///         input.clear();
///         Ok(())
///     }
/// }
///
/// impl Checkpointed for Discard {}
///
/// let seen: Arc<Mutex<Vec<SubtaskInfo>>> = Arc::default();
/// let job = JobBuilder::new("info", JobConfig::default());
/// let (input, ingest) = job.ingest::<u8>("input", 4);
/// let s2 = seen.clone();
/// input.rebalance().task("t", 2).sink("out", move |info: &SubtaskInfo| {
///     s2.lock().unwrap().push(info.clone());
///     Discard
/// });
/// ingest.close();
/// job.start().unwrap().wait().unwrap();
/// let mut seen = seen.lock().unwrap().clone();
/// seen.sort_by_key(|i| i.index);
/// assert_eq!(seen[1], SubtaskInfo { operator: "out".into(), index: 1, parallelism: 2 });
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SubtaskInfo {
    /// The name of the source, operator or sink being made.
    pub operator: String,
    /// Its subtask index, `0..parallelism`.
    pub index: usize,
    /// The number of subtasks of its task.
    pub parallelism: usize,
}
