//! Failure injection: a documented, seeded plan of task failures, so that
//! recovery is tested the same way every time.

use crate::types::error::TaskError;
use serde::{Deserialize, Serialize};

/// One planned failure: task `task` (its index in start order, see
/// [`crate::JobBuilder::task_names`]), or the task named `task_name`,
/// fails at `at`, once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedFailure {
    /// The task's index in start order (set from `task_name` when the job
    /// starts, if that is given).
    pub task: usize,
    /// The task's name as [`crate::JobBuilder::task_names`] lists it
    /// (`vwap[1]`; a task of one subtask may be named without `[0]`):
    /// when given, it decides, whatever `task` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    /// When it fails.
    pub at: FailurePoint,
}

/// The failures to inject into a job, each striking once, in order per
/// task: after a restart, a task's next planned failure is armed.
///
/// # Examples
/// ```
/// use lockgate::{testing::FailurePlan, testing::FailurePoint};
/// let plan = FailurePlan::none()
///     .with(2, FailurePoint::AfterRecords(1_000))
///     .with(2, FailurePoint::DuringSnapshot); // armed after the first struck
/// assert_eq!(plan.failures.len(), 2);
/// // seeded: the same seed gives the same plan
/// assert_eq!(FailurePlan::seeded(7, 3, 4, 100), FailurePlan::seeded(7, 3, 4, 100));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailurePlan {
    /// The failures.
    pub failures: Vec<PlannedFailure>,
}

impl FailurePlan {
    /// No failures.
    pub fn none() -> Self {
        FailurePlan::default()
    }

    /// `count` failures at seeded pseudo-random points: each picks a task
    /// among `0..num_tasks` and a record count in `1..=max_records`
    /// (SplitMix64 over `seed`, so the same seed gives the same plan).
    /// With no task or no record to fail at (`num_tasks` or `max_records`
    /// 0) the plan is empty.
    pub fn seeded(seed: u64, count: usize, num_tasks: usize, max_records: u64) -> Self {
        if num_tasks == 0 || max_records == 0 {
            return FailurePlan::none();
        }
        let mut state = seed;
        let mut next = move || {
            // SplitMix64 (Steele, Lea, Flood 2014): a small, well-mixed
            // generator; enough to spread failure points.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let failures = (0..count)
            .map(|_| PlannedFailure {
                task: (next() % num_tasks as u64) as usize,
                task_name: None,
                at: FailurePoint::AfterRecords(1 + next() % max_records),
            })
            .collect();
        FailurePlan { failures }
    }

    /// Adds a failure of the task with index `task` in start order.
    pub fn with(mut self, task: usize, at: FailurePoint) -> Self {
        self.failures.push(PlannedFailure {
            task,
            task_name: None,
            at,
        });
        self
    }

    /// Adds a failure of the task named `task`, as
    /// [`crate::JobBuilder::task_names`] lists it (`count[1]`; `count`
    /// alone for a task of one subtask). [`crate::JobBuilder::start`]
    /// refuses a name the job does not have, listing the names.
    ///
    /// # Examples
    /// ```
    /// use lockgate::{testing::FailurePlan, testing::FailurePoint, JobBuilder, JobConfig};
    /// let job = JobBuilder::new("named", JobConfig::default());
    /// let (input, _ingest) = job.ingest::<u64>("input", 8);
    /// let _out = input.rebalance().task("double", 2).map(|x| x * 2).collect();
    /// let plan = FailurePlan::none().with_task("dubble[1]", FailurePoint::AfterRecords(10));
    /// let err = job.with_failures(plan).start().unwrap_err().to_string();
    /// assert!(err.contains("double[1]"), "{err}"); // the names it has
    /// ```
    pub fn with_task(mut self, task: impl Into<String>, at: FailurePoint) -> Self {
        self.failures.push(PlannedFailure {
            task: 0,
            task_name: Some(task.into()),
            at,
        });
        self
    }

    /// Sets the index of every failure given by name from `names` (the
    /// job's tasks in start order).
    pub(crate) fn resolve_names(&mut self, names: &[String]) -> Result<(), String> {
        for f in &mut self.failures {
            let Some(name) = &f.task_name else { continue };
            let single = format!("{name}[0]");
            let found = names.iter().position(|n| n == name).or_else(|| {
                // A bare operator name stands for its only subtask.
                let i = names.iter().position(|n| *n == single)?;
                let prefix = format!("{name}[");
                (names.iter().filter(|n| n.starts_with(&prefix)).count() == 1).then_some(i)
            });
            match found {
                Some(i) => f.task = i,
                None => {
                    return Err(format!(
                        "the failure plan names task '{name}', which the job does not have (its tasks: {})",
                        names.join(", ")
                    ))
                }
            }
        }
        Ok(())
    }

    pub(crate) fn next_for(&self, task: usize, fired: &[usize]) -> Option<usize> {
        (0..self.failures.len()).find(|i| self.failures[*i].task == task && !fired.contains(i))
    }

    pub(crate) fn point(&self, index: usize) -> FailurePoint {
        self.failures[index].at
    }
}

/// Where a planned failure strikes a task (see [`crate::testing::FailurePlan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailurePoint {
    /// When the task has handled this many records in the current attempt
    /// (received, or emitted for a source).
    AfterRecords(u64),
    /// While the task aligns a checkpoint (after a barrier blocked one of
    /// its channels and before the alignment ends); only tasks with two or
    /// more inputs in exactly-once mode align.
    DuringAlignment,
    /// While the task takes its snapshot: after its state was copied and
    /// before it acknowledged the checkpoint.
    DuringSnapshot,
    /// In the asynchronous part of the task's snapshot (on its snapshot
    /// thread, while the task processes records again), before its part
    /// is written.
    DuringAsyncSnapshot,
}

/// One armed failure in one task attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InjectedFailure {
    pub(crate) index: usize,
    pub(crate) at: FailurePoint,
}

/// The error a task fails with when armed failure `f` strikes.
pub(crate) fn injected(f: &InjectedFailure) -> TaskError {
    TaskError::Injected(format!("planned failure #{} ({:?})", f.index, f.at))
}
