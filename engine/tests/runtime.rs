//! The task runtime: failures, stopping, restores and alignment under load.

mod common;

use common::*;
use lockgate::*;
use lockgate::{
    barrier::AbortReason,
    config::PinPolicy,
    error::{is_fatal_error, FatalError, TaskError},
    stats::{CheckpointStatus, Pinning},
    storage::{
        CheckpointMetadata, CheckpointStorage, LocalDirStorage, MemoryStorage, PartHandle,
        StorageError,
    },
    testing::{FailurePlan, FailurePoint},
    tuning::now_ns,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Finals = Arc<Mutex<HashMap<u64, u64>>>;

/// source(2) → key_by → keyed_sum(2) → sink(1) keeping the largest sum per
/// key (sums only grow, so that is the final one).
fn sum_job(config: JobConfig, n: u64, keys: u64) -> (JobBuilder, Finals) {
    let job = JobBuilder::new("sums", config);
    let finals: Finals = Arc::default();
    let f2 = finals.clone();
    job.source("numbers", 2, move |i| {
        Counter::part(i.index, i.parallelism, n)
    })
    .key_by(move |x| x % keys)
    .task("keyed_sum", 2)
    .process("keyed_sum", move |_| keyed_sum(keys))
    .rebalance()
    .task("sink", 1)
    .sink("sink", move |_| MaxSink(f2.clone()));
    (job, finals)
}

/// As [`sum_job`], with sources emitting `per_poll` numbers a millisecond
/// (few keys change between two checkpoints: incremental ones are deltas).
fn paced_sum_job(config: JobConfig, n: u64, keys: u64, per_poll: usize) -> (JobBuilder, Finals) {
    held_sum_job(config, n, keys, per_poll, None)
}

/// As [`paced_sum_job`]; with `release`, the sources idle at `n` until it
/// is true.
fn held_sum_job(
    config: JobConfig,
    n: u64,
    keys: u64,
    per_poll: usize,
    release: Option<Arc<std::sync::atomic::AtomicBool>>,
) -> (JobBuilder, Finals) {
    let job = JobBuilder::new("sums", config);
    let finals: Finals = Arc::default();
    let f2 = finals.clone();
    job.source("numbers", 2, move |i| {
        let c = Counter::paced(i.index, i.parallelism, n, per_poll, 1_000_000);
        match &release {
            Some(r) => c.held(r.clone()),
            None => c,
        }
    })
    .key_by(move |x| x % keys)
    .task("keyed_sum", 2)
    .process("keyed_sum", move |_| keyed_sum(keys))
    .rebalance()
    .task("sink", 1)
    .sink("sink", move |_| MaxSink(f2.clone()));
    (job, finals)
}

struct Failing {
    after: u64,
    seen: u64,
    panic: bool,
}
impl Operator<u64, u64> for Failing {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        self.seen += input.len() as u64;
        if self.seen >= self.after {
            if self.panic {
                panic!("boom at {}", self.seen);
            }
            return Err(Box::new(OperatorError("bad record".into())));
        }
        ctx.output().append(input);
        Ok(())
    }
}

impl Checkpointed for Failing {}

fn failing_job(panic: bool) -> Result<JobMetrics, JobError> {
    let mut config = JobConfig::default();
    config.batch_size = 16;
    let job = JobBuilder::new("failing", config);
    job.source("numbers", 2, |i| {
        Counter::part(i.index, i.parallelism, u64::MAX)
    })
    .rebalance()
    .task("fragile", 2)
    .process("fragile", move |_| Failing {
        after: 1000,
        seen: 0,
        panic,
    })
    .key_by(|x| *x)
    .task("sink", 1)
    .sink("sink", |_| MaxSink(Arc::default()).map_in());
    job.start()?.wait()
}

trait MapIn {
    fn map_in(self) -> U64Sink;
}
impl MapIn for MaxSink {
    fn map_in(self) -> U64Sink {
        U64Sink
    }
}
struct U64Sink;
impl Sink<u64> for U64Sink {
    fn write(&mut self, input: &mut Vec<u64>) -> Result<(), BoxError> {
        input.clear();
        Ok(())
    }
}

impl Checkpointed for U64Sink {}

