//! The helper the documentation's examples share: a job fed from a list
//! of records (or from a source), the example's operators attached to its
//! stream, run to its end, and its output returned.
//!
//! [`run`] pushes the records through an ingest source named `input` and
//! [`run_source`] reads a source of the example's own; either hands the
//! stream to the example's closure, which attaches operators, exchanges
//! and tasks and returns the stream to collect (or `()` when it ended the
//! stream in a sink itself, see [`End`]). The job has the default
//! [`JobConfig`] (no checkpoints) and ends when its input ends, so the
//! output is the same in every run; its order is the order the records
//! reached the end of the job, which a task of several subtasks in between
//! may change: sort the output then.
//!
//! # Examples
//! ```
//! use lockgate::example;
//!
//! let doubled = example::run(vec![1u64, 2, 3], |numbers| numbers.map(|x| x * 2));
//! assert_eq!(doubled, [2, 4, 6]);
//!
//! // a keyed task of 2 subtasks in between: sort what comes out
//! let mut odd = example::run(1..=6u64, |numbers| {
//!     numbers.key_by(|x| *x).task("odd", 2).filter(|x| x % 2 == 1)
//! });
//! odd.sort_unstable();
//! assert_eq!(odd, [1, 3, 5]);
//! ```

use crate::config::JobConfig;
use crate::graph::{Data, JobBuilder, Stream};
use crate::operator::Source;
use crate::transport::handoff::Output;
use crate::types::task_id::SubtaskInfo;

/// What an example's closure returns: the [`Stream`] whose records
/// [`run`] and [`run_source`] return, or `()` when the example ended its
/// streams in sinks of its own (they then return no record).
///
/// # Examples
/// ```
/// use lockgate::example;
/// use std::sync::{Arc, Mutex};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let into = seen.clone();
/// let none: Vec<()> = example::run(vec!['a', 'b'], move |letters| {
///     letters.for_each(move |c| into.lock().unwrap().push(c)) // a sink: returns ()
/// });
/// assert!(none.is_empty());
/// assert_eq!(*seen.lock().unwrap(), ['a', 'b']);
/// ```
pub trait End {
    /// The records the job's end collects.
    type Record: Data;

    /// The application's end of the stream, `None` for a job whose
    /// streams all end in sinks.
    fn into_output(self) -> Option<Output<Self::Record>>;
}

impl<T: Data> End for Stream<T> {
    type Record = T;

    fn into_output(self) -> Option<Output<T>> {
        Some(self.collect())
    }
}

impl End for () {
    type Record = ();

    fn into_output(self) -> Option<Output<()>> {
        None
    }
}

/// Runs a job that reads `records` through an ingest source (operator
/// `input`, parallelism 1), with the operators `build` attaches to its
/// stream, to its end, and returns what the stream `build` returned
/// carried, in the order it arrived (see the [module docs](self)).
///
/// # Panics
/// When the job does not start (e.g. `build` names an operator `input`,
/// or leaves a stream without a sink) or a task fails: an example's job
/// is expected to run.
///
/// # Examples
/// ```
/// use lockgate::example;
///
/// let lines = vec!["a b".to_string(), "c".to_string()];
/// let words = example::run(lines, |lines| {
///     lines.flat_map(|line: String| line.split(' ').map(String::from).collect::<Vec<_>>())
/// });
/// assert_eq!(words, ["a", "b", "c"]);
/// ```
pub fn run<I, E>(
    records: impl IntoIterator<Item = I>,
    build: impl FnOnce(Stream<I>) -> E,
) -> Vec<E::Record>
where
    I: Data,
    E: End,
{
    let job = JobBuilder::new("example", JobConfig::default());
    let (input, ingest) = job.ingest::<I>("input", 1024);
    let out = build(input).into_output();
    let handle = job
        .start()
        .unwrap_or_else(|e| panic!("the example's job does not start: {e}"));
    for record in records {
        if ingest.push(record).is_err() {
            break; // the job ended early: `wait` says why
        }
    }
    drop(ingest); // the end of the input
    if let Err(e) = handle.wait() {
        panic!("the example's job failed: {e}");
    }
    out.map(|o| o.try_iter().collect()).unwrap_or_default()
}

/// As [`run`], with a source of `parallelism` subtasks (operator
/// `input`), each made by `source(&info)`, instead of a list of records.
///
/// # Panics
/// As [`run`].
///
/// # Examples
/// ```
/// use lockgate::{example, BoxError, Checkpointed, Source, SourcePoll};
///
/// /// Counts down from `n` to 1.
/// struct Countdown(u32);
/// impl Source<u32> for Countdown {
///     fn poll(&mut self, out: &mut Vec<u32>, _max: usize) -> Result<SourcePoll, BoxError> {
///         out.push(self.0);
///         self.0 -= 1;
///         Ok(if self.0 == 0 { SourcePoll::Finished } else { SourcePoll::Ready })
///     }
/// }
/// impl Checkpointed for Countdown {}
///
/// let out = example::run_source(1, |_| Countdown(3), |counts| counts.map(|x| x * 10));
/// assert_eq!(out, [30, 20, 10]);
/// ```
pub fn run_source<T, S, E>(
    parallelism: usize,
    source: impl Fn(&SubtaskInfo) -> S + Send + Sync + 'static,
    build: impl FnOnce(Stream<T>) -> E,
) -> Vec<E::Record>
where
    T: Data,
    S: Source<T> + 'static,
    E: End,
{
    let job = JobBuilder::new("example", JobConfig::default());
    let out = build(job.source("input", parallelism, source)).into_output();
    let handle = job
        .start()
        .unwrap_or_else(|e| panic!("the example's job does not start: {e}"));
    if let Err(e) = handle.wait() {
        panic!("the example's job failed: {e}");
    }
    out.map(|o| o.try_iter().collect()).unwrap_or_default()
}
