//! [`TaskId`]: the name of one subtask, `operator[subtask]`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One subtask of an operator: the unit the runtime runs on one thread,
/// restarts and checkpoints. Shown (and stored in reports) as
/// `operator[subtask]`, e.g. `keyed_sum[1]`.
///
/// # Examples
/// ```
/// use lockgate::TaskId;
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