#[test]
fn an_operator_error_fails_the_job_naming_the_task_and_cause() {
    match failing_job(false) {
        Err(JobError::TaskFailed { task, cause }) => {
            assert_eq!(task.operator, "fragile", "{task}");
            assert!(cause.to_string().contains("bad record"), "{cause}");
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
}

#[test]
fn an_operator_panic_fails_the_job_cleanly() {
    match failing_job(true) {
        Err(JobError::TaskFailed {
            task,
            cause: TaskError::Panic(msg),
        }) => {
            assert_eq!(task.operator, "fragile", "{task}");
            assert!(msg.contains("boom"), "{msg}");
        }
        other => panic!("expected a panic failure, got {other:?}"),
    }
}

#[test]
fn stop_drains_an_endless_job_and_ends_it() {
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    let (job, finals) = sum_job(config, u64::MAX, 10);
    let handle = job.start().unwrap();
    assert!(wait_for(20, || handle.metrics().completed_checkpoints() >= 2));
    handle.stop_with_savepoint();
    let m = handle.wait().unwrap();
    // the final checkpoint after the sources stopped is a savepoint
    let last = m
        .checkpoints
        .iter()
        .rev()
        .find(|c| c.is_completed())
        .unwrap();
    assert!(
        last.is_final && last.kind == SnapshotKind::Savepoint,
        "{last:?}"
    );
    // every record the sources emitted reached the sink
    let emitted: u64 = m
        .tasks
        .iter()
        .filter(|t| t.name.starts_with("numbers"))
        .map(|t| t.records_in)
        .sum();
    let sunk = m
        .tasks
        .iter()
        .find(|t| t.name == "sink[0]")
        .unwrap()
        .records_in;
    assert_eq!(emitted, sunk);
    assert!(!finals.lock().unwrap().is_empty());
}

#[test]
fn a_job_without_sink_is_refused_with_a_clear_error() {
    let job = JobBuilder::new("broken", JobConfig::default());
    let _dangling = job
        .source("numbers", 1, |i| Counter::part(i.index, i.parallelism, 10))
        .map(|x| x + 1);
    match job.start() {
        Err(JobError::Config(msg)) => assert!(msg.contains("numbers"), "{msg}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("a dangling stream must be refused"),
    }
}

#[test]
fn duplicate_operator_names_are_refused() {
    let job = JobBuilder::new("dup", JobConfig::default());
    job.source("a", 1, |i| Counter::part(i.index, i.parallelism, 10))
        .sink("a", |_| U64Sink);
    match job.start() {
        Err(JobError::Config(msg)) => assert!(msg.contains("'a'"), "{msg}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("duplicate names must be refused"),
    }
}

fn dir_config(dir: &std::path::Path, restore: bool) -> JobConfig {
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.checkpoint.dir = Some(dir.to_path_buf());
    config.checkpoint.restore_mode = restore.into();
    config
}

#[test]
fn a_job_restores_from_its_checkpoint_folder() {
    let dir = tempfile::tempdir().unwrap();
    let n = 400_000;
    // First run: stopped early (the sources are endless and stop on demand).
    {
        let (job, _) = sum_job(dir_config(dir.path(), false), u64::MAX, 10);
        let h = job.start().unwrap();
        assert!(wait_for(20, || h.metrics().completed_checkpoints() >= 3));
        h.stop_with_savepoint();
        h.wait().unwrap();
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("chk-")));
    // A job started without restore refuses the non-empty folder.
    let (job, _) = sum_job(dir_config(dir.path(), false), n, 10);
    match job.start() {
        Err(e @ JobError::FolderInUse(_)) => assert!(e.to_string().contains("restore"), "{e}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("a non-empty checkpoint folder must not be overwritten"),
    }
    let job = JobBuilder::new("sums", dir_config(dir.path(), true));
    job.source("numbers", 3, move |i| {
        Counter::part(i.index, i.parallelism, n)
    })
    .key_by(|x| x % 10)
    .task("keyed_sum", 2)
    .process("keyed_sum", |_| keyed_sum(10))
    .rebalance()
    .task("sink", 1)
    .sink("sink", |_| MaxSink(Arc::default()));
    // Another parallelism is a rescale: the counter source declares no
    // rule to redistribute its position, so the restore fails, naming it,
    // without a restart.
    let err = job.start().unwrap().wait().unwrap_err().to_string();
    assert!(
        err.contains("numbers")
            && err.contains("redistribute")
            && err.contains("parallelism 2 to 3"),
        "{err}"
    );
    // The same job restores: the sources go on from their positions. The
    // restored sources are endless too; stop again, then check that the
    // keyed sums equal the closed form up to the positions reached.
    let (job, finals) = sum_job(dir_config(dir.path(), true), u64::MAX, 10);
    let h = job.start().unwrap();
    assert!(wait_for(20, || h.metrics().completed_checkpoints() >= 1));
    h.stop_with_savepoint();
    let m = h.wait().unwrap();
    assert!(m.restarts == 0);
    let finals = finals.lock().unwrap().clone();
    // Source i emitted i, i+2, ... below some bound b_i; the sums over
    // both runs must be those of exactly that set of numbers.
    let total: u64 = finals.values().sum();
    assert!(total > 0);
    let keys_even: u64 = (0..10)
        .step_by(2)
        .map(|k| finals.get(&k).copied().unwrap_or(0))
        .sum();
    let keys_odd: u64 = (1..10)
        .step_by(2)
        .map(|k| finals.get(&k).copied().unwrap_or(0))
        .sum();
    // even numbers come from source 0, odd from source 1: each sum is a
    // sum of an arithmetic prefix, i.e. b*(b-2)/4-like closed forms exist
    // for some bound b.
    assert!(
        is_prefix_sum(keys_even, 0) && is_prefix_sum(keys_odd, 1),
        "{finals:?}"
    );
}

/// True when `total` is the sum of `start, start+2, ..., start+2(m-1)` for
/// some m (what one counter source emits before it stops).
fn is_prefix_sum(total: u64, start: u64) -> bool {
    let mut s = 0u64;
    let mut x = start;
    while s < total {
        s += x;
        x += 2;
    }
    s == total
}

#[test]
fn a_corrupt_newest_checkpoint_falls_back_to_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (job, _) = sum_job(dir_config(dir.path(), false), u64::MAX, 10);
        let h = job.start().unwrap();
        assert!(wait_for(20, || h.metrics().completed_checkpoints() >= 3));
        h.stop_with_savepoint();
        h.wait().unwrap();
    }
    let storage = lockgate::storage::LocalDirStorage::open(dir.path()).unwrap();
    use lockgate::storage::CheckpointStorage;
    let ids = storage.list().unwrap();
    assert!(ids.len() >= 2, "{ids:?}");
    let newest = *ids.last().unwrap();
    // flip a byte in one part of the newest checkpoint
    flip_last_byte_of_part(&storage, newest, "keyed_sum");
    let latest = storage.load_latest_valid().unwrap();
    assert_eq!(latest.corrupt.len(), 1);
    assert!(
        latest.corrupt[0].1.to_string().contains("checksum"),
        "{}",
        latest.corrupt[0].1
    );
    let fallback = latest.checkpoint.unwrap().metadata.id;
    assert!(fallback < newest);
    // the job restores from the previous one and goes on
    let (job, _) = sum_job(dir_config(dir.path(), true), u64::MAX, 10);
    let h = job.start().unwrap();
    assert!(wait_for(20, || h.metrics().completed_checkpoints() >= 1));
    h.stop();
    let m = h.wait().unwrap();
    // new checkpoints got ids after every id in the folder
    assert!(
        m.checkpoints.iter().all(|c| c.id > newest),
        "{:?}",
        m.checkpoints.iter().map(|c| c.id).collect::<Vec<_>>()
    );
}

#[test]
fn many_channels_align_under_frequent_checkpoints() {
    // 12 sources into 1 sink: 12 channels at one input gate, tiny
    // channels, a checkpoint every 2 ms, in both modes.
    for mode in [CheckpointMode::ExactlyOnce, CheckpointMode::AtLeastOnce] {
        let mut config = JobConfig::default();
        config.batch_size = 8;
        config.channel_capacity = 2;
        config.handler.blocker_capacity_bytes = 0;
        config.checkpoint.mode = mode;
        config.checkpoint.interval = Some(Duration::from_millis(2));
        let n = 120_000;
        let job = JobBuilder::new("fan-in", config);
        let finals: Finals = Arc::default();
        let f2 = finals.clone();
        job.source("numbers", 12, move |i| {
            Counter::part(i.index, i.parallelism, n)
        })
        .key_by(|x| x % 5)
        .task("keyed_sum", 1)
        .process("keyed_sum", |_| keyed_sum(5))
        .sink("sink", move |_| MaxSink(f2.clone()));
        let m = job.start().unwrap().wait().unwrap();
        assert_eq!(*finals.lock().unwrap(), expected_sums(n, 5), "{mode:?}");
        assert!(m.completed_checkpoints() >= 1, "{mode:?}");
        for c in &m.checkpoints {
            assert!(c.status != CheckpointStatus::Pending, "{c:?}");
        }
    }
}

/// Exactly-once every 5 ms in memory, batches of 64, up to 5 restarts
/// without delay.
fn restarting_config() -> JobConfig {
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.restart = RestartStrategy {
        max_attempts: 5,
        delay: Duration::ZERO,
    };
    config
}

#[test]
fn exactly_once_restarts_give_exact_state() {
    let config = restarting_config();
    let n = 300_000;
    let (job, finals) = sum_job(config, n, 10);
    let names = job.task_names();
    let ks = names.iter().position(|t| t == "keyed_sum[1]").unwrap();
    let sink = names.iter().position(|t| t == "sink[0]").unwrap();
    let job = job.with_failures(
        FailurePlan::none()
            .with(ks, FailurePoint::AfterRecords(30_000))
            .with(sink, FailurePoint::DuringAlignment)
            .with(ks, FailurePoint::DuringSnapshot),
    );
    let m = job.start().unwrap().wait().unwrap();
    assert_eq!(m.restarts, 3, "{:?}", m.failures);
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10));
}

#[test]
fn restarts_are_bounded_by_the_strategy() {
    // One restart allowed, two planned failures of the same task: the
    // second is armed only in the second attempt (failures strike in order
    // per task), so the first costs the one restart and the second fails
    // the job. The job is finite: were the bound ignored, it would restart
    // again and end `Ok`.
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.restart = RestartStrategy {
        max_attempts: 1,
        delay: Duration::ZERO,
    };
    let (job, _) = sum_job(config, 200_000, 10);
    let ks = job
        .task_names()
        .iter()
        .position(|t| t == "keyed_sum[0]")
        .unwrap();
    let job = job.with_failures(
        FailurePlan::none()
            .with(ks, FailurePoint::AfterRecords(1_000))
            .with(ks, FailurePoint::AfterRecords(1_000)),
    );
    let h = job.start().unwrap();
    assert!(wait_for(60, || h.is_finished()));
    let restarts = h.metrics().restarts;
    match h.wait() {
        Err(JobError::TaskFailed {
            task,
            cause: TaskError::Injected(_),
        }) => assert_eq!(task, lockgate::task::TaskId::new("keyed_sum", 0)),
        other => panic!("the second failure must fail the job, got {other:?}"),
    }
    assert_eq!(restarts, 1, "exactly the one restart the strategy allows");
}

/// An ingest job: the test pushes `0..n`, a keyed sum counts them through
/// state, two planned failures restart it.
fn pushed_job(mode: CheckpointMode, n: u64, replay_capacity: usize) -> (JobMetrics, Finals) {
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = mode;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.restart = RestartStrategy {
        max_attempts: 5,
        delay: Duration::ZERO,
    };
    let job = JobBuilder::new("pushed", config);
    let finals: Finals = Arc::default();
    let f2 = finals.clone();
    let (input, ingest) = job.ingest_with::<u64>(
        "in",
        IngestConfig {
            channel_capacity: 256,
            replay_capacity,
        },
    );
    input
        .key_by(|x| x % 10)
        .task("keyed_sum", 2)
        .process("keyed_sum", |_| keyed_sum(10))
        .rebalance()
        .task("sink", 1)
        .sink("sink", move |_| MaxSink(f2.clone()));
    let names = job.task_names();
    let ks0 = names.iter().position(|t| t == "keyed_sum[0]").unwrap();
    let ks1 = names.iter().position(|t| t == "keyed_sum[1]").unwrap();
    let job = job.with_failures(
        FailurePlan::none()
            .with(ks0, FailurePoint::AfterRecords(20_000))
            .with(ks1, FailurePoint::DuringSnapshot),
    );
    let h = job.start().unwrap();
    for x in 0..n {
        ingest.push(x).unwrap();
    }
    ingest.close();
    (h.wait().unwrap(), finals)
}

