//! With a thread per task, where a task's checkpoint work (the
//! asynchronous phase) runs: on a snapshot thread while the machine has a
//! core to spare for one, else on the task's own thread: in slices where
//! it waits for input, or whole between two batches when it has waited
//! too long for that; and what a task that fails leaves its snapshot
//! thread to do. Its own test binary: it counts the process's
//! threads by name.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use lockgate::*;
use std::sync::Arc;
use std::time::Duration;

/// Threads of this process named `lg-snap-*`.
fn snapshot_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("lg-snap-"))
        .count()
}

/// The tests count the process's threads: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How the sources of [`run`] emit.
#[derive(Clone, Copy)]
enum Load {
    /// 10 records a millisecond per source: the tasks wait for input most
    /// of the time.
    Paced,
    /// As fast as the tasks take them: no task waits for input (W1).
    Saturated,
    /// 1,000 records, then nothing: after them the tasks only wait.
    Silent,
}

/// Runs `numbers` (parallelism `p`) into a sink, as one task each
/// (`split`) or chained into `p` tasks, checkpointing to a folder every
/// 5 ms until 20 checkpoints completed; returns the most snapshot threads
/// seen meanwhile.
fn run(p: usize, split: bool, load: Load) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.checkpoint.dir = Some(dir.path().to_path_buf());
    let job = JobBuilder::new("inline", config);
    let delivered = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let numbers = job
        .source("numbers", p, move |i| match load {
            Load::Paced => Counter::paced(i.index, i.parallelism, u64::MAX, 10, 1_000_000),
            Load::Saturated => Counter::part(i.index, i.parallelism, u64::MAX),
            // Never released: idle until the job stops.
            Load::Silent => Counter::part(i.index, i.parallelism, 1_000).held(Arc::default()),
        })
        .map(|x: u64| (x % 10, x));
    let numbers = if split {
        numbers.rebalance().task("sink", p)
    } else {
        numbers
    };
    let seen = delivered.clone();
    numbers
        .map(move |r: (u64, u64)| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            r
        })
        .sink("sink", |_| MaxSink(Arc::default()));
    let h = job.start().unwrap();
    let mut most = 0;
    let mut counted = false;
    let mut from = 0;
    assert!(
        wait_for(60, || {
            most = most.max(snapshot_threads());
            let completed = h.checkpoint_counts().completed;
            if matches!(load, Load::Silent) && !counted {
                // Count only checkpoints taken once every record is in:
                // with no record left to take, their work runs where the
                // tasks wait for input, or not at all.
                counted = delivered.load(std::sync::atomic::Ordering::Relaxed) == 1_000;
                from = completed + 1;
                return false;
            }
            completed >= from + 20
        }),
        "{} checkpoints completed",
        h.checkpoint_counts().completed
    );
    h.stop();
    h.wait().unwrap();
    most
}

#[test]
fn task_threads_run_their_checkpoint_work_when_no_core_is_spare() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cores = std::thread::available_parallelism().unwrap().get();
    // One task: a core is spare on a machine of two or more.
    let one = run(1, false, Load::Paced);
    if cores > 1 {
        assert_eq!(one, 1, "one task on {cores} cores: its snapshot thread");
    } else {
        assert_eq!(one, 0, "one task on one core: no snapshot thread");
    }
    // Twice as many tasks as cores: none is spare, and the checkpoints
    // still complete without a snapshot thread.
    let tasks = format!("{} tasks on {cores} cores", 2 * cores);
    assert_eq!(run(cores, true, Load::Paced), 0, "{tasks}");
}

/// The task threads run their checkpoint work in slices where they wait
/// for input, and whole between batches once it waited a while: both
/// ways the checkpoints complete, with records flowing all the time and
/// with none at all.
#[test]
fn task_threads_finish_their_checkpoint_work_busy_or_idle() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(run(cores, true, Load::Saturated), 0, "saturated");
    assert_eq!(run(cores, true, Load::Silent), 0, "silent");
}

/// Passes records on; the asynchronous part of its first snapshot waits
/// for `release`, and it fails once three snapshots were taken (the
/// second and third queued behind the first).
struct StallThenFail {
    taken: Vec<CheckpointId>,
    release: Arc<std::sync::atomic::AtomicBool>,
    ran: Arc<std::sync::Mutex<Vec<CheckpointId>>>,
}

impl Checkpointed for StallThenFail {
    fn snapshot_state_async(
        &mut self,
        id: CheckpointId,
    ) -> Result<Option<lockgate::state::StateSnapshot>, BoxError> {
        let first = self.taken.is_empty();
        self.taken.push(id);
        let (release, ran) = (self.release.clone(), self.ran.clone());
        Ok(Some(lockgate::state::StateSnapshot::deferred(move || {
            if first {
                assert!(
                    wait_for(30, || release.load(std::sync::atomic::Ordering::Acquire)),
                    "never released"
                );
            }
            ran.lock().unwrap().push(id);
            Ok(Vec::new())
        })))
    }
}

impl Operator<u64, u64> for StallThenFail {
    fn process(
        &mut self,
        input: &mut Vec<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), BoxError> {
        if self.taken.len() >= 3 {
            return Err("fails with two snapshots queued".into());
        }
        for x in input.drain(..) {
            ctx.emit(x);
        }
        Ok(())
    }
}

/// A task that fails while its snapshot thread is busy: the snapshot jobs
/// queued behind the one under way are dropped, so no deferred snapshot
/// code of the failed attempt runs after the failure.
#[test]
fn a_failed_task_drops_its_queued_snapshot_jobs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    struct NoHooks;
    impl StorageHooks for NoHooks {}
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.checkpoint.max_concurrent = 3;
    // `Hooked` says its writes may wait: a snapshot thread runs the
    // work whatever the cores.
    let job = JobBuilder::new("stall", config).with_storage(Box::new(Hooked {
        inner: lockgate::storage::MemoryStorage::new(),
        hooks: NoHooks,
    }));
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ran: Arc<std::sync::Mutex<Vec<CheckpointId>>> = Arc::default();
    let (r, rn) = (release.clone(), ran.clone());
    job.source("numbers", 1, |_| {
        Counter::paced(0, 1, u64::MAX, 16, 100_000)
    })
    .process("stall", move |_| StallThenFail {
        taken: Vec::new(),
        release: r.clone(),
        ran: rn.clone(),
    })
    .for_each(|_| ());
    let h = job.start().unwrap();
    let err = h.wait().expect_err("the operator fails the job");
    assert!(err.to_string().contains("two snapshots queued"), "{err}");
    assert!(ran.lock().unwrap().is_empty(), "the first one still waits");
    release.store(true, std::sync::atomic::Ordering::Release);
    assert!(
        wait_for(30, || snapshot_threads() == 0),
        "the snapshot thread ends"
    );
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.len(), 1, "only the job under way ran: {ran:?}");
}
