//! Tasks on cooperative worker threads (`JobConfig::workers`): the same
//! results, checkpoints and failure handling as one thread per task, with
//! more tasks than workers, backpressure between tasks of one worker, and
//! workers that park.

mod common;

use common::*;
use lockgate::*;
use lockgate::{
    config::MAX_WORKERS,
    testing::{FailurePlan, FailurePoint},
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Finals = Arc<Mutex<HashMap<u64, u64>>>;

/// source(2) → key_by → keyed_sum(3) → sink(1), on `workers` workers:
/// every worker holds tasks of several operators, and keyed_sum[2] shares
/// worker 0 with subtasks 0 when there are 2.
fn job(
    config: JobConfig,
    source: impl Fn(usize, usize) -> Counter + Send + Sync + 'static,
    keys: u64,
) -> (JobBuilder, Finals) {
    let job = JobBuilder::new("sums", config);
    let finals: Finals = Arc::default();
    let f2 = finals.clone();
    job.source("numbers", 2, move |i| source(i.index, i.parallelism))
        .key_by(move |x| x % keys)
        .task("keyed_sum", 3)
        .process("keyed_sum", move |_| keyed_sum(keys))
        .rebalance()
        .task("sink", 1)
        .sink("sink", move |_| MaxSink(f2.clone()));
    (job, finals)
}

/// Small batches and channels of 2 elements: tasks of one worker push
/// back on each other all the time.
fn config(workers: usize, mode: CheckpointMode) -> JobConfig {
    let mut config = JobConfig::default();
    config.workers = Some(workers);
    config.batch_size = 32;
    config.channel_capacity = 2;
    if mode != CheckpointMode::None {
        config.checkpoint.mode = mode;
        config.checkpoint.interval = Some(Duration::from_millis(5));
        config.restart = RestartStrategy {
            max_attempts: 5,
            delay: Duration::ZERO,
        };
    }
    config
}

fn failures(job: &JobBuilder) -> FailurePlan {
    let names = job.task_names();
    let at = |t: &str| names.iter().position(|n| n == t).unwrap();
    FailurePlan::none()
        .with(at("keyed_sum[1]"), FailurePoint::AfterRecords(20_000))
        .with(at("sink[0]"), FailurePoint::DuringSnapshot)
        .with(at("keyed_sum[2]"), FailurePoint::AfterRecords(40_000))
}

#[test]
fn a_finite_job_gives_the_exact_result_on_one_and_on_two_workers() {
    let n = 200_000;
    for workers in [1, 2] {
        let (job, finals) = job(
            config(workers, CheckpointMode::None),
            move |i, p| Counter::part(i, p, n),
            10,
        );
        let m = job.start().unwrap().wait().unwrap();
        assert_eq!(
            *finals.lock().unwrap(),
            expected_sums(n, 10),
            "{workers} workers"
        );
        let sink = m.tasks.iter().find(|t| t.name == "sink[0]").unwrap();
        assert_eq!(sink.records_in, n, "{workers} workers");
        // Channels of 2 push back: the sources' output waited, and that
        // time is counted as backpressure, as a blocked send's is.
        let sources = m.tasks.iter().filter(|t| t.name.starts_with("numbers["));
        assert!(
            sources.map(|t| t.backpressure_ns).sum::<u64>() > 0,
            "{workers} workers"
        );
    }
}

#[test]
fn exactly_once_restarts_on_workers_give_exact_state() {
    for mode in [CheckpointMode::ExactlyOnce, CheckpointMode::Unaligned] {
        let n = 300_000;
        let (job, finals) = job(config(2, mode), move |i, p| Counter::part(i, p, n), 10);
        let plan = failures(&job);
        let m = job.with_failures(plan).start().unwrap().wait().unwrap();
        assert_eq!(m.restarts, 3, "{mode:?}: {:?}", m.failures);
        assert!(m.completed_checkpoints() >= 1, "{mode:?}");
        assert_eq!(*finals.lock().unwrap(), expected_sums(n, 10), "{mode:?}");
    }
}

#[test]
fn at_least_once_restarts_on_workers_lose_nothing() {
    let n = 300_000;
    let (job, finals) = job(
        config(2, CheckpointMode::AtLeastOnce),
        move |i, p| Counter::part(i, p, n),
        10,
    );
    let plan = failures(&job);
    let m = job.with_failures(plan).start().unwrap().wait().unwrap();
    assert_eq!(m.restarts, 3, "{:?}", m.failures);
    // Sums only grow, and a replayed record adds again: at least the exact
    // sums, never less.
    let got = finals.lock().unwrap().clone();
    for (k, want) in expected_sums(n, 10) {
        assert!(got.get(&k).copied().unwrap_or(0) >= want, "key {k}");
    }
}

#[test]
fn paced_sources_on_parked_workers_keep_checkpointing_and_stop_cleanly() {
    // 50 records every ms per source: the workers are idle most of the
    // time, parked until the next record is due.
    let (job, finals) = job(
        config(2, CheckpointMode::ExactlyOnce),
        |i, p| Counter::paced(i, p, u64::MAX, 50, 1_000_000),
        10,
    );
    let h = job.start().unwrap();
    assert!(wait_for(60, || h.metrics().completed_checkpoints() >= 5));
    h.stop();
    let m = h.wait().unwrap();
    let sink = m.tasks.iter().find(|t| t.name == "sink[0]").unwrap();
    assert!(sink.records_in > 0);
    assert!(!finals.lock().unwrap().is_empty());
}

struct Boom;
impl Operator<u64, (u64, u64)> for Boom {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        _ctx: &mut Context<'_, (u64, u64)>,
    ) -> Result<(), BoxError> {
        if input.iter().any(|x| *x >= 5_000) {
            panic!("boom");
        }
        input.clear();
        Ok(())
    }
}
impl Checkpointed for Boom {}