#[test]
fn pushed_records_survive_restarts_exactly_once() {
    // Before the replay log, every key came out short by what was pushed
    // after the last completed checkpoint of each failed attempt.
    let n = 100_000;
    let (m, finals) = pushed_job(CheckpointMode::ExactlyOnce, n, 1 << 20);
    assert_eq!(m.restarts, 2, "{:?}", m.failures);
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10));
}

#[test]
fn a_small_replay_log_backpressures_the_application_and_loses_nothing() {
    // 512 records of log against 100,000 pushed: the source stops taking
    // records until each checkpoint completes, and the counts stay exact.
    let n = 100_000;
    let (m, finals) = pushed_job(CheckpointMode::ExactlyOnce, n, 512);
    assert_eq!(m.restarts, 2, "{:?}", m.failures);
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10));
}

#[test]
fn pushed_records_survive_restarts_at_least_once() {
    // At-least-once: a replayed record may count twice, none is lost, so
    // every key's sum is at least the exact one.
    let n = 100_000;
    let (m, finals) = pushed_job(CheckpointMode::AtLeastOnce, n, 1 << 20);
    assert_eq!(m.restarts, 2, "{:?}", m.failures);
    let got = finals.lock().unwrap();
    for (k, exact) in expected_sums(n, 10) {
        assert!(got.get(&k).copied().unwrap_or(0) >= exact, "key {k}");
    }
}

#[test]
fn storage_errors_abort_checkpoints_and_too_many_fail_the_job() {
    use lockgate::storage::MemoryStorage;
    let storage = Arc::new(MemoryStorage::new());
    storage.set_fail_writes(true);
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(2));
    config.checkpoint.tolerable_failures = 2;
    let (job, _) = sum_job(config, u64::MAX, 10);
    let job = job.with_storage(Box::new(storage.clone()));
    let handle = job.start().unwrap();
    match handle.wait() {
        Err(JobError::Checkpoint(msg)) => {
            assert!(msg.contains("storage_error"), "{msg}");
            // what the storage said is in the message, not only in the log
            assert!(msg.contains("set_fail_writes"), "{msg}");
        }
        other => panic!("expected the job to fail on storage errors, got {other:?}"),
    }
}

#[test]
fn storage_errors_below_the_tolerance_let_the_job_go_on() {
    use lockgate::{storage::CheckpointStorage, storage::MemoryStorage};
    let storage = Arc::new(MemoryStorage::new());
    storage.set_fail_writes(true);
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(2));
    config.checkpoint.tolerable_failures = 1000;
    let (job, _) = sum_job(config, u64::MAX, 10);
    let handle = job.with_storage(Box::new(storage.clone())).start().unwrap();
    assert!(wait_for(20, || handle
        .metrics()
        .checkpoints
        .iter()
        .filter(|c| c.status == CheckpointStatus::Aborted(AbortReason::StorageError))
        .count()
        >= 2));
    storage.set_fail_writes(false);
    assert!(wait_for(20, || handle.metrics().completed_checkpoints() >= 2));
    handle.stop();
    handle.wait().unwrap();
    assert!(storage.list().unwrap().len() >= 2);
}

/// Sleeps in every batch: checkpoints cannot complete within 1 ms.
struct Slow;
impl Operator<u64, u64> for Slow {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        std::thread::sleep(Duration::from_millis(3));
        ctx.output().append(input);
        Ok(())
    }
}

impl Checkpointed for Slow {}

#[test]
fn checkpoints_that_take_too_long_abort_with_timeout() {
    let mut config = JobConfig::default();
    config.batch_size = 4;
    config.channel_capacity = 1;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(1));
    config.checkpoint.timeout = Duration::from_millis(1);
    config.checkpoint.tolerable_failures = u32::MAX;
    let job = JobBuilder::new("slow", config);
    job.source("numbers", 1, |i| {
        Counter::part(i.index, i.parallelism, u64::MAX)
    })
    .rebalance()
    .task("slow", 1)
    .process("slow", |_| Slow)
    .sink("sink", |_| U64Sink);
    let h = job.start().unwrap();
    assert!(wait_for(20, || h.metrics().checkpoints.iter().any(|c| c
        .status
        == CheckpointStatus::Aborted(AbortReason::Timeout))));
    h.stop();
    h.wait().unwrap();
}

/// Emits 0.. forever, `burst` records per poll every `pause` (a slow
/// source whose barriers come late).
struct Trickle {
    next: u64,
    step: u64,
    pause: Duration,
}
impl Source<u64> for Trickle {
    fn poll(&mut self, out: &mut Vec<u64>, _max: usize) -> Result<SourcePoll, BoxError> {
        out.push(self.next);
        self.next += self.step;
        Ok(SourcePoll::Idle {
            wake_at_ns: Some(now_ns() + self.pause.as_nanos() as u64),
        })
    }
}

impl Checkpointed for Trickle {
    fn snapshot_state(&mut self, _id: CheckpointId) -> Result<Option<Vec<u8>>, BoxError> {
        Ok(Some(self.next.to_le_bytes().to_vec()))
    }
}

#[test]
fn alignment_over_the_limit_aborts_the_checkpoint_and_the_job_goes_on() {
    // A fast and a slow source into one keyed operator: while it waits for
    // the slow source's barrier it holds the fast one's records, far more
    // than 1 KiB.
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.handler.max_alignment_bytes = Some(1024);
    config.handler.blocker_capacity_bytes = 1 << 20;
    let job = JobBuilder::new("skew", config);
    let fast = job.source("fast", 1, |_| Counter {
        next: 0,
        end: u64::MAX,
        step: 2,
        per_poll: 64,
        pause_ns: 0,
        hold: None,
    });
    let slow = job.source("slow", 1, |_| Trickle {
        next: 1,
        step: 2,
        pause: Duration::from_millis(20),
    });
    fast.rebalance()
        .union(slow.rebalance())
        .task("keyed_sum", 1)
        .process("keyed_sum", |_| keyed_sum(4))
        .sink("sink", |_| MaxSink(Arc::default()));
    let h = job.start().unwrap();
    assert!(wait_for(30, || h.metrics().checkpoints.iter().any(|c| c
        .status
        == CheckpointStatus::Aborted(AbortReason::AlignmentLimit))));
    // the job is still running and processing records
    let records = |h: &JobHandle| {
        h.metrics()
            .tasks
            .iter()
            .find(|t| t.name == "keyed_sum[0]")
            .unwrap()
            .records_in
    };
    let before = records(&h);
    assert!(wait_for(20, || records(&h) > before));
    h.stop();
    h.wait().unwrap();
}

#[test]
fn planned_failures_strike_once_even_when_neighbours_report_first() {
    // A failing source closes its channels; its neighbours see them
    // disconnect. Each planned failure must still count once: 2 planned,
    // 2 restarts, never a third.
    for _ in 0..10 {
        let mut c = JobConfig::default();
        c.batch_size = 64;
        c.checkpoint.mode = CheckpointMode::ExactlyOnce;
        c.checkpoint.interval = Some(Duration::from_millis(5));
        c.restart = RestartStrategy {
            max_attempts: 2,
            delay: Duration::ZERO,
        };
        let n = 200_000;
        let (job, finals) = sum_job(c, n, 10);
        let src = job
            .task_names()
            .iter()
            .position(|t| t == "numbers[0]")
            .unwrap();
        let job = job.with_failures(
            FailurePlan::none()
                .with(src, FailurePoint::AfterRecords(20_000))
                .with(src, FailurePoint::AfterRecords(20_000)),
        );
        let m = job
            .start()
            .unwrap()
            .wait()
            .expect("2 failures, 2 restarts allowed");
        assert_eq!(m.restarts, 2, "{:?}", m.failures);
        assert!(
            m.failures.iter().all(|f| f.task == "numbers[0]"),
            "{:?}",
            m.failures
        );
        assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10));
    }
}

/// Reads the task thread's timer slack from procfs on its first batch.
struct SlackProbe;
impl Operator<u64, u64> for SlackProbe {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        input.clear();
        let s = std::fs::read_to_string("/proc/thread-self/timerslack_ns")?;
        ctx.emit(s.trim().parse()?);
        Ok(())
    }
}

impl Checkpointed for SlackProbe {}

