//! What an application embedding a job needs (issue 39): event time on
//! pushed records, failure injection by task name, a replayable source by
//! split and position (restore, rescale, the restored positions after
//! `start`), metrics read while another thread waits.

use lockgate::source::{Replayable, SplitOutput, SplitReader, SplitSource, WatermarkStrategy};
use lockgate::{
    testing::FailurePlan, testing::FailurePoint, BoxError, CheckpointConfig, CheckpointId,
    Checkpointed, Context, IngestConfig, JobBuilder, JobConfig, Operator, RecordSize, RestoreMode,
    SourcePoll, Watermark,
};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant};

/// What the observer saw, in order: records (their timestamps) and
/// watermarks. A plain record type: `#[derive(RecordSize)]`, no impl.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, RecordSize)]
enum Seen {
    Record(i64),
    Watermark(i64),
}

/// Emits every record and every watermark that reaches it.
struct Observe;
impl Checkpointed for Observe {}
impl Operator<i64, Seen> for Observe {
    fn process(
        &mut self,
        input: &mut Vec<i64>,
        ctx: &mut Context<'_, Seen>,
    ) -> Result<(), BoxError> {
        for t in input.drain(..) {
            ctx.emit(Seen::Record(t));
        }
        Ok(())
    }
    fn on_watermark(&mut self, w: Watermark, ctx: &mut Context<'_, Seen>) -> Result<(), BoxError> {
        ctx.emit(Seen::Watermark(w.0));
        Ok(())
    }
}

fn exactly_once(dir: Option<&Path>) -> JobConfig {
    let mut config = JobConfig::default();
    config.checkpoint =
        CheckpointConfig::exactly_once(Duration::from_millis(5), dir.map(Path::to_path_buf));
    config.restart.delay = Duration::ZERO;
    config.restart.max_attempts = 5;
    config
}

#[test]
fn pushed_records_carry_event_time_and_watermarks_flow_while_the_input_runs() {
    let job = JobBuilder::new("event-time", JobConfig::default());
    let strategy = WatermarkStrategy::bounded_out_of_orderness(0).with_timestamps(|t: &i64| *t);
    let (times, ingest) = job.ingest_event_time::<i64>("times", IngestConfig::default(), strategy);
    let out = times
        .rebalance()
        .task("observe", 1)
        .process("observe", |_| Observe)
        .collect();
    let handle = job.start().unwrap();
    for t in 1..=10 {
        ingest.push(t).unwrap();
    }
    // The input is still open: the generated watermark (max - 0 - 1)
    // arrives anyway.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.contains(&Seen::Watermark(9)) {
        assert!(
            Instant::now() < deadline,
            "no watermark while running: {seen:?}"
        );
        seen.extend(out.try_iter());
        std::thread::sleep(Duration::from_millis(1));
    }
    // A timestamp pushed with the record, and an explicit watermark.
    ingest.push_at(0, 50).unwrap();
    ingest.push_watermark(Watermark(100)).unwrap();
    while !seen.contains(&Seen::Watermark(100)) {
        assert!(Instant::now() < deadline, "no explicit watermark: {seen:?}");
        seen.extend(out.try_iter());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(seen.contains(&Seen::Watermark(49)), "{seen:?}");
    drop(ingest);
    handle.wait().unwrap();
}

/// Runs the event-time job with checkpoints, `failures` injected;
/// everything committed, in order, and the job's failures' task names.
fn event_time_run(failures: FailurePlan) -> (Vec<Seen>, Vec<String>) {
    let job = JobBuilder::new("event-time", exactly_once(None));
    let strategy = WatermarkStrategy::bounded_out_of_orderness(3).with_timestamps(|t: &i64| *t);
    let (times, ingest) = job.ingest_event_time::<i64>("times", IngestConfig::default(), strategy);
    let out = times
        .rebalance()
        .task("observe", 1)
        .process("observe", |_| Observe)
        .collect_committed(None);
    let handle = job.with_failures(failures).start().unwrap();
    for i in 0..2000i64 {
        // out of order within a bound, explicit watermarks now and then
        ingest.push(i - (i % 4)).unwrap();
        if i % 500 == 499 {
            ingest.push_watermark(Watermark(i + 1)).unwrap();
        }
    }
    drop(ingest);
    let metrics = handle.wait().unwrap();
    let seen = out.try_iter().flat_map(|b| b.records).collect();
    (seen, metrics.failures.into_iter().map(|f| f.task).collect())
}

#[test]
fn an_in_process_restart_replays_records_and_watermarks_exactly() {
    let (clean, none) = event_time_run(FailurePlan::none());
    assert!(none.is_empty());
    assert_eq!(
        clean
            .iter()
            .filter(|s| matches!(s, Seen::Record(_)))
            .count(),
        2000
    );
    assert!(clean.contains(&Seen::Watermark(500)), "an explicit one");
    // Failures injected by name: the same output, in the same order,
    // watermarks at the same places.
    let plan = FailurePlan::none()
        .with_task("observe", FailurePoint::AfterRecords(700))
        .with_task("times[0]", FailurePoint::AfterRecords(1500));
    let (failed, tasks) = event_time_run(plan);
    assert_eq!(tasks, ["observe[0]", "times[0]"]);
    assert_eq!(failed, clean);
}

