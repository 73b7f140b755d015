//! With a thread per task, where a task's checkpoint work (the
//! asynchronous phase) runs: on a snapshot thread while the machine has a
//! core to spare for one, else on the task's own thread: in slices where
//! it waits for input, or whole between two batches when it has waited
//! too long for that. Its own test binary: it counts the process's
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