#[cfg(target_os = "linux")]
#[test]
fn task_threads_run_with_the_configured_timer_slack() {
    if std::fs::metadata("/proc/thread-self/timerslack_ns").is_err() {
        return; // an old kernel without the file: nothing to check
    }
    for slack in [Some(2_000u64), None] {
        let mut config = JobConfig::default();
        config.timer_slack_ns = slack;
        let job = JobBuilder::new("slack", config);
        let out = job
            .source("numbers", 1, |i| Counter::part(i.index, i.parallelism, 10))
            .rebalance()
            .task("probe", 1)
            .process("probe", |_| SlackProbe)
            .collect();
        job.start().unwrap().wait().unwrap();
        let seen: Vec<u64> = out.try_iter().collect();
        assert!(!seen.is_empty());
        match slack {
            Some(s) => assert!(seen.iter().all(|v| *v == s), "{seen:?}"),
            // the OS default (50 µs on Linux unless changed for the process)
            None => assert!(seen.iter().all(|v| *v != 2_000), "{seen:?}"),
        }
    }
}

/// Emits, once per batch, the cores its thread may run on
/// (`Cpus_allowed_list` of `/proc/thread-self/status`, e.g. `0` or `0-1`).
struct AffinityProbe;
impl Operator<u64, String> for AffinityProbe {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, String>,
    ) -> Result<(), BoxError> {
        input.clear();
        let status = std::fs::read_to_string("/proc/thread-self/status")?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .ok_or("no Cpus_allowed_list")?;
        ctx.emit(line.trim().to_string());
        Ok(())
    }
}

impl Checkpointed for AffinityProbe {}

/// source(2) → probe(3): 5 tasks, more than the 2 cores CI has.
fn affinity_job(pin: PinPolicy) -> (Vec<String>, JobMetrics) {
    let mut config = JobConfig::default();
    config.pinning = pin;
    let job = JobBuilder::new("pinned", config);
    let out = job
        .source("numbers", 2, |i| {
            Counter::part(i.index, i.parallelism, 30_000)
        })
        .rebalance()
        .task("probe", 3)
        .process("probe", |_| AffinityProbe)
        .collect();
    let m = job.start().unwrap().wait().unwrap();
    (out.try_iter().collect(), m)
}

#[cfg(target_os = "linux")]
#[test]
fn pinning_works_when_tasks_outnumber_cores() {
    if std::fs::metadata("/proc/thread-self/status").is_err() {
        return; // no procfs: nothing to probe
    }
    let cores = core_affinity::get_core_ids().unwrap_or_default().len();
    // all on core 0: every probe thread may run on core 0 only
    let (seen, m) = affinity_job(PinPolicy::Cores(vec![0]));
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|c| c == "0"), "{seen:?}");
    assert!(
        m.pinning_failures().is_empty(),
        "{:?}",
        m.pinning_failures()
    );
    assert!(m.tasks.iter().all(|t| t.pinning == Pinning::Pinned(0)));
    // round robin: each thread on one core, each task's the one it reports
    let (seen, m) = affinity_job(PinPolicy::RoundRobin);
    for c in &seen {
        let core: usize = c.parse().unwrap_or_else(|_| panic!("one core, got {c:?}"));
        assert!(core < cores.max(1) || cores == 0, "{c}");
    }
    assert!(
        m.pinning_failures().is_empty(),
        "{:?}",
        m.pinning_failures()
    );
    for (i, t) in m.tasks.iter().enumerate() {
        assert!(
            matches!(t.pinning, Pinning::Pinned(_)),
            "task {i}: {:?}",
            t.pinning
        );
    }
    // unpinned: the process's own mask
    let (_, m) = affinity_job(PinPolicy::None);
    assert!(m.tasks.iter().all(|t| t.pinning == Pinning::Unpinned));
}

#[cfg(target_os = "linux")]
#[test]
fn a_core_that_does_not_exist_is_reported_and_the_job_still_runs() {
    let missing = lockgate::config::MAX_PIN_CORE - 1;
    let (seen, m) = affinity_job(PinPolicy::Cores(vec![missing]));
    assert!(!seen.is_empty(), "the job ran unpinned");
    let failures = m.pinning_failures();
    assert_eq!(failures.len(), m.tasks.len(), "{failures:?}");
    assert!(
        failures[0].contains(&format!("core {missing}")),
        "{failures:?}"
    );
    // beyond what a CPU set can name: refused before the job starts
    let mut config = JobConfig::default();
    config.pinning = PinPolicy::Cores(vec![100_000]);
    let err = config.validate().unwrap_err();
    assert!(err.contains("core 100000"), "{err}");
}

#[test]
fn an_interval_without_a_checkpoint_mode_is_refused() {
    let mut config = JobConfig::default();
    config.checkpoint.interval = Some(Duration::from_millis(10));
    let job = JobBuilder::new("no-mode", config);
    job.source("numbers", 1, |i| Counter::part(i.index, i.parallelism, 10))
        .sink("sink", |_| U64Sink);
    match job.start() {
        Err(JobError::Config(msg)) => assert!(msg.contains("checkpoint.mode is none"), "{msg}"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn pin_policies_parse_with_clear_errors() {
    assert_eq!("none".parse::<PinPolicy>(), Ok(PinPolicy::None));
    assert_eq!(
        "round-robin".parse::<PinPolicy>(),
        Ok(PinPolicy::RoundRobin)
    );
    assert_eq!(
        "0, 1".parse::<PinPolicy>(),
        Ok(PinPolicy::Cores(vec![0, 1]))
    );
    let err = "0,x".parse::<PinPolicy>().unwrap_err();
    assert!(err.contains("0,x"), "{err}");
}

#[test]
fn a_union_with_an_empty_input_runs_to_the_end_with_the_right_result() {
    let n = 100_000;
    let job = JobBuilder::new("union", JobConfig::default());
    let finals: Finals = Arc::default();
    let f2 = finals.clone();
    let sums = job
        .source("numbers", 2, move |i| {
            Counter::part(i.index, i.parallelism, n)
        })
        .key_by(|x| x % 10)
        .task("keyed_sum", 2)
        .process("keyed_sum", |_| keyed_sum(10))
        .rebalance();
    let empty = job
        .source("empty", 1, |i| Counter::part(i.index, i.parallelism, 0))
        .map(|x| (x, x))
        .rebalance();
    sums.union(empty)
        .task("sink", 1)
        .sink("sink", move |_| MaxSink(f2.clone()));
    let m = job.start().unwrap().wait().unwrap();
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10));
    let sink = m.tasks.iter().find(|t| t.name == "sink[0]").unwrap();
    assert_eq!(sink.records_in, n);
    assert!(sink.batches_in > 0 && sink.batches_in <= n);
}

/// Fails with a fatal error on its first batch.
/// Fails with a [`FatalError`], wrapped in context when `wrapped`.
struct Doomed {
    wrapped: bool,
}

/// An error that adds context to its cause.
#[derive(Debug, thiserror::Error)]
#[error("parsing record 3")]
struct WithContext(#[source] FatalError);

impl Operator<u64, u64> for Doomed {
    fn process(
        &mut self,
        _input: &mut Vec<u64>,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        let fatal = FatalError("line 7: not a number".into());
        Err(if self.wrapped {
            Box::new(WithContext(fatal))
        } else {
            Box::new(fatal)
        })
    }
}

impl Checkpointed for Doomed {}

#[test]
fn a_fatal_error_fails_the_job_without_restarts() {
    // A FatalError fails the job at once, also when wrapped with context:
    // what makes it fatal is found anywhere in the chain of causes, and the
    // chain is kept in the error the job returns.
    for wrapped in [false, true] {
        let mut config = JobConfig::default();
        config.checkpoint.mode = CheckpointMode::ExactlyOnce;
        config.checkpoint.interval = Some(Duration::from_millis(5));
        config.restart = RestartStrategy {
            max_attempts: 5,
            delay: Duration::ZERO,
        };
        let job = JobBuilder::new("fatal", config);
        job.source("numbers", 1, |i| {
            Counter::part(i.index, i.parallelism, 1_000)
        })
        .rebalance()
        .task("doomed", 1)
        .process("doomed", move |_| Doomed { wrapped })
        .sink("sink", |_| U64Sink);
        let h = job.start().unwrap();
        assert!(wait_for(30, || h.is_finished()));
        assert_eq!(h.metrics().restarts, 0, "wrapped: {wrapped}");
        let err = h.wait().unwrap_err();
        use std::error::Error as _;
        // the chain: job error → task error → what the operator returned
        let mut chain = Vec::new();
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&err);
        while let Some(e) = next {
            chain.push(e.to_string());
            next = e.source();
        }
        assert_eq!(chain.last().unwrap(), "line 7: not a number", "{chain:?}");
        assert_eq!(chain.len(), if wrapped { 4 } else { 3 }, "{chain:?}");
        // the links are the operator's own errors, so they downcast
        assert!(is_fatal_error(&err), "{chain:?}");
        let third = err
            .source()
            .and_then(|t| t.source())
            .expect("the operator's error");
        if wrapped {
            assert!(third.downcast_ref::<WithContext>().is_some(), "{chain:?}");
        } else {
            assert!(third.downcast_ref::<FatalError>().is_some(), "{chain:?}");
        }
        match err {
            JobError::TaskFailed { task, cause } => {
                assert_eq!(task, lockgate::task::TaskId::new("doomed", 0));
                assert!(cause.is_fatal(), "{cause}");
                assert!(
                    matches!(
                        cause,
                        TaskError::Fatal {
                            call: "process",
                            ..
                        }
                    ),
                    "{cause}"
                );
            }
            other => panic!("expected a fatal failure, got {other:?}"),
        }
    }
}

/// Counts the records it gets into a shared counter.
struct CountSink(Arc<Mutex<u64>>);
impl Sink<u64> for CountSink {
    fn write(&mut self, input: &mut Vec<u64>) -> Result<(), BoxError> {
        *self.0.lock().unwrap() += input.len() as u64;
        input.clear();
        Ok(())
    }
}

impl Checkpointed for CountSink {}

#[test]
fn a_split_stream_feeds_both_branches_exactly_across_failures() {
    let mut config = JobConfig::default();
    config.batch_size = 64;
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.restart = RestartStrategy {
        max_attempts: 3,
        delay: Duration::ZERO,
    };
    let n = 200_000;
    let job = JobBuilder::new("split", config);
    let finals: Finals = Arc::default();
    let (f2, evens, odds) = (
        finals.clone(),
        Arc::new(Mutex::new(0u64)),
        Arc::new(Mutex::new(0u64)),
    );
    let (e2, o2) = (evens.clone(), odds.clone());
    let sums = job
        .source("numbers", 2, move |i| {
            Counter::part(i.index, i.parallelism, n)
        })
        .key_by(|x| x % 10)
        .task("keyed_sum", 2)
        .process("keyed_sum", |_| keyed_sum(10));
    let (to_max, to_count) = sums.split();
    to_max
        .rebalance()
        .task("max", 1)
        .sink("max", move |_| MaxSink(f2.clone()));
    // a nested split: even and odd keys counted by two sinks
    let (even, odd) = to_count.map(|(k, _)| k).split();
    even.filter(|k| k % 2 == 0)
        .sink("evens", move |_| CountSink(e2.clone()));
    odd.filter(|k| k % 2 == 1)
        .sink("odds", move |_| CountSink(o2.clone()));
    let names = job.task_names();
    let ks = names.iter().position(|t| t == "keyed_sum[1]").unwrap();
    let job = job.with_failures(FailurePlan::none().with(ks, FailurePoint::AfterRecords(30_000)));
    let m = job.start().unwrap().wait().unwrap();
    assert_eq!(m.restarts, 1, "{:?}", m.failures);
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10));
    // the counting sinks are not transactional: replays after the restart
    // are counted again, so at least every record arrived
    let (e, o) = (*evens.lock().unwrap(), *odds.lock().unwrap());
    assert!(e >= n / 2 && o >= n / 2, "{e} {o}");
}