#[test]
fn a_failure_plan_naming_a_task_the_job_lacks_is_refused() {
    let job = JobBuilder::new("named", JobConfig::default());
    let (input, _ingest) = job.ingest::<u64>("input", 8);
    let _out = input.rebalance().task("double", 2).map(|x| x * 2).collect();
    // `double` has two subtasks: a bare name is not enough.
    let plan = FailurePlan::none().with_task("double", FailurePoint::AfterRecords(1));
    let err = job.with_failures(plan).start().unwrap_err().to_string();
    assert!(
        err.contains("'double'") && err.contains("double[1]"),
        "{err}"
    );
}

/// Numbers in `splits` splits: split `s` holds `s, s + splits, ...`
/// below `limit` (a feed that grows between runs).
struct Numbers {
    subtask: usize,
    parallelism: usize,
    splits: u32,
    limit: u64,
}

struct Reader {
    at: Vec<(u32, u64)>,
    step: u64,
    limit: u64,
}

impl SplitSource for Numbers {
    type Record = u64;
    type Split = u32;
    type Position = u64;
    type Reader = Reader;
    fn splits(&self) -> Vec<u32> {
        (0..self.splits)
            .filter(|s| *s as usize % self.parallelism == self.subtask)
            .collect()
    }
    fn open(&mut self, splits: &[(u32, Option<u64>)]) -> Result<Reader, BoxError> {
        Ok(Reader {
            at: splits
                .iter()
                .map(|(s, p)| (*s, p.unwrap_or(u64::from(*s))))
                .collect(),
            step: u64::from(self.splits),
            limit: self.limit,
        })
    }
}

impl SplitReader<Numbers> for Reader {
    fn read(&mut self, out: &mut SplitOutput<'_, Numbers>) -> Result<SourcePoll, BoxError> {
        // A few at a time, so that checkpoints fall in between.
        for (split, next) in &mut self.at {
            for _ in 0..3 {
                if *next >= self.limit || out.is_full() {
                    break;
                }
                out.emit(*next, split, *next + self.step);
                *next += self.step;
            }
        }
        let done = self.at.iter().all(|(_, n)| *n >= self.limit);
        Ok(if done {
            SourcePoll::Finished
        } else {
            SourcePoll::Ready
        })
    }
}

/// What a run of the numbers job gave: the numbers committed, sorted; the
/// restored positions read right after `start`; the newest checkpoint
/// whose output the application has.
struct NumbersRun {
    got: Vec<u64>,
    positions: Vec<(u32, u64)>,
    newest: Option<CheckpointId>,
}

/// Reads the numbers below `limit` at `parallelism`, restoring from `dir`
/// if it holds a checkpoint (`after`: the newest checkpoint whose output
/// the application already has).
fn numbers_run(
    dir: &Path,
    parallelism: usize,
    limit: u64,
    failures: FailurePlan,
    after: Option<CheckpointId>,
) -> NumbersRun {
    let config = exactly_once(Some(dir));
    let mut config = config;
    config.checkpoint = config.checkpoint.with_restore_mode(RestoreMode::IfPresent);
    let job = JobBuilder::new("numbers", config);
    let restored = job.restored_source("numbers");
    let out = job
        .source("numbers", parallelism, move |info| {
            Replayable::new(Numbers {
                subtask: info.index,
                parallelism: info.parallelism,
                splits: 6,
                limit,
            })
        })
        .collect_committed(after);
    let handle = job.with_failures(failures).start().unwrap();
    let positions = restored.positions::<Numbers>().unwrap();
    handle.wait().unwrap();
    let mut newest = after;
    let mut got = Vec::new();
    for batch in out.try_iter() {
        newest = newest.max(Some(batch.checkpoint));
        got.extend(batch.records);
    }
    got.sort_unstable();
    NumbersRun {
        got,
        positions,
        newest,
    }
}

/// `got` is exactly `range` (said briefly when not).
fn assert_exactly(got: &[u64], range: std::ops::Range<u64>) {
    let expected: Vec<u64> = range.clone().collect();
    if got != expected {
        let missing = expected.iter().filter(|x| !got.contains(x)).count();
        panic!(
            "expected {range:?}: got {} numbers ({:?}..{:?}), {missing} missing",
            got.len(),
            got.first(),
            got.last()
        );
    }
}

#[test]
fn a_replayable_source_resumes_by_split_across_restarts_restores_and_a_rescale() {
    let dir = tempfile::tempdir().unwrap();
    // Two subtasks, a failure in each: every number once.
    let plan = FailurePlan::none()
        .with_task("numbers[0]", FailurePoint::AfterRecords(200))
        .with_task("numbers[1]", FailurePoint::AfterRecords(400));
    let first = numbers_run(dir.path(), 2, 1200, plan, None);
    assert!(first.positions.is_empty(), "a fresh start restores nothing");
    assert_exactly(&first.got, 0..1200);
    // The feed grew; restored at three subtasks, each split goes on from
    // where the first run left it, whichever subtask reads it now.
    let second = numbers_run(dir.path(), 3, 3000, FailurePlan::none(), first.newest);
    assert_eq!(
        second.positions,
        (0..6).map(|s| (s, 1200 + u64::from(s))).collect::<Vec<_>>()
    );
    assert_exactly(&second.got, 1200..3000);
    // And back to one subtask, with a failure.
    let plan = FailurePlan::none().with_task("numbers", FailurePoint::AfterRecords(30));
    let third = numbers_run(dir.path(), 1, 3100, plan, second.newest);
    assert_exactly(&third.got, 3000..3100);
}