#[test]
fn a_panic_on_a_worker_fails_the_job_naming_the_task() {
    let job = JobBuilder::new("boom", config(2, CheckpointMode::None));
    job.source("numbers", 2, |i| {
        Counter::part(i.index, i.parallelism, u64::MAX)
    })
    .rebalance()
    .task("boom", 2)
    .process("boom", |_| Boom)
    .rebalance()
    .task("sink", 1)
    .sink("sink", |_| MaxSink(Arc::default()));
    match job.start().unwrap().wait() {
        Err(JobError::TaskFailed { task, cause }) => {
            assert!(task.to_string().starts_with("boom["), "{task}");
            assert!(cause.to_string().contains("boom"), "{cause}");
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
}

#[test]
fn a_worker_count_of_zero_is_refused() {
    let mut config = JobConfig::default();
    config.workers = Some(0);
    let err = config.validate().unwrap_err();
    assert!(err.contains("workers"), "{err}");
    config.workers = Some(MAX_WORKERS + 1);
    assert!(config.validate().is_err());
}

/// Counts the records it passes on; the asynchronous part of each of its
/// first three snapshots waits (at yield points, up to 10 s) until the
/// count has grown by 1,000, and reports the thread it ran on and whether
/// the count grew.
struct SnapshotProbe {
    seen: Arc<std::sync::atomic::AtomicU64>,
    probes: Arc<Mutex<Vec<(String, bool)>>>,
}
impl Checkpointed for SnapshotProbe {
    fn snapshot_state_async(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<lockgate::state::StateSnapshot>, BoxError> {
        if self.probes.lock().unwrap().len() >= 3 {
            return Ok(None);
        }
        let (seen, probes) = (self.seen.clone(), self.probes.clone());
        Ok(Some(lockgate::state::StateSnapshot::deferred(move || {
            use std::sync::atomic::Ordering::Relaxed;
            let start = seen.load(Relaxed);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            let grew = loop {
                if seen.load(Relaxed) >= start + 1_000 {
                    break true;
                }
                if std::time::Instant::now() > deadline {
                    break false;
                }
                lockgate::tuning::yield_point();
            };
            let thread = std::thread::current().name().unwrap_or("").to_string();
            probes.lock().unwrap().push((thread, grew));
            Ok(Vec::new())
        })))
    }
}
impl Operator<u64, u64> for SnapshotProbe {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        self.seen
            .fetch_add(input.len() as u64, std::sync::atomic::Ordering::Relaxed);
        for x in input.drain(..) {
            ctx.emit(x);
        }
        Ok(())
    }
}

/// Runs source → [`SnapshotProbe`] → for_each on `job` until three probes
/// reported; returns (thread, records passed) of each.
fn probe_three_snapshots(job: JobBuilder) -> Vec<(String, bool)> {
    let probes: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let p2 = probes.clone();
    job.source("numbers", 1, |_| Counter::paced(0, 1, u64::MAX, 16, 20_000))
        .process("probe", move |_| SnapshotProbe {
            seen: Arc::default(),
            probes: p2.clone(),
        })
        .for_each(|_| ());
    let h = job.start().unwrap();
    assert!(wait_for(60, || probes.lock().unwrap().len() >= 3));
    h.stop();
    h.wait().unwrap();
    let got = probes.lock().unwrap().clone();
    got
}

#[test]
fn checkpoint_work_runs_on_the_worker_in_slices_between_records() {
    // One worker runs the source, the probe and the sink, and (storage in
    // memory or in a folder: parts staged in memory) the probe's
    // asynchronous snapshot part too: that part can only see records pass
    // if the worker leaves it at a yield point to run its tasks.
    let dir = tempfile::tempdir().unwrap();
    for folder in [None, Some(dir.path().to_path_buf())] {
        let mut config = config(1, CheckpointMode::ExactlyOnce);
        config.checkpoint.dir = folder;
        for (thread, grew) in probe_three_snapshots(JobBuilder::new("sliced", config)) {
            assert_eq!(thread, "lg-worker-0", "the worker runs the checkpoint work");
            assert!(
                grew,
                "records passed while the checkpoint work was under way"
            );
        }
    }
}

#[test]
fn a_storage_that_may_block_keeps_a_snapshot_thread_on_workers() {
    // `Hooked` says its writes may wait (a test's hooks could hang), so
    // the asynchronous part stays off the worker.
    struct NoHooks;
    impl StorageHooks for NoHooks {}
    let mut config = config(1, CheckpointMode::ExactlyOnce);
    config.checkpoint.dir = None;
    let job = JobBuilder::new("threaded", config).with_storage(Box::new(Hooked {
        inner: lockgate::storage::MemoryStorage::new(),
        hooks: NoHooks,
    }));
    for (thread, grew) in probe_three_snapshots(job) {
        assert!(thread.starts_with("lg-snap-"), "{thread}");
        assert!(grew);
    }
}

/// Passes records on; the asynchronous part of its snapshot panics.
struct PanicsLater;
impl Checkpointed for PanicsLater {
    fn snapshot_state_async(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<lockgate::state::StateSnapshot>, BoxError> {
        Ok(Some(lockgate::state::StateSnapshot::deferred(|| {
            panic!("encoding blew up")
        })))
    }
}
impl Operator<u64, u64> for PanicsLater {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        for x in input.drain(..) {
            ctx.emit(x);
        }
        Ok(())
    }
}

/// Runs source → [`PanicsLater`] → for_each on `job` (no restarts) and
/// checks that it fails within 60 s naming the task and the panic.
fn fails_on_a_panic_in_checkpoint_work(job: JobBuilder) {
    job.source("numbers", 1, |_| Counter::paced(0, 1, u64::MAX, 16, 20_000))
        .process("encoder", |_| PanicsLater)
        .for_each(|_| ());
    let h = job.start().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.wait());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Err(JobError::TaskFailed { task, cause })) => {
            assert!(task.to_string().starts_with("numbers["), "{task}");
            assert!(cause.to_string().contains("encoding blew up"), "{cause}");
        }
        other => panic!("expected a task failure, got {other:?}"),
    }
}

fn no_restarts(mut config: JobConfig) -> JobConfig {
    config.restart = RestartStrategy {
        max_attempts: 0,
        delay: Duration::ZERO,
    };
    config
}

#[test]
fn a_panic_in_checkpoint_work_on_a_worker_fails_the_job_naming_the_task() {
    let config = no_restarts(config(1, CheckpointMode::ExactlyOnce));
    fails_on_a_panic_in_checkpoint_work(JobBuilder::new("panics", config));
}

#[test]
fn a_panic_in_checkpoint_work_on_a_snapshot_thread_fails_the_job_naming_the_task() {
    // A storage that may block keeps a snapshot thread on workers: the
    // panic ends that thread's job, not the task's thread.
    struct NoHooks;
    impl StorageHooks for NoHooks {}
    let mut config = no_restarts(config(1, CheckpointMode::ExactlyOnce));
    config.checkpoint.dir = None;
    let job = JobBuilder::new("panics-threaded", config).with_storage(Box::new(Hooked {
        inner: lockgate::storage::MemoryStorage::new(),
        hooks: NoHooks,
    }));
    fails_on_a_panic_in_checkpoint_work(job);
}