#[test]
fn a_split_without_both_branches_finished_is_refused() {
    let job = JobBuilder::new("half", JobConfig::default());
    let (a, _b) = job
        .source("numbers", 1, |i| Counter::part(i.index, i.parallelism, 10))
        .split();
    a.sink("a", |_| U64Sink);
    match job.start() {
        Err(JobError::Config(msg)) => assert!(msg.contains("numbers"), "{msg}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("an unfinished branch must be refused"),
    }
}

#[test]
fn a_stream_of_another_builder_is_a_config_error_not_a_panic() {
    let a = JobBuilder::new("a", JobConfig::default());
    let b = JobBuilder::new("b", JobConfig::default());
    let (ia, _pa) = a.ingest::<u64>("ina", 16);
    // more nodes in b than in a, so b's node numbers point past a's graph
    for k in 0..4 {
        let (s, _) = b.ingest::<u64>(&format!("b{k}"), 16);
        s.for_each(|_| {});
    }
    let (ib, _pb) = b.ingest::<u64>("inb", 16);
    let _out = ia.rebalance().union(ib.rebalance()).task("x", 2).collect();
    match a.start() {
        Err(JobError::Config(msg)) => assert!(msg.contains("another JobBuilder"), "{msg}"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn a_failure_plan_naming_a_missing_task_is_refused() {
    let (job, _) = sum_job(JobConfig::default(), 10, 2);
    let job = job.with_failures(FailurePlan::none().with(99, FailurePoint::AfterRecords(1)));
    match job.start() {
        Err(JobError::Config(msg)) => assert!(msg.contains("task 99"), "{msg}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    assert!(FailurePlan::seeded(1, 3, 0, 10).failures.is_empty());
}

#[test]
fn times_that_do_not_fit_in_u64_ns_are_refused() {
    let mut config = JobConfig::default();
    config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(10), None);
    config.checkpoint.timeout = Duration::MAX;
    let err = config.validate().unwrap_err();
    assert!(err.contains("checkpoint.timeout"), "{err}");
    config.checkpoint.timeout = Duration::from_secs(1);
    config.checkpoint.retained = 0;
    assert!(config.validate().unwrap_err().contains("retained"));
}

#[test]
fn an_aligned_checkpoint_timeout_is_refused_outside_exactly_once() {
    let mut config = JobConfig::default();
    config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(10), None)
        .with_aligned_timeout(Duration::from_millis(5));
    assert_eq!(config.validate(), Ok(()));
    assert!(config.checkpoint.uses_priority_lanes());
    for mode in [CheckpointMode::AtLeastOnce, CheckpointMode::Unaligned] {
        config.checkpoint.mode = mode;
        let err = config.validate().unwrap_err();
        assert!(
            err.contains("aligned_checkpoint_timeout applies to exactly-once"),
            "{mode:?}: {err}"
        );
    }
    // The alignment limit does not apply to a blocking alignment.
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.handler.max_alignment_bytes = Some(1 << 20);
    assert!(config
        .validate()
        .unwrap_err()
        .contains("max_alignment_bytes"));
    config.handler.max_alignment_bytes = None;
    config.checkpoint.aligned_checkpoint_timeout = Some(Duration::MAX);
    assert!(config
        .validate()
        .unwrap_err()
        .contains("checkpoint.aligned_checkpoint_timeout must be at most"));
}

#[test]
fn stop_cuts_the_restart_delay_short() {
    let mut config = JobConfig::default();
    config.restart = RestartStrategy {
        max_attempts: 3,
        delay: Duration::from_secs(600),
    };
    let (job, _) = sum_job(config, u64::MAX, 10);
    let ks = job
        .task_names()
        .iter()
        .position(|t| t == "keyed_sum[0]")
        .unwrap();
    let job = job.with_failures(FailurePlan::none().with(ks, FailurePoint::AfterRecords(100)));
    let h = job.start().unwrap();
    assert!(wait_for(30, || !h.metrics().failures.is_empty()));
    h.stop();
    // without the cut this would wait 600 s
    assert!(
        wait_for(30, || h.is_finished()),
        "stop ends the restart delay"
    );
    match h.wait() {
        Err(JobError::TaskFailed { .. }) => {}
        other => panic!("the failure ends the stopped job, got {other:?}"),
    }
}

/// ingest → key_by → `task` keyed sum with operator `op` → sink.
fn pushed_into(config: JobConfig, op: &str) -> (JobBuilder, Ingest<u64>, Finals) {
    let job = JobBuilder::new("pushed-folder", config);
    let finals: Finals = Arc::default();
    let f2 = finals.clone();
    let (input, ingest) = job.ingest::<u64>("in", 256);
    input
        .key_by(|x| x % 10)
        .task("keyed_sum", 2)
        .process(op, |_| keyed_sum(10))
        .rebalance()
        .task("sink", 1)
        .sink("sink", move |_| MaxSink(f2.clone()));
    (job, ingest, finals)
}

#[test]
fn a_new_process_knows_where_to_push_again_as_soon_as_the_job_started() {
    let dir = tempfile::tempdir().unwrap();
    let (job, ingest, _) = pushed_into(dir_config(dir.path(), false), "keyed_sum");
    let h = job.start().unwrap();
    for x in 0..5_000 {
        ingest.push(x).unwrap();
    }
    ingest.close(); // the final checkpoint (FLIP-147) covers all 5,000
    h.wait().unwrap();
    // a new process: the position is there when start returns, no waiting
    let (job, ingest, finals) = pushed_into(dir_config(dir.path(), true), "keyed_sum");
    let h = job.start().unwrap();
    let from = ingest.restored_position();
    assert_eq!(from, 5_000);
    for x in from..10_000 {
        ingest.push(x).unwrap();
    }
    ingest.close();
    h.wait().unwrap();
    assert_eq!(*finals.lock().unwrap(), expected_sums(10_000, 10));
}

#[test]
fn restored_state_that_no_operator_claims_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (job, ingest, _) = pushed_into(dir_config(dir.path(), false), "keyed_sum");
    let h = job.start().unwrap();
    for x in 0..1_000 {
        ingest.push(x).unwrap();
    }
    ingest.close();
    h.wait().unwrap();
    // the keyed sum renamed: its state would be dropped in silence
    let (job, _ingest, _) = pushed_into(dir_config(dir.path(), true), "renamed_sum");
    match job.start() {
        Err(JobError::Restore(msg)) => {
            assert!(msg.contains("keyed_sum (task keyed_sum[0])"), "{msg}");
            assert!(msg.contains("allow_non_restored_state"), "{msg}");
        }
        other => panic!("expected a restore error, got {other:?}"),
    }
    let mut config = dir_config(dir.path(), true);
    config.checkpoint.allow_non_restored_state = true;
    let (job, ingest, _) = pushed_into(config, "renamed_sum");
    let h = job.start().expect("allowed to drop the old state");
    ingest.close();
    h.wait().unwrap();
}

#[test]
fn a_failure_in_the_asynchronous_part_of_a_snapshot_recovers_exactly_once() {
    let config = restarting_config();
    let n = 200_000;
    let (job, finals) = sum_job(config, n, 10);
    let names = job.task_names();
    let ks = names.iter().position(|t| t == "keyed_sum[0]").unwrap();
    let src = names.iter().position(|t| t == "numbers[1]").unwrap();
    let job = job.with_failures(
        FailurePlan::none()
            .with(ks, FailurePoint::DuringAsyncSnapshot)
            .with(src, FailurePoint::DuringAsyncSnapshot),
    );
    let m = job.start().unwrap().wait().unwrap();
    assert_eq!(m.restarts, 2, "{:?}", m.failures);
    assert!(
        m.failures
            .iter()
            .all(|f| f.cause.contains("DuringAsyncSnapshot")),
        "{:?}",
        m.failures
    );
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10));
}

/// The first publish takes `delay` (a disk that stalls once; `stalled`
/// records which checkpoint it was).
struct SlowFirstPublish {
    delay: Duration,
    stalled: Mutex<Option<CheckpointId>>,
}

impl StorageHooks for SlowFirstPublish {
    fn before_publish(&self, meta: &CheckpointMetadata) {
        let first = {
            let mut s = self.stalled.lock().unwrap();
            s.is_none().then(|| *s = Some(meta.id)).is_some()
        };
        if first {
            std::thread::sleep(self.delay);
        }
    }
}

/// The disk fills up at checkpoint `full_at`: from then on every part is
/// written (staged, as a partial write leaves bytes behind) and then
/// reported failed with ENOSPC.
struct FullDisk {
    root: std::path::PathBuf,
    full_at: CheckpointId,
}

impl StorageHooks for FullDisk {
    fn after_write(&self, part: &PartHandle) -> Result<(), StorageError> {
        if part.checkpoint < self.full_at {
            return Ok(());
        }
        Err(StorageError::Io {
            op: "writing",
            path: self.root.join(&part.file),
            source: std::io::Error::from_raw_os_error(28),
        })
    }
}

/// A job that fails because its checkpoint writes fail (a full disk)
/// leaves no staging folder behind taking space: the checkpoint that
/// failed last is discarded like every aborted one.
#[test]
fn a_job_failed_by_its_checkpoint_writes_leaves_no_staging_folder() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Hooked {
        inner: LocalDirStorage::open(dir.path()).unwrap(),
        hooks: FullDisk {
            root: dir.path().to_path_buf(),
            full_at: CheckpointId(2),
        },
    };
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.checkpoint.tolerable_failures = 0;
    let job = JobBuilder::new("full", config);
    job.source("trickle", 1, |_| Trickle {
        next: 0,
        step: 1,
        pause: Duration::from_millis(1),
    })
    .rebalance()
    .task("sink", 1)
    .sink("sink", |_| U64Sink);
    let err = job
        .with_storage(Box::new(storage))
        .start()
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(matches!(err, JobError::Checkpoint(_)), "{err}");
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn the_timeout_covers_the_metadata_write_and_a_late_publish_is_deleted() {
    let storage = Arc::new(Hooked {
        inner: MemoryStorage::new(),
        hooks: SlowFirstPublish {
            delay: Duration::from_millis(400),
            stalled: Mutex::new(None),
        },
    });
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.checkpoint.timeout = Duration::from_millis(50);
    config.checkpoint.tolerable_failures = u32::MAX;
    // A slow source: barriers reach the sink at once (no backlog), so only
    // the stalled write can make a checkpoint late.
    let job = JobBuilder::new("stall", config);
    job.source("trickle", 1, |_| Trickle {
        next: 0,
        step: 1,
        pause: Duration::from_millis(1),
    })
    .rebalance()
    .task("sink", 1)
    .sink("sink", |_| U64Sink);
    let handle = job.with_storage(Box::new(storage.clone())).start().unwrap();
    let stalled = || *storage.hooks.stalled.lock().unwrap();
    let stalled_timed_out =
        || {
            stalled().is_some_and(|id| {
                handle.metrics().checkpoints.iter().any(|c| {
                    c.id == id && c.status == CheckpointStatus::Aborted(AbortReason::Timeout)
                })
            })
        };
    // The coordinator is not held up by the stalled write: the checkpoint
    // times out while its metadata is still being written.
    assert!(
        wait_for(20, stalled_timed_out),
        "stalled {:?}: {:?}",
        stalled(),
        handle
            .metrics()
            .checkpoints
            .iter()
            .map(|c| (c.id, c.status))
            .collect::<Vec<_>>()
    );
    let id = stalled().unwrap();
    // Once the disk is back, checkpoints complete again.
    assert!(wait_for(20, || handle
        .metrics()
        .checkpoints
        .iter()
        .any(|c| c.id > id && c.is_completed())));
    handle.stop();
    let m = handle.wait().unwrap();
    let c = m.checkpoints.iter().find(|c| c.id == id).unwrap();
    assert!(c.duration_ns >= 50_000_000, "{c:?}");
    // Its late publication was discarded: no checkpoint 1 in the store,
    // while the newest completed checkpoint is there.
    let stored = storage.list().unwrap();
    assert!(!stored.contains(&id), "{stored:?} has {id}");
    let newest = m
        .checkpoints
        .iter()
        .rev()
        .find(|c| c.is_completed())
        .unwrap();
    assert!(
        stored.contains(&newest.id),
        "{stored:?} lacks {}",
        newest.id
    );
}

#[test]
fn incremental_checkpoints_chain_deltas_and_a_corrupt_base_falls_back() {
    use lockgate::{storage::CheckpointStorage, storage::LocalDirStorage};
    let dir = tempfile::tempdir().unwrap();
    // 100,000 keys, few of them changed per checkpoint: deltas.
    let keys = 100_000;
    let mut config = dir_config(dir.path(), false);
    config.checkpoint.full_every = 1000;
    config.checkpoint.max_chain_ratio = 1000.0;
    config.checkpoint.retained = 2;
    {
        let (job, _) = paced_sum_job(config.clone(), u64::MAX, keys, 50);
        let h = job.start().unwrap();
        assert!(wait_for(30, || h
            .metrics()
            .checkpoints
            .iter()
            .filter(|c| c.is_completed() && c.incremental)
            .count()
            >= 3));
        h.stop();
        let m = h.wait().unwrap();
        let inc: Vec<_> = m
            .checkpoints
            .iter()
            .filter(|c| c.is_completed() && c.incremental)
            .collect();
        for c in &inc {
            // A delta writes less than the state it stands for. (A subtask
            // may write a full part at an incremental checkpoint: when most
            // of its keys changed, as under load, between two checkpoints.)
            let deltas: Vec<_> = c
                .subtasks
                .iter()
                .filter(|t| t.task.operator == "keyed_sum" && t.incremental)
                .collect();
            assert!(!deltas.is_empty(), "{c:?}");
            assert!(
                deltas.iter().all(|t| t.checkpointed_bytes < t.state_bytes),
                "{c:?}"
            );
        }
    }
    let storage = LocalDirStorage::open(dir.path()).unwrap();
    let ids = storage.list().unwrap();
    let newest = *ids.last().unwrap();
    let base_of = |id: CheckpointId| {
        storage
            .part_bases(id)
            .unwrap()
            .into_iter()
            .find(|(k, _)| k.task == "keyed_sum" && k.subtask == 0)
            .and_then(|(_, b)| b.base)
    };
    let base = base_of(newest);
    assert!(
        base.is_some(),
        "keyed_sum[0]'s newest part is a delta: {ids:?}"
    );
    // Retention keeps 2 checkpoints and every checkpoint their chains need.
    let chain_start = {
        let mut b = base.unwrap();
        while let Some(older) = base_of(b) {
            b = older;
        }
        b
    };
    assert!(
        ids.contains(&chain_start),
        "{ids:?} lacks the chain's start {chain_start}"
    );
    let loaded = storage.load(newest).unwrap();
    assert!(loaded.bases.values().all(|chain| !chain.is_empty()));

    // Flip a byte of the chain's full part of keyed_sum[0]: every checkpoint
    // building on it is unusable, and the message names that file.
    let victim = flip_last_byte_of_part(&storage, chain_start, "keyed_sum");
    let err = storage.load(newest).unwrap_err();
    assert!(err.to_string().contains(&victim), "{err}");
    let latest = storage.load_latest_valid().unwrap();
    assert!(latest.corrupt.iter().any(|(id, _)| *id == newest));
    if let Some(ok) = &latest.checkpoint {
        // What still loads does not build on the corrupt part.
        assert!(ok.metadata.id < chain_start || base_of(ok.metadata.id).is_none());
    }
}

#[test]
fn an_incremental_job_restores_exactly_after_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = dir_config(dir.path(), false);
    config.checkpoint.full_every = 4;
    config.restart = RestartStrategy {
        max_attempts: 5,
        delay: Duration::ZERO,
    };
    let n = 300_000;
    // The sources hold at their end until the job has restarted three times
    // and completed an incremental checkpoint, however slow the machine's
    // disk: the test waits for that, not for a time.
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (job, finals) = held_sum_job(config, n, 50_000, 500, Some(release.clone()));
    let names = job.task_names();
    let ks = names.iter().position(|t| t == "keyed_sum[1]").unwrap();
    let job = job.with_failures(
        FailurePlan::none()
            .with(ks, FailurePoint::AfterRecords(40_000))
            .with(ks, FailurePoint::DuringAsyncSnapshot)
            .with(ks, FailurePoint::AfterRecords(30_000)),
    );
    let h = job.start().unwrap();
    let incremental_after_restarts = wait_for(60, || {
        let m = h.metrics();
        m.restarts == 3
            && m.checkpoints
                .iter()
                .any(|c| c.is_completed() && c.incremental)
    });
    release.store(true, std::sync::atomic::Ordering::Release);
    let m = h.wait().unwrap();
    assert!(
        incremental_after_restarts,
        "restarts {}, checkpoints {:?}",
        m.restarts, m.checkpoints
    );
    assert_eq!(m.restarts, 3, "{:?}", m.failures);
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, 50_000));
}

#[test]
fn incremental_retention_stays_bounded_and_a_checkpoint_missing_a_task_is_skipped() {
    use lockgate::{storage::CheckpointMetadata, storage::CheckpointStorage};
    let storage = Arc::new(MemoryStorage::new());
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(2));
    config.checkpoint.full_every = 5;
    config.checkpoint.retained = 2;
    {
        let (job, _) = paced_sum_job(config.clone(), u64::MAX, 50_000, 50);
        let h = job.with_storage(Box::new(storage.clone())).start().unwrap();
        assert!(wait_for(30, || h.metrics().completed_checkpoints() >= 25));
        h.stop();
        h.wait().unwrap();
    }
    // The newest checkpoints with their chains (at most 5 parts,
    // restarting together at every 5th checkpoint), and a fallback whose
    // chains share no part with the newest verified one's (the 5 before):
    // never all of them.
    let ids = storage.list().unwrap();
    assert!(ids.len() <= 2 * 5 + 2, "{ids:?}");
    let newest = *ids.last().unwrap();
    // Forge a newer checkpoint that lacks the sink's state (a damaged
    // folder): the restore must skip it and use the intact one.
    let loaded = storage.load(newest).unwrap();
    let forged = CheckpointId(newest.get() + 1);
    let mut parts = Vec::new();
    for (key, bytes) in loaded.states.iter().filter(|(k, _)| k.task != "sink") {
        let mut p = storage.write_part(forged, key, bytes).unwrap();
        p.base = storage
            .part_bases(newest)
            .unwrap()
            .into_iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, b)| b.base);
        parts.push(p);
    }
    let meta = CheckpointMetadata {
        id: forged,
        ..loaded.metadata.clone()
    };
    storage.publish(&meta, &parts).unwrap();
    config.checkpoint.restore_mode = lockgate::RestoreMode::Required;
    let (job, _) = paced_sum_job(config, u64::MAX, 50_000, 50);
    let h = job.with_storage(Box::new(storage.clone())).start().unwrap();
    assert!(wait_for(30, || h.metrics().completed_checkpoints() >= 1));
    h.stop();
    let m = h.wait().unwrap();
    assert!(m.checkpoints.iter().all(|c| c.id > forged));
}

#[test]
fn a_checkpoint_folder_is_one_running_job_s() {
    let dir = tempfile::tempdir().unwrap();
    let (job, _) = paced_sum_job(dir_config(dir.path(), false), u64::MAX, 100, 50);
    let h = job.start().unwrap();
    assert!(wait_for(30, || h.metrics().completed_checkpoints() >= 1));
    // A second job on the folder (a restore, say) is refused while the
    // first runs: it would clean up the first one's staging folders.
    let (second, _) = paced_sum_job(dir_config(dir.path(), true), u64::MAX, 100, 50);
    let err = second.start().unwrap_err().to_string();
    assert!(
        err.contains("in use by another running job")
            && err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    h.stop();
    h.wait().unwrap();
    // Once it ended the folder is free again, its lock file gone.
    assert!(!dir.path().join(".lock").exists());
    let (third, _) = paced_sum_job(dir_config(dir.path(), true), u64::MAX, 100, 50);
    let h = third.start().unwrap();
    h.stop();
    h.wait().unwrap();
}

#[test]
fn an_app_config_key_absent_or_null_is_no_difference_on_restore() {
    // A setting added later and unset is recorded as null by the old run
    // and left out by the new one (or the other way round): the restore
    // goes on; a real difference is refused naming it.
    let dir = tempfile::tempdir().unwrap();
    let n = 100_000;
    let run = |restore: bool, app: serde_json::Value| {
        let (job, _) = sum_job(dir_config(dir.path(), restore), n, 10);
        job.with_app_config(app).start().and_then(|h| h.wait())
    };
    run(false, serde_json::json!({"a": 1, "later": null})).unwrap();
    run(true, serde_json::json!({"a": 1})).unwrap();
    match run(true, serde_json::json!({"a": 2})) {
        Err(e) => assert!(e.to_string().contains("a: 1 → 2"), "{e}"),
        Ok(_) => panic!("a restore with another configuration must be refused"),
    }
}

/// Periodic checkpoints paused and resumed (what `loadgen --ab` does):
/// while paused only checkpoints asked for are taken.
#[test]
fn periodic_checkpoints_pause_and_resume() {
    let mut config = JobConfig::default();
    config.checkpoint = CheckpointConfig::exactly_once(Duration::from_millis(1), None);
    let (job, _) = paced_sum_job(config, u64::MAX, 100, 10);
    let h = job.start().unwrap();
    assert!(wait_for(30, || h.checkpoint_counts().completed >= 3));
    h.set_periodic_checkpoints(false);
    // Commands are taken in order: once this one is answered the pause
    // applies.
    h.trigger_checkpoint().unwrap();
    assert!(wait_for(30, || h.checkpoint_counts().in_progress == 0));
    let before = h.checkpoint_counts().triggered;
    // Two asked for, with 1 ms between periodic ones were they on.
    h.trigger_checkpoint().unwrap();
    h.trigger_checkpoint().unwrap();
    assert_eq!(h.checkpoint_counts().triggered, before + 2);
    h.set_periodic_checkpoints(true);
    assert!(wait_for(30, || h.checkpoint_counts().completed >= before + 5));
    h.stop();
    h.wait().unwrap();
}

/// Flips the last byte of subtask 0 of `task`'s part in checkpoint `id`;
/// returns how a load names the part (`chk-<n>#<task>-0.state`).
fn flip_last_byte_of_part(
    storage: &lockgate::storage::LocalDirStorage,
    id: CheckpointId,
    task: &str,
) -> String {
    let (file, range) = storage
        .part_location(id, &lockgate::storage::TaskStateKey::new(task, 0))
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[(range.end - 1) as usize] ^= 0x55;
    std::fs::write(&file, bytes).unwrap();
    format!("{}#{task}-0.state", file.display())
}

/// Whether every part of checkpoint `id` in `dir` is full (no base).
fn all_full(dir: &std::path::Path, id: CheckpointId) -> bool {
    use lockgate::storage::CheckpointStorage;
    lockgate::storage::LocalDirStorage::open(dir)
        .unwrap()
        .part_bases(id)
        .unwrap()
        .iter()
        .all(|(_, base)| base.base.is_none())
}

/// Runs the paced sum job with `full_min_interval`, triggering checkpoints
/// on demand until `enough` says so of the completed ones (or 60 s pass);
/// returns their ids.
fn checkpoints_with_full_min_interval(
    dir: &std::path::Path,
    full_min_interval: Duration,
    enough: impl Fn(&[CheckpointId]) -> bool,
) -> Vec<CheckpointId> {
    let mut config = dir_config(dir, false);
    config.checkpoint.interval = None;
    config.checkpoint.full_every = 1000;
    config.checkpoint.max_chain_ratio = 1000.0;
    config.checkpoint.retained = 1000;
    config.checkpoint.full_min_interval = full_min_interval;
    let (job, _) = paced_sum_job(config, u64::MAX, 100_000, 50);
    let h = job.start().unwrap();
    let mut ids = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !enough(&ids) {
        assert!(
            std::time::Instant::now() < deadline,
            "checkpoints {ids:?} only"
        );
        if let Ok(id) = h.trigger_checkpoint() {
            ids.push(id);
        }
    }
    h.stop();
    h.wait().unwrap();
    ids
}

/// Keyed state rewrites itself key group by key group inside its deltas
/// (a rolling chain): at a 5 ms interval with a 50 ms
/// `full_min_interval` (a spread of 10 checkpoints), keyed_sum's parts
/// after its first delta are all deltas (the periodic full mark, every
/// 10th checkpoint, is skipped), the newest checkpoint's chain holds at
/// most twice the spread, retention keeps the folder small, and a new
/// job restored from it gives exact sums.
#[test]
fn a_rolling_chain_writes_no_full_part_and_restores_exactly() {
    use lockgate::storage::{CheckpointStorage, LocalDirStorage, TaskStateKey};
    let dir = tempfile::tempdir().unwrap();
    let mut config = dir_config(dir.path(), false);
    config.checkpoint.full_min_interval = Duration::from_millis(50);
    let n = 400_000;
    let keys = 50_000;
    let (job, finals) = paced_sum_job(config.clone(), n, keys, 20);
    let h = job.start().unwrap();
    assert!(wait_for(60, || h.checkpoint_counts().completed >= 80));
    h.stop();
    let m = h.wait().unwrap();
    let keyed_parts: Vec<(u64, bool)> = m
        .checkpoints
        .iter()
        .filter(|c| c.is_completed())
        .flat_map(|c| {
            c.subtasks
                .iter()
                .filter(|s| s.task.operator == "keyed_sum")
                .map(move |s| (c.id.get(), s.incremental))
        })
        .collect();
    let first_delta = keyed_parts
        .iter()
        .position(|(_, inc)| *inc)
        .expect("a delta");
    let full_after: Vec<u64> = keyed_parts[first_delta..]
        .iter()
        .filter(|(_, inc)| !inc)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        full_after.is_empty(),
        "full parts of keyed_sum after its first delta: {full_after:?}"
    );
    assert!(keyed_parts.len() - first_delta >= 100, "{keyed_parts:?}");
    let storage = LocalDirStorage::open(dir.path()).unwrap();
    let ids = storage.list().unwrap();
    let newest = storage.load(*ids.last().unwrap()).unwrap();
    let chain = &newest.bases[&TaskStateKey::new("keyed_sum", 0)];
    assert!(
        chain.len() < 2 * 10,
        "{} parts before the newest",
        chain.len()
    );
    assert!(ids.len() <= 4 * 10 + 2, "{} checkpoints kept", ids.len());
    // What the first job summed is in the folder: the second one, restored
    // from it, ends with the exact sums of all of 0..n.
    config.checkpoint.restore_mode = lockgate::RestoreMode::Required;
    finals.lock().unwrap().clear();
    let (job, finals) = paced_sum_job(config, n, keys, 100_000);
    let m = job.start().unwrap().wait().unwrap();
    assert!(m.restored.is_some());
    assert_eq!(*finals.lock().unwrap(), expected_sums(n, keys));
}

/// When every delta changes a large share of the keys (here a fifth of
/// 1,000 every 5 ms), a rolling chain of the default spread (400 parts
/// at this interval) would hold dozens of times the state: the engine
/// asks for a smaller spread, the state is rewritten faster, and the
/// newest checkpoint's chain stays a few parts long.
#[test]
fn a_rolling_chain_of_big_deltas_stays_short() {
    use lockgate::storage::{CheckpointStorage, LocalDirStorage, TaskStateKey};
    let dir = tempfile::tempdir().unwrap();
    let config = dir_config(dir.path(), false);
    let (job, _) = paced_sum_job(config, u64::MAX, 1_000, 20);
    let h = job.start().unwrap();
    assert!(wait_for(60, || h.checkpoint_counts().completed >= 80));
    h.stop();
    let m = h.wait().unwrap();
    let deltas = m.checkpoints.iter().filter(|c| c.incremental).count();
    assert!(deltas >= 40, "{deltas} incremental checkpoints");
    let storage = LocalDirStorage::open(dir.path()).unwrap();
    let ids = storage.list().unwrap();
    let newest = storage.load(*ids.last().unwrap()).unwrap();
    let chain = newest.bases[&TaskStateKey::new("keyed_sum", 0)].len();
    assert!(chain < 20, "{chain} parts before the newest");
}

/// A read-back that takes 8 ms, as on a slow disk.
struct SlowReadBack;

impl StorageHooks for SlowReadBack {
    fn before_verify(&self) {
        std::thread::sleep(Duration::from_millis(8));
    }
}

/// The next periodic checkpoint waits for the newest completed one to be
/// read back (at most 50 ms): with a read-back of 8 ms and a 10 ms
/// interval, every delta of keyed_sum builds on the checkpoint
/// just before it. Triggered at once, they built on the one before that,
/// carrying two intervals' changes.
#[test]
fn a_periodic_checkpoint_waits_for_the_newest_one_to_be_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(Hooked {
        inner: LocalDirStorage::open(dir.path()).unwrap(),
        hooks: SlowReadBack,
    });
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(10));
    config.checkpoint.retained = 100;
    config.checkpoint.full_every = 1000;
    let (job, _) = paced_sum_job(config, u64::MAX, 1_000, 20);
    let h = job.with_storage(Box::new(storage.clone())).start().unwrap();
    assert!(wait_for(60, || h.checkpoint_counts().completed >= 40));
    h.stop();
    h.wait().unwrap();
    let key = lockgate::storage::TaskStateKey::new("keyed_sum", 0);
    let ids = storage.list().unwrap();
    let mut deltas = 0;
    // The last is the final checkpoint, triggered at once at the stop.
    for pair in ids[..ids.len() - 1].windows(2) {
        let base = storage
            .part_bases(pair[1])
            .unwrap()
            .into_iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, l)| l.base);
        if let Some(b) = base {
            deltas += 1;
            assert_eq!(b, pair[0], "the part of {} builds on {b}", pair[1]);
        }
    }
    assert!(deltas >= 20, "{deltas} deltas in {ids:?}");
}

#[test]
fn full_min_interval_decides_which_checkpoints_are_full_for_every_subtask() {
    // An hour: the first checkpoint of the attempt is full; later ones
    // are deltas (keyed_sum's parts have a base) once a base has been
    // read back, which happens after its checkpoint completed: under load
    // a few may come first, full.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let deltas = |ids: &[CheckpointId]| ids.iter().filter(|id| !all_full(&path, **id)).count();
    let ids = checkpoints_with_full_min_interval(dir.path(), Duration::from_secs(3600), |ids| {
        deltas(ids) >= 3
    });
    assert!(all_full(dir.path(), ids[0]));
    // Zero: every checkpoint is full, with the same chains allowed.
    let dir = tempfile::tempdir().unwrap();
    let ids = checkpoints_with_full_min_interval(dir.path(), Duration::ZERO, |ids| ids.len() >= 6);
    for id in &ids {
        assert!(all_full(dir.path(), *id), "checkpoint {id} has a delta");
    }
}
